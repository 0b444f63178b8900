"""A smoke test of coalign at the papers' shapes for a bare GPU machine with no network: does each heavy step
fit one GPU, and how long does it take? One JSON line per step, each step in a process of its own.

1. grpo: coalign's GRPO stage (`training.grpo.train_grpo`) at paper-pilotrl-llama3.1-8b's RL settings (lr,
   16 generations, `micro_batch_size`, bf16, gradient checkpointing), LoRA r 16 on every linear layer, on a
   random model of Llama-3.1-8B's shape; rollouts stubbed (`rollout_func` returns fixed random ids, ~4,000
   tokens an episode, the config's `max_context`); one optimizer step of one group (16 episodes, 16 /
   micro_batch_size forwards);
2. scoring: MOAT's stage-1 scoring (`moat.scoring.score_completions`) of 64 tasks x 15 candidates, batch
   `moat.batch_size`, on a random model of Qwen2.5-14B's shape in bf16;
3. dpo: coalign's DPO stage (`training.dpo.dpo`) at paper-moat-qwen2.5-14b's planner_dpo settings (4 pairs x
   8 accumulated, pairs filled to max_length), LoRA r 16, on the same 14B shape: one optimizer step.

The models are built on the GPU from a config, in the dtype the stage asks for (the line's `dtype`), so
nothing is downloaded or written: coalign's stages load their model through `training.common.load_model`, which
here builds it (`random_weights`). LoRA saves its adapter alone (`merge: false`): the merge into the base and its
16-30 GB save are not measured. A local tokenizer (GPT-2-style, 8,192 tokens, made in seconds) gives the text;
its ids fit every vocabulary, and the logits are over the model's whole vocabulary (128,256 and 152,064).

A line's `status` is ok, oom (out of GPU memory: a result, with the memory at the time), timeout (killed at its
budget, `BUDGET_S`: 8 minutes in all) or error (its last lines). `peak_mib` is the step's peak,
`torch.cuda.max_memory_allocated` (reset as the step starts; the model's weights included), or on a CPU the
process's peak RSS; `seconds` the step's call (for grpo and dpo, the model's making included: `build_s`). The
first line (setup) gives the device, the versions in effect and any requirement they leave unmet.

On the GPU machine, from the repository root, with the wheels (under 64 MiB with the work tree) carried:

    python benchmarks/gpu_smoke.py [--wheels .whl] [--out $OUT/gpu_smoke.jsonl]

Here, where pip reaches the registry, to fetch them first (Python 3.12, manylinux x86_64):

    .venv/bin/python benchmarks/gpu_smoke.py --fetch-wheels .whl

`--tiny` runs the same steps at toy shapes on the CPU (GRPO's at Llama's real vocabulary); its timings mean
nothing. vLLM, several GPUs and the real weights are not covered.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import importlib.metadata
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("grpo", "scoring", "dpo")
BUDGET_S = {"grpo": 180, "scoring": 130, "dpo": 170}  # 8 minutes in all
PILOTRL_CONFIG, MOAT_CONFIG = "paper-pilotrl-llama3.1-8b.yaml", "paper-moat-qwen2.5-14b.yaml"
# What coalign's smoke path imports and the GPU image (torch 2.11, transformers 5.17: KINDS.md) lacks, holds too
# old for coalign's pins (transformers >= 5.24 wants huggingface-hub >= 2.4, and that httpx2; regex is checked
# at import), or holds at a version nobody has read there (peft), at the versions of the environment that fetches
# them (coalign's tested one). Not torch, not vLLM (neither fits). rank-bm25: MOAT's SFT data imports the shop.
CARRIED = (
    "transformers", "huggingface-hub", "httpx2", "httpcore2", "truststore", "regex", "trl", "datasets", "dill",
    "multiprocess", "pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions",
    "peft", "rank-bm25",
)  # fmt: skip
# coalign's requirements that nothing on this path imports (GGUF models, BabyAI's grid)
OFF_PATH = ("gguf", "minigrid")
TREE_LIMIT = 64 * 2**20  # what travels to the device machine: the work tree with the wheels
PLATFORMS = ("manylinux_2_39_x86_64", "manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64",
             "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")  # fmt: skip
TAIL = 15  # lines of a failed step's log in its JSON line
# the papers' models (their configs on the hub), and toy ones for --tiny: a few layers, hidden 64
LLAMA_8B = dict(
    model_type="llama", hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
    intermediate_size=14336, vocab_size=128256, rope_theta=500000.0, max_position_embeddings=131072,
    tie_word_embeddings=False,
)  # fmt: skip
QWEN_14B = dict(
    model_type="qwen2", hidden_size=5120, num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8,
    intermediate_size=13824, vocab_size=152064, rope_theta=1000000.0, max_position_embeddings=131072,
    tie_word_embeddings=False,
)  # fmt: skip
TOY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
TOKENIZER_VOCAB = 8192  # the local tokenizer's
TOY_QWEN = TOY | {"intermediate_size": 176, "vocab_size": TOKENIZER_VOCAB}  # logits of 152,064 would take seconds
# sizes of the workloads: (paper, --tiny)
EPISODE_PROMPT = (300, 16)  # tokens of an episode's prompt; the rest of its max_context is its completion
TINY_CONTEXT = 64  # --tiny's episodes: the least pilotrl.max_context
EPISODE_SLACK = 192  # an episode is up to this many tokens short of max_context (rewards differ within the group)
SCORED_TASKS = (64, 4)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ---- here: the wheels ----------------------------------------------------------------------------------------


def tree_bytes(exclude: Path) -> int | None:
    """Bytes of the work tree that travels to the device machine (tracked and untracked files git does not
    ignore), `exclude` left out; None outside a git checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=False
    )  # fmt: skip
    if listed.returncode:
        return None
    files = (ROOT / name for name in listed.stdout.decode().split("\0") if name)
    return sum(f.stat().st_size for f in files if f.is_file() and exclude not in f.parents)


