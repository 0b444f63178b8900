"""Why held-out end to end stays low: a run's evaluation predictions, template by template.

For each template (or dataset, where tasks carry none) of one evaluation set: end-to-end accuracy, the
grounder's accuracy given the gold subgoals (what a perfect planner would allow), how many of the planner's
plans have the gold number of subgoals, and how many gold plans, and planner plans, use a word that no
training plan ever uses (the planner can only learn to write words it has seen written).

    .venv/bin/python benchmarks/heldout_plans.py runs/cold0            # the run's config, its eval/ predictions
    .venv/bin/python benchmarks/heldout_plans.py runs/bench/seed0/cold_start --stage round0_eval   # a bench's
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

from coalign.config import load_config
from coalign.formats.lumos import FormatError, parse_subgoals
from coalign.tasks.sources import load_sources, source_name

WORD = re.compile(r"[A-Za-z]+")


def words(subgoals: list[str] | tuple[str, ...]) -> set[str]:
    return {w.lower() for s in subgoals for w in WORD.findall(s)}


def rows_by_template(run: Path, split: str, stage: str) -> dict[str, list[dict]]:
    """Prediction rows of every `split` set of the run, each with its task's gold subgoals and the words of
    training plans it lacks; grouped by template."""
    config = load_config(run / "config.yaml")
    known = set().union(*(words(t.subgoals) for t in load_sources(config.data.train)))
    groups: dict[str, list[dict]] = defaultdict(list)
    for source in getattr(config.data, split):
        tasks = {t.id: t for t in load_sources([source])}
        path = run / stage / f"{split}-{source_name(source)}.predictions.jsonl"
        if not path.is_file():
            stages = sorted({p.parent.name for p in run.glob("*/*.predictions.jsonl")})
            raise SystemExit(f"{path}: no such predictions file (this run's evaluation folders: {stages})")
        for line, text in enumerate(path.read_text().splitlines(), 1):
            row = json.loads(text)
            task = tasks.get(row["id"])
            if task is None or task.question != row["question"]:
                raise SystemExit(f"{path}, line {line}: task {row['id']} is not the config's (another seed or n?)")
            try:
                plan = parse_subgoals(row["plan"])
            except FormatError:  # a malformed plan has no subgoals to count
                plan = []
            row |= {
                "steps_match": len(plan) == len(task.subgoals),
                "gold_new": bool(words(task.subgoals) - known),
                "plan_new": bool(words(plan) - known),
            }
            groups[task.meta.get("template", task.dataset)].append(row)
    return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a run folder holding config.yaml and <stage>/*.predictions.jsonl")
    parser.add_argument("--split", default="heldout", choices=("heldin", "heldout"))
    parser.add_argument("--stage", default="eval", help="the evaluation folder of the run (eval, eval_round1, ...)")
    args = parser.parse_args()
    groups = rows_by_template(args.run, args.split, args.stage)
    head = "| template | n | end to end | given gold subgoals | plans with the gold step count |"
    print(head + " gold plans with a word no training plan has | planner plans with one |")
    print("|---|---|---|---|---|---|---|")
    every = [r for rows in groups.values() for r in rows]
    for name, rows in [*sorted(groups.items()), ("all", every)]:
        cells = [sum(bool(r[key]) for r in rows) for key in ("correct", "gold_subgoal_correct", "steps_match")]
        new = [sum(r[key] for r in rows) for key in ("gold_new", "plan_new")]
        print(
            f"| {name} | {len(rows)} | " + " | ".join(f"{c} ({100 * c / len(rows):.1f}%)" for c in cells + new) + " |"
        )


if __name__ == "__main__":
    main()
