"""Bad data files: every loader names file, line and field, or skips and counts bad rows with skip_bad_rows."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from coalign.config import DataSource
from coalign.core.errors import DataError, SkippedRows
from coalign.tasks import Task
from coalign.tasks.gsm8k import load_gsm8k
from coalign.tasks.lumos import load_lumos_tasks, task_to_rows
from coalign.tasks.sources import load_data, load_source
from coalign.tasks.svamp import load_svamp

NOT_UTF8 = b'{"question": "caf\xe9?", "answer": "#### 1"}'


def write_lines(path: Path, lines: list[str | bytes | dict]) -> Path:
    """A JSONL file from dicts (dumped), strings and raw bytes (as they are), one per line."""
    encoded = [
        line if isinstance(line, bytes) else (json.dumps(line) if isinstance(line, dict) else line).encode()
        for line in lines
    ]
    path.write_bytes(b"\n".join(encoded) + b"\n")
    return path


# --------------------------------------------------------------------------- GSM8K

GSM8K_GOOD = {"question": "Q?", "answer": "Step? ** 1+1=<<1+1=2>>2\n#### 2"}
GSM8K_BAD = [  # (line, field, reason)
    ('{"question": ', None, "invalid JSON"),
    ({"answer": "#### 2"}, "question", "missing field 'question'"),
    ({"question": 3, "answer": "#### 2"}, "question", "wrong type 'question'"),
    ({"question": "  ", "answer": "#### 2"}, "question", "empty 'question'"),
    ({"question": "Q?", "answer": "2"}, "answer", "invalid value 'answer'"),
    ("[1, 2]", None, "not an object"),
    (NOT_UTF8, None, "not UTF-8"),
    ('{"question": "Q?", "answer": NaN}', None, "invalid JSON"),
    ('{"question": "Q?", "answer": 1e999}', None, "invalid JSON"),
]


@pytest.mark.parametrize(("bad", "field", "reason"), GSM8K_BAD)
def test_gsm8k_bad_row_names_file_line_and_field(tmp_path: Path, bad, field: str | None, reason: str) -> None:
    path = write_lines(tmp_path / "test.jsonl", [GSM8K_GOOD, "", bad])
    with pytest.raises(DataError) as info:
        load_gsm8k(path)
    error = info.value
    assert (error.path, error.line, error.field, error.reason) == (str(path), 3, field, reason)
    assert str(error).startswith(f"{path}, line 3: " + (f"field '{field}': " if field else ""))


def test_gsm8k_skips_bad_rows_and_counts_them_by_reason(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "test.jsonl", [GSM8K_GOOD, *[bad for bad, _, _ in GSM8K_BAD], GSM8K_GOOD])
    skipped = SkippedRows()
    tasks = load_gsm8k(path, skipped)
    assert [t.id for t in tasks] == ["gsm8k-test-1", "gsm8k-test-11"]  # ids keep their line numbers
    assert [e.line for e in skipped.errors] == list(range(2, 11))
    assert skipped.summary()["by_reason"] == {
        "invalid JSON": 3,
        "missing field 'question'": 1,
        "wrong type 'question'": 1,
        "empty 'question'": 1,
        "invalid value 'answer'": 1,
        "not an object": 1,
        "not UTF-8": 1,
    }
    assert skipped.summary()["examples"][0].startswith(f"{path}, line 2: invalid JSON")


def test_a_byte_order_mark_is_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "test.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GSM8K_GOOD).encode() + b"\n")
    assert len(load_gsm8k(path)) == 1


def test_json_nested_past_the_recursion_limit_is_invalid_json_at_its_line(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(DataError, match=r"line 2: invalid JSON: nested too deeply"):
        load_gsm8k(write_lines(tmp_path / "test.jsonl", [GSM8K_GOOD, deep]))
    path = tmp_path / "SVAMP.json"
    path.write_text(deep)
    with pytest.raises(DataError, match="invalid JSON: nested too deeply"):
        load_svamp(path)


# --------------------------------------------------------------------------- SVAMP

SVAMP_GOOD = {"ID": "a", "Body": "Tom has 3 apples.", "Question": "How many?", "Equation": "( 3.0 + 0.0 )",
              "Answer": 3.0, "Type": "Addition"}  # fmt: skip
SVAMP_BAD = [  # (record, field, reason)
    ("not a record", None, "not an object"),
    ({k: v for k, v in SVAMP_GOOD.items() if k != "Type"}, "Type", "missing field 'Type'"),
    ({**SVAMP_GOOD, "Answer": "3"}, "Answer", "wrong type 'Answer'"),
    ({**SVAMP_GOOD, "Question": ""}, "Question", "empty 'Question'"),
    ({**SVAMP_GOOD, "Equation": "( 3.0 + )"}, "Equation", "invalid value 'Equation'"),
    ({**SVAMP_GOOD, "Equation": "(" * 500 + "1" + ")" * 500}, "Equation", "invalid value 'Equation'"),
    (SVAMP_GOOD, "ID", "duplicate id 'ID'"),
]


@pytest.mark.parametrize(("bad", "field", "reason"), SVAMP_BAD)
def test_svamp_bad_record_names_file_index_and_field(tmp_path: Path, bad, field: str | None, reason: str) -> None:
    path = tmp_path / "SVAMP.json"
    path.write_text(json.dumps([SVAMP_GOOD, bad]))
    with pytest.raises(DataError) as info:
        load_svamp(path)
    assert (info.value.path, info.value.line, info.value.field, info.value.reason) == (str(path), 2, field, reason)


def test_svamp_skips_bad_records_and_counts_them(tmp_path: Path) -> None:
    path = tmp_path / "SVAMP.json"
    path.write_text(json.dumps([SVAMP_GOOD, *[bad for bad, _, _ in SVAMP_BAD], {**SVAMP_GOOD, "ID": "b"}]))
    skipped = SkippedRows()
    assert [t.id for t in load_svamp(path, skipped)] == ["svamp-a", "svamp-b"]
    assert len(skipped.errors) == 7 and skipped.by_reason()["invalid value 'Equation'"] == 2


def test_svamp_answer_past_the_float_range_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "SVAMP.json"
    path.write_text(json.dumps([SVAMP_GOOD, {**SVAMP_GOOD, "ID": "b", "Answer": 10**400}]))
    with pytest.raises(DataError, match=r"line 2: field 'Answer': number too large"):
        load_svamp(path)


@pytest.mark.parametrize(
    ("text", "problem"), [("[\n{", "line 2: invalid JSON"), ('{"ID": 1}', "expected a JSON list"), (b"[\xff]", "UTF-8")]
)
def test_svamp_file_that_is_not_a_list_of_records_fails_even_when_skipping(tmp_path: Path, text, problem) -> None:
    path = tmp_path / "SVAMP.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(DataError, match=problem):
        load_svamp(path, SkippedRows())


# --------------------------------------------------------------------------- Lumos rows


def lumos_files(tmp_path: Path, planner_lines: list, grounder_lines: list) -> tuple[Path, Path]:
    return write_lines(tmp_path / "plan.jsonl", planner_lines), write_lines(tmp_path / "ground.jsonl", grounder_lines)


TASK = Task("t-1", "maths", "toy", "Add 2 and 3.", ("Add 2 and 3",), ("R1 = Calculator(2 + 3)",), "")
PLAN, GROUND = (row.to_json() for row in task_to_rows(TASK))
PLAN_2, GROUND_2 = (row.to_json() for row in task_to_rows(replace(TASK, id="t-2", question="Add 4 and 5.")))


@pytest.mark.parametrize(
    ("planner", "grounder", "where", "field", "reason"),
    [
        (['{"id": '], [GROUND], ("plan", 1), None, "invalid JSON"),
        ([{**PLAN, "messages": []}], [GROUND], ("plan", 1), "messages", "empty 'messages'"),
        ([PLAN], [{**GROUND, "messages": [{"role": 1, "content": "x"}]}], ("ground", 1), "messages[0].role",
         "wrong type 'messages[].role'"),
        ([{**PLAN, "id": ""}], [GROUND], ("plan", 1), "id", "empty 'id'"),
        ([PLAN, PLAN], [GROUND], ("plan", 2), "id", "duplicate id 'id'"),
        ([PLAN], [GROUND, GROUND_2], ("ground", 2), "id", "unpaired row 'id'"),
        ([PLAN, PLAN_2], [GROUND], ("plan", 2), "id", "unpaired row 'id'"),
        ([PLAN], ["", {**GROUND_2, "id": "t-1"}], ("ground", 2), "messages[0].content",
         "bad pair 'messages[].content'"),
        ([{**PLAN, "messages": PLAN["messages"][:1]}], [GROUND], ("plan", 1), "messages", "bad pair 'messages'"),
        ([{**PLAN, "messages": [PLAN["messages"][0], {"role": "assistant", "content": "add them"}]}], [GROUND],
         ("plan", 1), "messages[1].content", "bad pair 'messages[].content'"),
    ],
)  # fmt: skip
def test_lumos_bad_row_or_pair_names_the_file_and_line_at_fault(
    tmp_path: Path, planner: list, grounder: list, where: tuple, field: str | None, reason: str
) -> None:
    plan_path, ground_path = lumos_files(tmp_path, planner, grounder)
    with pytest.raises(DataError) as info:
        load_lumos_tasks(plan_path, ground_path)
    path = {"plan": plan_path, "ground": ground_path}[where[0]]
    assert (info.value.path, info.value.line, info.value.field, info.value.reason) == (
        str(path),
        where[1],
        field,
        reason,
    )


def test_lumos_skips_bad_rows_and_pairs(tmp_path: Path) -> None:
    plan_3, ground_3 = (row.to_json() for row in task_to_rows(replace(TASK, id="t-3", question="Add 6 and 7.")))
    plan_path, ground_path = lumos_files(
        tmp_path,
        [PLAN, '{"id": ', {**PLAN_2, "messages": []}, plan_3, plan_3],
        [GROUND, GROUND_2, {**ground_3, "messages": ground_3["messages"][:1]}, {**GROUND, "id": "t-9"}],
    )
    skipped = SkippedRows()
    assert [t.id for t in load_lumos_tasks(plan_path, ground_path, skipped)] == ["t-1"]
    assert skipped.by_reason() == {
        "invalid JSON": 1,
        "empty 'messages'": 1,
        "duplicate id 'id'": 1,
        "unpaired row 'id'": 2,  # t-2's grounder lost its planner row; t-9 never had one
        "bad pair 'messages'": 1,  # t-3: the grounder row is not a user + assistant pair
    }


# --------------------------------------------------------------------------- empty datasets and sources


def test_empty_file_is_an_empty_list_for_the_loaders_and_an_error_for_a_source(tmp_path: Path) -> None:
    empty = tmp_path / "test.jsonl"
    empty.write_text("\n\n")
    (tmp_path / "SVAMP.json").write_text("[]")
    assert load_gsm8k(empty) == [] and load_svamp(tmp_path / "SVAMP.json") == []
    for source in (
        DataSource(kind="gsm8k", path=empty),
        DataSource(kind="svamp", path=tmp_path / "SVAMP.json"),
        DataSource(kind="lumos", path=empty, grounder_path=empty),
    ):
        with pytest.raises(DataError, match="no tasks: the file holds no rows"):
            load_source(source, SkippedRows())


def test_a_source_whose_rows_are_all_bad_is_an_error_even_when_skipping(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "test.jsonl", ["{", {"question": 1}])
    with pytest.raises(
        DataError, match=r"no tasks: all 2 rows were bad and skipped \(the first: .*line 1: invalid JSON"
    ):
        load_source(DataSource(kind="gsm8k", path=path), SkippedRows())


def test_missing_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read the file"):
        load_source(DataSource(kind="gsm8k", path=tmp_path / "nope.jsonl"))
    with pytest.raises(DataError, match="cannot read the file"):
        load_svamp(tmp_path)  # a folder


def test_load_data_records_what_it_skipped_only_when_asked(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "test.jsonl", [GSM8K_GOOD, "{", GSM8K_GOOD])
    sources = [DataSource(kind="gsm8k", path=path, n=1), DataSource(kind="suite", split="train", n=2)]
    tasks, record = load_data(sources, skip_bad_rows=True)
    assert len(tasks) == 3  # n counts good tasks
    assert record["tasks"] == 3 and record["skipped_rows"] == 1 and record["by_reason"] == {"invalid JSON": 1}
    with pytest.raises(DataError, match="line 2: invalid JSON"):
        load_data(sources, skip_bad_rows=False)
