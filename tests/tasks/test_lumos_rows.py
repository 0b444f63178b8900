"""Lumos chat rows: validation with exact locations, atomic save, and Task <-> rows round trips."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from coalign.core.errors import DataError
from coalign.formats.lumos import FormatError, lumos_chat
from coalign.tasks import Task
from coalign.tasks.gsm8k import load_gsm8k
from coalign.tasks.lumos import LumosRow, load_lumos_rows, save_lumos_rows, task_to_rows, tasks_from_rows
from coalign.tasks.svamp import load_svamp

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
needs_data = pytest.mark.skipif(
    not DATA.is_dir(), reason=f"real benchmark files not found at {DATA} (../shared/data beside the checkout)"
)

TASK = Task(
    id="t-1",
    family="maths",
    dataset="gsm8k",
    question="Natalia sold 48 clips in April and half as many in May. How many altogether?",
    subgoals=("How many in May?", "How many altogether?", "State the total."),
    actions=("R1 = Calculator(48 / 2)", "R2 = Calculator(48 + R1)"),
    answer="72",
)


def _carried(task: Task) -> Task:
    """The fields rows carry (everything but the answer and meta)."""
    return replace(task, answer="", meta={})


def test_task_to_rows_shapes() -> None:
    planner, grounder = task_to_rows(TASK)
    assert planner.id == grounder.id == "t-1" and planner.dataset == "gsm8k"
    assert (
        planner.messages[1]["content"]
        == "Subgoal 1: How many in May?; Subgoal 2: How many altogether?; Subgoal 3: State the total."
    )
    assert grounder.messages[1]["content"] == "R1 = Calculator(48 / 2); R2 = Calculator(48 + R1)"
    assert "Subgoals to be grounded: Subgoal 1: How many in May?" in grounder.messages[0]["content"]
    assert lumos_chat(list(planner.messages)).startswith("<|user|>\nPlease provide a reasonable subgoal-based plan")


def test_round_trip_task_rows_task_and_file(tmp_path: Path) -> None:
    no_actions = replace(TASK, id="t-2", actions=())
    tasks = [TASK, no_actions]
    pairs = [task_to_rows(t) for t in tasks]
    planners, grounders = [p for p, _ in pairs], [g for _, g in pairs]
    assert tasks_from_rows(planners, grounders[::-1]) == [_carried(t) for t in tasks]
    save_lumos_rows(tmp_path / "plan.jsonl", planners)
    save_lumos_rows(tmp_path / "ground.jsonl", grounders)
    assert load_lumos_rows(tmp_path / "plan.jsonl") == planners
    assert tasks_from_rows(load_lumos_rows(tmp_path / "plan.jsonl"), load_lumos_rows(tmp_path / "ground.jsonl")) == [
        _carried(t) for t in tasks
    ]


@needs_data
def test_round_trip_real_tasks() -> None:
    tasks = load_gsm8k(DATA / "gsm8k" / "test_socratic.jsonl") + load_svamp(DATA / "svamp" / "SVAMP.json")
    pairs = [task_to_rows(t) for t in tasks]
    back = tasks_from_rows([p for p, _ in pairs], [g for _, g in pairs])
    assert back == [_carried(t) for t in tasks]


def test_unpaired_or_disagreeing_rows_are_refused() -> None:
    planner, grounder = task_to_rows(TASK)
    with pytest.raises(FormatError, match="'t-1': no grounder row"):
        tasks_from_rows([planner], [])
    with pytest.raises(FormatError, match="without a planner row"):
        tasks_from_rows([], [grounder])
    _, other = task_to_rows(replace(TASK, question="Another question?"))
    with pytest.raises(FormatError, match="disagree"):
        tasks_from_rows([planner], [other])
    with pytest.raises(FormatError, match="one user turn then one assistant turn"):
        tasks_from_rows([replace(planner, messages=planner.messages[:1])], [grounder])


def test_task_without_subgoals_has_no_planner_row() -> None:
    with pytest.raises(ValueError, match="no subgoals"):
        task_to_rows(replace(TASK, subgoals=()))


GOOD = {
    "id": "a",
    "dataset": "gsm8k",
    "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
}


@pytest.mark.parametrize(
    ("bad_line", "field", "problem"),
    [
        ('{"id": "b", "dataset": ', None, "invalid JSON"),
        (json.dumps({"id": "b", "dataset": "gsm8k"}), "messages", "missing"),
        (
            json.dumps({**GOOD, "messages": [GOOD["messages"][0], {"role": 1, "content": "a"}]}),
            "messages[1].role",
            "expected str, got int",
        ),
        (
            json.dumps({**GOOD, "messages": [{"role": "system", "content": "s"}]}),
            "messages[0].role",
            "expected 'user' or 'assistant'",
        ),
        (json.dumps({**GOOD, "messages": [{"role": "user"}]}), "messages[0].content", "missing"),
        (json.dumps({**GOOD, "messages": ["hi"]}), "messages[0]", "expected an object, got str"),
        (json.dumps({**GOOD, "messages": []}), "messages", "empty"),
        (json.dumps({**GOOD, "id": 7}), "id", "expected str, got int"),
    ],
)
def test_malformed_line_names_file_line_and_field(
    tmp_path: Path, bad_line: str, field: str | None, problem: str
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + bad_line + "\n")
    with pytest.raises(DataError) as info:
        load_lumos_rows(path)
    message = str(info.value)
    assert (info.value.line, info.value.field) == (3, field)
    assert str(path) in message and "line 3" in message and problem in message
    if field:
        assert f"field '{field}'" in message


def test_loaded_row_is_plain_data() -> None:
    row = LumosRow("a", "gsm8k", tuple(GOOD["messages"]))
    assert row.to_json() == GOOD


def test_qa_suite_tasks_round_trip_as_the_qa_family() -> None:
    """The grounder prompt shows Lumos's QA tool list, which is how rows read back as family "qa"."""
    from coalign.tasks.qa_suite import generate_qa_suite

    tasks = generate_qa_suite("heldout", 20)
    pairs = [task_to_rows(t) for t in tasks]
    assert all("'KnowledgeQuery', 'ParagraphRetrieve', 'QA'" in g.messages[0]["content"] for _, g in pairs)
    back = tasks_from_rows([p for p, _ in pairs], [g for _, g in pairs])
    assert back == [replace(t, answer="", subgoal_styles=(), meta={}) for t in tasks]
    assert {t.family for t in back} == {"qa"}
