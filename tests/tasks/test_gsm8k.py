"""GSM8K loader: real files when present, and the error messages users see for broken rows."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from coalign.core.errors import DataError
from coalign.core.jsonl import read_jsonl
from coalign.core.runs import write_jsonl
from coalign.formats.lumos import parse_action
from coalign.tasks.gsm8k import load_gsm8k, reference_results, steps_to_plan, written_calculations, written_relations
from coalign.tools.executor import execute

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k"
needs_data = pytest.mark.skipif(
    not DATA.is_dir(), reason=f"real GSM8K files not found at {DATA} (../shared/data beside the checkout)"
)


def test_socratic_step_gives_subquestion_and_referenced_action() -> None:
    steps = [
        "How many clips did Natalia sell in May? ** Natalia sold 48/2 = <<48/2=24>>24 clips in May.",
        "How many clips did Natalia sell altogether? ** Natalia sold 48+24 = <<48+24=72>>72 clips altogether.",
    ]
    subgoals, actions, annotations = steps_to_plan(steps)
    assert subgoals == ("How many clips did Natalia sell in May?", "How many clips did Natalia sell altogether?")
    assert actions == ("R1 = Calculator(48/2)", "R2 = Calculator(48+R1)")
    assert annotations == [("48/2", "24", "annotation"), ("48+24", "72", "annotation")]


def test_plain_steps_are_subgoals_without_annotations_and_unannotated_steps_have_no_action() -> None:
    subgoals, actions, _ = steps_to_plan(["She has 3 cats.", "", "Twice that is 3*2=<<3*2=6>>6 cats."])
    assert subgoals == ("She has 3 cats.", "Twice that is 3*2=6 cats.")
    assert actions == ("R1 = Calculator(3*2)",)


def test_references_use_most_recent_equal_result_and_whole_tokens_only() -> None:
    results = ["24", "5", "24", ".5"]
    assert reference_results("24*124+0.5-5.5+(5)", results) == "R3*124+R4-5.5+(R2)"
    assert reference_results("240/2", results) == "240/2"


def test_written_out_last_step_becomes_an_action() -> None:
    steps = [
        "How much do the heels cost? ** The heels cost 33 * 2 = $<<33*2=66>>66.",
        "How much do the boots cost? ** The boots cost $5 more, so the boots cost 66 + 5 = $71.",
    ]
    _, actions, calculations = steps_to_plan(steps)
    assert actions == ("R1 = Calculator(33*2)", "R2 = Calculator(R1 + 5)")
    assert calculations[1] == ("66 + 5", "71", "text")


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Charlie has 54 \u2212 37 = 17 stickers left.", [("54 - 37", "17")]),
        ("This is 12/20 x 100% = 60% of the students.", [("12/20 * 100", "60")]),
        ("it takes 5 seconds x 7 bottles = 35 seconds", [("5 * 7", "35")]),
        ("7 puppies / 20 puppies * 100% = 35%", [("7 / 20 * 100", "35")]),
        ("The perimeter is 2(40+9) = 98", [("2 * (40+9)", "98")]),
        ("(1/4)24 = 6 pints", [("(1/4) * 24", "6")]),
        ("a total of 1,000 + 2,500 = 3,500 dollars", [("1000 + 2500", "3500")]),
        ("200 minus 174 equals 26", [("200 - 174", "26")]),
        ("1 + 3 + 1/2 + 1 1/2 + 2 = 8 hours", [("1 + 3 + 1/2 + (1 + 1/2) + 2", "8")]),
        ("60g * 4/5 = 240g/5 = 48 grams", [("240/5", "48")]),
        ("each costs 10/3 = $3.33", [("10/3", "3.33")]),
        ("2 - 8 = -6 degrees", [("2 - 8", "-6")]),
    ],
)
def test_written_calculations_are_found(text: str, found: list) -> None:
    assert written_calculations(text) == found


@pytest.mark.parametrize(
    "text",
    [
        "Now we know that 2/3 * x = 12, so x = 18",  # algebra
        "15 gallons = 120 pints",  # a conversion, no operation
        "So, Suzzane has $32 - $20 = $300 left.",  # wrong in the source
        "The museum tour will take 3 / 2 = 1 1/2 hours.",  # a mixed number after `=` is not read as 1
        "7/2 = 3 rooms",  # integers must match exactly
        "so 48/2 = ",  # the annotation that follows carries it
    ],
)
def test_written_calculations_skip_what_does_not_check_out(text: str) -> None:
    assert written_calculations(text) == []


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Now we know that 2/3 * x = 12, where x is the number", [("2/3 * x", "12")]),
        ("which produces x = 18", [("x", "18")]),
        ("The discounted price is X - X*25% = $19.50.", [("X - X*25%", "19.50")]),
        ("We know that m + h = 80,000 and m = 10h.", [("m + h", "80000"), ("m", "10h")]),
        ("Since Carver's age (45) is 5 years less than twice, then 45=(2*x)-5.", [("45", "(2*x)-5")]),
        ("The sum is X + (X+3) + [(X+3)*3 - 1] = 87 years old.", [("X + (X+3) + ((X+3)*3 - 1)", "87")]),
        ("because 1000 +(1000 x (X/100)) = 1,100 if X = 10", [("1000 +(1000 * (X/100))", "1100"), ("X", "10")]),
        ("So there are X = 168/20% = 840 students", [("X", "168/20%"), ("X", "840")]),  # a chain also gives X
        ("Let Y = the length of the yellow rope", []),  # words, not an expression
        ("so 3 x 4 = 12 eggs", []),  # arithmetic: `x` is a times sign
    ],
)
def test_written_relations_are_found(text: str, found: list) -> None:
    assert written_relations(text) == found


def test_equation_worked_by_hand_becomes_set_and_solve_equation() -> None:
    steps = [
        "Q1? ** First multiply: 5 * 2 = <<5*2=10>>10",
        "Q2? ** Then add two: 10 + 2 = <<10+2=12>>12",
        "Q3? ** Now we know that 2/3 * x = 12, where x is the number. Dividing each side by 2/3 produces x = 18",
    ]
    _, actions, calculations = steps_to_plan(steps)
    assert actions[2:] == ("R3 = SetEquation(2/3 * x = R2)", "R4 = SolveEquation(R3)")
    assert calculations[2:] == [("2/3 * x = 12", None, "algebra"), ("x", "18", "algebra")]
    assert execute(list(actions)).answer == "18"


def test_first_equation_that_gives_the_written_value_is_used_and_solved_unknowns_become_references() -> None:
    steps = [
        "Define ** We know that b = 5s - 4 and s + b = 116.",
        "Write ** Substituting, we get s + 5s - 4 = 116.",
        "Simplify ** Combining like terms, we get 6s - 4 = 116, so 6s = 120",
        "Divide ** Dividing both sides by 6, we get s = 20",
        "Blue? ** Substituting this value back into b = 5s - 4, we get b = 96",
    ]
    _, actions, calculations = steps_to_plan(steps)
    assert actions == ("R1 = SetEquation(s + 5s - 4 = 116)", "R2 = SolveEquation(R1)", "R3 = Calculator(5 * R2 - 4)")
    assert calculations[2] == ("5s - 4", "96", "algebra")
    assert execute(list(actions)).answer == "96"


def test_value_given_in_a_bare_annotation_comes_from_the_equations_and_is_used_after() -> None:
    steps = ["And the sum would be x+2*x=30 games.", "And the value of x=<<10=10>>10 games.", "Carla won 2x=20 games."]
    _, actions, _ = steps_to_plan(steps)
    assert actions == ("R1 = SetEquation(x+2*x = 30)", "R2 = SolveEquation(R1)", "R3 = Calculator(2 * R2)")
    assert execute(list(actions)).answer == "20"


@pytest.mark.parametrize(
    "steps",
    [
        ["If 140 + 140x = 147 then x = .5"],  # a slip in the source: the equation gives .05
        ["Red rope = 4 * (Y - 7)", "The red rope was 20 cm long."],  # no value written for an unknown
        ["3x + 2y = 12, so x = 2"],  # two unknowns, one equation
    ],
)
def test_algebra_is_not_converted_when_no_stated_equation_gives_the_written_value(steps: list[str]) -> None:
    assert steps_to_plan(steps)[1] == ()


def test_unsolved_values_are_kept_for_the_gold_report(tmp_path: Path) -> None:
    answer = "If 140 + 140x = 147 then x = .5\n#### .5"
    (task,) = load_gsm8k(_write(tmp_path, [{"question": "Q?", "answer": answer}]))
    assert task.actions == () and task.meta["unsolved"] == [("x", ".5")]


def test_gold_answer_drops_thousands_commas(tmp_path: Path) -> None:
    (task,) = load_gsm8k(
        _write(tmp_path, [{"question": " Q? ", "answer": "So 1,000 + 1 = <<1000+1=1001>>1,001\n#### 1,001"}])
    )
    assert (task.question, task.answer, task.actions) == ("Q?", "1001", ("R1 = Calculator(1000+1)",))


def test_several_calculations_in_one_step_keep_their_order() -> None:
    _, actions, _ = steps_to_plan(["Q? ** 2+3=<<2+3=5>>5 and 5*4=<<5*4=20>>20, so 20 - 1 = 19 and 19+1=<<19+1=20>>20"])
    assert actions == (
        "R1 = Calculator(2+3)",
        "R2 = Calculator(R1*4)",
        "R3 = Calculator(R2 - 1)",
        "R4 = Calculator(R3+1)",
    )


def _write(tmp_path: Path, rows: list, name: str = "test.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


GOOD = {"question": "Q?", "answer": "Step? ** 1+1=<<1+1=2>>2\n#### 2"}


@pytest.mark.parametrize(
    ("row", "field", "problem"),
    [
        ({"answer": "#### 2"}, "question", "missing"),
        ({"question": 3, "answer": "#### 2"}, "question", "expected str, got int"),
        ({"question": "Q?", "answer": None}, "answer", "expected str, got null"),
        ({"question": "Q?", "answer": "1+1=2"}, "answer", "no '#### <final answer>' line"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path: Path, row: dict, field: str, problem: str) -> None:
    path = _write(tmp_path, [GOOD, "", row])
    with pytest.raises(DataError) as info:
        load_gsm8k(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 3, field)
    assert str(path) in str(info.value) and "line 3" in str(info.value) and field in str(info.value)
    assert problem in str(info.value)


def test_bad_json_names_line(tmp_path: Path) -> None:
    path = _write(tmp_path, [GOOD, '{"question": '])
    with pytest.raises(DataError, match=r"line 2: invalid JSON"):
        load_gsm8k(path)
    path = _write(tmp_path, ["[1, 2]"])
    with pytest.raises(DataError, match=r"line 1: expected a JSON object, got list"):
        load_gsm8k(path)


def test_hostile_solution_text_is_converted_promptly() -> None:
    """Deep brackets once exhausted the recursion limit; `x x ... = 2 = 2` took minutes (quadratic regex)."""
    steps = ["(" * 3000 + "1" + ")" * 3000 + " = 1", "x " * 5000 + "= 2 " * 100, "1+" * 3000 + "1 = 3001"]
    started = time.monotonic()
    for step in steps:
        steps_to_plan([step])
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    "solution",
    ["2+2 = " + "4" * 5000, "2x = 4, so x = " + "2" * 5000, "x = <<" + "2" * 5000 + "=" + "2" * 5000 + ">>"],
)
def test_numbers_past_the_int_string_limit_are_not_calculations(tmp_path: Path, solution: str) -> None:
    """Python refuses int() of over 4,300 digits with a ValueError; such a number agrees with nothing."""
    path = _write(tmp_path, [json.dumps({"question": "Q?", "answer": f"{solution}\n#### 4"})])
    (task,) = load_gsm8k(path)
    assert task.answer == "4"


def test_write_jsonl_replaces_atomically(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    write_jsonl(path, [{"a": 1}])

    def failing():
        yield {"a": 2}
        raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        write_jsonl(path, failing())
    assert list(read_jsonl(path)) == [(1, {"a": 1})]
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_split_in_id_is_shared_by_plain_and_socratic_files(tmp_path: Path) -> None:
    socratic = load_gsm8k(_write(tmp_path, [GOOD], "test_socratic.jsonl"))
    assert socratic[0].id == "gsm8k-test-1" and socratic[0].meta["source"] == "test_socratic.jsonl"


@needs_data
def test_real_socratic_test_file() -> None:
    tasks = load_gsm8k(DATA / "test_socratic.jsonl")
    assert len(tasks) == 1319
    first = tasks[0]
    assert first.id == "gsm8k-test-1" and first.family == "maths" and first.dataset == "gsm8k"
    assert first.subgoals == ("How many eggs does Janet sell?", "How much does Janet make at the farmers' market?")
    assert first.actions == ("R1 = Calculator(16-3-4)", "R2 = Calculator(R1*2)")
    assert first.answer == "18"
    assert all(t.subgoals and t.answer for t in tasks)
    tools = [[parse_action(action).tool for action in task.actions] for task in tasks]
    assert {tool for names in tools for tool in names} == {"Calculator", "SetEquation", "SolveEquation"}
    for names in tools:  # every SolveEquation solves the SetEquation just before it
        assert all(names[i - 1] == "SetEquation" for i, tool in enumerate(names) if tool == "SolveEquation")
        assert all(names[i + 1 : i + 2] == ["SolveEquation"] for i, tool in enumerate(names) if tool == "SetEquation")
    by_id = {t.id: t for t in tasks}
    assert by_id["gsm8k-test-14"].actions[2:] == ("R3 = SetEquation(2/3 * x = R2)", "R4 = SolveEquation(R3)")


@needs_data
def test_real_plain_files_match_socratic_questions_and_answers() -> None:
    plain = load_gsm8k(DATA / "test.jsonl")
    socratic = load_gsm8k(DATA / "test_socratic.jsonl")
    assert [(t.id, t.question, t.answer) for t in plain] == [(t.id, t.question, t.answer) for t in socratic]
    assert [t.actions for t in plain] == [t.actions for t in socratic]
    assert all("<<" not in s for t in plain for s in t.subgoals)