def fetch_wheels(folder: Path, python: str = "3.12") -> int:
    """Download `CARRIED` at this environment's versions for CPython `python` on manylinux x86_64 into `folder`
    (what pip finds there already stays); refuse a folder holding other wheels (two versions of one package stop
    the install there) or one that would not travel with the tree. Returns the wheels' bytes."""
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in CARRIED]
    platforms = [option for platform in PLATFORMS for option in ("--platform", platform)]
    command = [
        sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
        python, "--implementation", "cp", *platforms, "-d", str(folder), *pins,
    ]  # fmt: skip
    subprocess.run(command, check=True)
    wheels = sorted(folder.glob("*.whl"))
    wanted = {_canonical(pin.split("==")[0]): pin.split("==")[1] for pin in pins}
    stray = [w.name for w in wheels if wanted.get(_canonical(w.name.split("-")[0])) != w.name.split("-")[1]]
    if stray:
        sys.exit(f"{folder} holds other wheels too ({', '.join(stray)}): empty it and fetch again")
    total, tree = sum(w.stat().st_size for w in wheels), tree_bytes(folder.resolve())
    size = f"{len(wheels)} wheels in {folder}: {total / 2**20:.1f} MiB"
    if tree is not None:
        size += f"; with the work tree ({tree / 2**20:.1f} MiB) {(total + tree) / 2**20:.1f} MiB of 64"
    print(size, flush=True)
    if total + (tree or 0) >= TREE_LIMIT:
        sys.exit("too large to travel to the device machine (64 MiB)")
    return total


# ---- there: the steps, each in a child process -----------------------------------------------------------------


def install_wheels(folder: Path, site: Path) -> int:
    """Install every wheel in `folder` into `site` (no index, no dependencies: the folder holds them), which the
    steps put first on their path, and compile it and coalign on every core: where PYTHONDONTWRITEBYTECODE is
    set (it is on this workplace's machines), each step's process would compile transformers again."""
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        sys.exit(f"no wheels in {folder}: fetch them here first (--fetch-wheels)")
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
               "--no-cache-dir", "--disable-pip-version-check", "--target", str(site), *map(str, wheels)]  # fmt: skip
    subprocess.run(command, check=True)
    for tree in (site, ROOT / "coalign"):
        compileall.compile_dir(tree, quiet=1, workers=0)
    return len(wheels)


