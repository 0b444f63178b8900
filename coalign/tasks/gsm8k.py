"""GSM8K (openai/grade-school-math) as Lumos tasks: sub-questions become subgoals, calculations Calculator actions.

The calculations are the `<<expr=value>>` annotations plus the ones the solution writes out
without an annotation (`so the boots cost 99 + 5 = $104`): about 8% of test solutions do their
last step that way, and without it the gold actions would stop short of the answer. Equations
the solution solves by hand (`2/3 * x = 12, ... so x = 18`; 33 test solutions) become
`SetEquation` + `SolveEquation` actions, kept only when the executor gives the value written.

A plain file's subgoals are its solution sentences: "written" as the solution writes them, results
included, or "deferred": each result left to the grounder, so a planner trained on them learns to
say what to compute, not to do the arithmetic (`Natalia sold 48/2 clips in May.`).
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Literal

from coalign.core.errors import DataError, SkippedRows
from coalign.core.jsonl import convert_rows, read_jsonl, require_text
from coalign.formats.answers import gsm8k_gold_answer
from coalign.tasks import Task
from coalign.tasks.arithmetic import Operation, evaluate, parse
from coalign.tools.executor import execute

_ANNOTATION = re.compile(r"<<([^<>]*)>>")
_ANNOTATION_SPLIT = re.compile(r"(<<[^<>]*>>)")
# A whole number token: not part of a longer number or an identifier (`R12`, `1.5`, `.5` are one token each).
_NUMBER = re.compile(r"(?<![\w.])(?:\d+(?:\.\d+)?|\.\d+)(?![\w.])")
_SPACES = re.compile(r"\s+")
SOCRATIC_SEPARATOR = " ** "

# Words after a number (`7 puppies / 20 puppies`): dropped for arithmetic, kept for algebra (`3r + 5w`).
_UNITS = (re.compile(r"(?<=[\d%])(?:\s*[A-Za-z]+(?:/[A-Za-z]+)?){1,3}(?=\s*[-+*/=])"), "")
# Written-out calculations: spellings normalised to plain arithmetic before looking for `expr = number`.
_SPELLINGS = [
    (re.compile("[\u2212\u2013]"), "-"),  # minus sign, en dash
    (re.compile("\u00d7"), "*"),
    (re.compile("\u00f7"), "/"),
    (re.compile(r"(?<=\d),(?=\d{3}(?!\d))"), ""),  # thousands commas
    (re.compile(r"(?:(?<=\$\d)|(?<=\$\d\d)|(?<=\$\d\d\d)) (?=\d{3}(?!\d))"), ""),  # `$400 000`
    (re.compile(r"\bequals\b"), "="),
    (re.compile(r"\bplus\b"), "+"),
    (re.compile(r"\bminus\b"), "-"),
    (re.compile(r"\b(?:multiplied by|times)\b"), "*"),
    (re.compile(r"\bdivided by\b"), "/"),
    (re.compile(r"(?<![\d/.])(\d+) (\d+/\d+)(?![\d/])"), r"(\1 + \2)"),  # mixed numbers `1 1/2`
    (re.compile(r"(?<=/ )(\d+/\d+)(?![\d.])"), r"(\1)"),  # `3 / 1/2` divides by a half
    (re.compile(r"(?<=[\d)%])((?:\s*[A-Za-z]+){0,2})\s*\bx\b\s*(?=[\d($.])"), r"\1 * "),  # `20 x 3`, `5 seconds x 7`
    _UNITS,
    (re.compile(r"(?<=[\d)])\s*(?=\()"), " * "),  # implicit product `2(40+9)`
    (re.compile(r"(?<=\))\s*(?=[\d.])"), " * "),  # `(1/4)24`
]
_LEFT_OF_EQUALS = re.compile(r"[\d.\s+\-*/()$%]*\Z")
# Characters before an `=` searched for its left side. A suffix search tries every start, so over a whole
# hostile line (`x x x ... = 2 = 2`) it is quadratic per `=`: minutes for 10 kB. GSM8K's sides are < 100.
_LEFT_WINDOW = 400
_LEADING_JUNK = re.compile(r"^(?:[\s*/)+]|\.(?!\d))+")  # a sentence's full stop, a dangling operator
_RIGHT_OF_EQUALS = re.compile(r"\s*\$?\s*(?P<value>-?(?:\d+(?:\.\d+)?|\.\d+))%?(?!\s*[-+*/]\s*[\d($.])(?!\s*\(|\s+\d)")

# Hand-worked algebra (`2/3 * x = 12, ... so x = 18`): the same spellings except that words after
# a number stay (`3r + 5w = 42`), and `[...]` groups like `(...)`.
_ALGEBRA_SPELLINGS = [s for s in _SPELLINGS if s is not _UNITS] + [(re.compile(r"\["), "("), (re.compile(r"\]"), ")")]
_LETTER = r"(?<![A-Za-z'])[A-Za-z](?![A-Za-z'\d])"  # a one-letter name, not a letter of a word (`Carver's`)
_ALGEBRA_TEXT = rf"(?:[\d.\s+\-*/()%$]|{_LETTER})*"
_ALGEBRA_LEFT = re.compile(rf"{_ALGEBRA_TEXT}\Z")
_ALGEBRA_RIGHT = re.compile(_ALGEBRA_TEXT)
_NAME = re.compile(_LETTER)
_FULL_STOP = re.compile(r"\.(?!\d)")
_WORD_AFTER_NUMBER = re.compile(r"(?<=[\d.%)])\s+(?=[A-Za-z])")  # `12 a day`: the number ends the expression
_NUMBER_AFTER_WORD = re.compile(r"(?<=[A-Za-z])\s+(?=[\d.(])")  # `a 3x + 2`: the expression starts at `3x`
_EQUALS_AT_END = re.compile(r"=\s*\$?\s*\Z")
_PLAIN_NUMBER = re.compile(r"-?(?:\d+(?:\.\d+)?|\.\d+)")

# Deferred subgoals. A number as prose writes it: thousands commas, a full stop after (`she has 1,200.`).
_WRITTEN_NUMBER = re.compile(r"(?<![\w.,])(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?!\w|[.,]\d)")
_EQUALS = re.compile(r"=|\bequals\b")  # the `=` that `_written_calculations` and `_relations` count
_RESULT_SIGN = re.compile(r"\s*(?P<equals>=|\bequals\b)?\s*[$\u20ac\u00a3]?\s*\Z")  # `48/2 = $<<...>>`
_WRITTEN_RESULT = re.compile(r"\s*[$\u20ac\u00a3]?\s*[-\u2212\u2013]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)%?")  # `= $1,200`
_ANNOTATED_VALUE = re.compile(r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)")  # `<<...>>162.00`: the value written after
_EXPRESSION_END = re.compile(r"[\d)%]\Z")
_EXPRESSION_START = re.compile(r"(?<![\w.])[\d$(.\u20ac\u00a3]")  # where a written calculation may begin
# A middle link of a chain (`3 + 2 * 10 = 3 + 20 = 23`): arithmetic in any of `_SPELLINGS`' spellings, no words.
_CHAIN_LINK = re.compile(
    r"(?:[\d.,\s+\-*/()$%\u20ac\u00a3\u2212\u2013\u00d7\u00f7]|\b(?:x|times|plus|minus|(?:divided|multiplied) by)\b)*"
)
_EXPRESSION_WINDOW = 200  # characters searched for a written expression; GSM8K's are < 100
SubgoalStyle = Literal["written", "deferred"]


def load_gsm8k(path: str | Path, skipped: SkippedRows | None = None, subgoals: SubgoalStyle = "written") -> list[Task]:
    """Tasks from a GSM8K JSONL file (`test_socratic.jsonl`, `test.jsonl`, `train.jsonl`).

    A step `Sub-question? ** solution` gives the sub-question as its subgoal; a plain step (no
    sub-questions in the file) is its own subgoal, with the `<<...>>` annotations removed
    (`subgoals="written"`), or with each result left for the grounder to compute (`"deferred"`,
    `steps_to_plan`).
    The split in the id drops `_socratic`, so one problem has one id in both renderings; the id
    holds the line number, so skipping a bad row (`skipped` given) leaves the other ids as they were.
    A bad row raises DataError naming file, line and field, or is recorded in `skipped`.
    """
    path = Path(path)
    split = path.stem.removesuffix("_socratic")
    return convert_rows(read_jsonl(path, skipped), lambda line, row: _task(row, path, line, split, subgoals), skipped)


def parse_annotation(annotation: str) -> tuple[str, str | None]:
    """`48/2=24` -> ("48/2", "24"); the claimed result is None when there is no `=`."""
    expression, equals, result = annotation.rpartition("=")
    return (expression.strip(), result.strip()) if equals else (annotation.strip(), None)


def reference_results(expression: str, results: list[str | None], numbers: re.Pattern[str] = _NUMBER) -> str:
    """Replace each number equal to an earlier result by that result's `R#` (the most recent one).

    This turns copied intermediate values into references, as in Lumos's grounder data
    (`R2 = Calculator(48 + R1)`); given numbers that differ from every earlier result stay literal.
    `numbers` finds the numbers: plain ones in an expression, `_WRITTEN_NUMBER` in prose.
    """
    values = [_value(result) for result in results]

    def substitute(match: re.Match[str]) -> str:
        value = _value(match[0])
        for index in range(len(values) - 1, -1, -1):
            if values[index] is not None and values[index] == value:
                return f"R{index + 1}"
        return match[0]

    return numbers.sub(substitute, expression)


def written_calculations(text: str) -> list[tuple[str, str]]:
    """(expression, written result) for each `expr = number` in plain text whose expression gives that number.

    Only calculations that check out (exactly, or up to the rounding of the written result) are
    kept, so algebra (`2/3 * x = 12`), unit conversions (`15 gallons = 120 pints`) and typos are skipped.
    """
    return [(expression, result) for _, expression, result in _written_calculations(text)]


def _written_calculations(text: str) -> list[tuple[int, str, str]]:
    """(which `=` of the text, expression, written result) for each calculation that checks out."""
    for pattern, replacement in _SPELLINGS:
        text = pattern.sub(replacement, text)
    found = []
    for ordinal, equals in enumerate(re.finditer("=", text)):
        right = _RIGHT_OF_EQUALS.match(text, equals.end())
        if not right:
            continue
        expression = _left_side(_LEFT_OF_EQUALS, text, equals.start()).replace("$", "").replace("%", "")
        expression = _LEADING_JUNK.sub("", expression).strip()
        while expression.count("(") > expression.count(")") and expression.startswith("("):
            expression = expression[1:].lstrip()
        if _checks_out(expression, right["value"]):
            found.append((ordinal, expression, right["value"]))
    return found


def written_relations(text: str) -> list[tuple[str, str]]:
    """(left, right) for each `=` in plain text with a one-letter unknown on either side.

    `Now we know that 2/3 * x = 12, where x is ...` gives ("2/3 * x", "12"), and `so x = 18` gives
    ("x", "18"). Nothing is checked here: `steps_to_plan` keeps an equation only when solving it
    gives a value the text then writes.
    """
    return [(left, right) for _, left, right in _relations(text)]


def _relations(text: str) -> list[tuple[int, str, str]]:
    for pattern, replacement in _ALGEBRA_SPELLINGS:
        text = pattern.sub(replacement, text)
    found, previous = [], ("", "")
    for ordinal, equals in enumerate(re.finditer("=", text)):
        left = _side(_left_side(_ALGEBRA_LEFT, text, equals.start()), left=True)
        right = _side(_ALGEBRA_RIGHT.match(text, equals.end())[0], left=False)
        if _NAME.fullmatch(previous[0]) and left == previous[1] and _PLAIN_NUMBER.fullmatch(right):
            found.append((ordinal, previous[0], right))  # `X = 168/20% = 840` also says `X = 840`
        elif left and right and (_NAME.search(left) or _NAME.search(right)):
            found.append((ordinal, left, right))
        previous = (left, right)
    return found


def _unknown_before(text: str) -> str | None:
    """The name in text ending `... x = ` (a value in an annotation follows), else None."""
    for pattern, replacement in _ALGEBRA_SPELLINGS:
        text = pattern.sub(replacement, text)
    equals = _EQUALS_AT_END.search(text)
    left = _side(_left_side(_ALGEBRA_LEFT, text, equals.start()), left=True) if equals else ""
    return left if _NAME.fullmatch(left) else None


def _left_side(suffix: re.Pattern[str], text: str, end: int) -> str:
    """The longest match of `suffix` (a pattern ending in `\\Z`) ending at `end`, within `_LEFT_WINDOW` characters."""
    return suffix.search(text[max(0, end - _LEFT_WINDOW) : end])[0]


def _side(text: str, left: bool) -> str:
    """One side of an equation found in prose, cut at sentence ends and stray operators."""
    text = text.replace("$", "")
    if left:
        text = _NUMBER_AFTER_WORD.split(_FULL_STOP.split(text)[-1])[-1]
        text = text.lstrip(" +*/)")
        while text.count("(") > text.count(")") and text.startswith("("):
            text = text[1:].lstrip(" +*/)")
    else:
        text = _WORD_AFTER_NUMBER.split(_FULL_STOP.split(text)[0])[0]
        text = text.rstrip(" +-*/(")
        while text.count(")") > text.count("(") and text.endswith(")"):
            text = text[:-1].rstrip(" +-*/(")
    return _SPACES.sub(" ", text).strip()


def steps_to_plan(
    steps: list[str], subgoals: SubgoalStyle = "written", question: str = ""
) -> tuple[tuple[str, ...], tuple[str, ...], list[tuple[str, str | None, str]]]:
    """(subgoals, actions, calculations as (expression, claimed result, origin)) for solution lines.

    The origin is "annotation" (`<<48/2=24>>`), "text" (`66 + 5 = $71`) or "algebra": an equation
    in one unknown that the solution works by hand (`2/3 * x = 12` ... `x = 18`) becomes
    `SetEquation` + `SolveEquation` (or a `Calculator` when the unknown stands alone on one side
    once earlier unknowns are substituted), emitted where the text writes the unknown's value and
    only when the executor gives that value.

    A plain step's subgoal is the step without its annotations (`subgoals="written"`), or
    (`"deferred"`) the step with each calculation written as its action's expression and no result,
    and earlier results as their `R#`: `Natalia sold 48+24 = <<48+24=72>>72 clips` -> `Natalia sold
    48+R1 clips`. Where the written expression is not the action's (`2 1/2 x 4 = <<2.5*4=10>>10`)
    only the result goes; an annotation with nothing written before it (`She has <<3*4=12>>12`)
    gives its expression in place of the result; a value worked out by algebra (`so x = 18`) goes.
    Numbers the `question` gives stay as written there (`Three $20 bills`, though a result was 20).
    """
    plan, actions, calculations, _ = _plan(steps, subgoals == "deferred", question)
    return plan, actions, calculations


def _plan(
    steps: list[str], deferred: bool = False, question: str = ""
) -> tuple[tuple[str, ...], tuple[str, ...], list[tuple[str, str | None, str]], list[tuple[str, str]]]:
    """`steps_to_plan` plus the values written for unknowns (`x = 18`) that no stated equation gave."""
    given = {_value(number) for number in _WRITTEN_NUMBER.findall(question)}
    subgoals: list[str] = []
    actions: list[str] = []
    calculations: list[tuple[str, str | None, str]] = []
    algebra = _Algebra()
    for step in steps:
        if not step.strip():
            continue
        asked, separator, solution = step.partition(SOCRATIC_SEPARATOR)
        rewrite = deferred and not separator
        edits: list[_Edit] = []  # where the deferred subgoal differs from the step
        parts = _ANNOTATION_SPLIT.split(solution if separator else step)
        end = 0
        for index, part in enumerate(parts):
            start, end = end, end + len(part)  # in `step`, when rewritten (not a socratic step)
            if _ANNOTATION.fullmatch(part):
                computed: str | None = None  # the Calculator's expression; None when equations gave the value
                expression, result = parse_annotation(part[2:-2])
                name = _unknown_before(parts[index - 1]) if index else None
                if (
                    name
                    and result is not None
                    and _PLAIN_NUMBER.fullmatch(expression)
                    and (value := _value(result)) is not None  # None: past Python's int-string limit (4,300 digits)
                    and _value(expression) == value
                ):
                    # `x = <<10=10>>10`: a bare number; the equations stated so far may give it instead
                    if not algebra.read(name, result, len(calculations), actions, calculations):
                        computed = _add_calculation(expression, result, "annotation", actions, calculations)
                        algebra.given(name, len(calculations), result)
                else:
                    computed = _add_calculation(expression, result, "annotation", actions, calculations)
                if rewrite:
                    edits.append(_annotation_edit(step, start, end, expression, computed))
                continue
            written = {ordinal: (expression, result) for ordinal, expression, result in _written_calculations(part)}
            relations = {ordinal: (left, right) for ordinal, left, right in _relations(part)}
            signs = [start + sign.start() for sign in _EQUALS.finditer(part)] if rewrite else []
            for ordinal in sorted(written.keys() | relations.keys()):
                before, computed = len(calculations), None
                if ordinal in written:
                    computed = _add_calculation(*written[ordinal], "text", actions, calculations)
                if ordinal in relations:  # after the calculation: `x = 10 - 6 = 4` says x is its result
                    algebra.read(*relations[ordinal], len(calculations), actions, calculations)
                if rewrite and len(calculations) > before:
                    expression = written[ordinal][0] if ordinal in written else ""
                    edits.append(_result_edit(step, signs[ordinal], expression, computed))
        if separator:
            subgoals.append(asked.strip())
        else:
            subgoals.append(
                _deferred(step, edits, calculations, given) if rewrite else _ANNOTATION.sub("", step).strip()
            )
    return tuple(subgoals), tuple(actions), calculations, algebra.unsolved


_Edit = tuple[int, int, str]  # a deferred subgoal's change to its step: (start, end, replacement)


def _annotation_edit(step: str, start: int, end: int, expression: str, computed: str | None) -> _Edit:
    """The edit for the annotation at step[start:end]: its result goes, and the expression written before it
    becomes the action's (`48+24 = <<48+24=72>>72` -> `48+R1`); with none written, the action's goes in its place."""
    value = _ANNOTATED_VALUE.match(step, end)
    stop = value.end() if value else end
    sign = _RESULT_SIGN.search(step, 0, start)
    if computed is None:  # equations gave the value: `x = <<10=10>>10 games` -> `x games`
        return (sign.start(), stop, "")
    if (written := _written_start(step, sign.start(), expression)) is not None:
        return (written, stop, computed)
    if sign["equals"] and _EXPRESSION_END.search(step, 0, sign.start()):
        return (sign.start(), stop, "")  # written otherwise (`2 1/2 x 4` for `2.5*4`): it stays
    return (start, stop, computed)  # `She has <<3*4=12>>12`, `Total = <<5+3=8>>8`


def _result_edit(step: str, sign: int, expression: str, computed: str | None) -> _Edit:
    """The edit for a calculation written out (`66 + 5 = $71` -> `R1 + 5`) or a value worked out by algebra
    (`x = 18` -> `x`)."""
    result = _WRITTEN_RESULT.match(step, _EQUALS.match(step, sign).end())
    sign = len(step[:sign].rstrip())
    if result is None:  # a result written in a way not read here (`$400 000`): left as it is
        return (sign, sign, "")
    written = _written_start(step, sign, expression) if computed else None
    return (sign, result.end(), "") if written is None else (written, result.end(), computed)


def _written_start(step: str, end: int, expression: str) -> int | None:
    """Where the text before `end` writes `expression` (`$6/burger x 3 burgers` for `6*3`), also as the first
    link of a chain (`3 + 2 * 10 = 3 + 20` for `3+2*10`); None when it does not."""
    floor = max(0, end - _EXPRESSION_WINDOW)
    while True:
        link = step.rfind("=", floor, end) + 1  # the text since the `=` before, if any
        for begin in range(max(link, floor), end):
            if _EXPRESSION_START.match(step, begin) and _writes(step[begin:end], expression):
                return begin
        if not link or not _CHAIN_LINK.fullmatch(step, link, end):
            return None
        end = len(step[: link - 1].rstrip())


def _writes(written: str, expression: str) -> bool:
    """`written` is `expression` in other spellings: the same numbers in the same order, and the same value
    (`(300/3) x 2` for `300/3*2`, `$43.00 + $40` for `43+40`)."""
    written, expression = _plain(written), _plain(expression)
    if written == expression:
        return True
    if [_value(n) for n in _NUMBER.findall(written)] != [_value(n) for n in _NUMBER.findall(expression)]:
        return False  # `43.00 + 40` writes `43+40`
    try:
        return evaluate(parse(written)) == evaluate(parse(expression))
    except (ValueError, ZeroDivisionError):
        return False


def _plain(expression: str) -> str:
    """An expression in `_SPELLINGS`' plain arithmetic, without units, spaces and signs: `$2 x 5 cups` -> `2*5`."""
    expression += "="  # where the expression ends, as in the text: units before it go (`5 cups =`)
    for pattern, replacement in _SPELLINGS:
        expression = pattern.sub(replacement, expression)
    return re.sub(r"[\s$%\u20ac\u00a3]", "", expression)[:-1]


