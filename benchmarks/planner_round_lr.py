"""Does the matched Lumos baseline's planner round hurt its planner? Sweep `planner_round_sft.learning_rate`.

From a finished cold start (a `coalign train` run folder of a maths config, e.g. `tiny`), each learning rate
trains the planner for one round on the gold plans of the round's tasks (`moat.tasks`, as the bench's matched
baseline does), then evaluates it with the cold-start grounder on the config's sets. Each variant is a stage
of that run folder (`probe_planner_lr<lr>`, `probe_eval_lr<lr>`), so a rerun resumes.

    .venv/bin/coalign train tiny --run-dir runs/lrprobe --set 'data.heldout=[]' --set eval.diagnostics=false
    .venv/bin/python benchmarks/planner_round_lr.py runs/lrprobe --lrs 1e-3,1e-4,3e-5 --tasks 100
"""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from coalign.config import load_config
from coalign.moat.baseline import planner_round_data
from coalign.moat.cold_start import evaluate_run, load_split, round_tasks, train_agent
from coalign.moat.units import round_units
from coalign.core.runs import Run, read_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a finished cold start (planner_sft and grounder_sft checkpoints)")
    parser.add_argument("--lrs", default="1e-3,1e-4,3e-5", help="comma-separated learning rates")
    parser.add_argument("--tasks", type=int, default=100, help="the round's tasks (moat.tasks)")
    args = parser.parse_args()
    console, run = Console(), Run(args.run_dir)
    config = load_config(run.path("config.yaml"))
    config = config.model_copy(update={"moat": config.moat.model_copy(update={"tasks": args.tasks})})
    train = load_split(run, config, config.data.train, "train", console)
    units = round_units(round_tasks(config, train), config.moat.web_turns_per_task, config.seed)
    gold = planner_round_data(units)
    planner, grounder = str(run.path("checkpoints", "planner_sft")), str(run.path("checkpoints", "grounder_sft"))
    results = {"no round": read_json(run.path("eval", "metrics.json"))["heldin"]["average"]["accuracy"]}
    for lr in (float(x) for x in args.lrs.split(",")):
        settings = config.planner_round_sft.model_copy(update={"learning_rate": lr})
        trained = train_agent(run, f"probe_planner_lr{lr:g}", planner, gold, settings, config.seed, console)
        metrics = evaluate_run(run, config, trained, grounder, console, name=f"probe_eval_lr{lr:g}")
        results[f"{lr:g}"] = metrics["heldin"]["average"]["accuracy"]
    console.print("held-in end-to-end accuracy by the planner round's learning rate:")
    console.print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