def one_step(out: Path, started: float) -> tuple[float, dict]:
    """Seconds since `started` (the GPU's queued work done) and the train log of the stage saved to `out`, which
    must have taken exactly one optimizer step."""
    import torch  # after the carried wheels are on the path, as every step's imports

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    log = json.loads((out / "train_log.json").read_text())
    if log["steps"] != 1:
        raise RuntimeError(f"one optimizer step expected, {log['steps']} taken")
    return seconds, log


def run_child(command: list[str], log: Path, result: Path, timeout: float, env: dict) -> dict:
    """One step's process (its own session, so a timeout kills whatever it started): its JSON result, or a
    record of its timeout or error with the last lines of its log; `process_s` its wall seconds."""
    started = time.perf_counter()
    with log.open("w") as out:
        child = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )  # fmt: skip
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            code = None
    record = json.loads(result.read_text()) if code == 0 and result.is_file() else None
    if record is None:
        tail = log.read_text(errors="replace").splitlines()[-TAIL:]
        status = "timeout" if code is None else "error"
        what = f"killed at its budget, {timeout:.0f} s" if code is None else f"exit {code}"
        record = {"status": status, "error": what, "tail": tail}
    return {**record, "process_s": round(time.perf_counter() - started, 1)}


def peak_mib() -> float:
    """The step's peak: on a GPU its tensors' since the step began, else the process's resident set's."""
    import torch

    if torch.cuda.is_available():
        return round(torch.cuda.max_memory_allocated() / 2**20)
    from dpo_memory import peak_rss_mib

    return round(peak_rss_mib())


def random_model(shape: dict, dtype: str, ids: dict, oom: bool = False):
    """A causal LM of `shape` with random weights, built where it runs (the GPU, else the CPU) in `dtype`;
    `oom`: its first forward raises torch.OutOfMemoryError (--oom, a test of the recording)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**shape, **ids)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    if oom:

        def fail(*_) -> None:
            raise torch.OutOfMemoryError("out of memory injected by --oom (a test of the recording)")

        model.register_forward_pre_hook(fail)
    return model.eval()


def token_ids(tokenizer) -> dict:
    return {
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }


@contextlib.contextmanager
def random_weights(shape: dict, tokenizer, oom: bool) -> Iterator[dict]:
    """While a coalign stage runs: its model, which it loads through `training.common.load_model`, a random
    one of `shape` in the dtype the stage asks for (`random_model`), not a folder's. Yields what was built
    (dtype, parameters, build_s); a stage that loaded its model elsewhere would train the tokenizer folder's
    toy model: refused once the stage is done."""
    from coalign.models.load import parameter_count
    from coalign.training import common

    built: dict = {}

    def load(path, trust_remote_code=False, dtype="auto", quantize=False, trainable_adapter=False):
        if quantize or trainable_adapter or built:
            raise ValueError("the smoke builds one plain model a stage: no QLoRA, no adapter trained on")
        started = time.perf_counter()
        dtype = "bfloat16" if dtype == "auto" else str(dtype).removeprefix("torch.")
        model = random_model(shape, dtype, token_ids(tokenizer), oom)
        built.update(dtype=dtype, parameters=parameter_count(model), build_s=round(time.perf_counter() - started, 1))
        return model

    loaded, common.load_model = common.load_model, load
    try:
        yield built
    finally:
        common.load_model = loaded
    if not built:
        raise RuntimeError("the stage loaded its model elsewhere than training.common.load_model")


def make_tokenizer(folder: Path) -> None:
    """A GPT-2-style tokenizer (`scoring_speed.standard_grounder`) trained on MOAT grounder rows and random
    words, so a stage-1 row is about as long as under a real model's tokenizer (~300 tokens)."""
    from dpo_memory import random_words
    from scoring_speed import standard_grounder

    from coalign.config import TinySpec
    from coalign.formats.lumos import lumos_generation_prompt
    from coalign.moat.sft_data import grounder_pair
    from coalign.models.load import make_tiny_model
    from coalign.tasks.maths_suite import generate_suite

    rng = random.Random(0)
    texts = [lumos_generation_prompt(u) + c for u, c in map(grounder_pair, generate_suite("train", 500))]
    texts += [random_words(rng, 400) for _ in range(200)]
    least = TinySpec(vocab_size=300, hidden_size=8, num_layers=1, num_heads=1, num_kv_heads=1, intermediate_size=8)
    make_tiny_model(texts, folder, least)  # the folder a stage loads its tokenizer from
    standard_grounder(texts, folder, least, vocab_size=TOKENIZER_VOCAB)


