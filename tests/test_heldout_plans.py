"""The held-out plan diagnosis (benchmarks/heldout_plans.py) on a run folder written by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from coalign.config import load_config
from coalign.formats.lumos import format_subgoals
from coalign.tasks.sources import load_sources, source_name

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import heldout_plans  # noqa: E402


def write_run(folder: Path, plans) -> list:
    """A run of `tiny` with 40 training and 10 held-out tasks, whose planner wrote `plans(task)`."""
    overrides = {
        "data": {
            "train": [{"kind": "suite", "split": "train", "n": 40}],
            "heldout": [{"kind": "suite", "split": "heldout", "n": 10}],
        }
    }
    config = load_config("tiny", overrides)
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json")))
    source = config.data.heldout[0]
    tasks = load_sources([source])
    rows = [
        {"id": t.id, "question": t.question, "plan": plans(t), "correct": i == 0, "gold_subgoal_correct": True}
        for i, t in enumerate(tasks)
    ]
    (folder / "eval").mkdir()
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (folder / "eval" / f"heldout-{source_name(source)}.predictions.jsonl").write_text(text)
    return tasks


def test_counts_step_matches_and_words_no_training_plan_has(tmp_path: Path) -> None:
    tasks = write_run(tmp_path / "run", lambda t: format_subgoals([*t.subgoals, "Then zorble the frobnicated R1"]))
    groups = heldout_plans.rows_by_template(tmp_path / "run", "heldout", "eval")
    rows = [r for g in groups.values() for r in g]
    assert len(rows) == len(tasks) and set(groups) <= set(t.meta["template"] for t in tasks)
    assert not any(r["steps_match"] for r in rows)  # one subgoal too many in every plan
    assert all(r["plan_new"] for r in rows)  # "zorble" is in no training plan
    assert sum(r["correct"] for r in rows) == 1
    write_run(tmp_path / "gold", lambda t: format_subgoals(t.subgoals))
    gold = [r for g in heldout_plans.rows_by_template(tmp_path / "gold", "heldout", "eval").values() for r in g]
    assert all(r["steps_match"] for r in gold)
    assert [r["plan_new"] for r in gold] == [r["gold_new"] for r in gold]


def test_a_malformed_plan_counts_no_steps_and_a_foreign_row_is_refused(tmp_path: Path) -> None:
    write_run(tmp_path / "run", lambda t: "no plan at all")
    rows = [r for g in heldout_plans.rows_by_template(tmp_path / "run", "heldout", "eval").values() for r in g]
    assert not any(r["steps_match"] or r["plan_new"] for r in rows)
    path = next((tmp_path / "run" / "eval").iterdir())
    path.write_text(path.read_text().replace('"question": "', '"question": "Edited. ', 1))
    with pytest.raises(SystemExit, match=r"line 1: task .* is not the config's"):
        heldout_plans.rows_by_template(tmp_path / "run", "heldout", "eval")
    with pytest.raises(SystemExit, match=r"no such predictions file .*\['eval'\]"):
        heldout_plans.rows_by_template(tmp_path / "run", "heldout", "round0_eval")
