"""The offline maths tools: exact arithmetic, equations, and refusals with clear messages."""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from coalign.tools import maths
from coalign.tools.maths import (
    ToolError,
    calculator,
    code,
    comparison,
    count,
    define,
    format_number,
    set_equation,
    solve_equation,
    solve_inequality,
)


@pytest.mark.parametrize(
    ("formula", "value"),
    [
        ("2 + 3 * 4", "14"),
        ("(2 + 3) * 4", "20"),
        ("20 - 4 - 3", "13"),
        ("48 / 2 / 3", "8"),
        ("28 * 1/7", "4"),
        ("-3 + 5", "2"),
        ("2 * -3", "-6"),
        ("--3", "3"),
        ("-2^2", "-4"),
        ("(-2)^2", "4"),
        ("2^10", "1024"),
        ("2**10", "1024"),
        ("2^3^2", "512"),
        ("2^-1", "0.5"),
        ("50%", "0.5"),
        ("20% * 150", "30"),
        ("1,000 + 1", "1001"),
        ("1,234,567 * 2", "2469134"),
        ("$5 * 3", "15"),
        ("$1,200 / 4", "300"),
        ("2(3 + 4)", "14"),
        ("0.1 + 0.2", "0.3"),
        (".5 * 10", "5"),
        ("(1/3) * 3 - 1", "0"),
    ],
)
def test_calculator_arithmetic_follows_precedence_and_notation(formula: str, value: str) -> None:
    assert calculator(formula) == (value,)


@pytest.mark.parametrize(
    ("formula", "value"),
    [
        ("10 / 3", "3.333333"),
        ("2 / 3", "0.666667"),
        ("-2 / 3", "-0.666667"),
        ("1 / 8", "0.125"),
        ("-1 / 8", "-0.125"),
        ("1 / 3000000", "0"),
        ("1 / 2000000", "0.000001"),
        ("8^(1/3)", "2"),
        ("(-8)^(1/3)", "-2"),
        ("(4/9)^(1/2)", "0.666667"),
        ("2^(1/2)", "1.414214"),
    ],
)
def test_calculator_divisions_are_exact_then_rounded_to_six_places(formula: str, value: str) -> None:
    assert calculator(formula) == (value,)


def test_format_number_rounds_half_away_from_zero_and_strips_zeros() -> None:
    assert format_number(sp.Rational(1, 2_000_000)) == "0.000001"
    assert format_number(sp.Rational(-1, 2_000_000)) == "-0.000001"
    assert format_number(sp.Rational(5, 2)) == "2.5"
    assert format_number(sp.Integer(-24)) == "-24"


@pytest.mark.parametrize(
    ("formula", "message"),
    [
        ("__import__('os')", "unexpected character '_'"),
        ("sqrt(4)", "function calls"),
        ("1 / 0", "division by zero"),
        ("1 / (2 - 2)", "division by zero"),
        ("0^-1", "division by zero"),
        ("x + 1", "unknown name(s): x"),
        ("2 +", "end of text"),
        ("(1 + 2", "')'"),
        ("7 % 3", "'3'"),
        ("1 = 1", "not an equation"),
        ("(-8)^(1/2)", "not a real number"),
        ("2^1001", "exponent 1001 is too large"),
        ("10^999 * 10^999", "number too large"),
        ("99^999", "more than 1000 digits"),
        ("x^y", "exponent must be a number"),
    ],
)
def test_calculator_refuses_with_a_message_that_names_the_problem(formula: str, message: str) -> None:
    with pytest.raises(ToolError) as caught:
        calculator(formula)
    assert message in str(caught.value)


def test_limits_are_enforced_before_work_is_done() -> None:
    with pytest.raises(ToolError, match="argument too long"):
        calculator("1+" * maths.MAX_ARGUMENT_CHARS + "1")
    with pytest.raises(ToolError, match="parentheses nested too deeply"):
        calculator("(" * (maths.MAX_DEPTH + 1) + "1" + ")" * (maths.MAX_DEPTH + 1))
    with pytest.raises(ToolError, match="nested too deeply"):
        calculator("1^" * (maths.MAX_DEPTH + 1) + "1")
    with pytest.raises(ToolError, match="too many unknowns"):
        set_equation(" + ".join("abcdefg") + " = 1")
    assert calculator("(" * maths.MAX_DEPTH + "7" + ")" * maths.MAX_DEPTH) == ("7",)


