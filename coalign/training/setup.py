"""What every recipe does first with its run folder: check the run can go, open it, record its config; and
what a trained checkpoint depends on (`training_dependencies`), recorded with each training stage.
"""

from __future__ import annotations

import importlib.util
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import yaml
from pydantic import BaseModel
from rich.console import Console

from coalign.config import (
    TRAINING_STAGES,
    DPOSettings,
    GenerationSettings,
    GRPOSettings,
    LoraSettings,
    RunConfig,
    config_changes,
    config_to_yaml,
)
from coalign.core import ranks
from coalign.core.errors import RunError
from coalign.core.machine import decide_bf16, precision_record
from coalign.core.parallel import memory_estimate
from coalign.core.runs import Run, atomic_write_text, read_json, value_digest, write_json
from coalign.models.bases import starting_point
from coalign.models.load import llama_parameters, llama_sizes
from coalign.models.vllm_engine import INSTALL as VLLM_INSTALL
from coalign.models.vllm_engine import MISSING as VLLM_MISSING
from coalign.models.vllm_engine import check_cpu_heads, engine_host_bytes, folder_config, head_size
from coalign.tasks.sources import check_files, check_rows
from coalign.training.common import stage_batch

# Settings an evaluation of a finished run may set without changing what the run trained: who writes the text.
EVALUATION_ONLY = ("generation",)
# What labels a run rather than what it trained, which an evaluation of its checkpoints may differ in: its name (a
# bench's `tiny-moat` folder) and its recipe, whose evaluator checks that it can take the run (`saved_recipe`).
RUN_LABELS = ("name", "recipe")


def record_config(run: Run, config: RunConfig, force: bool = False, trains: bool = True) -> None:
    """Save the run's config. A run folder holding a different one is refused, naming the keys that differ,
    unless `force`: then the old config is kept in `config.history/` and finished stages stay finished, but
    for those whose dependencies changed (`Run.stage`'s `depends_on`). A folder with no finished stage (a start
    that failed) takes the new config as it is: nothing in it was made under the old one. A run that does not train (an
    evaluation of its checkpoints) may differ in `EVALUATION_ONLY` settings and `RUN_LABELS`, and leaves the saved
    config as training wrote it."""
    text, saved = config_to_yaml(config), run.path("config.yaml")
    old = saved.read_text() if saved.exists() else None
    if old == text or (old is not None and not trains and _same_training(old, text)):
        return
    finished = any(run.path("stages").glob("*.json"))  # none: a start that failed, nothing made under `old`
    changes = config_changes(old, text) if old is not None and finished else []
    if not trains and changes:  # what an evaluation may differ in is no change to name
        changes = [c for c in changes if c.partition(":")[0].split(".")[0] not in (*EVALUATION_ONLY, *RUN_LABELS)]
        if not changes:
            return
    if changes and not force:
        listed = "".join(f"\n  {line}" for line in changes)
        raise SystemExit(
            f"{saved} holds a different config:{listed}\n"
            "resume with the same config, use a new --run-dir, or pass --force to go on with the new config"
            " (finished stages are kept, but a stage whose own settings or data changed is redone)"
        )
    if changes:
        history = run.path("config.history")
        n = len(list(history.glob("*.yaml"))) + 1 if history.exists() else 1
        header = f"# replaced by a forced resume on {time.strftime('%Y-%m-%dT%H:%M:%S')}; changed:\n"
        atomic_write_text(history / f"{n:03d}.yaml", header + "".join(f"#   {c}\n" for c in changes) + old)
    atomic_write_text(saved, text)


