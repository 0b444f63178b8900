"""Run a grounder's action sequence with a domain's tools and record what each step did.

Model output is the input here, so nothing escapes: malformed text, unknown tools, unset `R#`
references, tool failures and tool calls that overrun their time are recorded in the `Trace`, step
by step, and every step is attempted so the trace is complete. Like Agent Lumos, a sequence with
any failed step has no answer (it counts as wrong).
"""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from coalign.formats.lumos import REFERENCE, parse_action, split_actions
from coalign.tools import maths, qa

Tool = Callable[[str], tuple[str, ...]]

DOMAINS: dict[str, dict[str, Tool]] = {"maths": maths.TOOLS, "qa": qa.TOOLS}

MAX_ACTIONS = 64  # actions in one sequence
MAX_INPUT_CHARS = 100_000  # whole sequence, and any argument after `R#` substitution
MAX_VALUE_CHARS = 10_000  # one output value
MAX_ERROR_CHARS = 500  # one recorded error message
ACTION_TIMEOUT_S = 1.0  # wall-clock limit on one tool call, where a timer can enforce it (see `_timed_call`)

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
    references = REFERENCE.findall(argument)
    missing = sorted({r for r in references if r not in values}, key=lambda r: int(r[1:]))
    if missing:
        raise ValueError(f"{', '.join(missing)} not set by an earlier action")
    size = len(argument) + sum(len(values[r]) + 2 - len(r) for r in references)
    if size > MAX_INPUT_CHARS:
        raise ValueError(f"argument too long after substituting references (limit {MAX_INPUT_CHARS})")
    return REFERENCE.sub(lambda match: _operand(values[match[0]]), argument)


class _ActionTimeout(BaseException):
    """Raised into a tool call that overran. Not an Exception, so a tool's own `except Exception` cannot
    swallow it."""


def _alarm_is_free() -> bool:
    """Whether SIGALRM can time a call: POSIX, the main thread (the only one Python runs signal handlers
    in), no real-time interval timer of someone else's running, and a handler we can put back."""
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        and signal.getsignal(signal.SIGALRM) is not None
    )


def _timed_call(tool: Tool, argument: str, timeout_s: float) -> tuple[str, ...]:
    """`tool(argument)`, stopped with `_ActionTimeout` after `timeout_s` seconds of wall-clock time.

    The stop is a SIGALRM from `setitimer`, whose handler raises in the tool's Python code; the previous
    handler is put back and the timer cleared afterwards, and KeyboardInterrupt passes through. Its limits:
    - When SIGALRM is not free (`_alarm_is_free`: a worker thread, Windows, another timer running) the
      call runs untimed and the size limits alone bound it; they are set so that every tool ends in well
      under a second on any input they admit (`tests/tools/test_executor.py`).
    - Handlers run between bytecodes, so one long C call (a big-integer operation, a regex match)
      finishes before the stop; hence the size limits, and no backtracking patterns over model text.
    - The tool is stopped wherever it is: the bundled tools hold no state that could be left
      half-updated, and a backend with state must tolerate an exception at any point.
    A subprocess per call would lift these limits, but starting one took 23 ms here against a median
    action of 45 us (65,769 gold actions of the bundled suites; the slowest took 35 ms); the timer
    adds about 6 us.
    """
    if not _alarm_is_free():
        return tool(argument)
    armed = [True]

    def on_alarm(signum: int, frame: object) -> None:
        if armed[0]:  # an alarm that lands after the call has returned is ignored
            raise _ActionTimeout

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            return tool(argument)
        finally:
            armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)


def _run_step(text: str, values: dict[str, str], tools: dict[str, Tool], timeout_s: float) -> StepResult:
    try:
        action = parse_action(text)
        tool = tools.get(action.tool)
        if tool is None:
            raise ValueError(f"unknown tool {action.tool!r}; available: {', '.join(tools)}")
        argument = _substitute(action.argument, values)
    except ValueError as exc:  # FormatError included
        return StepResult(text, {}, str(exc)[:MAX_ERROR_CHARS])
    try:
        results = _timed_call(tool, argument, timeout_s)
    except _ActionTimeout:
        return StepResult(text, {}, f"{action.tool}: timed out after {timeout_s} s")
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


def execute(actions: str | Sequence[str], domain: str = "maths", timeout_s: float | None = None) -> Trace:
    """Run `R1 = Calculator(28 * 1/7); R2 = Calculator(28 - R1)` (or a list of such actions).

    Each tool call may take `timeout_s` seconds (default `ACTION_TIMEOUT_S`, read at each call, so a
    slower backend such as a remote QA reader can raise it); one that overruns is a recorded error.
    Raises only for an unknown `domain` or a `timeout_s` <= 0 (a caller's mistakes, not model text).
    """
    if domain not in DOMAINS:
        raise KeyError(f"unknown domain {domain!r}; known: {sorted(DOMAINS)}")
    timeout_s = ACTION_TIMEOUT_S if timeout_s is None else timeout_s
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    texts, error = _action_texts(actions)
    if error is not None:
        return Trace(steps=[], answer=None, error=error)
    values: dict[str, str] = {}
    steps = []
    for text in texts:
        step = _run_step(text, values, DOMAINS[domain], timeout_s)
        values.update(step.outputs)
        steps.append(step)
    failed = next(((i, s.error) for i, s in enumerate(steps, start=1) if s.error), None)
    if failed is not None:
        return Trace(steps=steps, answer=None, error=f"step {failed[0]}: {failed[1]}")
    return Trace(steps=steps, answer=values[max(values, key=lambda r: int(r[1:]))], error=None)
