"""The PilotRL bench: variants x seeds of the pilotrl recipe, side by side, into one results file and report.

Variants (`recipe_registry`) today are the SFT cold starts the paper compares: AdaPlan (plan, act, rewrite the plan; evaluated
at each plan-update interval of `pilotrl.eval_update_every`) and ReAct (no plan). Each (variant, seed) is
its own resumable run folder, `<bench>/seed<s>/<variant>/`.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from coalign.config import RunConfig
from coalign.parallel import Job, run_jobs
from coalign.pilotrl_report import report_markdown
from coalign.recipe_registry import bench_variant
from coalign.recipes.pilotrl import run_pilotrl
from coalign.runs import atomic_write_text, write_json

def variant_config(config: RunConfig, variant: str, seed: int) -> RunConfig:
    """The run of one bench variant (`recipe_registry`: adaplan, react) for one seed."""
    recipe_name, overrides = bench_variant(variant)
    if recipe_name != "pilotrl":
        raise ValueError(f"{variant!r} is a {recipe_name} variant; a pilotrl bench runs adaplan, react")
    pilotrl = config.pilotrl.model_copy(update=overrides)
    return config.model_copy(update={"seed": seed, "name": f"{config.name}-{variant}-s{seed}", "pilotrl": pilotrl})


def _run(config: RunConfig, run_dir: Path, force: bool) -> dict:
    return run_pilotrl(config, run_dir, Console(), force)


def run_pilotrl_bench(
    config: RunConfig,
    root: str | Path,
    seeds: list[int],
    variants: list[str],
    workers: int,
    console: Console,
    name: str = "",
    force: bool = False,
) -> dict:
    """Run every (variant, seed) and write `<name>results.json` and `<name>report.md` under `root`."""
    root = Path(root)
    pairs = [(variant, seed) for seed in seeds for variant in variants]
    jobs = []
    for variant, seed in pairs:
        run_dir = root / f"seed{seed}" / variant
        jobs.append(Job(f"{variant} seed {seed}", _run, (variant_config(config, variant, seed), run_dir, force),
                        run_dir / "log.txt"))  # fmt: skip
    runs: dict = {}
    for (variant, seed), metrics in zip(pairs, run_jobs(jobs, workers, "pilotrl runs"), strict=True):
        runs.setdefault(variant, {})[str(seed)] = metrics
    results = {
        "seeds": seeds,
        "heldin": list(config.pilotrl.heldin),
        "heldout": list(config.pilotrl.heldout),
        "config": config.model_dump(mode="json"),
        "runs": runs,
    }
    prefix = f"{name}-" if name else ""
    write_json(root / f"{prefix}results.json", results)
    atomic_write_text(root / f"{prefix}report.md", report_markdown(results))
    return results