@st.composite
def _integer_formulas(draw: st.DrawFn, depth: int = 3) -> tuple[str, Fraction]:
    if depth == 0 or draw(st.booleans()):
        n = draw(st.integers(-50, 50))
        return (f"({n})" if n < 0 else str(n)), Fraction(n)
    (left, a), (right, b) = draw(_integer_formulas(depth - 1)), draw(_integer_formulas(depth - 1))
    op = draw(st.sampled_from("+-*/"))
    if op == "/" and b == 0:
        op = "*"
    value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else a * b}[op]
    return f"({left} {op} {right})", value


@settings(max_examples=150, deadline=None)
@given(_integer_formulas())
def test_calculator_agrees_with_exact_fraction_arithmetic(case: tuple[str, Fraction]) -> None:
    formula, value = case
    assert calculator(formula) == (format_number(sp.Rational(value.numerator, value.denominator)),)


def test_set_equation_prints_text_that_parses_back_to_the_same_equation() -> None:
    (printed,) = set_equation("x/3 + 1/2 = 2x^2 - 1/(x + 1)")
    assert set_equation(printed) == (printed,)
    assert set_equation("x + 3 = 10") == ("x + 3 = 10",)
    assert set_equation("2x + 3") == ("2*x + 3 = 0",)
    assert set_equation("x + y = 10, x - y = 2") == ("x + y = 10; x - y = 2",)


@pytest.mark.parametrize(
    ("equations", "values"),
    [
        ("x + 3 = 10", ("7",)),
        ("3 * x = 10", ("3.333333",)),
        ("120 / x = 4", ("30",)),
        ("x + y = 10, x - y = 2", ("6", "4")),
        ("y - x = 2; y + x = 10", ("4", "6")),
        ("x + y = 10; x - y = 2", ("6", "4")),
        ("a + b + c = 6, a - b = 0, c = 4", ("1", "1", "4")),
        ("x + 1 = 3, 2x = 4", ("2",)),
        ("x^2 = 16", ("4",)),
        ("x^2 = 2", ("1.414214",)),
        ("(x - 1)^2 = 0", ("1",)),
        ("x = 1,000", ("1000",)),
    ],
)
def test_solve_equation_returns_one_value_per_unknown_sorted_by_name(equations: str, values: tuple) -> None:
    assert solve_equation(equations) == values


@pytest.mark.parametrize(
    ("equations", "message"),
    [
        ("x + y = 3", "not enough equations"),
        ("x = 1; x = 2", "no real solution"),
        ("x^2 + 1 = 0", "no real solution"),
        ("x / (x - 1) = 1 / (x - 1)", "no real solution"),
        ("x^2 - 5x + 6 = 0", "several solutions (x = 2 or 3)"),
        ("3 = 3", "no unknown"),
        ("x < 3", "use SolveInequality"),
        ("x * y = 12, x + y = 7", "only linear systems"),
        ("x^5 = 32", "degree 5 is too high to solve"),
        ("10^70 * x^2 = 1", "coefficients too large to solve"),
        ("; ".join(f"x + {i} = y" for i in range(7)), "too many equations"),
    ],
)
def test_solve_equation_refuses_what_it_cannot_answer(equations: str, message: str) -> None:
    with pytest.raises(ToolError) as caught:
        solve_equation(equations)
    assert message in str(caught.value)


def test_set_equation_output_feeds_solve_equation() -> None:
    (equation,) = set_equation("x/4 + 2 = 7")
    assert solve_equation(equation) == ("20",)
    assert solve_equation(set_equation("x + y = 10, x - y = 2")[0]) == ("6", "4")