def _deferred(step: str, edits: list[_Edit], calculations: list, given: set[Fraction | None]) -> str:
    """The step with `edits` made, and everywhere else each result that is not a `given` number written as its
    `R#`: an earlier step's, or this step's, also before its calculation (`He eats 32 pieces because 2 x 16 = 32`
    -> `He eats R1 pieces because 2*16`)."""
    results = [None if _value(result) in given else result for _, result, _ in calculations]
    pieces, cursor = [], 0
    for start, end, replacement in sorted(edits):
        if start < cursor:
            continue  # inside the edit before (`x = 120/4 = 30` gives two): that one stands
        pieces += [_referenced_prose(step[cursor:start], results), replacement]
        cursor = end
    pieces.append(_referenced_prose(step[cursor:], results))
    return "".join(pieces).strip()


def _referenced_prose(text: str, results: list[str | None]) -> str:
    return reference_results(_ANNOTATION.sub("", text), results, _WRITTEN_NUMBER)


def _add_calculation(expression: str, result: str | None, origin: str, actions: list[str], calculations: list) -> str:
    """Append the Calculator action; returns its expression (earlier results as `R#`)."""
    expression = _SPACES.sub(" ", expression)  # no-break spaces occur in the source
    referenced = reference_results(expression, [r for _, r, _ in calculations])
    calculations.append((expression, result, origin))
    actions.append(f"R{len(calculations)} = Calculator({referenced})")
    return referenced


