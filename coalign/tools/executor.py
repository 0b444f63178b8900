"""Run a grounder's action sequence with a domain's tools and record what each step did.

Model output is the input here, so nothing escapes: malformed text, unknown tools, unset `R#`
references and tool failures are recorded in the `Trace`, step by step, and every step is
attempted so the trace is complete. Like Agent Lumos, a sequence with any failed step has no
answer (it counts as wrong).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from coalign.formats import parse_action, split_actions
from coalign.tools import maths, qa

Tool = Callable[[str], tuple[str, ...]]

DOMAINS: dict[str, dict[str, Tool]] = {"maths": maths.TOOLS, "qa": qa.TOOLS}

MAX_ACTIONS = 64  # actions in one sequence
MAX_INPUT_CHARS = 100_000  # whole sequence, and any argument after `R#` substitution
MAX_VALUE_CHARS = 10_000  # one output value
MAX_ERROR_CHARS = 500  # one recorded error message

_REFERENCE = re.compile(r"\bR\d+\b", re.A)
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?", re.A)


@dataclass
class StepResult:
    """What one action did: its outputs, or why it has none."""

    action: str  # the action text as given
    outputs: dict[str, str]  # "R1" -> value text ({} on error)
    error: str | None


@dataclass
class Trace:
    """A whole run, kept complete for the prediction rows even when a step failed."""

    steps: list[StepResult]
    answer: str | None  # value of the highest-numbered R#, only when every step succeeded
    error: str | None  # the first error (parse or execution), or None

    def to_json(self) -> dict:
        return asdict(self)


def _action_texts(actions: str | Sequence[str]) -> tuple[list[str], str | None]:
    """The action strings, or an error that rejects the whole input before any step runs."""
    if isinstance(actions, str):
        if len(actions) > MAX_INPUT_CHARS:
            return [], f"action sequence too long ({len(actions)} characters, limit {MAX_INPUT_CHARS})"
        texts = split_actions(actions)
    else:
        texts = list(actions)
        if not all(isinstance(text, str) for text in texts):
            return [], "every action must be a string"
        if sum(len(text) for text in texts) > MAX_INPUT_CHARS:
            return [], f"action sequence too long (limit {MAX_INPUT_CHARS} characters)"
    if not texts:
        return [], "empty action sequence"
    if len(texts) > MAX_ACTIONS:
        return [], f"too many actions ({len(texts)}, limit {MAX_ACTIONS})"
    return texts, None


def _operand(value: str) -> str:
    """A number goes in parentheses (`28 - R1` with R1 = -3 reads `28 - (-3)`); any other value (a name, an
    equation, a QA tool's paragraphs or answer) goes in as it is, so `KnowledgeQuery(R3)` reads the name."""
    return f"({value})" if _NUMBER.fullmatch(value) else value


def _substitute(argument: str, values: dict[str, str]) -> str:
    """Replace each `R#` (whole word: R1 never matches inside R12) by its earlier value."""
    references = _REFERENCE.findall(argument)
    missing = sorted({r for r in references if r not in values}, key=lambda r: int(r[1:]))
    if missing:
        raise ValueError(f"{', '.join(missing)} not set by an earlier action")
    size = len(argument) + sum(len(values[r]) + 2 - len(r) for r in references)
    if size > MAX_INPUT_CHARS:
        raise ValueError(f"argument too long after substituting references (limit {MAX_INPUT_CHARS})")
    return _REFERENCE.sub(lambda match: _operand(values[match[0]]), argument)


def _run_step(text: str, values: dict[str, str], tools: dict[str, Tool]) -> StepResult:
    try:
        action = parse_action(text)
        tool = tools.get(action.tool)
        if tool is None:
            raise ValueError(f"unknown tool {action.tool!r}; available: {', '.join(tools)}")
        argument = _substitute(action.argument, values)
    except ValueError as exc:  # FormatError included
        return StepResult(text, {}, str(exc)[:MAX_ERROR_CHARS])
    try:
        results = tool(argument)
    except maths.ToolError as exc:
        return StepResult(text, {}, f"{action.tool}: {exc}"[:MAX_ERROR_CHARS])
    except Exception as exc:  # a tool bug must not lose the trace; KeyboardInterrupt still stops the run
        return StepResult(text, {}, f"{action.tool}: {type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS])
    if len(results) != len(action.outputs):
        problem = f"{action.tool} gave {len(results)} value(s) but the action names {len(action.outputs)} output(s)"
        return StepResult(text, {}, problem)
    if any(len(value) > MAX_VALUE_CHARS for value in results):
        return StepResult(text, {}, f"{action.tool}: result too long (limit {MAX_VALUE_CHARS} characters)")
    return StepResult(text, dict(zip(action.outputs, results)), None)


def execute(actions: str | Sequence[str], domain: str = "maths") -> Trace:
    """Run `R1 = Calculator(28 * 1/7); R2 = Calculator(28 - R1)` (or a list of such actions).

    Raises only for an unknown `domain` (a caller's mistake, not model text).
    """
    if domain not in DOMAINS:
        raise KeyError(f"unknown domain {domain!r}; known: {sorted(DOMAINS)}")
    texts, error = _action_texts(actions)
    if error is not None:
        return Trace(steps=[], answer=None, error=error)
    values: dict[str, str] = {}
    steps = []
    for text in texts:
        step = _run_step(text, values, DOMAINS[domain])
        values.update(step.outputs)
        steps.append(step)
    failed = next(((i, s.error) for i, s in enumerate(steps, start=1) if s.error), None)
    if failed is not None:
        return Trace(steps=steps, answer=None, error=f"step {failed[0]}: {failed[1]}")
    return Trace(steps=steps, answer=values[max(values, key=lambda r: int(r[1:]))], error=None)
