"""SVAMP loader: equation decomposition, answers, and error locations."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from coalign.core.errors import DataError
from coalign.tasks.arithmetic import evaluate, number_text, parse
from coalign.tasks.svamp import equation_to_plan, load_svamp

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "svamp"
needs_data = pytest.mark.skipif(
    not DATA.is_dir(), reason=f"real SVAMP file not found at {DATA} (../shared/data beside the checkout)"
)


def test_nested_equation_gives_innermost_first_actions() -> None:
    subgoals, actions = equation_to_plan(parse("( ( 8.0 * 5.0 ) + 2.0 )"))
    assert actions == ("R1 = Calculator(8 * 5)", "R2 = Calculator(R1 + 2)")
    assert subgoals == ("Calculate 8 * 5", "Add 2 to R1")


def test_right_nested_and_two_sided_equations() -> None:
    _, actions = equation_to_plan(parse("( 7.0 / ( 4.0 + 3.0 ) )"))
    assert actions == ("R1 = Calculator(4 + 3)", "R2 = Calculator(7 / R1)")
    subgoals, actions = equation_to_plan(parse("( ( 1.5 - 0.5 ) * ( 2.0 + 3.0 ) )"))
    assert actions == ("R1 = Calculator(1.5 - 0.5)", "R2 = Calculator(2 + 3)", "R3 = Calculator(R1 * R2)")
    assert subgoals[-1] == "Multiply R1 by R2"


def test_bare_number_is_one_action() -> None:
    assert equation_to_plan(parse("8.0")) == (("Take the given number 8",), ("R1 = Calculator(8)",))


def test_number_text() -> None:
    assert [number_text(x) for x in ("8.0", "0.50", 51.0, 2.5)] == ["8", "0.5", "51", "2.5"]


@pytest.mark.parametrize(
    "equation", ["( 1.0 + )", "( 1.0 + 2.0", "1.0 2.0", "x + 1", "", "(" * 500 + "1" + ")" * 500, "- " * 300 + "1"]
)
def test_bad_equations_raise(equation: str) -> None:
    with pytest.raises(ValueError):
        parse(equation)


RECORD = {
    "ID": "x-1",
    "Body": " Tom has 3 apples. ",
    "Question": "How many? ",
    "Equation": "( 3.0 + 0.0 )",
    "Answer": 3.0,
    "Type": "Addition",
}


def test_record_to_task(tmp_path: Path) -> None:
    path = tmp_path / "SVAMP.json"
    path.write_text(json.dumps([RECORD]))
    (task,) = load_svamp(path)
    assert task.id == "svamp-x-1" and task.family == "maths" and task.dataset == "svamp"
    assert task.question == "Tom has 3 apples. How many?"
    assert task.answer == "3"


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        ({"Body": None}, "Body", "expected str, got null"),
        ({"Answer": "3"}, "Answer", "expected int or float, got str"),
        ({"Answer": True}, "Answer", "expected int or float, got bool"),
        ({"Equation": "( 3.0 + )"}, "Equation", "cannot parse"),
    ],
)
def test_bad_records_name_file_index_and_field(tmp_path: Path, change: dict, field: str, problem: str) -> None:
    path = tmp_path / "SVAMP.json"
    path.write_text(json.dumps([RECORD, {**RECORD, **change}]))
    with pytest.raises(DataError) as info:
        load_svamp(path)
    assert (info.value.line, info.value.field) == (2, field)
    assert str(path) in str(info.value) and "line 2" in str(info.value) and problem in str(info.value)


def test_a_long_bad_equation_is_quoted_in_part(tmp_path: Path) -> None:
    path = tmp_path / "SVAMP.json"
    path.write_text(json.dumps([{**RECORD, "Equation": "( 1.0 + 2.0 ) " * 500 + ")"}]))
    with pytest.raises(DataError, match=r"field 'Equation': cannot parse '\( 1\.0 \+ 2\.0 \).*\.\.\.': ") as info:
        load_svamp(path)
    assert len(str(info.value)) < 300


def test_missing_field_and_non_list(tmp_path: Path) -> None:
    path = tmp_path / "SVAMP.json"
    path.write_text(json.dumps([{k: v for k, v in RECORD.items() if k != "Type"}]))
    with pytest.raises(DataError, match=r"line 1: field 'Type': missing"):
        load_svamp(path)
    path.write_text(json.dumps(RECORD))
    with pytest.raises(DataError, match="expected a JSON list"):
        load_svamp(path)
    path.write_text("[\n{")
    with pytest.raises(DataError, match=r"line 2: invalid JSON"):
        load_svamp(path)


@needs_data
def test_real_file() -> None:
    tasks = load_svamp(DATA / "SVAMP.json")
    assert len(tasks) == 1000
    first = tasks[0]
    assert first.id == "svamp-chal-1"
    assert first.actions == ("R1 = Calculator(76 - 25)",) and first.answer == "51"
    assert first.question.endswith("on each pack How much do you have to pay to buy each pack?")
    assert all(len(t.subgoals) == len(t.actions) >= 1 for t in tasks)
    assert len({t.id for t in tasks}) == 1000


def test_evaluate_is_exact_with_precedence_and_signs() -> None:
    assert evaluate(parse("1 + 2 * 3 - 4 / 8")) == Fraction(13, 2)
    assert evaluate(parse("-6 + 3")) == -3 and evaluate(parse("-(2 - 5)")) == 3 and evaluate(parse("+2")) == 2
    assert evaluate(parse(".1 + .2")) == Fraction(3, 10)
