"""Answer metrics on hand-written cases."""

from __future__ import annotations

import pytest

from coalign.metrics import (
    NUMERIC_REL_TOL,
    accuracy,
    gsm8k_gold_answer,
    lumos_exact_match,
    numeric_match,
    svamp_gold_answer,
)


@pytest.mark.parametrize(
    ("pred", "gold", "numeric", "exact"),
    [
        ("24", "24", True, True),
        (" 24 ", "24", True, True),
        ("24", "24.0", True, False),
        ("24.0", "24", True, False),
        ("1,000", "1000", True, False),
        ("1000", "1,000", True, False),
        ("$18", "18", True, False),
        ("18.", "18", True, False),
        ("50%", "50", True, False),
        ("-3", "-3", True, True),
        ("3.333333", "3.3333333333", True, False),
        ("24", "25", False, False),
        ("x = 4", "4", False, False),
        ("four", "4", False, False),
        ("", "0", False, False),
        ("nan", "nan", False, True),
        ("1e3", "1000", False, False),
    ],
)
def test_numeric_and_lumos_matches_on_hand_written_cases(pred: str, gold: str, numeric: bool, exact: bool) -> None:
    assert numeric_match(pred, gold) is numeric
    assert lumos_exact_match(pred, gold) is exact


def test_a_missing_prediction_never_matches() -> None:
    assert numeric_match(None, "24") is False
    assert lumos_exact_match(None, "24") is False


def test_the_tolerance_is_relative_above_one_and_absolute_below() -> None:
    assert NUMERIC_REL_TOL == 1e-4
    assert numeric_match("1000.1", "1000")  # exactly 1e-4 relative: inside
    assert not numeric_match("1000.1001", "1000")
    assert numeric_match("-1000.1", "-1000")
    assert numeric_match("0.0001", "0")  # exactly 1e-4 absolute: inside
    assert not numeric_match("0.00011", "0")
    assert numeric_match("0.50009", "0.5")
    assert not numeric_match("0.5002", "0.5")


def test_numbers_too_long_to_convert_do_not_raise() -> None:
    assert numeric_match("9" * 10_000, "1") is False


def test_accuracy_is_the_fraction_of_true_flags() -> None:
    assert accuracy([True, False, True, True]) == 0.75
    assert accuracy(iter([True, True])) == 1.0
    assert accuracy([]) == 0.0


def test_gsm8k_gold_is_the_text_after_the_marks_without_thousands_commas() -> None:
    field = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 1,234,567"
    assert gsm8k_gold_answer(field) == "1234567"
    assert gsm8k_gold_answer("so 72\n#### 72 ") == "72"
    with pytest.raises(ValueError, match="no '####'"):
        gsm8k_gold_answer("no final answer here")


@pytest.mark.parametrize(("value", "text"), [(8.0, "8"), (2.5, "2.5"), (-3.0, "-3"), (0.1, "0.1"), (12, "12")])
def test_svamp_gold_prints_integral_floats_as_integers(value: float, text: str) -> None:
    assert svamp_gold_answer(value) == text