class _Algebra:
    """Equations stated so far in a solution, and the unknowns already solved (name -> R# and value)."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, frozenset[str], int]] = []  # equation, unknowns, calculations before it
        self.solved: dict[str, tuple[int, Fraction]] = {}
        self.stated: set[str] = set()
        self.unsolved: list[tuple[str, str]] = []  # (name, written value) that no stated equation gave

    def read(self, left: str, right: str, known: int, actions: list[str], calculations: list) -> bool:
        """Note an equation, or emit actions for a value the text writes (`x = 18`, `2x = 20` once x is known).

        True when the value written is now the last action's: actions were added, or `x = 18` names
        the result just computed.
        """
        for name, value in ((left, right), (right, left)):
            if _NAME.fullmatch(name) and _PLAIN_NUMBER.fullmatch(value):
                return self._solve(name, value, actions, calculations)
        equation = f"{left} = {right}"
        unknowns = frozenset(_NAME.findall(equation))
        if not unknowns:
            return False
        added = False
        if unknowns <= self.solved.keys() and equation not in self.stated:  # `so Carla won 2x = 20 games`
            for expression, value in ((left, right), (right, left)):
                if _PLAIN_NUMBER.fullmatch(value):
                    call = f"Calculator({self._referenced(expression, None, calculations)})"
                    added = self._emit([(call, expression)], value, actions, calculations)
                    break
        self.stated.add(equation)
        self.pending.append((equation, unknowns, known))  # solved unknowns too: `x` may be used again
        return added

    def given(self, name: str, index: int, written: str) -> None:
        """`x = <<10=10>>10` with no equation giving 10: x is R`index` from now on."""
        self._mark(name, index, Fraction(written))

    def _solve(self, name: str, written: str, actions: list[str], calculations: list) -> bool:
        value = _value(written)
        if value is None:  # a number too long for Fraction (hostile or broken row): nothing to solve
            self.unsolved.append((name, written))
            return False
        if calculations and calculations[-1][1] is not None and _value(calculations[-1][1]) == value:
            self._mark(name, len(calculations), value)  # `x = 120/4 = 30`: just computed
            return True
        if name in self.solved and self.solved[name][1] == value:
            return False  # stated again
        for equation, unknowns, known in self.pending:
            if name in unknowns and unknowns - {name} <= self.solved.keys():
                calls = self._solving(equation, name, calculations[:known], len(calculations))
                if self._emit(calls, written, actions, calculations):
                    self._mark(name, len(calculations), value)
                    return True
        self.unsolved.append((name, written))
        return False

    def _emit(self, new: list[tuple[str, str]], written: str, actions: list[str], calculations: list) -> bool:
        """Append (tool call, expression recorded) pairs as actions when the executor's last value is `written`."""
        texts = [f"R{len(calculations) + i} = {call}" for i, (call, _) in enumerate(new, start=1)]
        steps = execute([*actions, *texts]).steps  # none when the sequence is refused (too many actions)
        if not steps or steps[-1].error is not None or not _agrees(next(iter(steps[-1].outputs.values())), written):
            return False
        for number, (text, (_, expression)) in enumerate(zip(texts, new), start=1):
            actions.append(text)
            calculations.append((expression, written if number == len(new) else None, "algebra"))
        return True

    def _mark(self, name: str, index: int, value: Fraction) -> None:
        self.solved[name] = (index, value)
        self.pending = [p for p in self.pending if not p[1] <= self.solved.keys()]

    def _referenced(self, text: str, unknown: str | None, calculations: list) -> str:
        """`text` with solved unknowns (except `unknown`) and numbers equal to earlier results as `R#`."""
        solved = {n: r for n, (r, _) in self.solved.items() if n != unknown}
        text = _NAME.sub(lambda m: f"R{solved[m[0]]}" if m[0] in solved else m[0], text)
        text = re.sub(r"(?<=[\d)])\s*(?=R\d)", " * ", text)  # `5s` with s solved: `5 * R3`
        text = re.sub(r"(R\d+)\s*(?=[\d(])", r"\1 * ", text)
        return reference_results(text, [r for _, r, _ in calculations])

    def _solving(self, equation: str, name: str, calculations: list, before: int) -> list[tuple[str, str]]:
        """Tool calls that solve `equation` for `name` after `before` actions: a Calculator when `name` stands alone."""
        text = self._referenced(equation, name, calculations)
        sides, written = text.split(" = "), equation.split(" = ")
        for alone, other in ((0, 1), (1, 0)):
            if sides[alone] == name and name not in _NAME.findall(sides[other]):
                return [(f"Calculator({sides[other]})", written[other])]
        return [(f"SetEquation({text})", equation), (f"SolveEquation(R{before + 1})", name)]


