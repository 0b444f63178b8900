"""The Agent Lumos recipe: planner and grounder fine-tuned independently on ground truth.

This is MOAT's cold start and its baseline. Read top to bottom: make or load the initial
models, SFT the planner on gold subgoals, SFT the grounder on gold actions, evaluate
(`cold_start.cold_starts`). As the baseline in a bench, `matched_rounds` continues that SFT on
gold data at MOAT's training budget. Each stage leaves its output in the run folder and is skipped
when already finished.
"""

from __future__ import annotations

import random
from pathlib import Path

from rich.console import Console

from coalign.config import RunConfig
from coalign.core.runs import Run, write_json
from coalign.moat.cold_start import check_models, cold_starts, train_agent
from coalign.moat.data import round_tasks, start_run
from coalign.moat.evaluate import evaluate_run
from coalign.moat.sft_data import grounder_data
from coalign.moat.units import round_units
from coalign.tasks import Task


def matched_rounds(
    run: Run, config: RunConfig, train: list[Task], planner: str, grounder: str, round0: dict, console: Console
) -> dict:
    """The Agent Lumos baseline at MOAT's training budget: as many rounds, each continuing SFT on gold data.

    Per round, the planner trains on the gold output of each of MOAT's units (`moat.units`: a onetime
    task's gold subgoals, a web task's gold planner turn at each turn MOAT samples; `planner_round_sft`, where
    MOAT runs DPO on at most one pair per unit) and the grounder on as many gold examples as MOAT's
    stage 2 builds with the execution critic (K per unit, plus the mixed-in initial data), with
    MOAT's `grounder_round_sft` settings. So the gain of MOAT over this is what its data adds, not
    more steps.
    """
    history = {"round0": round0}
    m, gold = config.moat, grounder_data(config, train)
    units = round_units(round_tasks(config, train), m.web_turns_per_task, config.seed)
    planner_gold = [(u.planner_prompt(), u.gold_planner_output()) for u in units]  # each unit's gold output
    built = len(units) * m.k
    n_grounder = built + min(len(gold), round(built * m.mix_ratio))
    for r in range(1, m.rounds + 1):
        planner = train_agent(
            run, f"round{r}_planner_sft", planner, planner_gold, config.planner_round_sft,
            config.seed, console, trust_remote_code=config.models.trust_remote_code, lora=config.lora,
            key="planner_round_sft",
        )  # fmt: skip
        pool = list(gold)
        random.Random(config.seed * 1000 + r).shuffle(pool)  # per round, so a resumed run draws the same
        examples = [pool[i % len(pool)] for i in range(n_grounder)]
        grounder = train_agent(
            run, f"round{r}_grounder_sft", grounder, examples, config.grounder_round_sft, config.seed, console,
            trust_remote_code=config.models.trust_remote_code, lora=config.lora, key="grounder_round_sft",
        )  # fmt: skip
        history[f"round{r}"] = evaluate_run(run, config, planner, grounder, console, name=f"round{r}_eval")
    write_json(run.path("rounds.json"), history)
    return history


def run_lumos(config: RunConfig, run_dir: str | Path, console: Console, force: bool = False) -> dict:
    """Agent Lumos: independent SFT of both agents on ground truth, then evaluation
    (`force`: resume even if the run folder's config differs)."""
    check_models(config)
    run, train = start_run(config, run_dir, console, force)
    return cold_starts({"": (config, run.root)}, train, 1, console, evaluation="eval")[""][2]
