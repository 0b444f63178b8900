"""Answer metrics: Agent Lumos's exact match, a tolerant numeric match, and gold-answer extraction."""

from __future__ import annotations

import re
from collections.abc import Iterable
from fractions import Fraction

NUMERIC_REL_TOL = 1e-4

_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.A)
_THOUSANDS = re.compile(r"(\d),(\d)")


def _as_number(text: str) -> Fraction | None:
    """`$1,000.` -> 1000, `12.5%` -> 12.5 (the percent sign is dropped, not divided out); else None."""
    text = text.strip().removeprefix("$")
    text = _THOUSANDS.sub(r"\1\2", text).rstrip("%").rstrip(".")
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


def accuracy(flags: Iterable[bool]) -> float:
    """Fraction of true flags, in [0, 1]; 0.0 when there are none."""
    values = [bool(flag) for flag in flags]
    return sum(values) / len(values) if values else 0.0


def gsm8k_gold_answer(answer_field: str) -> str:
    """The final answer after GSM8K's `####`, stripped, thousands commas removed (`1,000` -> `1000`)."""
    if "####" not in answer_field:
        raise ValueError(f"GSM8K answer has no '####' final answer: {answer_field[-80:]!r}")
    return _THOUSANDS.sub(r"\1\2", answer_field.rsplit("####", 1)[1].strip())


def svamp_gold_answer(value: float) -> str:
    """SVAMP stores answers as floats: `8.0` -> "8", `2.5` -> "2.5"."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))
