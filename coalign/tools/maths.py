"""Agent Lumos maths tools, run offline on model text without ever executing it.

Model output is hostile input: nothing here calls `eval`/`exec` or sympy's `sympify`/`parse_expr`
(which call `eval`). A small tokenizer and recursive-descent parser turn the argument into
rational functions over QQ (sympy polynomial rings), checking size limits after every step, so
every call ends quickly with a value or a `ToolError`.

Each tool takes the argument text and returns one string per output: `Calculator(10/3)` gives
("3.333333",); `SolveEquation(x + y = 10, x - y = 2)` gives ("6", "4") for unknowns sorted by name.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import NamedTuple

import sympy as sp
from sympy.polys.domains import QQ
from sympy.polys.rings import PolyElement, PolyRing, ring
from sympy.solvers.inequalities import reduce_rational_inequalities

MAX_ARGUMENT_CHARS = 2_000  # longest argument a tool reads
MAX_DEPTH = 64  # deepest nesting of parentheses or of chained powers
MAX_EXPONENT = 1_000  # largest |exponent| of a number
MAX_DIGITS = 1_000  # largest number (numerator or denominator), in decimal digits
MAX_BITS = math.ceil(MAX_DIGITS * math.log2(10))
MAX_UNKNOWNS = 6  # distinct names in one argument
MAX_EQUATIONS = 6  # equations in one SolveEquation
MAX_DEGREE = 8  # total degree of any numerator or denominator polynomial
MAX_TERMS = 64  # monomials in any numerator or denominator polynomial
MAX_SOLVE_DEGREE = 4  # a non-linear equation or an inequality: degree of its polynomials ...
MAX_SOLVE_DIGITS = 60  # ... and digits of their coefficients once denominators are cleared
MAX_SOLVE_BITS = math.ceil(MAX_SOLVE_DIGITS * math.log2(10))
DECIMALS = 6  # a non-integer result is rounded to this many decimal places
APPROX_DIGITS = 30  # significant digits kept for an irrational value

RELATIONS = ("=", "<", "<=", ">", ">=")
_COMPARE = {"<": sp.Lt, "<=": sp.Le, ">": sp.Gt, ">=": sp.Ge}

_TOKEN = re.compile(
    r"""(?P<space>\s+)
    | \$?(?P<number>(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+)
    | (?P<name>[A-Za-z][A-Za-z0-9_]*)
    | (?P<op>\*\*|<=|>=|[-+*/^%()=,;<>])""",
    re.X | re.A,
)


class ToolError(ValueError):
    """A tool could not use its argument; the message says why, for the recorded trace."""


class _Token(NamedTuple):
    kind: str  # "number", "name", "op" or "end"
    text: str
    position: int


Frac = tuple[PolyElement, PolyElement]  # numerator, denominator (constant denominators are folded in)


class _Relation(NamedTuple):
    lhs: Frac
    op: str | None  # one of RELATIONS, or None for a bare expression
    rhs: Frac


# --------------------------------------------------------------------------- numbers


def format_number(value: sp.Rational) -> str:
    """`24` for integers, else a decimal rounded half away from zero to DECIMALS places; a result past
    MAX_DIGITS (a solution can grow where no operand did) is a tool error, never a 4,301-digit str()."""
    p, q = int(value.p), int(value.q)
    if _digits(p, q) > MAX_DIGITS:
        raise ToolError(f"result would have more than {MAX_DIGITS} digits")
    if q == 1:
        return str(p)
    scale = 10**DECIMALS
    scaled = (2 * abs(p) * scale + q) // (2 * q)
    if scaled == 0:
        return "0"
    whole, fraction = divmod(scaled, scale)
    text = f"{whole}.{fraction:0{DECIMALS}d}".rstrip("0").rstrip(".")
    return ("-" if p < 0 else "") + text


def _approximate(value: sp.Expr) -> sp.Rational | None:
    """An exact Rational close to a real algebraic value; None when the value is not real."""
    if value.is_Rational:
        return value
    real, imaginary = value.evalf(APPROX_DIGITS).as_real_imag()
    if abs(imaginary) > sp.Rational(1, 10 ** (APPROX_DIGITS // 2)):
        return None
    return _known_digits(real)


def _known_digits(value: sp.Float) -> sp.Rational:
    """The Rational of `value`'s decimal digits: the Float's own binary value would show digits past its
    precision (`111...819.609375` for a 30-digit square root of a 59-digit integer)."""
    return sp.Rational(str(value))


def _digits(p: int, q: int) -> float:
    """Decimal digits of the larger of |p| and q, as a real number (cheap on huge integers)."""
    return max(math.log10(abs(p)) if p else 0.0, math.log10(q))


def _power_of_numbers(base: sp.Rational, exponent: sp.Rational) -> sp.Rational:
    """base ** exponent, refused before computing when the result would break the limits."""
    if base == 0:
        if exponent < 0:
            raise ToolError("division by zero (0 to a negative power)")
        return sp.Integer(0 if exponent > 0 else 1)
    if abs(exponent) > MAX_EXPONENT:
        raise ToolError(f"exponent {format_number(exponent)} is too large (limit {MAX_EXPONENT})")
    if abs(exponent) * _digits(int(base.p), int(base.q)) > MAX_DIGITS:
        raise ToolError(f"result would have more than {MAX_DIGITS} digits")
    if exponent.q == 1:
        return base ** int(exponent.p)
    a, b = int(exponent.p), int(exponent.q)
    if base < 0 and b % 2 == 0:
        raise ToolError("an even root of a negative number is not a real number")
    sign = -1 if base < 0 and a % 2 else 1
    p_root, p_exact = sp.integer_nthroot(abs(int(base.p)), b)
    q_root, q_exact = sp.integer_nthroot(int(base.q), b)
    if p_exact and q_exact:  # (p/q)^(a/b) is rational only when p/q is a perfect b-th power
        return sign * sp.Rational(p_root, q_root) ** a
    return sign * _known_digits(sp.Pow(abs(base), exponent, evaluate=False).evalf(APPROX_DIGITS))


# --------------------------------------------------------------------------- rational functions


def _total_degree(poly: PolyElement) -> int:
    return max((sum(monom) for monom in poly.itermonoms()), default=0)


def _bounded(num: PolyElement, den: PolyElement) -> Frac:
    """Fold a constant denominator into the numerator, then enforce the size limits."""
    if den.is_ground:
        num, den = num.quo_ground(den.LC), den.ring.one
    for poly in (num, den):
        if len(poly) > MAX_TERMS:
            raise ToolError(f"expression too large (more than {MAX_TERMS} terms)")
        if _total_degree(poly) > MAX_DEGREE:
            raise ToolError(f"degree too high (limit {MAX_DEGREE})")
        for coefficient in poly.itercoeffs():
            if max(int(coefficient.numerator).bit_length(), int(coefficient.denominator).bit_length()) > MAX_BITS:
                raise ToolError(f"number too large (more than {MAX_DIGITS} digits)")
    return num, den


def _add(a: Frac, b: Frac) -> Frac:
    if a[1] == b[1]:
        return _bounded(a[0] + b[0], a[1])
    return _bounded(a[0] * b[1] + b[0] * a[1], a[1] * b[1])


def _negate(a: Frac) -> Frac:
    return -a[0], a[1]


def _multiply(a: Frac, b: Frac) -> Frac:
    return _bounded(a[0] * b[0], a[1] * b[1])


def _divide(a: Frac, b: Frac) -> Frac:
    if not b[0]:
        raise ToolError("division by zero")
    return _bounded(a[0] * b[1], a[1] * b[0])


def _constant(a: Frac) -> sp.Rational | None:
    """The value of an expression without unknowns; None when it has some."""
    num, den = a
    if not (num.is_ground and den.is_ground):
        return None
    return QQ.to_sympy(num.LC) / QQ.to_sympy(den.LC)


def _from_number(ring_: PolyRing, value: sp.Rational) -> Frac:
    return _bounded(ring_(QQ.from_sympy(value)), ring_.one)


def _power(base: Frac, exponent: Frac) -> Frac:
    exponent_value = _constant(exponent)
    if exponent_value is None:
        raise ToolError("an exponent must be a number, not an expression with unknowns")
    base_value = _constant(base)
    if base_value is not None:
        return _from_number(base[0].ring, _power_of_numbers(base_value, exponent_value))
    if exponent_value.q != 1:
        raise ToolError("an unknown can only be raised to a whole-number power")
    n = int(exponent_value.p)
    if abs(n) * max(_total_degree(base[0]), _total_degree(base[1])) > MAX_DEGREE:
        raise ToolError(f"degree too high (limit {MAX_DEGREE})")
    result: Frac = (base[0].ring.one, base[0].ring.one)
    for _ in range(abs(n)):
        result = _multiply(result, base)
    return _bounded(result[1], result[0]) if n < 0 else result


# --------------------------------------------------------------------------- parsing


def _tokenize(text: str) -> list[_Token]:
    """Tokens of `text`; refuses long text, unknown characters and deep parentheses before parsing."""
    if len(text) > MAX_ARGUMENT_CHARS:
        raise ToolError(f"argument too long ({len(text)} characters, limit {MAX_ARGUMENT_CHARS})")
    tokens, position, depth = [], 0, 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise ToolError(f"unexpected character {text[position]!r} at position {position}")
        kind = match.lastgroup
        if kind != "space":
            value = match[kind]
            if kind == "number" and len(value) > MAX_DIGITS:
                raise ToolError(f"number too long (more than {MAX_DIGITS} digits)")
            depth += {"(": 1, ")": -1}.get(value, 0) if kind == "op" else 0
            if depth > MAX_DEPTH:
                raise ToolError(f"parentheses nested too deeply (limit {MAX_DEPTH})")
            tokens.append(_Token(kind, value, match.start(kind)))
        position = match.end()
    tokens.append(_Token("end", "", len(text)))
    return tokens


class _Parser:
    """Recursive descent: relations > sum > product > signed > power > postfix (%) > atom."""

    def __init__(self, tokens: list[_Token], ring_: PolyRing):
        self.tokens, self.ring, self.index, self.depth = tokens, ring_, 0, 0
        self.gens = dict(zip((str(s) for s in ring_.symbols), ring_.gens))

    @property
    def token(self) -> _Token:
        return self.tokens[self.index]

    def _take(self, *texts: str) -> str | None:
        if self.token.kind == "op" and self.token.text in texts:
            self.index += 1
            return self.tokens[self.index - 1].text
        return None

    def _fail(self, expected: str) -> ToolError:
        found = repr(self.token.text) if self.token.kind != "end" else "end of text"
        return ToolError(f"expected {expected} at position {self.token.position}, found {found}")

    def _nested(self, parse: Callable[[], Frac]) -> Frac:
        """Bound the recursion of parentheses and chained powers together."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ToolError(f"expression nested too deeply (limit {MAX_DEPTH})")
        value = parse()
        self.depth -= 1
        return value

    def relations(self) -> list[_Relation]:
        out = [self._relation()]
        while self._take(",", ";"):
            out.append(self._relation())
        if self.token.kind != "end":
            raise self._fail("an operator or the end")
        return out

    def _relation(self) -> _Relation:
        lhs = self._sum()
        op = self._take(*RELATIONS)
        rhs = self._sum() if op else (self.ring.zero, self.ring.one)
        return _Relation(lhs, op, rhs)

    def _sum(self) -> Frac:
        value = self._product()
        while op := self._take("+", "-"):
            term = self._product()
            value = _add(value, term if op == "+" else _negate(term))
        return value

    def _product(self) -> Frac:
        value = self._signed()
        while True:
            if op := self._take("*", "/"):
                factor = self._signed()
                value = _multiply(value, factor) if op == "*" else _divide(value, factor)
            elif self.token.kind == "name" or self.token.text == "(":  # implicit product: 2x, 3(x + 1)
                value = _multiply(value, self._signed())
            else:
                return value

    def _signed(self) -> Frac:
        negative = False
        while op := self._take("+", "-"):  # a loop, not recursion: `------1` stays flat
            negative ^= op == "-"
        value = self._power()
        return _negate(value) if negative else value

    def _power(self) -> Frac:
        base = self._postfix()
        if not self._take("^", "**"):
            return base
        return _power(base, self._nested(self._signed))  # right-associative: 2^3^2 = 2^9

    def _postfix(self) -> Frac:
        value = self._atom()
        while self._take("%"):
            value = _divide(value, _from_number(self.ring, sp.Integer(100)))
        return value

    def _atom(self) -> Frac:
        token = self.token
        if token.kind == "number":
            self.index += 1
            return _from_number(self.ring, _decimal(token.text))
        if token.kind == "name":
            self.index += 1
            if self.token.text == "(":
                raise ToolError(f"function calls like '{token.text}(' are not supported")
            return self.gens[token.text], self.ring.one
        if self._take("("):
            value = self._nested(self._sum)
            if not self._take(")"):
                raise self._fail("')'")
            return value
        raise self._fail("a number, a name or '('")


def _decimal(text: str) -> sp.Rational:
    whole, _, fraction = text.replace(",", "").partition(".")
    return sp.Rational(int(whole or "0") * 10 ** len(fraction) + int(fraction or "0"), 10 ** len(fraction))


def _parse(text: str) -> list[_Relation]:
    """Relations (or bare expressions) separated by ',' or ';', over a ring of the names used."""
    tokens = _tokenize(text)
    names = sorted({t.text for t in tokens if t.kind == "name"})
    if len(names) > MAX_UNKNOWNS:
        raise ToolError(f"too many unknowns ({len(names)}, limit {MAX_UNKNOWNS})")
    ring_ = ring([sp.Symbol(name) for name in names], QQ)[0]
    return _Parser(tokens, ring_).relations()


def _one_expression(text: str, tool: str) -> Frac:
    relations = _parse(text)
    if len(relations) != 1 or relations[0].op is not None:
        raise ToolError(f"{tool} takes one expression, not an equation or a list")
    return relations[0].lhs


def _unknown_names(value: Frac) -> str:
    return ", ".join(str(symbol) for symbol in value[0].ring.symbols)


# --------------------------------------------------------------------------- printing


def _expr(value: Frac) -> sp.Expr:
    return value[0].as_expr() / value[1].as_expr()


def _format_relation(relation: _Relation) -> str:
    """`lhs = rhs` in the syntax `_parse` reads back (sympy's str printer: `**`, `/`, names)."""
    return f"{sp.sstr(_expr(relation.lhs))} {relation.op or '='} {sp.sstr(_expr(relation.rhs))}"


def _format_value(value: sp.Expr) -> str:
    """A bound or solution of an inequality, as `format_number` writes it; a nonzero one that rounds to 0 in
    scientific notation instead (`x > 1e-07`), since `x > 0` would be another set."""
    approx = _approximate(value)
    if approx is None:
        raise ToolError(f"not a real number: {value}")
    text = format_number(approx)
    return f"{float(approx):.{DECIMALS}g}" if text == "0" and approx != 0 else text


def _format_set(name: str, solutions: sp.Set) -> str:
    """`x > 3`, `-2 < x < 1 or x > 2`, `x = 1`: readable pieces joined by ' or '."""
    if solutions is sp.S.EmptySet:
        return "no solution"
    if solutions == sp.S.Reals:
        return "all real numbers"
    pieces = solutions.args if isinstance(solutions, sp.Union) else (solutions,)
    out = []
    for piece in pieces:
        if isinstance(piece, sp.FiniteSet):
            out.extend(f"{name} = {_format_value(v)}" for v in piece)
        elif piece.start == -sp.oo:
            out.append(f"{name} {'<' if piece.right_open else '<='} {_format_value(piece.end)}")
        elif piece.end == sp.oo:
            out.append(f"{name} {'>' if piece.left_open else '>='} {_format_value(piece.start)}")
        else:
            low, high = ("<" if piece.left_open else "<="), ("<" if piece.right_open else "<=")
            out.append(f"{_format_value(piece.start)} {low} {name} {high} {_format_value(piece.end)}")
    return " or ".join(out)


# --------------------------------------------------------------------------- solving


def _difference(relation: _Relation) -> Frac:
    """lhs - rhs, so every relation reads `difference op 0`."""
    return _add(relation.lhs, _negate(relation.rhs))


def _solutions(numerators: list[PolyElement], ring_: PolyRing) -> list[tuple[sp.Expr, ...]]:
    """All solutions of `numerators == 0` (sympy numbers); ToolError when not finitely many."""
    symbols = ring_.symbols
    nonzero = [p for p in numerators if p]
    if any(p.is_ground for p in nonzero):
        return []
    if all(_total_degree(p) <= 1 for p in nonzero):
        solved = sp.linsolve([p.as_expr() for p in nonzero], list(symbols)) if nonzero else None
        if solved is sp.S.EmptySet:
            return []
        if solved is None or any(v.free_symbols for v in next(iter(solved))):
            raise ToolError("not enough equations to fix every unknown")
        return [next(iter(solved))]
    if len(symbols) > 1:
        raise ToolError("only linear systems, or one polynomial equation in one unknown, can be solved")
    common = nonzero[0]
    for p in nonzero[1:]:
        common = common.gcd(p)
    _check_solvable(common)
    return [(root,) for root in sorted(set(sp.Poly(common.as_expr(), symbols[0]).real_roots()))]


def _check_solvable(poly: PolyElement) -> None:
    """Exact real-root isolation is fast only for low degree and modest integer coefficients."""
    if _total_degree(poly) > MAX_SOLVE_DEGREE:
        raise ToolError(f"degree {_total_degree(poly)} is too high to solve (limit {MAX_SOLVE_DEGREE})")
    _, integral = poly.clear_denoms()
    if max((int(c.numerator).bit_length() for c in integral.itercoeffs()), default=0) > MAX_SOLVE_BITS:  # 0: none
        raise ToolError(f"coefficients too large to solve (limit {MAX_SOLVE_DIGITS} digits)")


def _real_solutions(differences: list[Frac], ring_: PolyRing) -> list[tuple[sp.Rational, ...]]:
    """Real solutions, as exact or close Rationals, at which no denominator vanishes."""
    out = []
    tolerance = sp.Rational(1, 10 ** (APPROX_DIGITS // 2))
    for solution in _solutions([d[0] for d in differences], ring_):
        values = tuple(_approximate(v) for v in solution)
        if any(v is None for v in values):
            continue
        point = [QQ.from_sympy(v) for v in values]
        if all(abs(QQ.to_sympy(d[1](*point))) > tolerance for d in differences):
            out.append(values)
    return out


# --------------------------------------------------------------------------- tools


def calculator(argument: str) -> tuple[str]:
    """Calculator(formula): the value of an arithmetic formula."""
    value = _one_expression(argument, "Calculator")
    number = _constant(value)
    if number is None:
        raise ToolError(f"Calculator needs numbers only; unknown name(s): {_unknown_names(value)}")
    return (format_number(number),)


def comparison(argument: str) -> bool | None:
    """Whether one comparison of numbers (`3 > 2`, `1,200 <= 900`, `2 = 2`) holds; None for text that
    compares nothing (plain arithmetic, for `calculator`). Lumos's QA grounder writes `Calculator(R6 > R3)`."""
    relations = _parse(argument)
    if len(relations) != 1 or relations[0].op is None:
        return None
    relation = relations[0]
    left, right = _constant(relation.lhs), _constant(relation.rhs)
    if left is None or right is None:
        unknown = _unknown_names(relation.lhs if left is None else relation.rhs)
        raise ToolError(f"a comparison needs numbers on both sides; unknown name(s): {unknown}")
    holds = {"=": left == right, "<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}
    return bool(holds[relation.op])  # sympy answers <, > with its own true/false


def set_equation(argument: str) -> tuple[str]:
    """SetEquation(equation): the equation(s), normalised, in text SolveEquation reads back."""
    relations = _parse(argument)
    if any(r.op not in (None, "=") for r in relations):
        raise ToolError("SetEquation takes equations; use SolveInequality for inequalities")
    return ("; ".join(_format_relation(r) for r in relations),)


def solve_equation(argument: str) -> tuple[str, ...]:
    """SolveEquation(equations): one value per unknown, unknowns sorted by name.

    Only real solutions count; when several remain, the ones with no negative value are kept
    (word problems count things), and if that still leaves several it is an error.
    """
    relations = _parse(argument)
    if any(r.op not in (None, "=") for r in relations):
        raise ToolError("SolveEquation takes equations; use SolveInequality for inequalities")
    if len(relations) > MAX_EQUATIONS:
        raise ToolError(f"too many equations ({len(relations)}, limit {MAX_EQUATIONS})")
    ring_ = relations[0].lhs[0].ring
    if not ring_.symbols:
        raise ToolError("no unknown to solve for")
    solutions = _real_solutions([_difference(r) for r in relations], ring_)
    if len(solutions) > 1:
        solutions = [s for s in solutions if all(v >= 0 for v in s)] or solutions
    if not solutions:
        raise ToolError("no real solution")
    if len(solutions) > 1:
        shown = " or ".join(", ".join(map(format_number, s)) for s in solutions)
        raise ToolError(f"several solutions ({_unknown_names(relations[0].lhs)} = {shown})")
    return tuple(format_number(v) for v in solutions[0])


def solve_inequality(argument: str) -> tuple[str]:
    """SolveInequality(inequality): the solution set in one unknown, e.g. `x > 3`."""
    relations = _parse(argument)
    if len(relations) != 1 or relations[0].op not in _COMPARE:
        raise ToolError("SolveInequality takes one inequality using <, <=, > or >=")
    relation = relations[0]
    symbols = relation.lhs[0].ring.symbols
    if len(symbols) != 1:
        raise ToolError(f"SolveInequality needs exactly one unknown, got {len(symbols)}")
    difference = _difference(relation)
    for poly in difference:
        _check_solvable(poly)
    inequality = _COMPARE[relation.op](_expr(difference), 0)
    solutions = reduce_rational_inequalities([[inequality]], symbols[0], relational=False)
    return (_format_set(str(symbols[0]), solutions),)


def count(argument: str) -> tuple[str]:
    """Count(list): how many non-empty comma-separated items, brackets around the list ignored."""
    if len(argument) > MAX_ARGUMENT_CHARS:
        raise ToolError(f"argument too long ({len(argument)} characters, limit {MAX_ARGUMENT_CHARS})")
    items = argument.strip()
    if items and items[0] in "[({" and items[-1] in "])}":
        items = items[1:-1]
    return (str(sum(1 for item in items.split(",") if item.strip())),)


def define(argument: str) -> tuple[str]:
    """Define(variable/number): a number comes back formatted, a name as itself."""
    if re.fullmatch(r"\s*[A-Za-z][A-Za-z0-9_]*\s*", argument, re.A):
        return (argument.strip(),)
    number = _constant(_one_expression(argument, "Define"))
    if number is None:
        raise ToolError("Define takes one number or one name")
    return (format_number(number),)


def code(argument: str) -> tuple[str]:
    """Code(pseudo_code): listed by Lumos, refused here so that model text is never run."""
    raise ToolError("Code is not supported (model text is never executed)")


TOOLS: dict[str, Callable[[str], tuple[str, ...]]] = {
    "Calculator": calculator,
    "SetEquation": set_equation,
    "SolveEquation": solve_equation,
    "SolveInequality": solve_inequality,
    "Count": count,
    "Define": define,
    "Code": code,
}
