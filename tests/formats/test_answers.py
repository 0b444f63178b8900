"""Answer metrics on hand-written cases."""

from __future__ import annotations

import pytest

from coalign.formats.answers import (
    NUMERIC_REL_TOL,
    accuracy,
    answer_correct,
    gsm8k_gold_answer,
    lumos_exact_match,
    numeric_match,
    says_yes,
    squad_exact_match,
    squad_normalize,
    strategyqa_gold_answer,
    strategyqa_match,
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
        ("-$5", "-5", True, False),
        ("$-5", "-5", True, False),
        ("10%.", "10", True, False),
        ("12,345.5", "12345.5", True, False),
        ("1,5", "15", False, False),
        ("1,5", "1.5", False, False),
        ("1,0000", "10000", False, False),
        ("$$5", "5", False, False),
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


@pytest.mark.parametrize(
    ("pred", "gold", "match"),
    [
        ("Orvel Guild", "the Orvel Guild", True),  # article dropped
        ("An apple", "apple", True),
        ("a", "", True),  # a lone article normalises to nothing
        ("theatre", "atre", False),  # articles only as whole words
        ("BRENNHOLT.", "Brennholt", True),  # case, punctuation
        ("  Kalone   Vastrid ", "Kalone Vastrid", True),  # whitespace squeezed
        ("48,200", "48200", True),  # the comma is punctuation
        ("3,677 seated", "3,677", False),
        ("Greenwich Village, New York City", "Greenwich Village New York City", True),
        ("yes", "no", False),
        ("12.5", "125", True),  # so is the decimal point: the reference's rule, kept
        (None, "yes", False),
    ],
)
def test_squad_exact_match_on_hand_written_cases(pred: str | None, gold: str, match: bool) -> None:
    assert squad_exact_match(pred, gold) is match


def test_squad_normalize_follows_the_reference_order() -> None:
    # punctuation goes before articles: "the-end" becomes the word "theend", which keeps its "the"
    assert squad_normalize("The-end of THE road!") == "theend of road"
    assert squad_normalize("l'a") == "la"  # apostrophe removed, "la" is not an article


@pytest.mark.parametrize(
    ("pred", "reads_yes"),
    [
        ("yes", True),
        ("Yes, because the guild is older.", True),
        ("YES", True),
        ("eyes", True),  # a substring test, as in Agent Lumos's script
        ("no", False),
        ("No, it is not.", False),
        ("True", False),  # only the word yes counts
        ("", False),
        (None, False),
    ],
)
def test_says_yes_is_lumos_strategyqa_rule(pred: str | None, reads_yes: bool) -> None:
    assert says_yes(pred) is reads_yes


def test_strategyqa_match_compares_the_reading_with_the_bool() -> None:
    assert strategyqa_match("Yes, because ...", True) and not strategyqa_match("Yes, because ...", False)
    assert strategyqa_match("no", False) and strategyqa_match("I do not know", False)
    assert not strategyqa_match(None, False)  # a failed run is wrong even when the gold is no
    assert [strategyqa_gold_answer(v) for v in (True, False)] == ["yes", "no"]
    assert strategyqa_match(strategyqa_gold_answer(True), True) and strategyqa_match("no", False)


@pytest.mark.parametrize(
    ("pred", "gold", "family", "dataset", "correct"),
    [
        ("24.0", "24", "maths", "gsm8k", True),  # numeric match
        ("Yes, it is.", "yes", "qa", "strategyqa", True),  # Lumos's yes/no rule
        ("no", "yes", "qa", "qa-suite-heldin", False),
        ("yes", "no", "qa", "qa-suite-heldin", False),
        ("the Orvel Guild", "Orvel Guild", "qa", "qa-suite-heldout", True),  # SQuAD exact match
        ("48,200", "48200", "qa", "hotpotqa", True),
        ("Yes, it is.", "yes", "qa", "hotpotqa", False),  # HotpotQA's yes/no answers are matched exactly
        (None, "no", "qa", "strategyqa", False),
    ],
)
def test_answer_correct_uses_each_benchmark_rule(pred, gold, family, dataset, correct) -> None:
    assert answer_correct(pred, gold, family, dataset) is correct


def test_answer_correct_refuses_a_family_without_a_rule() -> None:
    with pytest.raises(ValueError, match="no answer rule for family 'web'"):
        answer_correct("CLICK", "CLICK", "web", "mind2web")