def unmet_requirements() -> list[str]:
    """Requirements of coalign (but `OFF_PATH`) and of each carried package that the versions in effect leave
    unmet: what a first run on a new image should carry next."""
    import tomllib

    from packaging.requirements import Requirement

    def unmet(requirement: str, by: str) -> str | None:
        need = Requirement(requirement)
        if need.marker is not None and not need.marker.evaluate({"extra": ""}):
            return None
        try:
            have = importlib.metadata.version(need.name)
        except importlib.metadata.PackageNotFoundError:
            return f"{need} (by {by}): missing"
        return None if need.specifier.contains(have, prereleases=True) else f"{need} (by {by}): {have}"

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    found = [unmet(r, "coalign") for r in project if _canonical(Requirement(r).name) not in OFF_PATH]
    for name in CARRIED:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found += [unmet(r, name) for r in importlib.metadata.requires(name) or []]
    return sorted({line for line in found if line})


def setup(tiny: bool) -> dict:
    """What the steps run on, read without starting CUDA: the GPU (nvidia-smi), the versions in effect (the
    carried wheels first), the requirements they leave unmet."""
    device: dict = {"device": "cpu (--tiny)" if tiny else "cpu"}
    query = ["nvidia-smi", "--query-gpu=name,memory.total,memory.used", "--format=csv,noheader,nounits"]
    with contextlib.suppress(OSError, ValueError, IndexError, subprocess.SubprocessError):
        if not tiny:
            found = subprocess.run(query, capture_output=True, text=True, check=True, timeout=30).stdout
            name, total, used = (field.strip() for field in found.splitlines()[0].split(","))
            device = {"device": name, "gpu_mib": int(total), "used_mib": int(used)}
    versions = {}
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "huggingface-hub", "pydantic"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[name] = importlib.metadata.version(name)
    return {**device, "versions": versions, "unmet": unmet_requirements()}


def tokenizer_folder(work: Path) -> Path:
    """The tokenizer the steps share, made by the first step to run (`make_tokenizer`) and moved into place
    whole, so a step killed while making it leaves none."""
    folder = work / "tokenizer"
    if not folder.is_dir():
        with tempfile.TemporaryDirectory(dir=work) as tmp:
            make_tokenizer(Path(tmp) / "made")
            (Path(tmp) / "made").rename(folder)
    return folder


def _config(name: str, overrides: dict):
    from coalign.config import BUNDLED, load_config

    return load_config(BUNDLED / name, overrides)


def _lora() -> dict:
    """The paper configs' LoRA advice for one GPU (`lora.r=16`), the adapter saved alone."""
    return {"lora": {"r": 16, "merge": False}}


