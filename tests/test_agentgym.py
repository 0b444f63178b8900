"""AgentGym / PilotRL trajectory files: both file shapes, both key styles, and bad rows named by file, line, field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coalign.core.errors import DataError, SkippedRows
from coalign.tasks.agentgym import Trajectory, load_agentgym

ITEM = {
    "item_id": "alfworld_12",
    "conversations": [
        {"from": "human", "value": "Interact with a household to solve a task.", "loss": False},
        {"from": "gpt", "value": "OK", "loss": False},
        {"from": "human", "value": "Your task is to: put a clean apple in fridge.", "loss": False},
        {"from": "gpt", "value": "Thought: find the apple.\nAction: go to countertop 1", "loss": True},
    ],
}


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def test_sharegpt_items_from_jsonl(tmp_path: Path) -> None:
    item = json.loads(json.dumps(ITEM))
    del item["conversations"][2]["loss"]
    (trajectory,) = load_agentgym(write_jsonl(tmp_path / "t.jsonl", [item]))
    assert trajectory == Trajectory(
        "alfworld_12",
        "alfworld",
        (
            {"role": "user", "content": "Interact with a household to solve a task."},
            {"role": "assistant", "content": "OK"},
            {"role": "user", "content": "Your task is to: put a clean apple in fridge."},
            {"role": "assistant", "content": "Thought: find the apple.\nAction: go to countertop 1"},
        ),
        (False, False, False, True),
    )
    with pytest.raises(AttributeError):
        trajectory.env = "x"  # frozen


def test_role_content_items_from_a_json_list(tmp_path: Path) -> None:
    items = [
        {
            "id": "sciworld_3_7",
            "conversations": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "go"}],
        },
        {
            "item_id": "42",
            "env": "wordle",
            "conversations": [{"from": "system", "value": "rules"}, {"from": "assistant", "value": "crane"}],
        },
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(items))
    first, second = load_agentgym(path)
    assert (first.id, first.env, first.trainable) == ("sciworld_3_7", "sciworld_3", (False, True))
    assert (second.env, second.messages[0]["role"], second.trainable) == ("wordle", "system", (False, True))


BAD = [
    ("not json", None, "invalid JSON"),
    ([1, 2], None, "expected a JSON object"),
    ({"conversations": ITEM["conversations"]}, "item_id", "missing"),
    ({**ITEM, "item_id": 12}, "item_id", "expected str, got int"),
    ({**ITEM, "item_id": "alfworld"}, "item_id", "cannot tell the environment"),
    ({**ITEM, "env": ""}, "env", "empty text"),
    ({**ITEM, "conversations": []}, "conversations", "no turns"),
    ({**ITEM, "conversations": "hello"}, "conversations", "expected list, got str"),
    ({**ITEM, "conversations": ["hello"]}, "conversations[0]", "expected a JSON object"),
    ({**ITEM, "conversations": [{"from": "robot", "value": "x"}]}, "conversations[0].from", "unknown speaker"),
    ({**ITEM, "conversations": [{"value": "x"}]}, "conversations[0].from", "missing"),
    ({**ITEM, "conversations": [{"from": "gpt", "value": None}]}, "conversations[0].value", "expected str"),
    ({**ITEM, "conversations": [{"from": "gpt", "value": "x", "loss": 1}]}, "conversations[0].loss", "expected bool"),
    (
        {**ITEM, "conversations": [{"from": "human", "value": "x", "loss": True}, {"from": "gpt", "value": "y"}]},
        "conversations[0].loss",
        "only the model's turns",
    ),
    ({**ITEM, "conversations": [{"from": "human", "value": "x"}]}, "conversations", "no model turn"),
]


@pytest.mark.parametrize(("row", "field", "problem"), BAD, ids=[b[2] for b in BAD])
def test_a_bad_row_names_file_line_and_field(tmp_path: Path, row, field, problem) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [ITEM, row if isinstance(row, (str, dict)) else json.dumps(row)])
    with pytest.raises(DataError) as caught:
        load_agentgym(path)
    error = caught.value
    assert (error.path, error.line, error.field) == (str(path), 2, field)
    assert problem in str(error)


def test_bad_rows_are_skipped_and_counted_when_asked(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [ITEM, "{", {**ITEM, "conversations": []}, "", ITEM])
    skipped = SkippedRows()
    assert len(load_agentgym(path, skipped)) == 2
    assert skipped.by_reason() == {"invalid JSON": 1, "empty 'conversations'": 1}
    listed = tmp_path / "t.json"
    listed.write_text(json.dumps([ITEM, {"item_id": "x_1"}]))
    with pytest.raises(DataError, match=r"t\.json, line 2: field 'conversations': missing"):
        load_agentgym(listed)
    listed.write_text(json.dumps({"item_id": "x_1"}))
    with pytest.raises(DataError, match="expected a JSON list of trajectories"):
        load_agentgym(listed, SkippedRows())
    with pytest.raises(DataError, match="cannot read the file"):
        load_agentgym(tmp_path / "absent.json")
