"""What every recipe does first with its run folder: check the run can go, open it, record its config; and
what a trained checkpoint depends on (`training_settings`), recorded with each training stage.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import torch
from pydantic import BaseModel
from rich.console import Console

from coalign.config import LoraSettings, RunConfig, config_changes, config_to_yaml
from coalign.core.errors import RunError
from coalign.core.machine import decide_bf16, precision_record
from coalign.core.runs import Run, atomic_write_text, read_json, value_digest, write_json
from coalign.models.backends import VLLM_MISSING


def record_config(run: Run, config: RunConfig, force: bool = False) -> None:
    """Save the run's config. A run folder holding a different one is refused, naming the keys that differ,
    unless `force`: then the old config is kept in `config.history/` and finished stages stay finished, but
    for those whose own settings changed (`Run.stage`)."""
    text, saved = config_to_yaml(config), run.path("config.yaml")
    old = saved.read_text() if saved.exists() else None
    if old == text:
        return
    changes = config_changes(old, text) if old is not None else []
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


def check_generation(config: RunConfig, trains: bool) -> None:
    """RunError before any work for a generation backend the run cannot use: vLLM not installed, or a server
    for a run that `trains` (it changes the models it generates with every stage, a server holds one)."""
    backend = config.generation.backend if config.generation else "hf"
    if backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise RunError(VLLM_MISSING)
    if backend == "openai" and trains:
        raise RunError(
            "generation.backend openai generates with the checkpoints servers hold, but this run trains the planner "
            "and grounder it generates with; train with generation.backend hf or vllm, and evaluate finished "
            "checkpoints on servers with coalign eval --planner P --grounder G"
        )


def decide_precision(config: RunConfig) -> dict[str, bool]:
    """Each training stage's bf16 decision and generation's and scoring's (`inference`), made here before any work,
    so that bf16 asked for where it cannot run is one clear error (`core.machine.decide_bf16`) and not a trainer's
    traceback an hour in."""
    inference = inference_bf16(config)  # first: a run-level bf16 the CPU cannot run is named as the config gave it
    decided = {name: decide_bf16(s.bf16, f"{name}.bf16") for name, s in config.stage_settings().items()}
    return {**decided, "inference": inference}


def inference_bf16(config: RunConfig) -> bool:
    """Whether the run's generation and scoring load their models in bf16: the run's own `bf16` decided."""
    return decide_bf16(config.bf16 or False, "bf16")


def inference_settings(config: RunConfig) -> dict:
    """What a stage that generates or scores records of its precision: `{"bf16": True}` in bf16, else nothing, so
    run folders made before bf16 existed resume."""
    return {"bf16": True} if inference_bf16(config) else {}


def prepare_run(
    config: RunConfig, run_dir: str | Path, console: Console, force: bool = False, trains: bool = True
) -> Run:
    """Open the run folder and record its config (see `record_config` for a changed one); `trains` False for
    a run that only evaluates given checkpoints (`check_generation`)."""
    check_generation(config, trains)
    decided = decide_precision(config)
    run = Run(run_dir)
    record_config(run, config, force)
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


def training_settings(settings: BaseModel, seed: int, lora: LoraSettings | None, data) -> dict:
    """What a trained checkpoint depends on besides its input files: the stage's training settings, the seed,
    the adapters and a digest of its examples (`data`). Recorded with the stage (`Run.stage`), so a forced
    resume after any of them changed trains again instead of keeping a checkpoint made under others."""
    return {
        "training": settings.model_dump(mode="json"),
        "seed": seed,
        "lora": lora.model_dump(mode="json") if lora else None,
        "data": value_digest(data),
    }
