"""Gold execution: the converted gold actions, run by the real executor, must give the gold answers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from coalign.tasks import Task
from coalign.tasks.gold import (
    ALGEBRA,
    NEVER_COMPUTED,
    NO_ANNOTATIONS,
    NOT_LAST,
    ROUNDED,
    SCALED,
    UNPARSEABLE,
    WRONG_ARITHMETIC,
    gold_execution_report,
)
from coalign.tasks.gsm8k import load_gsm8k
from coalign.tasks.svamp import load_svamp

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
needs_data = pytest.mark.skipif(
    not DATA.is_dir(), reason=f"real benchmark files not found at {DATA} (../shared/data beside the checkout)"
)


def _task(
    task_id: str, actions: tuple[str, ...], answer: str, claimed: tuple[str | None, ...] = (), unsolved: tuple = ()
) -> Task:
    meta = {"calculations": [("", c, "annotation") for c in claimed]} if claimed else {}
    if unsolved:
        meta["unsolved"] = list(unsolved)
    return Task(task_id, "maths", "gsm8k", "q", ("s",), actions, answer, meta=meta)


def test_each_miss_gets_its_cause() -> None:
    report = gold_execution_report(
        [
            _task("ok", ("R1 = Calculator(48/2)", "R2 = Calculator(48 + R1)"), "72"),
            _task("ok-rounded", ("R1 = Calculator(10/3)",), "3.3333333"),
            _task("none", (), "5"),
            _task("broken", ("R1 = Calculator(2 +* 3)",), "5"),
            _task("wrong", ("R1 = Calculator(32 - 20)",), "300", claimed=("300",)),
            _task("early", ("R1 = Calculator(2 + 3)", "R2 = Calculator(R1 * 2)"), "5"),
            _task("never", ("R1 = Calculator(2 + 3)",), "7"),
            _task("algebra", ("R1 = Calculator(5 * 2)",), "18", unsolved=(("x", "18"),)),
            _task("algebra-only", (), "18", unsolved=(("y", "4"), ("x", "18"))),
            _task("rounded", ("R1 = Calculator(54 / 8)",), "7"),
            _task("cents", ("R1 = Calculator(2 / 8)",), "25"),
            _task("not-rounded", ("R1 = Calculator(54 / 8)",), "5"),
        ]
    )
    assert (report.total, report.numeric_ok, report.exact_ok) == (12, 2, 1)
    assert [(f.task_id, f.cause) for f in report.failures] == [
        ("none", NO_ANNOTATIONS),
        ("broken", UNPARSEABLE),
        ("wrong", WRONG_ARITHMETIC),
        ("early", NOT_LAST),
        ("never", NEVER_COMPUTED),
        ("algebra", ALGEBRA),
        ("algebra-only", ALGEBRA),
        ("rounded", ROUNDED),
        ("cents", SCALED),
        ("not-rounded", NEVER_COMPUTED),
    ]
    assert "gives 12, the source writes 300" in report.failures[2].detail
    assert "the source writes x = 18" in report.failures[6].detail
    assert "2/12 tasks" in report.summary() and NOT_LAST in report.summary()


@needs_data
def test_gsm8k_gold_actions_reproduce_gold_answers(capsys: pytest.CaptureFixture[str]) -> None:
    report = gold_execution_report(load_gsm8k(DATA / "gsm8k" / "test_socratic.jsonl"))
    with capsys.disabled():
        print(f"\nGSM8K test_socratic: {report.summary()}")
    # Measured 98.79% (1303/1319) once algebra worked by hand became SetEquation/SolveEquation
    # (97.88% before). The 16 misses: 3 rounded in words, 3 cents answers to dollar workings,
    # 10 never computed (slips in the source, a unit change, counting, a step in words).
    assert report.numeric_rate >= 0.98, report.summary()
    assert ALGEBRA not in report.causes(), report.summary()


@needs_data
def test_gsm8k_plain_file_gold_actions_reproduce_gold_answers() -> None:
    report = gold_execution_report(load_gsm8k(DATA / "gsm8k" / "test.jsonl"))
    assert report.numeric_rate >= 0.98, report.summary()


@needs_data
def test_svamp_gold_actions_reproduce_gold_answers(capsys: pytest.CaptureFixture[str]) -> None:
    report = gold_execution_report(load_svamp(DATA / "svamp" / "SVAMP.json"))
    with capsys.disabled():
        print(f"\nSVAMP: {report.summary()}")
    assert report.numeric_rate >= 0.98, report.summary()


def test_qa_gold_is_judged_by_its_answer_rule() -> None:
    from coalign.tasks.qa_suite import generate_qa_suite

    yes_no, named = generate_qa_suite("heldin", 1)[0], generate_qa_suite("heldout", 1)[0]
    flipped = replace(yes_no, answer="no" if yes_no.answer == "yes" else "yes")
    lowered = replace(named, answer=f"the {named.answer.lower()}")  # SQuAD normalisation drops case and articles
    report = gold_execution_report([yes_no, flipped, lowered])
    assert (report.total, report.numeric_ok) == (3, 2) and [f.task_id for f in report.failures] == [flipped.id]
    assert "2/3 tasks (66.67% QA answer match" in report.summary()