def saved_recipe(run_dir: str | Path, config: RunConfig, evaluates: tuple[str, ...]) -> str | None:
    """The recipe of the run `run_dir` holds (its config.yaml's; None where none is saved yet, or it cannot be
    read, which `record_config` then reports). `coalign eval` takes a run of another recipe than its config's
    (`RUN_LABELS`) where `config`'s evaluator `evaluates` it (lumos and moat runs alike); else a RunError in one
    line names the run's recipe."""
    try:
        saved = yaml.safe_load((Path(run_dir) / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    recipe = saved.get("recipe") if isinstance(saved, dict) else None
    if recipe is not None and recipe not in evaluates:
        raise RunError(
            f"{run_dir} holds a {recipe} run, and this config's recipe is {config.recipe}, whose evaluation takes "
            f"{' and '.join(evaluates)} runs: evaluate it with a {recipe} config, as it was trained"
        )
    return recipe


def check_generation(config: RunConfig, trains: bool) -> None:
    """RunError before any work for a generation backend the run cannot use: vLLM not installed (for generation, or
    for the rollouts of pilotrl's GRPO stages, which start after its SFT), or a server for a run that `trains` (it
    changes the models it generates with every stage, a server holds one)."""
    backend = config.generation.backend if config.generation else "hf"
    if backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise RunError(VLLM_MISSING)
    rl = config.pilotrl.rl if config.recipe == "pilotrl" and trains else None
    if rl is not None and rl.generation != "hf" and importlib.util.find_spec("vllm") is None:
        raise RunError(f"pilotrl.rl.generation: {rl.generation} needs vLLM: {VLLM_INSTALL}")
    if backend == "vllm" or (rl is not None and rl.generation == "vllm_colocate"):
        named = [("pilotrl.model", config.pilotrl.model)] if config.recipe == "pilotrl" else [
            ("models.planner", config.models.planner), ("models.grounder", config.models.grounder)]  # fmt: skip
        for field, name in named:
            check_cpu_heads(engine_heads(name, config), f"{field} {name}")
        check_one_engine(config, named, rl)
    if backend == "openai" and trains:
        raise RunError(
            "generation.backend openai generates with the checkpoints servers hold, but this run trains the planner "
            "and grounder it generates with; train with generation.backend hf or vllm, and evaluate finished "
            "checkpoints on servers with coalign eval --planner P --grounder G"
        )


# a model's sizes, as config.json names them, that one vLLM engine's weights must share to be swapped for another's
ENGINE_SHAPE = (
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size"
)  # fmt: skip


def check_one_engine(config: RunConfig, named: list[tuple[str, str]], rl: GRPOSettings | None) -> None:
    """RunError before any work for what one vLLM engine a process (`vllm_engine.engine`) cannot serve: a planner
    and a grounder of different shapes, where both are known (its weights are swapped between them); a GRPO
    stage's engine in another precision than the evaluation's that reuses it; tensor parallelism under a
    launcher (each rank holds an engine of its own, on its own GPU)."""
    generation = config.generation
    tensor_parallel = generation.tensor_parallel_size if generation else 1
    if tensor_parallel > 1 and ranks.world_size() > 1:
        raise RunError(
            f"generation.tensor_parallel_size {tensor_parallel} with {ranks.world_size()} processes: under a "
            "launcher each rank holds an engine on its own GPU; run one process (vLLM then spreads the engine "
            "over that many GPUs), or set tensor_parallel_size: 1"
        )
    shapes = [(field, name, model_shape(name, config)) for field, name in named]
    sizes = {(field, name): tuple(shape.get(k) for k in ENGINE_SHAPE) for field, name, shape in shapes if shape}
    if len(set(sizes.values())) > 1:
        (first, a), (second, b) = sizes
        raise RunError(
            f"{first} {a} and {second} {b} differ in shape, and a process holds one vLLM engine, whose weights are "
            "swapped between the two agents: start both from one base, or generate with generation.backend hf"
        )
    if rl is not None and rl.generation == "vllm_colocate" and generation and generation.backend == "vllm":
        trains, infers = decide_bf16(rl.bf16, "pilotrl.rl.bf16"), inference_bf16(config)
        if trains != infers:
            raise RunError(
                f"pilotrl.rl.bf16 samples in {'bf16' if trains else 'the saved dtype'}, the evaluation in "
                f"{'bf16' if infers else 'the saved dtype'}, and one vLLM engine a process serves both: set the "
                "run's bf16"
            )


def generation_settings(config: RunConfig) -> GenerationSettings | None:
    """The `generation` block as the run's agents generate by it: under vLLM with the engine's `max_model_len`,
    unless the block sets one, from the run's lengths: pilotrl's episode budget (`max_context`); otherwise the
    longest sequence the stages train on (their `max_length`) plus the most new tokens a generation asks for. Left
    to vLLM, it is the model's own (131,072 positions for Qwen2.5-14B), whose key/value cache would not fit."""
    block = config.generation
    if block is None or block.backend != "vllm" or block.max_model_len is not None:
        return block
    if config.recipe == "pilotrl":
        length = config.pilotrl.max_context
    else:
        trained = max(getattr(config, name).max_length for name in TRAINING_STAGES)
        m, e = config.moat, config.eval
        length = trained + max(m.max_new_tokens_plan, m.max_new_tokens_ground, e.max_new_tokens_plan,
                               e.max_new_tokens_ground)  # fmt: skip
    return block.model_copy(update={"max_model_len": length})


# fp32 copies of a micro-batch's logits a training step holds at its peak (logits, log-softmax, their gradients and
# the loss's intermediates), from a measured peak: a smol MOAT job training at 4 x 768 tokens peaked at 8.3 GB
# (docs/log/2026-12-06-smollm2.md), estimated 8.1; conservative elsewhere (a smol-pilotrl SFT job, 1 x 4,096, held
# about 5 GB and is estimated at 9.7)
LOGIT_COPIES = 8
# the same for a GRPO step, from a measured peak: a smol-pilotrl PilotRL run (1 x 3,072 tokens, its vLLM engine in
# the process) reached 19.6 GB resident at its high-water mark (VmHWM, in stage 2; docs/log/2026-12-07-smol-pilotrl.md),
# about 24 copies beside its training state and engine
GRPO_LOGIT_COPIES = 26


def model_shape(name: str, config: RunConfig) -> dict | None:
    """The sizes (transformers' config names) of the model `name` starts from: a from-scratch one's (`models.tiny`)
    or its folder's config.json; None for a hub id, known only once it loads."""
    path = starting_point(name)
    if path is None:
        return {**llama_sizes(config.models.tiny), "vocab_size": config.models.tiny.vocab_size}
    return folder_config(path) or None


def job_memory(config: RunConfig) -> int | None:
    """Bytes one run of `config` holds at its peak (`core.parallel.Job.memory_bytes`: what a bench's job waits for,
    here or on Ray): `memory_estimate` of its largest model's parameters (full fine-tuning in fp32: 16 bytes each)
    plus, at its largest stage, the logits of a micro-batch (vocabulary x tokens in fp32, `LOGIT_COPIES` of them;
    `GRPO_LOGIT_COPIES` in a GRPO stage, with its colocated vLLM engine's `engine_host_bytes`), which for SmolLM2's
    49,152-token vocabulary outweigh its 135M parameters. None where a size is unknown."""
    names = [config.pilotrl.model] if config.recipe == "pilotrl" else [config.models.planner, config.models.grounder]
    shapes = [model_shape(name, config) for name in names]
    if any(shape is None for shape in shapes):
        return None
    try:
        parameters = max(llama_parameters(shape) for shape in shapes)
        vocab = max(int(shape["vocab_size"]) for shape in shapes)
    except (KeyError, TypeError, ValueError):
        return None

    def stage_bytes(settings: BaseModel) -> int:
        logits = 4 * vocab * micro_batch_tokens(settings, config)
        if not isinstance(settings, GRPOSettings):
            return LOGIT_COPIES * logits
        engine = engine_host_bytes(parameters) if settings.generation == "vllm_colocate" else 0
        return GRPO_LOGIT_COPIES * logits + engine

    return memory_estimate(parameters) + max(stage_bytes(settings) for settings in trained_stages(config).values())


def micro_batch_tokens(settings: BaseModel, config: RunConfig) -> int:
    """Tokens in one forward of a training stage: its batch of sequences at their longest (a DPO pair is two; an
    episode runs to `pilotrl.max_context`; a GRPO forward holds `micro_batch_size` episodes at most)."""
    length = getattr(settings, "max_length", None) or config.pilotrl.max_context
    batch = settings.batch_size
    if isinstance(settings, GRPOSettings):
        batch = min(batch, settings.micro_batch_size)
    return batch * length * (2 if isinstance(settings, DPOSettings) else 1)


def engine_heads(name: str, config: RunConfig) -> int | None:
    """The attention head size of the model `name` starts from (`model_shape`; None for a hub id)."""
    shape = model_shape(name, config)
    return head_size(shape) if shape else None


def decide_precision(config: RunConfig) -> dict[str, bool]:
    """Each training stage's bf16 decision and generation's and scoring's (`inference`), made here before any work,
    so that bf16 asked for where it cannot run is one clear error (`core.machine.decide_bf16`) and not a trainer's
    traceback an hour in."""
    inference = inference_bf16(config)  # first: a run-level bf16 the CPU cannot run is named as the config gave it
    decided = {name: decide_bf16(s.bf16, f"{name}.bf16") for name, s in config.stage_settings().items()}
    return {**decided, "inference": inference}


def inference_bf16(config: RunConfig) -> bool:
    """Whether the run's generation and scoring load their models in bf16: the run's own `bf16` decided, or without
    one, bf16 where any training stage trains in bf16. The agents are then models trained on a bf16 machine: in
    fp32 two 7B ones took ~56 GB a GPU (issue 55). A config whose stages all train in fp32 (the tiny ones) infers
    in fp32 too, so its numbers stay those of the results recorded for it."""
    if config.bf16 is not None:
        return decide_bf16(config.bf16, "bf16")
    return any(decide_bf16(s.bf16, f"{name}.bf16") for name, s in config.stage_settings().items())


def inference_dependencies(config: RunConfig) -> dict:
    """What a stage that generates or scores records of its precision: `{"bf16": True}` in bf16, else nothing, so
    run folders made before bf16 existed resume."""
    return {"bf16": True} if inference_bf16(config) else {}


def _same_training(old_yaml: str, new_yaml: str) -> bool:
    """Whether two saved configs differ in `EVALUATION_ONLY` settings and `RUN_LABELS` alone."""
    old, new = yaml.safe_load(old_yaml), yaml.safe_load(new_yaml)
    for name in (*EVALUATION_ONLY, *RUN_LABELS):
        old.pop(name, None)
        new.pop(name, None)
    return old == new


def trained_stages(config: RunConfig) -> dict[str, BaseModel]:
    """The settings blocks, by config key (`RunConfig.stage_settings`), of the stages `config.recipe` trains:
    pilotrl's SFT and GRPO stages; both agents' SFT for lumos, and for moat also its rounds' DPO and grounder SFT
    where its stage 1 and 2 are on. (The bench's matched rounds, `planner_round_sft`, run in one process.)"""
    stages = config.stage_settings()
    if config.recipe == "pilotrl":
        return {key: settings for key, settings in stages.items() if key.startswith("pilotrl.")}
    keys = ["planner_sft", "grounder_sft"]
    if config.recipe == "moat":
        keys += ["planner_dpo"] * config.moat.stage1 + ["grounder_round_sft"] * config.moat.stage2
    return {key: stages[key] for key in keys}


def check_batches(config: RunConfig) -> None:
    """RunError, naming the config keys, when a stage's batch per optimizer step cannot be shared by this launch's
    processes (`ranks.batch_split`): found here, before any work, rather than when that stage starts, hours in."""
    for key, settings in trained_stages(config).items():
        stage_batch(settings, key)


def check_start(config: RunConfig, trains: bool) -> None:
    """Every check of a run's inputs that needs no run folder: the training batches (`check_batches`), the data
    files a run reads (`sources.check_files`; one that only evaluates reads no training set), and every row of its
    evaluation files (`sources.check_rows`), read now rather than after hours of training. The training rows are
    read by the recipe before it opens the folder (`moat.data.start_run`)."""
    if trains:
        check_batches(config)
    if config.data is not None:
        check_files(config.data, ("train", "heldin", "heldout") if trains else ("heldin", "heldout"))
        if config.recipe != "pilotrl":  # pilotrl's tasks are its environments': it reads no data set
            check_rows(config.data, ("heldin", "heldout"))


@contextmanager
def removed_if_failed(folder: str | Path) -> Iterator[None]:
    """A folder that a call makes (`coalign eval` into eval-<time>/, and any folder above it that it makes)
    removed again when the call fails before any stage in it finished, so a failed try (a server that is not up)
    leaves no folder behind."""
    folder = Path(folder)
    made = next((p for p in [*reversed(folder.parents), folder] if not p.exists()), None)  # the topmost new one
    try:
        yield
    except BaseException:
        if made is not None and ranks.is_main() and not any(folder.glob("stages/*.json")):
            shutil.rmtree(made, ignore_errors=True)
        raise


def prepare_run(
    config: RunConfig, run_dir: str | Path, console: Console, force: bool = False, trains: bool = True
) -> Run:
    """Check the run can go (`check_run`), then open the run folder (`open_run`); `trains` False for a run that
    only evaluates checkpoints. Every check runs before anything is written, so a start that fails one leaves no
    run folder."""
    return open_run(config, run_dir, console, force, trains, check_run(config, trains))


def check_run(config: RunConfig, trains: bool = True) -> dict[str, bool]:
    """Every check of a run that needs no run folder (`check_generation`, `decide_precision`, `check_start`); the
    precision decisions, for `open_run`. A recipe with checks of its own (of its training tasks) runs them between
    the two, so that they too come before anything is written."""
    ranks.set_timeout(config.ddp_timeout)  # before any check that meets the other ranks
    check_generation(config, trains)
    decided = decide_precision(config)
    check_start(config, trains)
    return decided


def open_run(
    config: RunConfig, run_dir: str | Path, console: Console, force: bool, trains: bool, decided: dict[str, bool]
) -> Run:
    """Open the run folder, record its config (see `record_config` for a changed one) and the precision
    `decided` by `check_run`."""
    run = Run(run_dir)
    run.check_shared()  # under a launcher: every rank sees the folder rank 0 writes, or all stop
    record_config(run, config, force, trains)
    record, path = precision_record(decided), run.path("precision.json")
    try:
        kept = read_json(path) == record  # a resume on the same machine writes nothing
    except (OSError, ValueError):
        kept = False
    if not kept:
        write_json(path, record)
    if config.threads:
        torch.set_num_threads(config.threads)
    console.print(f"[bold]run folder[/bold] {run.root}")
    return run


def training_dependencies(settings: BaseModel, seed: int, lora: LoraSettings | None, data) -> dict:
    """What a trained checkpoint depends on besides its input files: the stage's training settings, the seed,
    the adapters and a digest of its examples (`data`). Recorded with the stage (`Run.stage`), so a forced
    resume after any of them changed trains again instead of keeping a checkpoint made under others."""
    return {
        "training": settings.model_dump(mode="json"),
        "seed": seed,
        "lora": lora.model_dump(mode="json") if lora else None,
        "data": value_digest(data),
    }
