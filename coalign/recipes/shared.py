"""What every recipe does with its run folder: open it, load a split, make the initial models, SFT an
agent, evaluate, and the Agent Lumos cold start (independent SFT of both agents) that MOAT and the
baseline's matched rounds continue from.

Each step leaves its output in the run folder and is skipped when already finished (`Run.stage`).
"""

from __future__ import annotations

import importlib.util
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch
from pydantic import BaseModel
from rich.console import Console

from coalign.agents import Agent
from coalign.backends import VLLM_MISSING
from coalign.config import LoraSettings, RunConfig, config_changes, config_to_yaml
from coalign.errors import RunError
from coalign.evaluate import evaluate_tasks, family_summaries, set_family, split_summary
from coalign.models import make_tiny_model
from coalign.output_room import room
from coalign.pretraining.bases import starting_point
from coalign.recipes.sft_data import grounder_data, planner_data, tokenizer_texts
from coalign.runs import Run, atomic_dir, atomic_write_text, read_json, value_digest, write_json, write_jsonl
from coalign.stages.sft import sft
from coalign.tasks import Task
from coalign.tasks.sources import load_data, report_skipped, source_name


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


def prepare_run(
    config: RunConfig, run_dir: str | Path, console: Console, force: bool = False, trains: bool = True
) -> Run:
    """Open the run folder and record its config (see `record_config` for a changed one); `trains` False for
    a run that only evaluates given checkpoints (`check_generation`)."""
    check_generation(config, trains)
    run = Run(run_dir)
    record_config(run, config, force)
    if config.threads:
        torch.set_num_threads(config.threads)
    console.print(f"[bold]run folder[/bold] {run.root}")
    return run


def initial_models(run: Run, config: RunConfig, train: list[Task], console: Console) -> tuple[str, str]:
    """Paths of the planner's and grounder's starting checkpoints: from-scratch ones (`scratch`) are made here,
    a shipped base is found by name (`coalign-base`), anything else is a path or hub id."""
    models = config.models
    tiny_dir = run.path("models", "tiny-init")
    texts = [text for t in train for text in tokenizer_texts(t)]

    def make() -> dict:
        console.print("making a tiny model: BPE tokenizer on the training text, small Llama config")
        with atomic_dir(tiny_dir) as tmp:
            make_tiny_model(texts, tmp, models.tiny, seed=config.seed)
        return {"path": str(tiny_dir)}

    starts = [starting_point(name) for name in (models.planner, models.grounder)]
    if None in starts:
        shape = {"tiny": models.tiny.model_dump(mode="json"), "seed": config.seed, "texts": value_digest(texts)}
        run.stage("init", make, [tiny_dir], settings=shape)
    return tuple(str(tiny_dir) if start is None else start for start in starts)


def load_split(run: Run, config: RunConfig, sources: list, label: str, console: Console) -> list[Task]:
    """Tasks of `sources`; rows skipped under `data.skip_bad_rows` are reported and recorded in data.json."""
    tasks, record = load_data(sources, config.data.skip_bad_rows)
    report_skipped(label, record, console)
    path = run.path("data.json")
    saved = read_json(path) if path.exists() else {}
    if saved.get(label) != record:  # a resumed run rewrites nothing it already holds
        write_json(path, {**saved, label: record})
    return tasks


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


def train_agent(
    run: Run,
    stage: str,
    init: str,
    examples,
    settings,
    seed: int,
    console: Console,
    inputs: Sequence[Path] = (),
    trust_remote_code: bool = False,
    lora: LoraSettings | None = None,
) -> str:
    """One SFT stage (LoRA adapters under `lora`), skipped when its checkpoint is already complete and was
    trained under the same settings and examples; `inputs`: the files its examples came from, so the stage
    is redone when they change."""
    out = run.path("checkpoints", stage)

    def train() -> dict:
        console.print(f"[bold]{stage}[/bold]: SFT on {len(examples)} examples from {init}")
        sft(init, examples, out, settings, seed=seed, trust_remote_code=trust_remote_code, lora=lora)
        return {"examples": len(examples), "init": init, **read_json(out / "train_log.json")}

    run.stage(stage, train, [out], inputs=[init, *inputs], settings=training_settings(settings, seed, lora, examples))
    return str(out)


def check_room(console: Console, name: str, tasks: list[Task], tokenizers: tuple, limits, block: str) -> dict[str, int]:
    """`output_room.room` for the planner and the grounder (`tokenizers`, in that order) under the limits of
    `limits` (the `eval` or `moat` settings, named `block`), said on the console when a gold turn does not fit;
    the number of tasks over each agent's limit."""
    over = {}
    for (role, setting), tokenizer in zip((("planner", "plan"), ("grounder", "ground")), tokenizers):
        field = f"max_new_tokens_{setting}"
        fit = room(tasks, role, tokenizer, getattr(limits, field))
        if line := fit.warning(name, f"{block}.{field}"):
            console.print(f"[yellow]{line}[/yellow]")
        over[role] = fit.tasks_over
    return over