@pytest.mark.parametrize(
    ("inequality", "solution"),
    [
        ("2x + 1 >= 7", "x >= 3"),
        ("3 - x > 1", "x < 2"),
        ("x^2 < 4", "-2 < x < 2"),
        ("x^2 <= 4", "-2 <= x <= 2"),
        ("(x^2 - 4) / (x - 1) > 0", "-2 < x < 1 or x > 2"),
        ("x^2 + 1 < 0", "no solution"),
        ("x^2 + 1 > 0", "all real numbers"),
        ("x >= x", "all real numbers"),  # the unknown cancels: a constant difference, no polynomial to bound
        ("2*x > 2*x", "no solution"),
        ("x > 1/10000000", "x > 1e-07"),  # rounded to 6 places this bound would read x > 0, another set
        ("x < -3/100000000", "x < -3e-08"),
        ("x^2 < 1/10^16", "-1e-08 < x < 1e-08"),
        ("x > 1/1000000", "x > 0.000001"),  # six places hold it
    ],
)
def test_solve_inequality_prints_readable_intervals(inequality: str, solution: str) -> None:
    assert solve_inequality(inequality) == (solution,)


def test_an_irrational_result_shows_only_the_digits_it_was_computed_to() -> None:
    big = "12345678901234567890123456789012345678901234567890123456789"  # 59 digits: a 30-digit root
    root = "111111110611111109936111105819"  # its first 30 significant digits, rounded; no binary tail after them
    assert calculator(f"{big} ** 0.5") == (root,)
    assert solve_inequality(f"x^2 >= {big}") == (f"x <= -{root} or x >= {root}",)
    assert calculator("2 ** 0.5") == ("1.414214",)


def test_solve_inequality_needs_one_inequality_in_one_unknown() -> None:
    with pytest.raises(ToolError, match="one inequality"):
        solve_inequality("x = 3")
    with pytest.raises(ToolError, match="exactly one unknown"):
        solve_inequality("x < y")


@pytest.mark.parametrize(
    ("items", "n"), [("[1, 2, 3]", "3"), ("apples, pears,, plums", "3"), ("one", "1"), ("", "0"), ("[]", "0")]
)
def test_count_counts_non_empty_comma_separated_items(items: str, n: str) -> None:
    assert count(items) == (n,)


def test_define_returns_a_formatted_number_or_the_name() -> None:
    assert define("x") == ("x",)
    assert define(" apples ") == ("apples",)
    assert define("5.50") == ("5.5",)
    assert define("1,000") == ("1000",)
    assert define("-3/4") == ("-0.75",)
    with pytest.raises(ToolError, match="one number or one name"):
        define("x + 1")


def test_code_is_refused_and_never_runs() -> None:
    with pytest.raises(ToolError, match=r"Code is not supported \(model text is never executed\)"):
        code("import os; os.system('touch /tmp/pwned')")


def test_the_registry_lists_every_tool_of_the_lumos_preamble() -> None:
    from coalign.formats.lumos import TOOL_PREAMBLES

    for name in maths.TOOLS:
        assert f"'{name}'" in TOOL_PREAMBLES["maths"]
    expected = {"Calculator", "SetEquation", "SolveEquation", "Count", "SolveInequality", "Code", "Define"}
    assert set(maths.TOOLS) == expected


@pytest.mark.parametrize(
    ("text", "holds"),
    [
        ("3 > 2", True),
        ("2 > 3", False),
        ("1,874 < 1,821", False),
        ("(1821) <= (1821)", True),
        ("1/3 = 2/6", True),
        ("0.1 + 0.2 >= 0.3", True),
        ("-5 < -4", True),
        ("2 * 3", None),  # arithmetic, not a comparison
        ("1, 2", None),
    ],
)
def test_comparison_of_numbers(text: str, holds: bool | None) -> None:
    assert comparison(text) is holds


def test_comparison_refuses_unknowns() -> None:
    with pytest.raises(ToolError, match="numbers on both sides; unknown name.*Brennholt"):
        comparison("Brennholt > 3")