def grpo(work: Path, args: argparse.Namespace) -> dict:
    """One GRPO optimizer step of one group, rollouts stubbed, through coalign's stage function."""

    from coalign.models.load import load_tokenizer
    from coalign.training.common import stage_batch
    from coalign.training.grpo import train_grpo

    fp32 = {"bf16": False} if args.tiny else {}
    rl = {"generation": "hf", "grad_accum": 1, **fp32}  # one group a step; vLLM cannot travel, its rollouts stubbed
    context = {"max_context": TINY_CONTEXT} if args.tiny else {}
    config = _config(PILOTRL_CONFIG, {**_lora(), "pilotrl": {"rl": rl, **context}})
    settings, spec = config.pilotrl.rl, config.pilotrl
    tokenizer = load_tokenizer(tokenizer_folder(work))
    shape = {**LLAMA_8B, **((TOY | {"intermediate_size": 224}) if args.tiny else {})}
    prompt, rng = EPISODE_PROMPT[1 if args.tiny else 0], random.Random(0)
    low = len(tokenizer.all_special_ids)  # ordinary tokens, so TRL decodes the completions as text
    episodes: list[int] = []

    def rollout(prompts: list, trainer) -> dict:
        """Fixed random episodes of up to max_context tokens, the whole completion trained (`env_mask`)."""
        lengths = [spec.max_context - rng.randint(0, min(EPISODE_SLACK, prompt)) - prompt for _ in prompts]
        episodes.extend(prompt + n for n in lengths)
        completions = [[rng.randrange(low, len(tokenizer)) for _ in range(n)] for n in lengths]
        return {
            "prompt_ids": [[rng.randrange(low, len(tokenizer)) for _ in range(prompt)] for _ in prompts],
            "completion_ids": completions, "logprobs": None, "env_mask": [[1] * n for n in lengths],
        }  # fmt: skip

    def longer(completion_ids: list[list[int]], **_) -> list[float]:
        """The completion's length: it differs within the group, so the step has advantages and a gradient."""
        return [float(len(ids)) for ids in completion_ids]

    out, started = work / "grpo", time.perf_counter()
    with random_weights(shape, tokenizer, args.oom == "grpo") as built:
        train_grpo(
            tokenizer_folder(work), out, [{"prompt": "a smoke-test task"}], settings, [longer], [1.0], rollout,
            spec.max_new_tokens, name="smoke", epochs=1, seed=config.seed, lora=config.lora,
            context_tokens=spec.max_context,
        )  # fmt: skip
    seconds, log = one_step(out, started)
    micro, forwards = stage_batch(settings)
    step = (log.get("history") or [{}])[0]
    return {
        "seconds": round(seconds, 1), "model": "Llama-3.1-8B shape" + (" (toy)" if args.tiny else ""), **built,
        "lora_r": config.lora.r, "episodes": len(episodes), "micro_batch": micro, "forwards": forwards,
        "episode_tokens": round(sum(episodes) / len(episodes)), "lr": settings.learning_rate, "bf16": settings.bf16,
        "checkpointing": settings.gradient_checkpointing, "loss": log["train_loss"], "step_s": step.get("step_time"),
    }  # fmt: skip


def scoring(work: Path, args: argparse.Namespace) -> dict:
    """MOAT's stage-1 scoring of the suite's tasks x K candidates, as the recipe batches it."""
    import math

    import torch
    from scoring_speed import stage1_rows

    from coalign.moat.scoring import encode_completion, score_completions
    from coalign.models.agents import Agent
    from coalign.models.load import load_tokenizer, parameter_count
    from coalign.tasks.maths_suite import generate_suite

    config = _config(MOAT_CONFIG, {})
    tokenizer = load_tokenizer(tokenizer_folder(work))
    users, completions = stage1_rows(generate_suite("train", SCORED_TASKS[args.tiny]), config.moat.k)
    tokens = sum(len(encode_completion(tokenizer, u, c).ids) for u, c in zip(users, completions))
    shape = {**QWEN_14B, **(TOY_QWEN if args.tiny else {})}
    dtype = "float32" if args.tiny else "bfloat16"  # as `inference_bf16` loads the grounder on a GPU
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    model = random_model(shape, dtype, token_ids(tokenizer), args.oom == "scoring")
    build = time.perf_counter() - started
    started = time.perf_counter()
    scores = score_completions(
        Agent(model, tokenizer), users, completions, config.moat.batch_size, share_prefix=config.moat.share_prefix
    )  # fmt: skip
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    if len(scores) != len(users) or not all(math.isfinite(s.value("mean")) for s in scores):
        raise RuntimeError("scoring returned too few scores, or scores that are not finite")
    return {
        "seconds": round(seconds, 1), "model": "Qwen2.5-14B shape" + (" (toy)" if args.tiny else ""),
        "dtype": dtype, "parameters": parameter_count(model), "build_s": round(build, 1), "rows": len(users),
        "row_tokens": round(tokens / len(users)), "batch": config.moat.batch_size,
        "share_prefix": config.moat.share_prefix,
    }  # fmt: skip