def evaluate_run(
    run: Run, config: RunConfig, planner_path: str, grounder_path: str, console: Console, name: str = "eval"
) -> dict:
    """Evaluate on every held-in and held-out set; write predictions and metrics under `name`/.

    Per split: each set's metrics, its task family, the mean over all sets, and the mean per family
    (the only place grounding PPL is averaged when a split mixes families)."""

    def evaluate() -> dict:
        trust = config.models.trust_remote_code
        generation = config.generation
        planner = Agent.load(planner_path, trust, generation, "planner")
        grounder = Agent.load(grounder_path, trust, generation, "grounder")
        results: dict = {}
        for split in ("heldin", "heldout"):
            per_set, families = {}, {}
            for source in getattr(config.data, split):
                label = source_name(source)
                tasks = load_split(run, config, [source], f"{split}/{label}", console)
                console.print(f"[bold]{name}[/bold] {split}/{label}: {len(tasks)} tasks")
                tokenizers = (planner.tokenizer, grounder.tokenizer)
                too_long = check_room(console, f"{split}/{label}", tasks, tokenizers, config.eval, "eval")
                metrics, rows = evaluate_tasks(planner, grounder, tasks, config.eval, f"{split}/{label}")
                metrics["gold_turns_too_long"] = too_long
                write_jsonl(run.path(name, f"{split}-{label}.predictions.jsonl"), rows)
                per_set[label], families[label] = metrics, set_family(tasks)
            results[split] = {
                "sets": per_set,
                "average": split_summary(per_set, families),
                "families": families,
                "family_average": family_summaries(per_set, families),
            }
        write_json(run.path(name, "metrics.json"), results)
        return {}

    run.stage(name, evaluate, [run.path(name)], inputs=[planner_path, grounder_path], settings=eval_settings(config))
    return read_json(run.path(name, "metrics.json"))


def eval_settings(config: RunConfig) -> dict:
    """What an evaluation's numbers depend on besides its two checkpoints: the sets, how bad rows are
    handled, the evaluation budgets and the generation backend."""
    data = config.data.model_dump(mode="json")
    return {
        "heldin": data["heldin"],
        "heldout": data["heldout"],
        "skip_bad_rows": data["skip_bad_rows"],
        "eval": config.eval.model_dump(mode="json"),
        "generation": config.generation.model_dump(mode="json") if config.generation else None,
    }


def cold_start_agent(run: Run, config: RunConfig, train: list[Task], agent: str, console: Console) -> str:
    """Independent SFT of one agent ("planner" or "grounder") on ground truth; returns its checkpoint."""
    planner_init, grounder_init = initial_models(run, config, train, console)
    trust = config.models.trust_remote_code
    if agent == "planner":
        examples = planner_data(config, train)
        return train_agent(
            run,
            "planner_sft",
            planner_init,
            examples,
            config.planner_sft,
            config.seed,
            console,
            trust_remote_code=trust,
            lora=config.lora,
        )
    if agent == "grounder":
        examples = grounder_data(config, train)
        return train_agent(
            run,
            "grounder_sft",
            grounder_init,
            examples,
            config.grounder_sft,
            config.seed,
            console,
            trust_remote_code=trust,
            lora=config.lora,
        )
    raise ValueError(f"agent must be planner or grounder, got {agent!r}")


def cold_start(run: Run, config: RunConfig, train: list[Task], console: Console) -> tuple[str, str]:
    """Independent SFT of both agents on ground truth; returns the two checkpoints."""
    planner = cold_start_agent(run, config, train, "planner", console)
    return planner, cold_start_agent(run, config, train, "grounder", console)


def round_tasks(config: RunConfig, train: list[Task]) -> list[Task]:
    """The training tasks a round works on: the first `moat.tasks` (all when unset), in train order.

    With several task families, each family's first tasks in proportion to its share of train (the
    remainder to the families first seen), so a mixed run's rounds are not all of the family listed first.
    """
    n = config.moat.tasks
    if not n or n >= len(train):
        return train
    counts = Counter(t.family for t in train)  # in order of first appearance
    quota = {family: n * c // len(train) for family, c in counts.items()}
    for family in list(counts)[: n - sum(quota.values())]:
        quota[family] += 1
    taken: Counter[str] = Counter()
    out = []
    for task in train:
        if taken[task.family] < quota[task.family]:
            taken[task.family] += 1
            out.append(task)
    return out
