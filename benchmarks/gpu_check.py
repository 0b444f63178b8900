"""One check of coalign on a single GPU machine: what vLLM, prefix sharing and LoRA buy there, as ratios measured
in this one run.

For parts 1-3 it makes a random-weight Llama of a 1-3B shape (default: hidden 2048, 22 layers, 16 heads,
vocabulary 32,000, about 1.2B parameters) in a temporary folder, with a GPT-2-style tokenizer trained on generated
text, so it downloads nothing (part 4 makes its own, larger). On that model it measures and prints:

1. sampling tokens/s: HF `generate` (coalign's HFBackend) and vLLM's offline engine (VLLMBackend, when vllm is
   installed; else "vllm not installed: skipped"), K=15 samples per ~300-token prompt at temperature 1, in one
   call each; ratio vLLM/HF;
2. stage-1 scoring tokens/s: `scoring.score_completions` on MOAT-shaped rows (K candidates per suite task, which
   share the grounder prompt), with `share_prefix` False and True; ratio shared/plain;
3. training: seconds per SFT, DPO (reference log-probs precomputed, as coalign's DPO stage does) and GRPO step
   (TRL's GRPOTrainer sampling with `generate`, a reward that is the completion's length), and peak memory,
   each with LoRA (coalign's defaults: r 16, every linear layer) and with every weight; ratios LoRA/full;
4. the paper configs scaled out (`--parts paper`): `coalign train` on paper-moat-llama2-7b and
   paper-pilotrl-llama3.1-8b, each in a process of its own, with a random Llama of Llama-2-7B's shape (hidden
   4096, 32 heads, MLP 11,008, vocabulary 32,000; 32 layers, or as many as the disk holds: see
   `fitting_layers`), LoRA r 16 merged, the bundled data (GSM8K and SVAMP files shipped with coalign, the
   bundled environments) and a few tasks and optimizer steps a stage (`paper_overrides`); generation by vLLM
   where it is installed (moat `generation.backend: vllm`, pilotrl `rl.generation: vllm_colocate`), else HF.
   Per recipe: exit status, wall seconds, the stages finished, peak GPU memory (nvidia-smi, polled) and the
   evaluations' metrics files; a failure prints the run's last lines, and the next recipe runs.

Each measurement runs in a process of its own, so each peak is its own: `torch.cuda.max_memory_allocated` on a
GPU, peak RSS (VmHWM, imports included) on a CPU; and vLLM's reserved memory is gone before training starts.
On a GPU the checkpoint is saved in bf16, sampling and scoring run in bf16 and training keeps float32 weights
under bf16 autocast (`bf16: true` in a coalign config). The first training step of each variant is not timed.
On one GPU, from the repository root (options pass through): parts 1-3 by default, expected to take 5-10
minutes on an H200; the paper part is a run of its own, within two `--paper-timeout`s and the model's making:

    bash benchmarks/gpu_check.sh
    bash benchmarks/gpu_check.sh --parts paper

On a CPU, `--tiny` runs every code path on a very small model (part 4 with HF generation): on 2 busy cores parts
1-3 took 3-8 minutes and part 4 2-6 (1.5 on idle ones); its timings mean nothing:

    .venv/bin/python benchmarks/gpu_check.py --tiny --parts sampling,scoring,training,paper
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import torch
from datasets import Dataset
from dpo_memory import peak_rss_mib, random_triples, random_words
from scoring_speed import prefix_share, seconds, stage1_rows, standard_grounder
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, TrainerCallback
from transformers.utils import logging as hf_logging
from trl import DPOConfig, DPOTrainer, GRPOTrainer, SFTConfig, SFTTrainer

from coalign.config import (
    BUNDLED,
    DPOSettings,
    GenerationSettings,
    GRPOSettings,
    LoraSettings,
    RunConfig,
    SFTSettings,
    TinySpec,
)
from coalign.formats.lumos import lumos_generation_prompt
from coalign.moat.sft_data import grounder_pair
from coalign.models.agents import Agent
from coalign.models.backends import HFBackend, VLLMBackend
from coalign.models.load import (
    llama_sizes,
    load_model,
    load_tokenizer,
    make_tiny_model,
    parameter_count,
    render_prompt,
)
from coalign.pilotrl.curriculum import stage_epochs
from coalign.registry import load_config
from coalign.tasks.maths_suite import generate_suite
from coalign.training.common import quiet_transformers, trainer_args, training_model
from coalign.training.dpo import dpo_dataset
from coalign.training.grpo import grpo_config
from coalign.training.sft import sft_dataset

CUDA = torch.cuda.is_available()  # without starting CUDA, which would make vLLM spawn its engine, not fork it
ROOT = Path(__file__).resolve().parents[1]
TRAINED = ("sft", "dpo", "grpo")
PARTS = ("sampling", "scoring", "training", "paper")
SMALL_PARTS = PARTS[:3]  # on the small model; the default, 5-10 minutes on an H200: the paper part runs on its own
PAPER_CONFIGS = {"moat": "paper-moat-llama2-7b", "pilotrl": "paper-pilotrl-llama3.1-8b"}
# Llama-2-7B's shape (its embeddings tied here, as make_tiny_model makes them: 6.6B parameters, not 6.7B)
PAPER_SHAPE = TinySpec(
    vocab_size=32000, hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=32, intermediate_size=11008,
    max_positions=4096,
)  # fmt: skip
# at most: a LoRA stage saves its merge in the dtype it held the base in (`training.common.weights_dtype`), bf16's
# 2 bytes where bf16 is on, else float32's
CHECKPOINT_BYTES = 4
TAIL_LINES, TAIL_INDENT = 30, 7  # of a failed recipe's output, printed in 80 columns (its own: 80 - 7)
# option: (default, default under --tiny, help); None: each stage's batch size in coalign's settings
SIZES: dict[str, tuple[int | None, int, str]] = {
    "hidden": (2048, 64, "model: hidden size (the MLP's is 11/4 of it)"),
    "layers": (22, 2, "model: decoder layers"),
    "heads": (16, 4, "model: attention heads, as many key-value heads"),
    "vocab": (32000, 512, "model: tokenizer and embedding size"),
    "prompts": (16, 2, "sampling: prompts, all in one call, each sampled K times"),
    "prompt_tokens": (300, 48, "sampling: tokens of random words a prompt, before the chat format"),
    "new_tokens": (128, 16, "sampling and GRPO: most tokens a completion"),
    "tasks": (64, 4, "scoring: suite tasks, K candidate rows each"),
    "steps": (4, 2, "training: steps a variant, the first not timed (at least 2)"),
    "words": (256, 24, "training: random words an example: half prompt, a quarter each answer (SFT: chosen)"),
    "train_batch": (None, 2, "training: sequences a step, one batch; default coalign's: SFT 8, DPO 4, GRPO 16"),
    "generations": (16, 2, "GRPO: completions per prompt (num_generations; a divisor of the GRPO batch)"),
    "paper_timeout": (240, 900, "paper: seconds a recipe may run before it is stopped"),
}


def bf16() -> bool:
    """A GPU with bf16 in hardware: the checkpoint saved, sampled and scored in bf16, training under its autocast."""
    return CUDA and torch.cuda.is_bf16_supported(including_emulation=False)


def small_shape(args: argparse.Namespace) -> TinySpec:
    """The model of parts 1-3 (and of part 4 under --tiny): the asked sizes, an MLP 11/4 of the hidden size."""
    return TinySpec(
        vocab_size=args.vocab, hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
        num_kv_heads=args.heads, intermediate_size=args.hidden * 11 // 4, max_positions=PAPER_SHAPE.max_positions,
    )  # fmt: skip


def random_llama(folder: Path, shape: TinySpec) -> Path:
    """A Llama of `shape` with random weights and a GPT-2-style tokenizer of `shape.vocab_size` tokens: trained
    on the suite's grounder rows, so stage-1 rows are as long as under a real model's tokenizer (~300 tokens), and
    on random words, which fill the vocabulary. The tokenizer is made beside a one-layer model whose config the
    model of `shape` then takes, made and saved once (a 7B one is ~13 GB in bf16), in bf16 on a GPU, as hub
    checkpoints are saved."""
    rng = random.Random(0)
    texts = [lumos_generation_prompt(u) + c for u, c in map(grounder_pair, generate_suite("train", 500))]
    texts += [random_words(rng, 400) for _ in range(200)]
    least = TinySpec(
        vocab_size=300, hidden_size=8, num_layers=1, num_heads=1, num_kv_heads=1, intermediate_size=8,
        max_positions=shape.max_positions,
    )  # fmt: skip
    make_tiny_model(texts, folder, least)  # the config; its small tokenizer is replaced next
    standard_grounder(texts, folder, least, vocab_size=shape.vocab_size)
    config = LlamaConfig.from_pretrained(folder)
    config.update(llama_sizes(shape))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if bf16() else torch.float32).save_pretrained(folder)
    return folder


def _prompts(tokenizer, args: argparse.Namespace) -> list[str]:
    """`args.prompts` user turns of `args.prompt_tokens` tokens of random words, rendered as coalign renders them."""
    rng, n = random.Random(1), args.prompt_tokens
    cut = [tokenizer(random_words(rng, n)).input_ids[:n] for _ in range(args.prompts)]
    return [render_prompt(tokenizer, tokenizer.decode(ids)) for ids in cut]


class CountingModel:
    """The model as HFBackend uses it, counting the tokens each `generate` samples: each row's up to its first EOS
    (a row that ended early is padded to the batch's longest)."""

    def __init__(self, model) -> None:
        self.model, self.tokens = model, 0

    @property
    def device(self) -> torch.device:
        return self.model.device

    def generate(self, **kwargs) -> torch.Tensor:
        out = self.model.generate(**kwargs)
        eos = out[:, kwargs["input_ids"].shape[1] :] == kwargs["eos_token_id"]
        self.tokens += int((eos.cumsum(1) - eos.int() == 0).sum())  # no EOS before the token
        return out


class CountingLLM:
    """vLLM's engine as VLLMBackend uses it, counting the tokens each `generate` samples."""

    def __init__(self, llm) -> None:
        self.llm, self.tokens = llm, 0

    def generate(self, *args, **kwargs) -> list:
        results = self.llm.generate(*args, **kwargs)
        self.tokens += sum(len(c.token_ids) for r in results for c in r.outputs)
        return results


class CountedVLLM(VLLMBackend):
    """VLLMBackend sampling through a `CountingLLM` (its `llm` is the process's engine, a read-only property)."""

    counter: CountingLLM

    @property
    def llm(self):
        return self.counter


def _sample(backend, counter: CountingModel | CountingLLM, tokenizer, args: argparse.Namespace) -> dict:
    """One timed call of K samples per prompt at temperature 1, after an untimed warm-up on another prompt (no
    prefix cache hit); `counter` counts the tokens sampled."""
    prompts = _prompts(tokenizer, args)
    backend.complete([render_prompt(tokenizer, "warm up")], 4, 2, 1.0, 1.0)
    counter.tokens = 0
    torch.manual_seed(0)
    started = time.perf_counter()
    backend.complete(prompts, args.new_tokens, args.k, 1.0, 1.0)
    return {
        "sample_s": time.perf_counter() - started,
        "sampled_tokens": counter.tokens,
        "prompt_tokens": statistics.mean(len(tokenizer(p).input_ids) for p in prompts),
    }


def _inference(init: str, args: argparse.Namespace) -> dict:
    """HF sampling, then stage-1 scoring plain and with prefix sharing (each after an untimed warm-up batch), of
    the two those asked for in `args.parts`, on the model on the GPU (coalign's `Agent.load` leaves it where
    `from_pretrained` puts it, the CPU)."""
    tokenizer = load_tokenizer(init)
    model = load_model(init).to("cuda" if CUDA else "cpu")
    result = {"parameters": parameter_count(model)}
    if "sampling" in args.parts:
        counter = CountingModel(model)
        result |= _sample(HFBackend(counter, tokenizer, batch_size=args.prompts), counter, tokenizer, args)
    if "scoring" not in args.parts:
        return result
    agent = Agent(model, tokenizer)
    users, completions = stage1_rows(generate_suite("train", args.tasks), args.k)
    total, skipped, groups = prefix_share(tokenizer, users, completions, args.score_batch)
    warm = args.score_batch
    for share in (False, True):
        seconds(agent, users[:warm], completions[:warm], args.score_batch, share)
    plain = seconds(agent, users, completions, args.score_batch, False)
    shared = seconds(agent, users, completions, args.score_batch, True)
    return {
        **result, "rows": len(users), "row_tokens": total, "skipped": skipped, "groups": groups,
        "plain_s": plain, "shared_s": shared,
    }  # fmt: skip


def _vllm(init: str, args: argparse.Namespace) -> dict:
    """The same sampling through vLLM's engine, as `generation.backend: vllm` runs it."""
    tokenizer = load_tokenizer(init)
    backend = CountedVLLM(init, tokenizer, False, args.gpu_memory_utilization)
    backend.counter = CountingLLM(VLLMBackend.llm.fget(backend))
    return _sample(backend, backend.counter, tokenizer, args)


class StepTimes(TrainerCallback):
    """Wall seconds of each optimizer step (a GRPO step's include its sampling), the GPU drained at both ends so
    queued work lands in its own step."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.started = 0.0

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        if CUDA:
            torch.cuda.synchronize()
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if CUDA:
            torch.cuda.synchronize()
        self.seconds.append(time.perf_counter() - self.started)


def _length_reward(completions: list[str], **_) -> list[float]:
    """A completion's length: it differs within a group, so every GRPO step has advantages and a gradient."""
    return [float(len(c)) for c in completions]


def _trainer(stage: str, model, peft_config, tokenizer, out: Path, args: argparse.Namespace):
    """TRL's trainer for `stage`, configured from coalign's settings as its stages do, for `args.steps` steps (GRPO
    on plain prompts, sampled by `generate`, not on AdaPlan episodes)."""
    if stage == "grpo":
        settings = GRPOSettings(
            num_generations=args.generations, batch_size=args.train_batch or GRPOSettings().batch_size,
            grad_accum=1, bf16=bf16(),
        )  # fmt: skip
        config = grpo_config(settings, stage_epochs(settings, "joint"), out, 0, [1.0], args.new_tokens)
        config.max_steps = args.steps
        triples = random_triples(args.steps * settings.batch_size, args.words)
        data = Dataset.from_dict({"prompt": [render_prompt(tokenizer, prompt) for prompt, _, _ in triples]})
        return GRPOTrainer(
            model=model, reward_funcs=[_length_reward], args=config, train_dataset=data, processing_class=tokenizer,
            peft_config=peft_config,
        )  # fmt: skip
    tokenizer.padding_side = "right"
    kind = SFTSettings if stage == "sft" else DPOSettings
    settings = kind(batch_size=args.train_batch or kind().batch_size, grad_accum=1, bf16=bf16())
    triples = random_triples(args.steps * settings.batch_size, args.words)
    if stage == "sft":
        config = SFTConfig(completion_only_loss=True, max_steps=args.steps, **trainer_args(settings, out, 0))
        data = sft_dataset(tokenizer, [(prompt, chosen) for prompt, chosen, _ in triples])
        return SFTTrainer(
            model=model, args=config, train_dataset=data, processing_class=tokenizer, peft_config=peft_config
        )
    config = DPOConfig(
        beta=settings.beta, loss_type=[settings.loss_type], precompute_ref_log_probs=True, max_steps=args.steps,
        **trainer_args(settings, out, 0),
    )  # fmt: skip
    data = dpo_dataset(tokenizer, triples)
    return DPOTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer, peft_config=peft_config)