def _task(row: dict, path: Path, line: int, split: str, style: SubgoalStyle) -> Task:
    question = require_text(row, "question", path, line)
    answer_text = require_text(row, "answer", path, line)
    try:
        gold = gsm8k_gold_answer(answer_text)  # the one gold rule the metrics use too
    except ValueError:
        raise DataError(path, line, "answer", "no '#### <final answer>' line") from None
    steps = answer_text.partition("####")[0].splitlines()
    subgoals, actions, calculations, unsolved = _plan(steps, style == "deferred", question)
    return Task(
        id=f"gsm8k-{split}-{line}",
        family="maths",
        dataset="gsm8k",
        question=question.strip(),
        subgoals=subgoals,
        actions=actions,
        answer=gold,
        meta={"source": path.name, "calculations": calculations, "unsolved": unsolved},
    )


def _value(number: str | None) -> Fraction | None:
    """Exact value of a number as written (`.5`, `3/4`, `1,000`); None when it is not one."""
    if number is None:
        return None
    try:
        return Fraction(number.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def _checks_out(expression: str, written: str) -> bool:
    """True when `expression` is a real operation whose value is `written`, allowing for its decimal rounding."""
    try:
        tree = parse(expression)
        value = evaluate(tree)
    except (ValueError, ZeroDivisionError):
        return False
    return isinstance(tree, Operation) and _agrees(value, written)


def _agrees(value: Fraction | str, written: str) -> bool:
    """`value` (a tool's output text or an exact value) is the number `written`, up to its decimal rounding."""
    value = _value(value) if isinstance(value, str) else value
    target = _value(written)  # None past Python's int-string limit: such a number agrees with nothing
    if value is None or target is None:
        return False
    decimals = len(written.partition(".")[2])
    tolerance = Fraction(1, 2 * 10**decimals) if decimals else 0  # `10/3 = 3.33` is fine, `7/2 = 3` is not
    return abs(value - target) <= tolerance
