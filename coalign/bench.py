"""`coalign bench`: the paper's comparisons on one config, several seeds, one folder.

    for each seed: cold start (Agent Lumos SFT of both agents), evaluated as round 0
    from that cold start, each recipe runs its rounds:
        lumos           the baseline at MOAT's training budget (matched SFT rounds on gold data)
        moat            Algorithm 1
        moat_no_stage1  / moat_no_stage2 / moat_no_critic: the paper's ablations
        moat_k{K}       MOAT with K candidates per task (the K sweep, Figure 3)
    results.json, report.md (Tables 2, 3 and 4 analogues, the premise and the capability gap)
    and rounds.png / k_sweep.png

Recipes of one seed share its cold start, so they differ only in what their rounds do. Jobs
that do not depend on each other run side by side (`workers`), each in its own run folder
with its own log, so any of them resumes on its own after a kill.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console

from coalign.config import RunConfig
from coalign.console import make_console
from coalign.machine import describe_machine
from coalign.parallel import Job, run_jobs
from coalign.recipes.shared import (
    cold_start_agent,
    evaluate_run,
    initial_models,
    load_split,
    prepare_run,
    record_config,
)
from coalign.recipe_registry import REGISTRY, bench_variant, load, recipe
from coalign.runs import Run, read_json, write_json
from coalign.tasks.sources import load_data, refuse_in_rounds, report_skipped


def recipe_config(config: RunConfig, name: str, seed: int) -> RunConfig:
    """The config one (bench recipe, seed) runs with: the base config, its seed, and the variant's settings
    (`recipe_registry.bench_variant`: `moat_no_stage1` is recipe moat with moat.stage1 false)."""
    recipe_name, overrides = bench_variant(name)
    data = config.model_dump()
    section = recipe(recipe_name).section
    if section:
        data[section] = {**data[section], **overrides}
    data.update(seed=seed, recipe=recipe_name, name=f"{config.name}-{name}")
    return RunConfig.model_validate(data)


ROUND_ONLY = frozenset(s for entry in REGISTRY.values() for s in entry.round_sections)


def _cold_config(config: RunConfig, seed: int) -> RunConfig:
    """The cold start's config: round-only settings left at their defaults, so benches that differ only in
    their rounds (a K sweep, fewer rounds) share the cold start of a seed."""
    data = {k: v for k, v in config.model_dump().items() if k not in ROUND_ONLY}
    return RunConfig.model_validate({**data, "seed": seed, "recipe": "lumos"})


def _cold_agent(config: RunConfig, cold_dir: Path, agent: str) -> str:
    run, console = Run(cold_dir), make_console()
    return cold_start_agent(run, config, load_split(run, config, config.data.train, "train", console), agent, console)


def _cold_checkpoints(cold_dir: Path) -> tuple[str, str]:
    return str(cold_dir / "checkpoints" / "planner_sft"), str(cold_dir / "checkpoints" / "grounder_sft")


def _cold_eval(config: RunConfig, cold_dir: Path) -> dict:
    planner, grounder = _cold_checkpoints(cold_dir)
    return evaluate_run(Run(cold_dir), config, planner, grounder, make_console(), name="round0_eval")


def _recipe_rounds(config: RunConfig, cold_dir: Path, recipe_dir: Path, round0: dict) -> dict:
    console = make_console()
    run = prepare_run(config, recipe_dir, console)
    planner, grounder = _cold_checkpoints(cold_dir)
    rounds = load(recipe(config.recipe).rounds)
    train = load_split(run, config, config.data.train, "train", console)
    return rounds(run, config, train, planner, grounder, round0, console)


def _round_records(run: Run, rounds: int) -> dict:
    """Per round: the premise (PPL vs success), DPO and pair statistics, as recorded by the stages."""
    out = {}
    for r in range(1, rounds + 1):
        record = {}
        premise = run.path(f"round{r}", "premise.json")
        if premise.exists():
            record["premise"] = read_json(premise)
        for stage in ("pairs", "dpo", "critic"):
            if run.is_done(f"round{r}_{stage}"):
                info = run.stage_info(f"round{r}_{stage}")
                record[stage] = {k: v for k, v in info.items() if k not in ("losses", "stage", "finished_at")}
        out[f"round{r}"] = record
    return out


def run_bench(
    config: RunConfig,
    root: str | Path,
    seeds: list[int],
    recipes: list[str],
    workers: int,
    console: Console,
    name: str = "",
    force: bool = False,
) -> dict:
    """Run every (seed, recipe), resuming finished work; write results.json, report.md and the plots
    (prefixed `name-` when given, so several benches can share one folder and its cold starts).
    Every run folder's config is checked before any work starts; `force` resumes those that differ."""
    from coalign.bench_report import write_report

    root, started = Path(root), time.time()
    configs = {(s, r): recipe_config(config, r, s) for s in seeds for r in recipes}  # unknown recipes fail here
    cold = {s: root / f"seed{s}" / "cold_start" for s in seeds}
    cold_configs = {s: _cold_config(config, s) for s in seeds}
    recipe_dirs = {(s, r): root / f"seed{s}" / r for s, r in configs}
    for s in seeds:
        record_config(Run(cold[s]), cold_configs[s], force)
    for key, recipe_dir in recipe_dirs.items():
        record_config(Run(recipe_dir), configs[key], force)
    train, data = load_data(config.data.train, config.data.skip_bad_rows)
    refuse_in_rounds(train, "coalign bench")
    for run_config in configs.values():
        check = recipe(run_config.recipe).check
        if check:
            load(check)(run_config, train)  # before any cold start
    report_skipped("train", data, console)
    for s in seeds:
        initial_models(prepare_run(cold_configs[s], cold[s], console), cold_configs[s], train, console)
    jobs = [
        Job(f"seed {s} {agent} SFT", _cold_agent, (cold_configs[s], cold[s], agent), cold[s] / f"{agent}.log")
        for agent in ("grounder", "planner")  # longest first
        for s in seeds
    ]
    run_jobs(jobs, workers, "cold start", console)
    round0_jobs = [
        Job(f"seed {s} round 0", _cold_eval, (cold_configs[s], cold[s]), cold[s] / "eval.log") for s in seeds
    ]
    round0 = dict(zip(seeds, run_jobs(round0_jobs, workers, "round 0 evaluation", console)))
    keys = list(configs)
    histories = run_jobs(
        [
            Job(
                f"seed {s} {r}",
                _recipe_rounds,
                (configs[s, r], cold[s], recipe_dirs[s, r], round0[s]),
                recipe_dirs[s, r] / "run.log",
            )
            for s, r in keys
        ],
        workers,
        "recipes",
        console,
    )
    runs: dict = {r: {} for r in recipes}
    for (s, r), history in zip(keys, histories):
        runs[r][str(s)] = {"rounds": history, "stages": _round_records(Run(recipe_dirs[s, r]), config.moat.rounds)}
    results = {
        "config": config.model_dump(),
        "seeds": seeds,
        "recipes": recipes,
        "k": {r: configs[seeds[0], r].moat.k for r in recipes},
        "data": {"train": data},
        "runs": runs,
        "wall_seconds": round(time.time() - started, 1),
        "machine": describe_machine(),
    }
    prefix = f"{name}-" if name else ""
    write_json(root / f"{prefix}results.json", results)
    write_report(results, root, prefix)
    console.print(f"[bold]bench[/bold] results in {root}: {prefix}results.json, {prefix}report.md, plots")
    return results
