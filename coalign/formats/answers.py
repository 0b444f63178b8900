"""Answer metrics: Agent Lumos's exact match, a tolerant numeric match, the QA rules, and gold-answer extraction."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from fractions import Fraction

NUMERIC_REL_TOL = 1e-4

_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.A)
_THOUSANDS = re.compile(r"(\d),(\d)")
_GROUPED = re.compile(r"[+-]?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]*)?", re.A)  # 1,000 and 12,345.5, never 1,5
_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def _as_number(text: str) -> Fraction | None:
    """`$1,000.` -> 1000, `-$5` -> -5, `12.5%` -> 12.5 (the percent sign is dropped, not divided out); a comma
    that does not group thousands (`1,5`) is no number; else None."""
    text = text.strip()
    sign, text = (text[0], text[1:]) if text[:1] in ("+", "-") else ("", text)
    text = sign + text.removeprefix("$")
    text = text.rstrip(".").rstrip("%")
    if "," in text:
        if not _GROUPED.fullmatch(text):
            return None
        text = text.replace(",", "")
    if not _NUMBER.fullmatch(text):
        return None
    try:
        return Fraction(text)
    except ValueError:  # more digits than Python converts (int_max_str_digits)
        return None


def numeric_match(pred: str | None, gold: str) -> bool:
    """Both parse as numbers and |pred - gold| <= NUMERIC_REL_TOL * max(1, |gold|).

    The tolerance is relative for |gold| >= 1 and absolute (1e-4) below, so a tool's
    6-decimal rounding (`3.333333` for 10/3) matches, while 24 vs 24.01 does not.
    """
    if pred is None:
        return False
    p, g = _as_number(pred), _as_number(gold)
    if p is None or g is None:
        return False
    return abs(p - g) <= Fraction(str(NUMERIC_REL_TOL)) * max(1, abs(g))


def lumos_exact_match(pred: str | None, gold: str) -> bool:
    """Agent Lumos's rule: the tool output string equals the gold answer string (both stripped)."""
    return pred is not None and pred.strip() == gold.strip()


def squad_normalize(text: str) -> str:
    """SQuAD/HotpotQA answer normalisation, in the reference order: lowercase, drop punctuation, drop
    the articles a/an/the, squeeze whitespace (Agent Lumos's HotpotQA `normalize_answer`)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def squad_exact_match(pred: str | None, gold: str) -> bool:
    """HotpotQA exact match: equal after `squad_normalize` (`The Orvel Guild.` matches `orvel guild`)."""
    return pred is not None and squad_normalize(pred) == squad_normalize(gold)


def says_yes(pred: str | None) -> bool:
    """Agent Lumos's StrategyQA reading of an answer: yes when its text contains "yes" in any case.

    A substring test, as in the reference, so "Yes, because ..." is yes and so (a quirk kept for
    comparability) is "eyes"; anything else, including "True" and a missing answer, is no.
    """
    return pred is not None and "yes" in pred.lower()


def strategyqa_match(pred: str | None, gold: bool) -> bool:
    """StrategyQA exact match: the yes/no reading of the prediction equals the gold bool.

    A missing prediction (failed execution) counts wrong whatever the gold, as Lumos skips it.
    """
    return pred is not None and says_yes(pred) == gold


YES_NO_DATASETS = frozenset({"strategyqa", "qa-suite-heldin"})  # scored by Lumos's StrategyQA rule


def answer_correct(pred: str | None, gold: str, family: str, dataset: str) -> bool:
    """Is a task's executed answer right, by its benchmark's rule: numeric match for maths, Lumos's
    yes/no rule for StrategyQA-style data (gold "yes"/"no"), SQuAD exact match for other QA."""
    if family == "maths":
        return numeric_match(pred, gold)
    if family != "qa":
        raise ValueError(f"no answer rule for family {family!r}")
    if dataset in YES_NO_DATASETS:
        return strategyqa_match(pred, gold == "yes")
    return squad_exact_match(pred, gold)


def accuracy(flags: Iterable[bool]) -> float:
    """Fraction of true flags, in [0, 1]; 0.0 when there are none."""
    values = [bool(flag) for flag in flags]
    return sum(values) / len(values) if values else 0.0


def gsm8k_gold_answer(answer_field: str) -> str:
    """The final answer after GSM8K's `####`, stripped, thousands commas removed (`1,000` -> `1000`)."""
    if "####" not in answer_field:
        raise ValueError(f"GSM8K answer has no '####' final answer: {answer_field[-80:]!r}")
    return _THOUSANDS.sub(r"\1\2", answer_field.rsplit("####", 1)[1].strip())


def strategyqa_gold_answer(value: bool) -> str:
    """StrategyQA stores answers as bools; a task's answer text is "yes" or "no" (what `says_yes` reads)."""
    return "yes" if value else "no"


def svamp_gold_answer(value: float) -> str:
    """SVAMP stores answers as floats: `8.0` -> "8", `2.5` -> "2.5"."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))
