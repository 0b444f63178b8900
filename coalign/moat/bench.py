"""`coalign bench`: the paper's comparisons on one config, several seeds, one folder.

    for each seed: cold start (Agent Lumos SFT of both agents), evaluated as round 0
    from that cold start, each recipe runs its rounds:
        lumos           the baseline at MOAT's training budget (matched SFT rounds on gold data)
        moat            Algorithm 1
        moat_no_stage1  / moat_no_stage2 / moat_no_critic: the paper's ablations
        moat_corrected  MOAT whose critic pairs corrected actions with corrected subgoals
        moat_k{K}       MOAT with K candidates per task (the K sweep, Figure 3)
        any of these+section.key=value[+...]: it with settings of its rounds changed (a sweep:
                        moat+planner_dpo.beta=0.05, moat+moat.pairs_per_task=2+planner_dpo.epochs=4)
    results.json, report.md (Tables 2, 3 and 4 analogues, the premise and the capability gap)
    and rounds.png / k_sweep.png

Recipes of one seed share its cold start, so they differ only in what their rounds do. Jobs
that do not depend on each other run side by side (`workers`), each in its own run folder
with its own log, so any of them resumes on its own after a kill.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from rich.console import Console

from coalign.config import RunConfig
from coalign.core.console import make_console
from coalign.core.machine import describe_machine
from coalign.core.parallel import Job, run_jobs
from coalign.core.runs import Run, read_json, write_json
from coalign.moat.baseline import matched_rounds
from coalign.moat.cold_start import check_models, cold_starts
from coalign.moat.data import record_split
from coalign.moat.recipe import moat_rounds, refuse_llm_critic_on_turns
from coalign.moat.report import write_report
from coalign.tasks.sources import load_data, refuse_in_rounds, report_skipped
from coalign.training.setup import check_run, job_memory, open_run, prepare_run, record_config


@dataclass(frozen=True)
class Benched:
    """A recipe as the bench runs it from a seed's shared cold start.

    rounds: (run, config, train, planner, grounder, round0, console) -> the evaluation after every round.
    section: the config section its variants override (None: it has no variants beyond its name).
    round_sections: the config sections only its rounds read; the cold start leaves them at their defaults,
        so benches that differ only in their rounds share a seed's cold start.
    check: (config, train) -> None, raising RunError for a config that would fail after the cold start.
    weight: its rounds' length relative to the others', so the longest jobs start first (`Job.weight`).
    """

    rounds: Callable[..., dict]
    section: str | None
    round_sections: tuple[str, ...]
    check: Callable[..., None] | None = None
    weight: float = 1.0


BENCHED = {
    "lumos": Benched(matched_rounds, None, ("moat", "grounder_round_sft", "planner_round_sft")),
    "moat": Benched(  # a round samples, scores, trains by DPO, grounds and trains by SFT: 1.5x Lumos's on `smol`
        moat_rounds, "moat", ("moat", "planner_dpo", "grounder_round_sft"), refuse_llm_critic_on_turns, weight=1.5
    ),
}
# bench variant -> (recipe, overrides of its section): the baseline, MOAT and the paper's ablations
VARIANTS: dict[str, tuple[str, dict]] = {
    "lumos": ("lumos", {}),
    "moat": ("moat", {}),
    "moat_no_stage1": ("moat", {"stage1": False}),
    "moat_no_stage2": ("moat", {"stage2": False}),
    "moat_no_critic": ("moat", {"critic": "none", "critic_options": {}}),  # an llm critic's options do not fit "none"
    "moat_corrected": ("moat", {"critic_subgoals": "corrected"}),  # corrected actions with corrected subgoals (A.3)
}
SWEEP = ("moat_k", "moat", "k")  # `moat_k8`: recipe moat with moat.k = 8 (the K sweep, Figure 3)
SET = "+"  # `moat+planner_dpo.beta=0.05`: variant moat with planner_dpo.beta 0.05 (any round setting's sweep)
ROUND_ONLY = frozenset(s for entry in BENCHED.values() for s in entry.round_sections)


def _named_variant(name: str) -> tuple[str, dict]:
    """(recipe, {section: overrides}) of a named variant or a K of the sweep; ValueError if none."""
    if name in VARIANTS:
        recipe_name, overrides = VARIANTS[name]
        section = BENCHED[recipe_name].section
        return recipe_name, {section: dict(overrides)} if section and overrides else {}
    prefix, recipe_name, key = SWEEP
    if name.startswith(prefix) and name[len(prefix) :].isdigit():
        return recipe_name, {"moat": {key: int(name[len(prefix) :])}}
    known = ", ".join([*VARIANTS, f"{prefix}<{key.upper()}>", f"any of them{SET}section.key=value"])
    raise ValueError(f"unknown moat bench variant {name!r}; known: {known}")


def bench_variant(name: str) -> tuple[str, dict]:
    """(recipe, {config section: overrides}) that a bench variant's name stands for; ValueError if none.

    `NAME+section.key=value+...` is variant NAME with those settings (values read as YAML), so one bench sweeps
    them side by side from shared cold starts: a section only the recipe's rounds read (`Benched.round_sections`),
    since the cold start, shared with the other variants, ignores the variant's settings."""
    base, *sets = name.split(SET)
    recipe_name, overrides = _named_variant(base)
    allowed = BENCHED[recipe_name].round_sections
    for item in sets:
        path, sep, value = item.partition("=")
        section, _, key = path.partition(".")
        if not (sep and key) or "." in key or "/" in item:
            raise ValueError(f"bench variant {name!r}: {item!r} is not section.key=value")
        if section not in allowed:
            raise ValueError(
                f"bench variant {name!r}: {section} is not a setting of {recipe_name}'s rounds "
                f"({', '.join(allowed)}); change the cold start's with --set"
            )
        try:
            overrides.setdefault(section, {})[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ValueError(f"bench variant {name!r}: the value of {path} is not YAML: {value!r}") from None
    return recipe_name, overrides


def recipe_config(config: RunConfig, name: str, seed: int) -> RunConfig:
    """The config one (bench variant, seed) runs with: the base config, its seed, and the variant's settings
    (`bench_variant`: `moat_no_stage1` is recipe moat with moat.stage1 false)."""
    recipe_name, overrides = bench_variant(name)
    data = config.model_dump()
    for section, values in overrides.items():
        data[section] = {**data[section], **values}
    data.update(seed=seed, recipe=recipe_name, name=f"{config.name}-{name}")
    return RunConfig.model_validate(data)


def _cold_config(config: RunConfig, seed: int) -> RunConfig:
    """The cold start's config: round-only settings left at their defaults, so benches that differ only in
    their rounds (a K sweep, fewer rounds) share the cold start of a seed."""
    data = {k: v for k, v in config.model_dump().items() if k not in ROUND_ONLY}
    return RunConfig.model_validate({**data, "seed": seed, "recipe": "lumos"})


def _recipe_rounds(config: RunConfig, start: tuple[str, str, dict], recipe_dir: Path, train: list) -> dict:
    console = make_console()
    run = prepare_run(config, recipe_dir, console)
    planner, grounder, round0 = start
    return BENCHED[config.recipe].rounds(run, config, train, planner, grounder, round0, console)


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
    root, started = Path(root), time.time()
    configs = {(s, r): recipe_config(config, r, s) for s in seeds for r in recipes}  # unknown variants fail here
    cold = {s: root / f"seed{s}" / "cold_start" for s in seeds}
    cold_configs = {s: _cold_config(config, s) for s in seeds}
    recipe_dirs = {(s, r): root / f"seed{s}" / r for s, r in configs}
    check_models(config)
    decided = check_run(cold_configs[seeds[0]])  # the seeds' cold starts differ by seed alone; rows of every file
    train, data = load_data(config.data.train, config.data.skip_bad_rows)
    refuse_in_rounds(train, "coalign bench")
    for run_config in configs.values():
        check = BENCHED[run_config.recipe].check
        if check:
            check(run_config, train)  # before any cold start, and any folder: a failed start leaves none
    for s in seeds:
        record_config(Run(cold[s]), cold_configs[s], force)
    for key, recipe_dir in recipe_dirs.items():
        record_config(Run(recipe_dir), configs[key], force)
    report_skipped("train", data, console)
    for folder in [*cold.values(), *recipe_dirs.values()]:
        record_split(Run(folder), "train", data)
    for s in seeds:
        open_run(cold_configs[s], cold[s], console, False, True, decided)
    starts = cold_starts({f"seed {s}": (cold_configs[s], cold[s]) for s in seeds}, train, workers, console)
    keys = list(configs)
    histories = run_jobs(
        [
            Job(
                f"seed {s} {r}",
                _recipe_rounds,
                (configs[s, r], starts[f"seed {s}"], recipe_dirs[s, r], train),
                recipe_dirs[s, r] / "run.log",
                BENCHED[configs[s, r].recipe].weight,
                job_memory(configs[s, r]),
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
        "config": config.model_dump(mode="json"),
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
