"""The scratch-against-base table (benchmarks/scratch_vs_base.py) from hand-written results files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import scratch_vs_base  # noqa: E402


def results(path: Path, seeds: dict[str, tuple[float, float]]) -> Path:
    """A one-round bench whose seed s has held-in accuracy a at the cold start and b after MOAT."""

    def block(acc: float) -> dict:
        sets = {"x": {"accuracy": acc, "grounder_acc_gold_subgoals": acc + 0.1, "grounder_acc_blank_subgoals": 0.0}}
        return {"heldin": {"sets": sets}, "heldout": {"sets": {"y": {"accuracy": 0.0}}}}

    runs = {s: {"rounds": {"round0": block(a), "round1": block(b)}} for s, (a, b) in seeds.items()}
    path.write_text(json.dumps({"config": {"moat": {"rounds": 1}}, "runs": {"moat": runs}}))
    return path


def test_pairs_the_shared_seeds_set_by_set(tmp_path):
    scratch = scratch_vs_base.by_seed([results(tmp_path / "s.json", {"0": (0.1, 0.2), "1": (0.1, 0.3)})], "moat")
    base = scratch_vs_base.by_seed(
        [
            results(tmp_path / "b0.json", {"0": (0.3, 0.5)}),
            results(tmp_path / "b12.json", {"1": (0.4, 0.4), "2": (0.9, 0.9)}),
        ],
        "moat",
    )
    table = scratch_vs_base.comparison(scratch, base)
    assert table.startswith("| seeds 0, 1 | x | y |")  # seed 2 ran from the base only: no pair
    assert "| base, cold start, end to end | 35.0 ± 7.1 | 0.0 ± 0.0 |" in table
    assert "| base − scratch, cold start, end to end (t) | 25.0 ± 7.1 (5.00) |" in table
    assert "| base − scratch, after MOAT, end to end (t) | 20.0 ± 14.1 (2.00) |" in table
    assert "| base, cold start, gold sg | 45.0 ± 7.1 |" in table
    assert "| scratch, cold start, gold sg | 20.0 ± 0.0 | - |" in table  # held out has no gold-sg measure here
    assert "12.71 from 2 seeds" in table


def test_a_seed_in_two_files_is_refused(tmp_path):
    twice = [results(tmp_path / "a.json", {"0": (0.1, 0.1)}), results(tmp_path / "b.json", {"0": (0.2, 0.2)})]
    with pytest.raises(SystemExit, match="seed 0 of moat is in two results files"):
        scratch_vs_base.by_seed(twice, "moat")