def _train(stage: str, lora: bool, init: str, args: argparse.Namespace) -> dict:
    """Median seconds of a step after the first, and this process's peak memory in MiB."""
    tokenizer = load_tokenizer(init)
    model, peft_config = training_model(init, False, LoraSettings() if lora else None, bf16())
    timer = StepTimes()
    with tempfile.TemporaryDirectory() as out, quiet_transformers():
        trainer = _trainer(stage, model, peft_config, tokenizer, Path(out), args)
        trainer.add_callback(timer)
        trainer.train()
    return {
        "step_s": statistics.median(timer.seconds[1:]),
        "peak_mib": _peak_mib(),
        "batch": trainer.args.train_batch_size,
    }


def _peak_mib() -> float:
    """This process's peak: on a GPU its tensors' (`max_memory_allocated`), else its resident set's."""
    return torch.cuda.max_memory_allocated() / 2**20 if CUDA else peak_rss_mib()


def _child(task: str, init: Path) -> dict | None:
    """`task` in a fresh process (the same options, `--child`): its result, or None after printing its error."""
    command = [sys.executable, __file__, *sys.argv[1:], "--child", task, str(init)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return json.loads(done.stdout.strip().splitlines()[-1])
    print(f"   {task} failed (exit {done.returncode}); its last output:", *done.stderr.strip().splitlines()[-15:],
          sep="\n     ", flush=True)  # fmt: skip
    return None


def paper_overrides(recipe: str, model: Path, vllm: bool, gpu: bool) -> dict:
    """What `coalign train` changes in the recipe's paper config (`PAPER_CONFIGS`) to run it on one GPU in minutes
    with nothing downloaded: `model` for every agent, LoRA r 16 merged into each checkpoint (the configs' own
    advice for one GPU), the data bundled with coalign, a few tasks and optimizer steps a stage, short turns (a
    random model never stops early) and vLLM where `vllm`. Every other setting is the paper's, bf16 included on a
    `gpu`; on a CPU (--tiny) every stage trains in fp32, as coalign's tiny configs do."""
    fp32 = {} if gpu else {"bf16": False}
    lora = {"r": 16, "merge": True}
    if recipe == "pilotrl":
        # GRPO: 4 held-in tasks x 2 rollouts, 4 a step: 2 steps an epoch (the planner stage's 2 epochs: 4)
        rl = {"tasks": 1, "num_generations": 2, "batch_size": 4, "grad_accum": 1, **fp32}
        rl["generation"] = "vllm_colocate" if vllm else "hf"
        sft = {"epochs": 1, "grad_accum": 1, **fp32}  # 2 expert episodes a held-in environment, 4 a step: 2 steps
        episodes = {"train_tasks": 2, "eval_tasks": 2, "max_new_tokens": 64, "max_context": 2048}
        return {"lora": lora, "pilotrl": {"model": str(model), **episodes, "sft": sft, "rl": rl}}
    shipped = "shipped:{}"  # the benchmark files coalign ships, as smol.yaml reads them
    data = {
        "train": [{"kind": "gsm8k", "path": shipped.format("gsm8k/train.jsonl"), "n": 16}],
        "heldin": [{"kind": "gsm8k", "path": shipped.format("gsm8k/test_socratic.jsonl"), "n": 8}],
        "heldout": [{"kind": "svamp", "path": shipped.format("svamp/SVAMP.json"), "n": 8}],
    }
    sft = {"epochs": 1, "grad_accum": 2, **fp32}  # 16 examples, 8 a step: 2 steps
    # one round on 8 tasks; pair_threshold 0: a random grounder's NLLs may all lie within the paper's 0.1,
    # which would leave DPO nothing to train on
    moat = {"rounds": 1, "tasks": 8, "k": 4, "pair_threshold": 0}
    tokens = {"max_new_tokens_plan": 128, "max_new_tokens_ground": 128}
    return {
        "models": {"planner": str(model), "grounder": str(model)},
        "lora": lora,
        "data": data,
        "planner_sft": sft,
        "grounder_sft": sft,
        "planner_dpo": {"grad_accum": 1, **fp32},  # at most 8 pairs, 4 a step
        "grounder_round_sft": {"epochs": 1, "grad_accum": 4, **fp32},  # 8 tasks x K 4 + 16 initial examples: 3 steps
        "moat": {**moat, **tokens},
        "eval": {**tokens, "diagnostics": False},
        **({"planner_round_sft": fp32} if fp32 else {}),  # unused by moat; its bf16 would still set inference_bf16
        "generation": {"backend": "vllm" if vllm else "hf"},  # the config's is vllm
    }


def set_options(overrides: dict, prefix: str = "") -> list[str]:
    """`overrides` as `coalign train --set` takes them: a `dotted.key=value` a leaf, so the rest of each block
    stays the config's, each value in JSON (YAML that quotes what YAML's flow style would misread, `shipped:`)."""
    pairs = []
    for key, value in overrides.items():
        if isinstance(value, dict):
            pairs += set_options(value, f"{prefix}{key}.")
        else:
            pairs.append(f"{prefix}{key}={json.dumps(value)}")
    return pairs


def kept_checkpoints(config: RunConfig) -> int:
    """Model checkpoints a run of `config` leaves in its folder: pilotrl's SFT and one a GRPO stage; moat's cold
    start (planner and grounder), then a DPO planner and an SFT grounder a round."""
    if config.recipe == "pilotrl":
        return 1 + (len(config.pilotrl.rl.order) if config.pilotrl.rl else 0)
    return 2 + 2 * config.moat.rounds


def _parameters(shape: TinySpec) -> int:
    """Parameters of a Llama of `shape` as `random_llama` makes it (embeddings tied), counted on no device."""
    config = LlamaConfig(vocab_size=shape.vocab_size, tie_word_embeddings=True, **llama_sizes(shape))
    with torch.device("meta"):
        return parameter_count(LlamaForCausalLM(config))


def fitting_layers(shape: TinySpec, free: int, checkpoints: int) -> int:
    """The most decoder layers, up to `shape.num_layers`, for which the model (2 bytes a parameter on a GPU with
    bf16, else 4) and a run's `checkpoints` merged ones (`CHECKPOINT_BYTES` a parameter) fit in `free` bytes (the
    runs' folders are removed one by one); 0 when not even one layer does."""
    one, two = (_parameters(shape.model_copy(update={"num_layers": n})) for n in (1, 2))
    layer, rest = two - one, 2 * one - two
    each = (2 if bf16() else 4) + CHECKPOINT_BYTES * checkpoints
    return max(0, min(shape.num_layers, (free // each - rest) // layer))


class GPUMemory:
    """Memory in use on the GPUs, read by nvidia-smi every `interval` seconds in a thread while a run goes on, so
    its peak takes in every process of the run (vLLM's engine is one of its own) and what vLLM reserves, which
    torch's counters in the trainer's process would not. None where nvidia-smi is missing or fails."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval, self.before_mib, self.peak_mib = interval, None, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    @staticmethod
    def used_mib() -> int | None:
        """MiB in use now, summed over the GPUs."""
        query = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
        try:
            out = subprocess.run(query, capture_output=True, text=True, check=True, timeout=30).stdout
            return sum(int(line) for line in out.split())
        except (OSError, ValueError, subprocess.SubprocessError):
            return None

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            used = self.used_mib()
            if used is not None:
                self.peak_mib = max(self.peak_mib or 0, used)

    def __enter__(self) -> "GPUMemory":
        self.before_mib = self.used_mib()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def run_logged(command: list[str], log: Path, timeout: float) -> dict:
    """`command` from the repository root, its output (stdout and stderr, rich's tracebacks wrapped to fit under
    `TAIL_INDENT`) in `log`: its exit status (None when stopped at `timeout` seconds, with every process it
    started: it runs in a session of its own), wall seconds, the GPU memory in use before it and at its peak
    (`GPUMemory`), and the last `TAIL_LINES` lines of `log`."""
    started, env = time.perf_counter(), {**os.environ, "COLUMNS": str(80 - TAIL_INDENT)}
    with log.open("w") as out, GPUMemory() as memory:
        child = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )  # fmt: skip
        try:
            status = child.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            status = None
    return {
        "status": status, "seconds": time.perf_counter() - started, "before_mib": memory.before_mib,
        "peak_mib": memory.peak_mib, "tail": log.read_text(errors="replace").splitlines()[-TAIL_LINES:],
    }  # fmt: skip


def run_recipe(recipe: str, overrides: dict, run: Path, timeout: float) -> dict:
    """`coalign train` of the recipe's paper config with `overrides` (`paper_overrides`) into `run` (`run_logged`,
    its log beside `run`), with the stages the run finished, in order, each with its seconds (from its record in
    `stages/`), and its evaluations' metrics files."""
    config = BUNDLED / f"{PAPER_CONFIGS[recipe]}.yaml"
    sets = [arg for pair in set_options(overrides) for arg in ("--set", pair)]
    command = [sys.executable, "-m", "coalign.cli", "train", str(config), "--run-dir", str(run), *sets]
    result = run_logged(command, run.with_suffix(".log"), timeout)
    records = sorted(run.glob("stages/*.json"), key=lambda path: path.stat().st_mtime)
    stages = [(path.stem, json.loads(path.read_text()).get("seconds")) for path in records]
    metrics = sorted(path.relative_to(run).as_posix() for path in run.rglob("metrics.json"))
    return {**result, "stages": stages, "metrics": metrics}


def _say(text: str, indent: int = 3) -> None:
    """`text` in lines of at most 80 columns, each `indent` spaces in, the later ones two more."""
    print(textwrap.fill(text, 80, initial_indent=" " * indent, subsequent_indent=" " * (indent + 2)), flush=True)


def _generation(config: RunConfig) -> str:
    """Who samples a run's text: moat's `generation.backend`, pilotrl's `rl.generation` (its rollouts)."""
    if config.recipe == "pilotrl":
        return f"rl.generation {config.pilotrl.rl.generation}"
    return f"generation.backend {config.generation.backend if config.generation else 'hf'}"


def _paper(args: argparse.Namespace, folder: Path) -> bool:
    """Part 4: the model, then each recipe's paper config trained on it; whether every run ended with its
    evaluations."""
    missing = "vllm not installed" if importlib.util.find_spec("vllm") is None else None if CUDA else "no CUDA GPU"
    model = folder / "model"
    overrides = {recipe: paper_overrides(recipe, model, not missing, CUDA) for recipe in PAPER_CONFIGS}
    configs = {recipe: load_config(BUNDLED / f"{PAPER_CONFIGS[recipe]}.yaml", o) for recipe, o in overrides.items()}
    shape = small_shape(args) if args.tiny else PAPER_SHAPE.model_copy(update={"num_layers": args.paper_layers})
    free, kept = shutil.disk_usage(folder).free, max(map(kept_checkpoints, configs.values()))
    layers = fitting_layers(shape, free, kept)
    print("\n4. paper configs: coalign train on each, in a process of its own", flush=True)
    _say("LoRA r 16 merged, the bundled data, a few tasks and optimizer steps a stage (gpu_check.paper_overrides); "
         f"disk: {free / 1e9:.1f} GB free for the model and a run's {kept} float32 checkpoints, room for {layers} "
         f"of {shape.num_layers} layers")  # fmt: skip
    if not layers:
        print("   skipped: not even one layer fits")
        return False
    started, shape = time.perf_counter(), shape.model_copy(update={"num_layers": layers})
    random_llama(model, shape)
    _say(f"model: random Llama, hidden {shape.hidden_size}, {layers} layers, {shape.num_heads} heads, MLP "
         f"{shape.intermediate_size}, vocabulary {len(load_tokenizer(model))}, {_parameters(shape) / 1e6:,.1f}M "
         f"parameters; made in {time.perf_counter() - started:.0f} s")  # fmt: skip
    done = True
    for recipe, name in PAPER_CONFIGS.items():
        print(f"   {recipe} ({name}), {_generation(configs[recipe])}{f' ({missing})' if missing else ''}:", flush=True)
        result = run_recipe(recipe, overrides[recipe], folder / recipe, args.paper_timeout)
        status = f"exit {result['status']}" if result["status"] is not None else "stopped at --paper-timeout"
        peak = (
            f"{result['peak_mib']} MiB ({result['before_mib']} before it)" if result["peak_mib"] is not None
            else "n/a, no reading from nvidia-smi"
        )  # fmt: skip
        _say(f"{status} after {result['seconds']:.0f} s; peak GPU memory in use: {peak}", 5)
        stages = ", ".join(stage if took is None else f"{stage} {took:.0f}" for stage, took in result["stages"])
        _say(f"stages finished, seconds each: {stages or 'none'}", 5)
        _say(f"metrics: {' '.join(result['metrics']) or 'none'}", 5)
        if result["status"] != 0 or not result["metrics"]:
            done = False
            indent = "\n" + " " * TAIL_INDENT
            print(f"     failed; the run's last {len(result['tail'])} lines:", *result["tail"], sep=indent, flush=True)
        shutil.rmtree(folder / recipe, ignore_errors=True)  # its checkpoints: room for the next run's
    return done


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="a very small model and workload: the code paths on a CPU")
    for name, (full, tiny, text) in SIZES.items():
        default = f"default {full}; " if full is not None else ""
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, help=f"{text} ({default}--tiny: {tiny})")
    parser.add_argument("--k", type=int, default=15, help="samples per prompt and scored candidates per task (15)")
    parser.add_argument("--score-batch", type=int, default=32, help="scoring: rows per forward pass (32)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=GenerationSettings().gpu_memory_utilization,
                        help="vLLM's share of the GPU (coalign's default, %(default)s)")  # fmt: skip
    parser.add_argument("--parts", default=",".join(SMALL_PARTS),
                        help=f"what to run, of {','.join(PARTS)} (default %(default)s)")  # fmt: skip
    parser.add_argument("--paper-layers", type=int, default=PAPER_SHAPE.num_layers,
                        help="paper: decoder layers, fewer where the disk holds fewer (%(default)s)")  # fmt: skip
    parser.add_argument("--child", nargs=2, metavar=("TASK", "INIT"), help=argparse.SUPPRESS)
    return parser


def _arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, each size left unset taking its default, or its --tiny one."""
    parser = _parser()
    args = parser.parse_args(argv)
    for name, (full, tiny, _) in SIZES.items():
        if getattr(args, name) is None:
            setattr(args, name, tiny if args.tiny else full)
    if args.steps < 2:
        parser.error("--steps must be at least 2: the first step is not timed")
    args.parts = tuple(part.strip() for part in args.parts.split(","))
    if unknown := [part for part in args.parts if part not in PARTS]:
        parser.error(f"--parts: no part {unknown[0]!r}; the parts are {','.join(PARTS)}")
    return args


def _ratio(numerator: float | None, denominator: float | None) -> str:
    return f"{numerator / denominator:.2f}x" if numerator and denominator else "n/a"


def _training_header() -> None:
    memory = "CUDA peak, max_memory_allocated" if CUDA else "peak RSS"
    print(f"   {'stage':5s} {'batch':>5s} {'full s/step':>11s} {'LoRA s/step':>11s} {'LoRA/full':>9s} "
          f"{'full MiB':>10s} {'LoRA MiB':>10s} {'LoRA/full':>9s}   (MiB: {memory})", flush=True)  # fmt: skip


def _training_row(stage: str, full: dict | None, lora: dict | None) -> None:
    """One stage's step seconds and peaks, with LoRA and without, and their ratios."""
    full, lora = full or {}, lora or {}
    batch = full.get("batch") or lora.get("batch") or "-"
    steps = [f"{r['step_s']:11.3f}" if r else f"{'failed':>11s}" for r in (full, lora)]
    peaks = [f"{r['peak_mib']:10.0f}" if r else f"{'failed':>10s}" for r in (full, lora)]
    step_ratio = _ratio(lora.get("step_s"), full.get("step_s"))
    peak_ratio = _ratio(lora.get("peak_mib"), full.get("peak_mib"))
    print(f"   {stage.upper():5s} {batch:>5} {steps[0]} {steps[1]} {step_ratio:>9s} {peaks[0]} {peaks[1]} "
          f"{peak_ratio:>9s}", flush=True)  # fmt: skip


def _small_model_parts(args: argparse.Namespace, folder: Path) -> bool:
    """Parts 1-3, those of them in `args.parts`, on a model of `small_shape`; whether every measurement ran."""
    started, failed = time.perf_counter(), False
    init = random_llama(folder / "model", small_shape(args))
    tokenizer = load_tokenizer(init)
    prompt, chosen, _ = random_triples(1, args.words)[0]
    example_tokens = len(tokenizer(render_prompt(tokenizer, prompt) + chosen).input_ids)
    print(f"model: random Llama, hidden {args.hidden}, {args.layers} layers, {args.heads} heads, vocabulary "
          f"{len(tokenizer)}; made in {time.perf_counter() - started:.0f} s", flush=True)  # fmt: skip

    hf = None
    if "sampling" in args.parts or "scoring" in args.parts:
        hf = _child("inference", init)
        failed |= hf is None
    if hf:
        print(f"   {hf['parameters'] / 1e6:.1f}M parameters")
    if "sampling" in args.parts:
        prompt_tokens = hf["prompt_tokens"] if hf else args.prompt_tokens
        print(f"\n1. sampling: {args.prompts} prompts of ~{prompt_tokens:.0f} tokens, K={args.k} samples each, "
              f"up to {args.new_tokens} new tokens, temperature 1")  # fmt: skip
        if hf:
            print(f"   HF generate (HFBackend):  {hf['sampled_tokens'] / hf['sample_s']:10.1f} tokens/s "
                  f"({hf['sampled_tokens']} tokens in {hf['sample_s']:.1f} s)", flush=True)  # fmt: skip
        vllm = None
        if importlib.util.find_spec("vllm") is None:
            print("   vllm not installed: skipped")
        elif not CUDA:
            print("   no CUDA GPU: vllm skipped")
        else:
            vllm = _child("vllm", init)
            failed |= vllm is None
            if vllm:
                print(f"   vLLM (VLLMBackend):       {vllm['sampled_tokens'] / vllm['sample_s']:10.1f} tokens/s "
                      f"({vllm['sampled_tokens']} tokens in {vllm['sample_s']:.1f} s)")  # fmt: skip
        hf_rate = hf and hf["sampled_tokens"] / hf["sample_s"]
        print(f"   ratio vLLM/HF tokens/s: {_ratio(vllm and vllm['sampled_tokens'] / vllm['sample_s'], hf_rate)}")

    if "scoring" in args.parts:
        print(f"\n2. stage-1 scoring: {args.tasks} tasks x K={args.k} candidate rows, batch {args.score_batch}", end="")
        if hf:
            print(f"; {hf['row_tokens'] / hf['rows']:.0f} tokens a row, prefix sharing skips "
                  f"{hf['skipped'] / hf['row_tokens']:.1%} of them ({hf['groups']} groups)")  # fmt: skip
            for name, key in (("plain  (share_prefix False)", "plain_s"), ("shared (share_prefix True) ", "shared_s")):
                print(f"   {name}: {hf['row_tokens'] / hf[key]:10.1f} tokens/s ({hf[key]:.2f} s)")
            print(f"   ratio shared/plain tokens/s: {_ratio(hf['plain_s'], hf['shared_s'])}")
        else:
            print("\n   failed with the model's loading or sampling (see above)")

    if "training" in args.parts:
        print(f"\n3. training: {args.steps} steps a variant (the first not timed), ~{example_tokens} tokens an SFT "
              f"example; LoRA r {LoraSettings().r} on every linear layer; each variant in its own process",
              flush=True)  # fmt: skip
        _training_header()
        for stage in TRAINED:
            full, lora = _child(f"{stage}:full", init), _child(f"{stage}:lora", init)
            failed |= full is None or lora is None
            _training_row(stage, full, lora)
    shutil.rmtree(init)  # room on the disk for the paper part's model and checkpoints
    return not failed


def main() -> None:
    args = _arguments()
    if args.child:
        task, init = args.child
        if task == "inference":
            result = _inference(init, args)
        elif task == "vllm":
            result = _vllm(init, args)
        else:
            stage, variant = task.split(":")
            result = _train(stage, variant == "lora", init, args)
        print(json.dumps(result))
        return
    os.environ.update(HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1")  # nothing leaves the machine, children included
    hf_logging.disable_progress_bar()  # save_pretrained's
    started = time.perf_counter()
    device = f"{torch.cuda.get_device_name()}, {'bf16' if bf16() else 'float32'}" if CUDA else "CPU, float32"
    print(f"coalign GPU check on {device}{' (--tiny: the code paths; its timings mean nothing)' if args.tiny else ''}")
    done = True
    with tempfile.TemporaryDirectory() as tmp:
        if set(args.parts) & set(SMALL_PARTS):
            done &= _small_model_parts(args, Path(tmp))
        if "paper" in args.parts:
            done &= _paper(args, Path(tmp))
    print(f"\ntotal wall time: {time.perf_counter() - started:.0f} s")
    if not done:
        sys.exit("some measurements or runs failed (their errors are above)")


if __name__ == "__main__":
    main()
