"""Exact arithmetic on the small `+ - * /` expressions found in maths datasets.

The loaders need it to turn SVAMP equations into step-by-step actions and to check that a
calculation written out in a GSM8K solution really gives the number written after its `=`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

MAX_TOKENS = 200  # dataset expressions have at most ~25; the parser recurses once per bracket or sign
_TOKEN = re.compile(r"\s*(?:(?P<number>\d+(?:\.\d+)?|\.\d+)|(?P<symbol>[-+*/()]))")


@dataclass(frozen=True)
class Operation:
    """A binary operation; operands are number texts (`"8"`, `"-6"`) or nested operations."""

    op: str
    left: "Operation | str"
    right: "Operation | str"


Expression = Operation | str


def parse(text: str) -> Expression:
    """Parse `( ( 8.0 * 5.0 ) + 2.0 )` into a tree with the usual precedence; ValueError if malformed.

    Over MAX_TOKENS tokens is refused too, so a hostile data row cannot exhaust the recursion limit.

    Numbers are kept as written but without a trailing `.0` (see `number_text`).
    """
    tokens = _tokenize(text)
    if len(tokens) > MAX_TOKENS:
        raise ValueError(f"expression of {len(tokens)} tokens; at most {MAX_TOKENS} are parsed")
    tree, position = _sum(tokens, 0)
    if position != len(tokens):
        raise ValueError(f"unexpected {tokens[position]!r} after a complete expression")
    return tree


def evaluate(tree: Expression) -> Fraction:
    """Exact value of a tree; ZeroDivisionError on division by zero."""
    if isinstance(tree, str):
        return Fraction(tree)
    left, right = evaluate(tree.left), evaluate(tree.right)
    if tree.op == "+":
        return left + right
    if tree.op == "-":
        return left - right
    if tree.op == "*":
        return left * right
    return left / right


def number_text(value: str | float | int) -> str:
    """`8.0` -> `8`, `0.50` -> `0.5`: numbers as a person writes them (and Lumos's `str(int(x))` when integral)."""
    number = Decimal(str(value))
    return str(int(number)) if number == number.to_integral_value() else format(number.normalize(), "f")


def _tokenize(text: str) -> list[str]:
    tokens, position = [], 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if not match:
            raise ValueError(f"unexpected character {text[position:].lstrip()[:1]!r}")
        tokens.append(number_text(match["number"]) if match["number"] else match["symbol"])
        position = match.end()
    if not tokens:
        raise ValueError("empty expression")
    return tokens


def _sum(tokens: list[str], position: int) -> tuple[Expression, int]:
    left, position = _product(tokens, position)
    while position < len(tokens) and tokens[position] in {"+", "-"}:
        op = tokens[position]
        right, position = _product(tokens, position + 1)
        left = Operation(op, left, right)
    return left, position


def _product(tokens: list[str], position: int) -> tuple[Expression, int]:
    left, position = _operand(tokens, position)
    while position < len(tokens) and tokens[position] in {"*", "/"}:
        op = tokens[position]
        right, position = _operand(tokens, position + 1)
        left = Operation(op, left, right)
    return left, position


def _operand(tokens: list[str], position: int) -> tuple[Expression, int]:
    if position >= len(tokens):
        raise ValueError("expression ends where a number or '(' was expected")
    token = tokens[position]
    if token in {"+", "-"}:  # sign: `-6 + 3`, `+2`
        inner, position = _operand(tokens, position + 1)
        if token == "+":
            return inner, position
        return (
            f"-{inner}" if isinstance(inner, str) and not inner.startswith("-") else Operation("*", "-1", inner)
        ), position
    if token == "(":
        inner, position = _sum(tokens, position + 1)
        if position >= len(tokens) or tokens[position] != ")":
            raise ValueError("missing ')'")
        return inner, position + 1
    if token in {"*", "/", ")"}:
        raise ValueError(f"unexpected {token!r} where a number or '(' was expected")
    return token, position + 1
