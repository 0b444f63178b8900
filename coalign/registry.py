"""Recipes by name: what `coalign train`, `eval`, `bench` and `report` run for a config's `recipe`; and demos
by name: what `coalign demo` runs.

One entry per recipe, each naming its functions, and one per demo; the CLI looks them up here instead of keeping
if-chains. A new recipe is one folder beside `moat/` and `pilotrl/` and one entry in `REGISTRY`. The registry sits
above the recipes (it imports them); the config checks a recipe's name against it, and PilotRL's GRPO stages
against the curriculum, when the CLI loads one (`load_config`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from coalign import config as config_module
from coalign.config import RunConfig
from coalign.moat import bench as moat_bench
from coalign.moat import report as moat_report
from coalign.moat.baseline import run_lumos
from coalign.moat.evaluate import evaluate_checkpoints
from coalign.moat.recipe import run_moat
from coalign.pilotrl import bench as pilotrl_bench
from coalign.pilotrl import report as pilotrl_report
from coalign.pilotrl.curriculum import STAGE_MODES
from coalign.pilotrl.recipe import evaluate_checkpoint, run_pilotrl


@dataclass(frozen=True)
class Recipe:
    """A recipe's entry.

    run: (config, run_dir, console, force) -> results, as `coalign train` calls it.
    history: whether `run` returns the evaluation after every round (else one evaluation).
    bench: (config, root, seeds, variants, workers, console, name, force) -> results, `coalign bench`.
    bench_variants: what `coalign bench` runs for a config of this recipe when not told.
    report: (results) -> markdown, the report of its bench; write_report: (results, folder, prefix) -> None,
        the same written to a folder with whatever plots it draws from the results.
    evaluate: (config, run_dir, console=, force=, and `eval_options` by keyword) -> results, `coalign eval`.
    eval_options: the values of `coalign eval` that `evaluate` takes: planner, grounder, model (checkpoints the
        command line gives) and config_name (the config as the command line names it, for commands its errors
        suggest).
    show: (results) -> markdown, what `coalign train` and `eval` print after a run (None: the evaluation tables).
    """

    run: Callable[..., dict]
    history: bool
    bench: Callable[..., dict]
    bench_variants: tuple[str, ...]
    report: Callable[[dict], str]
    write_report: Callable[[dict, Path, str], None]
    evaluate: Callable[..., dict]
    eval_options: tuple[str, ...]
    show: Callable[[dict], str] | None = None


_MOAT_BENCH = dict(
    bench=moat_bench.run_bench,
    bench_variants=tuple(moat_bench.VARIANTS),  # the baseline, MOAT and its ablations from shared cold starts
    report=moat_report.report_markdown,
    write_report=moat_report.write_report,
    evaluate=evaluate_checkpoints,
    eval_options=("planner", "grounder", "config_name"),
)
REGISTRY: dict[str, Recipe] = {
    "lumos": Recipe(run=run_lumos, history=False, **_MOAT_BENCH),
    "moat": Recipe(run=run_moat, history=True, **_MOAT_BENCH),
    "pilotrl": Recipe(
        run=run_pilotrl,
        history=False,
        bench=pilotrl_bench.run_pilotrl_bench,
        bench_variants=pilotrl_bench.DEFAULT_VARIANTS,  # the paper's main comparison
        report=pilotrl_report.report_markdown,
        write_report=pilotrl_report.write_report,
        evaluate=evaluate_checkpoint,
        eval_options=("model",),
        show=pilotrl_report.run_markdown,
    ),
}


@dataclass(frozen=True)
class Demo:
    """A `coalign demo`: `coalign bench` of `variants` on seed 0 of the bundled `config`, into `run_dir`, trimmed
    by `settings` (`--set` pairs, before the command line's own) to show the whole recipe in minutes."""

    config: str
    run_dir: Path
    variants: tuple[str, ...]
    settings: tuple[str, ...]


DEMOS: dict[str, Demo] = {
    # bench tiny's cold start (2+1 epochs from the base) and 2 rounds on 400 tasks, trimmed to about 10 minutes
    # on 2 cores: half an epoch per agent, one round on 100 tasks
    "moat": Demo(
        "tiny",
        Path("runs/demo"),
        ("lumos", "moat"),
        (
            "planner_sft.epochs=0.5",
            "grounder_sft.epochs=0.5",
            "moat.rounds=1",
            "moat.tasks=100",
            "grounder_round_sft.epochs=1",
        ),
    ),
    # bench smol on SmolLM2-135M at a quarter of its training (32 GSM8K problems), its round on 8 tasks and
    # evaluated on 20 + 20, so that a real model's demo runs within half an hour on 2 cores
    "smol": Demo(
        "smol",
        Path("runs/demo-smol"),
        ("lumos", "moat"),
        (
            'data.train=[{kind: gsm8k, path: "shipped:gsm8k/train.jsonl", subgoals: deferred, n: 32}]',
            'data.heldin=[{kind: gsm8k, path: "shipped:gsm8k/test_socratic.jsonl", n: 20}]',
            'data.heldout=[{kind: svamp, path: "shipped:svamp/SVAMP.json", n: 20}]',
            "moat.tasks=8",
        ),
    ),
    # bench tiny-pilotrl (200 expert episodes per environment, 3 epochs, 10 evaluated per environment at plan-update
    # intervals 1, 2 and 5) at a quarter of the episodes, 2 epochs, 5 evaluated per environment at interval 1
    "pilotrl": Demo(
        "tiny-pilotrl",
        Path("runs/demo-pilotrl"),
        ("adaplan", "react"),
        ("pilotrl.train_tasks=50", "pilotrl.sft.epochs=2", "pilotrl.eval_tasks=5", "pilotrl.eval_update_every=[1]"),
    ),
}


def recipe(name: str) -> Recipe:
    if name not in REGISTRY:
        raise ValueError(f"unknown recipe {name!r}; known: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def bench_names(config_recipe: str = "lumos") -> tuple[str, ...]:
    """What `coalign bench` runs by default for a config of `config_recipe`."""
    return recipe(config_recipe).bench_variants


def load_config(name_or_path: str | Path, overrides: dict | None = None) -> RunConfig:
    """A run config, read and validated, its `recipe` one of the registry's and its `pilotrl.rl` stages of
    PilotRL's curriculum (a ConfigError names the file, line and field otherwise)."""
    return config_module.load_config(name_or_path, overrides, recipes=tuple(REGISTRY), stages=STAGE_MODES)