def dpo(work: Path, args: argparse.Namespace) -> dict:
    """One DPO optimizer step of the planner with LoRA through coalign's stage function, the reference log-probs
    precomputed as it does; pairs filled to max_length (the worst case of the paper's cap)."""
    from dpo_memory import random_words

    from coalign.models.load import load_tokenizer
    from coalign.training.dpo import dpo as train_dpo

    cut = {"grad_accum": args.dpo_accum} if args.dpo_accum else {}
    tiny = {"grad_accum": args.dpo_accum or 2, "max_length": 128, "bf16": False} if args.tiny else {}
    # HF generation: vLLM's, which loads whole models, refuses an adapter saved alone (and nothing generates here)
    config = _config(MOAT_CONFIG, {**_lora(), "generation": {"backend": "hf"}, "planner_dpo": {**cut, **tiny}})
    settings, paper = config.planner_dpo, _config(MOAT_CONFIG, {}).planner_dpo
    tokenizer = load_tokenizer(tokenizer_folder(work))
    rng, half = random.Random(0), settings.max_length // 2

    def text(tokens: int) -> str:
        """Random words cut to `tokens` tokens."""
        return tokenizer.decode(tokenizer(random_words(rng, tokens)).input_ids[:tokens])

    triples = [(text(half), text(half), text(half)) for _ in range(settings.batch_size * settings.grad_accum)]
    shape = {**QWEN_14B, **(TOY_QWEN if args.tiny else {})}
    out, started = work / "dpo", time.perf_counter()
    with random_weights(shape, tokenizer, args.oom == "dpo") as built:
        train_dpo(tokenizer_folder(work), triples, out, settings, seed=config.seed, lora=config.lora)
    seconds, log = one_step(out, started)
    return {
        "seconds": round(seconds, 1), "model": "Qwen2.5-14B shape" + (" (toy)" if args.tiny else ""), **built,
        "lora_r": config.lora.r, "batch": settings.batch_size, "grad_accum": settings.grad_accum,
        "paper_grad_accum": paper.grad_accum,
        "max_length": settings.max_length, "lr": settings.learning_rate, "bf16": settings.bf16,
        "checkpointing": settings.gradient_checkpointing, "loss": log["train_loss"],
    }  # fmt: skip


CHILDREN: dict[str, Callable[[Path, argparse.Namespace], dict]] = {"grpo": grpo, "scoring": scoring, "dpo": dpo}


