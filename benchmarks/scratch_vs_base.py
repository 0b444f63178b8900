"""Scratch against a pretrained base, set by set (issue 14's table): two benches of the same config and
evaluation sets, one per starting point, each a list of `results.json` files (one per seed or per invocation).
For every evaluation set, at the cold start (round 0) and after MOAT's last round: end-to-end accuracy and the
grounder's accuracy given the gold and the blanked subgoals, mean ± std over seeds, and base − scratch paired
by seed with its t.

    .venv/bin/python benchmarks/scratch_vs_base.py \\
        --scratch docs/results/tiny-six/scratch-s{0,1,2}-results.json \\
        --base docs/results/tiny-six/six-s{0,1,2}-results.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from coalign.reports.tables import pipe_table
from coalign.reports.stats import fmt, paired_diff, paired_t, t_bars
from coalign.moat.report import rounds_of

MEASURES = {
    "end to end": "accuracy",
    "gold sg": "grounder_acc_gold_subgoals",
    "blank sg": "grounder_acc_blank_subgoals",
}


def by_seed(paths: list[Path], recipe: str) -> dict[str, dict[str, dict]]:
    """Seed -> {"cold start": split blocks, "after MOAT": split blocks} from one bench's results files."""
    seeds: dict[str, dict[str, dict]] = {}
    for path in paths:
        results = json.loads(path.read_text())
        final = rounds_of(results)[-1]
        for seed, run in results["runs"].get(recipe, {}).items():
            if seed in seeds:
                raise SystemExit(f"{path}: seed {seed} of {recipe} is in two results files")
            seeds[seed] = {"cold start": run["rounds"]["round0"], "after MOAT": run["rounds"][final]}
    return seeds


def value(blocks: dict, when: str, split: str, dataset: str, measure: str) -> float | None:
    return blocks[when][split]["sets"].get(dataset, {}).get(measure)


def comparison(scratch: dict, base: dict) -> str:
    """One row per (starting point, moment, measure) and one per paired difference, a column per evaluation set."""
    seeds = sorted(set(scratch) & set(base), key=int)
    if not seeds:
        raise SystemExit("the two benches share no seed")
    first = base[seeds[0]]["cold start"]
    columns = [(split, d) for split in ("heldin", "heldout") for d in first[split]["sets"]]
    rows = []
    for when in ("cold start", "after MOAT"):
        for label, measure in MEASURES.items():
            cells = {
                name: [[value(bench[s], when, split, d, measure) for s in seeds] for split, d in columns]
                for name, bench in (("scratch", scratch), ("base", base))
            }
            for name in ("scratch", "base"):
                rows.append(
                    [f"{name}, {when}, {label}", *(fmt([v for v in col if v is not None]) for col in cells[name])]
                )
            diffs = [
                [paired_diff(b, a) for a, b in zip(sc, bc) if a is not None and b is not None]
                for sc, bc in zip(cells["scratch"], cells["base"])
            ]
            rows.append([f"base − scratch, {when}, {label} (t)", *(f"{fmt(d)} ({paired_t(d)})" for d in diffs)])
    table = pipe_table(["seeds " + ", ".join(seeds), *(d for _, d in columns)], rows)
    bars = t_bars([len(seeds)])
    return f"{table}\n\n{bars}" if bars else table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scratch", nargs="+", type=Path, required=True, help="the from-scratch bench's results")
    parser.add_argument("--base", nargs="+", type=Path, required=True, help="the pretrained base's results")
    parser.add_argument("--recipe", default="moat", help="whose rounds to read (its round 0 is the cold start)")
    args = parser.parse_args()
    print(comparison(by_seed(args.scratch, args.recipe), by_seed(args.base, args.recipe)))


if __name__ == "__main__":
    main()
