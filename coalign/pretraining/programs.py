"""Small arithmetic programs, and the many ways text can spell them out.

A program is a list of steps; each applies one operation to numbers or to earlier results. The corpus
renders the same program as an instruction list, as calls in one of several syntaxes, as a story with a
worked solution: so a model learns that an operand in an instruction is the operand in the call, whatever
the wording or the syntax around it. Short operation phrases ("Add 9 to 4", "Multiply 7 by 3") are plain
English that the maths suite's explicit subgoals use too; no suite question or subgoal template appears
(the contamination check, `leakage.py`, measures that on every corpus).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from coalign.pretraining.words import number

OPS = ("+", "-", "*", "/")


@dataclass(frozen=True)
class Step:
    op: str
    left: int | str  # a number, or the name of an earlier result ("#1" for step 1's)
    right: int | str


def run(steps: list[Step]) -> list[int]:
    """Each step's result."""
    values: list[int] = []

    def value(x: int | str) -> int:
        return values[int(x[1:]) - 1] if isinstance(x, str) else x

    for s in steps:
        a, b = value(s.left), value(s.right)
        values.append({"+": a + b, "-": a - b, "*": a * b, "/": a // b if b else 0}[s.op])
    return values


def program(rng: random.Random, length: int) -> list[Step]:
    """`length` steps with whole, non-negative results; each later step usually uses an earlier result."""
    steps: list[Step] = []
    values: list[int] = []
    for i in range(length):
        ref = f"#{rng.randint(1, i)}" if i and rng.random() < 0.8 else None
        left_value = values[int(ref[1:]) - 1] if ref else number(rng)
        op = rng.choice(OPS)
        if op == "-" and left_value < 2:
            op = "+"
        if op == "/":
            divisors = [d for d in range(2, 13) if left_value % d == 0]
            if not divisors:
                op = "*"
        right: int | str = (
            rng.choice(divisors)
            if op == "/"
            else rng.randint(1, left_value - 1)
            if op == "-"
            else rng.randint(2, 12)
            if op == "*"
            else number(rng)
        )
        if op == "+" and i > 1 and rng.random() < 0.3:
            right = f"#{rng.randint(1, i)}"
        step = Step(op, ref or left_value, right)
        steps.append(step)
        values = run(steps)
    return steps


INSTRUCTIONS = {
    "+": (
        "Add {b} to {a}",
        "Compute {a} plus {b}",
        "Sum {a} and {b}",
        "Increase {a} by {b}",
        "Find the total of {a} and {b}",
        "What is {a} + {b}?",
        "Put {b} together with {a}",
    ),
    "-": (
        "Subtract {b} from {a}",
        "Compute {a} minus {b}",
        "Decrease {a} by {b}",
        "Take {b} off {a}",
        "Find the difference between {a} and {b}",
        "What is {a} - {b}?",
        "Remove {b} from {a}",
    ),
    "*": (
        "Multiply {a} by {b}",
        "Compute {a} times {b}",
        "Find the product of {a} and {b}",
        "Scale {a} by a factor of {b}",
        "What is {a} * {b}?",
        "Take {b} groups of {a}",
    ),
    "/": (
        "Divide {a} by {b}",
        "Compute {a} over {b}",
        "Split {a} into {b} equal parts",
        "Find the quotient of {a} and {b}",
        "What is {a} / {b}?",
        "Share {a} among {b}",
    ),
}
REFERENCES = (
    ("the result of step {i}", "r{i}"),
    ("R{i}", "R{i}"),
    ("result {i}", "res{i}"),
    ("${i}", "${i}"),
    ("the value from step {i}", "v{i}"),
    ("out{i}", "out{i}"),
)
FUNCTION_NAMES = {
    "+": ("add", "plus", "sum"),
    "-": ("sub", "minus", "subtract"),
    "*": ("mul", "times", "multiply"),
    "/": ("div", "over", "divide"),
}


@dataclass(frozen=True)
class Spelling:
    """One way of writing a program: how results are named in words and in code, and the call syntax."""

    ref_words: str
    ref_code: str
    syntax: str
    tool: str
    fn_index: int


SYNTAXES = ("assign_tool", "assign_infix", "function", "json", "lisp", "arrow", "let")


def spelling(rng: random.Random) -> Spelling:
    words, code = rng.choice(REFERENCES)
    tool = rng.choice(("Calculator", "Calc", "compute", "Math.eval", "arith", "evaluate"))
    return Spelling(words, code, rng.choice(SYNTAXES), tool, rng.randrange(3))


def instruction(rng: random.Random, step: Step, how: Spelling) -> str:
    def words(x: int | str) -> str:
        return how.ref_words.format(i=x[1:]) if isinstance(x, str) else str(x)

    return rng.choice(INSTRUCTIONS[step.op]).format(a=words(step.left), b=words(step.right))


def call(step: Step, index: int, how: Spelling) -> str:
    """Step `index` (from 1) as code in the spelling's syntax."""

    def code(x: int | str) -> str:
        return how.ref_code.format(i=x[1:]) if isinstance(x, str) else str(x)

    out, a, b = how.ref_code.format(i=index), code(step.left), code(step.right)
    fn = FUNCTION_NAMES[step.op][how.fn_index]
    return {
        "assign_tool": f"{out} = {how.tool}({a} {step.op} {b})",
        "assign_infix": f"{out} = {a} {step.op} {b}",
        "function": f"{out} = {fn}({a}, {b})",
        "json": f'{{"id": "{out}", "op": "{fn}", "args": [{a_json(a)}, {a_json(b)}]}}',
        "lisp": f"(define {out} ({step.op} {a} {b}))",
        "arrow": f"{a} {step.op} {b} -> {out}",
        "let": f"let {out} = {fn}({a}, {b});",
    }[how.syntax]


def a_json(x: str) -> str:
    return x if x.isdigit() else f'"{x}"'