def child(step: str, work: Path, args: argparse.Namespace) -> None:
    """Run `step`, writing its record to `<work>/<step>.json`; out of memory is a record, anything else raises."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    try:
        record = {"status": "ok", **CHILDREN[step](work, args)}
    except RuntimeError as error:  # torch.OutOfMemoryError, or a library's error that says so
        if not isinstance(error, torch.OutOfMemoryError) and "out of memory" not in str(error).lower():
            raise
        allocated = round(torch.cuda.memory_allocated() / 2**20) if torch.cuda.is_available() else None
        record = {"status": "oom", "error": str(error).splitlines()[0][:300], "allocated_mib": allocated}
    record.setdefault("seconds", round(time.perf_counter() - started, 1))
    record["peak_mib"] = peak_mib()
    record["memory"] = "cuda max_memory_allocated" if torch.cuda.is_available() else "peak RSS"
    (work / f"{step}.json").write_text(json.dumps(record))


# ---- the run -----------------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fetch-wheels", type=Path, metavar="DIR", help="download the wheels into DIR, and stop")
    parser.add_argument("--wheels", type=Path, metavar="DIR",
                        help="install these first (default: .whl where it exists, but not under --tiny)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="the JSON lines also here (default: $OUT/gpu_smoke.jsonl where "
                        "OUT is set), each step's log beside them")  # fmt: skip
    parser.add_argument("--tiny", action="store_true", help="toy shapes on the CPU: the code paths, in seconds")
    parser.add_argument("--steps", default=",".join(STEPS), help="of %(default)s")
    parser.add_argument("--dpo-accum", type=int, help="DPO: micro-steps of the one step (the paper's 8)")
    parser.add_argument("--oom", choices=STEPS, help="--tiny: this step's first forward runs out of memory")
    parser.add_argument("--child", nargs=2, metavar=("STEP", "WORK"), help=argparse.SUPPRESS)
    return parser


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = _parser()
    args = parser.parse_args(argv)
    args.steps = tuple(step.strip() for step in args.steps.split(","))
    if unknown := [step for step in args.steps if step not in STEPS]:
        parser.error(f"--steps: no step {unknown[0]!r}; the steps are {','.join(STEPS)}")
    if args.oom and not args.tiny:
        parser.error("--oom only with --tiny: an injected out-of-memory is no measurement")
    if args.wheels is None and not args.tiny and (ROOT / ".whl").is_dir():
        args.wheels = ROOT / ".whl"
    if args.out is None and os.environ.get("OUT"):
        args.out = Path(os.environ["OUT"]) / "gpu_smoke.jsonl"
    return args


def _pass_on(args: argparse.Namespace) -> list[str]:
    """The options a step's process needs."""
    return [*(["--tiny"] if args.tiny else []), *(["--oom", args.oom] if args.oom else []),
            *(["--dpo-accum", str(args.dpo_accum)] if args.dpo_accum else [])]  # fmt: skip


def _record(record: dict, out: Path | None) -> None:
    """One JSON line, on stdout and appended to `out`."""
    line = json.dumps(record)
    print(line, flush=True)
    if out:
        with out.open("a") as file:
            file.write(line + "\n")


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if args.child:
        step, work = args.child
        child(step, Path(work), args)
        return 0
    if args.fetch_wheels:
        args.fetch_wheels.mkdir(parents=True, exist_ok=True)
        fetch_wheels(args.fetch_wheels)
        return 0
    started = time.perf_counter()
    what = "toy shapes on the CPU; its timings mean nothing" if args.tiny else "the papers' shapes"
    print(f"coalign GPU smoke: {what}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        paths = [str(ROOT), str(ROOT / "benchmarks")]
        # "site-packages" in its name: dill (datasets' fingerprints) pickles a module by value unless its file's
        # path says it is installed, and pickling TRL's or transformers' modules by value fails
        site = work / "site-packages"
        wheels = install_wheels(args.wheels, site) if args.wheels else 0
        if wheels:
            paths.insert(0, str(site))
            sys.path.insert(0, paths[0])  # the versions `setup` reads
        env = {
            **os.environ, "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1",
            "TOKENIZERS_PARALLELISM": "false", "COLUMNS": "80", **({"CUDA_VISIBLE_DEVICES": ""} if args.tiny else {}),
        }  # fmt: skip
        logs = args.out.parent if args.out else work
        if args.out:
            logs.mkdir(parents=True, exist_ok=True)
            args.out.write_text("")
        budgets = ", ".join(f"{step} {BUDGET_S[step]}" for step in args.steps)
        print(f"a process a step; budgets (s): {budgets}", flush=True)
        _record({"step": "setup", "status": "ok", "wheels": wheels, **setup(args.tiny)}, args.out)
        failed = False
        for step in args.steps:
            command = [sys.executable, __file__, *_pass_on(args), "--child", step, str(work)]
            log = logs / f"gpu_smoke-{step}.log"
            record = {"step": step, **run_child(command, log, work / f"{step}.json", BUDGET_S[step], env)}
            _record(record, args.out)
            failed |= record["status"] == "error"
    print(f"total {time.perf_counter() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
