"""Recipes by name: what `coalign train`, `eval`, `bench` and `report` run for a config's `recipe`.

One entry per recipe, each naming its functions; the CLI looks them up here instead of keeping if-chains.
A new recipe is one folder beside `moat/` and `pilotrl/` and one entry in `REGISTRY`. The registry sits
above the recipes (it imports them); the config checks a recipe's name against it when the CLI loads one
(`load_config`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coalign import config as config_module
from coalign.config import RunConfig
from coalign.moat import bench as moat_bench
from coalign.moat import report as moat_report
from coalign.moat.baseline import run_lumos
from coalign.moat.recipe import run_moat
from coalign.pilotrl import bench as pilotrl_bench
from coalign.pilotrl import report as pilotrl_report
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
    show: (results) -> markdown, what `coalign train` and `eval` print after a run (None: the evaluation tables).
    evaluate: (config, run_dir, model, console, force) -> results, `coalign eval` of its configs (None: the
        planner -> grounder -> executor evaluation).
    """

    run: Callable[..., dict]
    history: bool
    bench: Callable[..., dict]
    bench_variants: tuple[str, ...]
    report: Callable[[dict], str]
    write_report: Callable[[dict, Path, str], None]
    show: Callable[[dict], str] | None = None
    evaluate: Callable[..., Any] | None = None


_MOAT_BENCH = dict(
    bench=moat_bench.run_bench,
    bench_variants=tuple(moat_bench.VARIANTS),  # the baseline, MOAT and its ablations from shared cold starts
    report=moat_report.report_markdown,
    write_report=moat_report.write_report,
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
        show=pilotrl_report.run_markdown,
        evaluate=evaluate_checkpoint,
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
    """A run config, read and validated, its `recipe` one of the registry's (a ConfigError names the file,
    line and field otherwise)."""
    return config_module.load_config(name_or_path, overrides, recipes=tuple(REGISTRY))
