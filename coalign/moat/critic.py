"""Stage 2's critic: judge a grounder's actions for (task, candidate subgoals) and correct failures.

MOAT keeps `(x, s_k, a_k)` when the grounder's actions reach the answer and `(x, s_k, a_hat)` with
corrected actions when they do not (Algorithm 1). A correction also carries corrected subgoals `s_hat`, which
stage 2 trains on in place of `s_k` when `moat.critic_subgoals` is `corrected` (the paper's A.3 critic writes
both). Three critics share one interface:

- `ExecutionCritic` (default, offline): runs the actions; the correction is the task's gold plan and actions.
- `NoCritic`: the "w/o critic" ablation, every sample is kept as generated.
- `LLMCritic` (onetime tasks only: web turns are judged by `moat.turn_critic`, which refuses it): the
  paper's critic prompt against an LLM (an OpenAI-compatible server such as vLLM,
  or a local transformers model). Its calls are bounded (concurrency, retries, a total budget)
  and counted in `stats`, because at paper scale a round makes |D| x K of them.

Corrections are renumbered (`reindex`) so the grounder always learns `R1, R2, ...` in order, and the corrected
subgoals' references to them with the same renaming.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from coalign.core.endpoint_options import CriticBudget, OpenAIOptions, split_llm_options
from coalign.formats.answers import answer_correct
from coalign.formats.lumos import (
    REFERENCE,
    TOOL_PREAMBLES,
    FormatError,
    format_actions,
    format_subgoals,
    parse_actions,
    parse_subgoals,
)
from coalign.models.endpoint import FAILURE_KINDS, RETRYABLE, CallError, Complete, OpenAIChat, retry_delay
from coalign.tasks import Task
from coalign.tools.executor import execute

if TYPE_CHECKING:
    from coalign.models.agents import Agent


@dataclass(frozen=True)
class CriticInput:
    task: Task
    subgoals: tuple[str, ...]  # the planner's candidate (the SFT input in `original` mode, Algorithm 1)
    actions: str  # the grounder's generated action text


@dataclass(frozen=True)
class Verdict:
    success: bool
    actions: str | None  # text to train on: generated on success, corrected on failure; None = drop
    # The plan the corrected actions ground (a failure only; None when the critic gave none that parse): the SFT
    # input in place of the candidate's when `moat.critic_subgoals` is `corrected`.
    corrected_subgoals: tuple[str, ...] | None = None
    note: str = ""


class Critic(Protocol):
    name: str

    def judge(self, items: Sequence[CriticInput]) -> list[Verdict]: ...


# --------------------------------------------------------------------------- corrections


def renumbering(actions: str) -> Callable[[str], str]:
    """The renaming `reindex` gives `actions`, to apply to them and to text naming their outputs (their subgoals).

    R-variables become R1, R2, ... in order of first appearance in `actions`; a name they never use is left as it
    is. Whole words only (R1 never matches inside R12). The renaming is one-to-one, so references stay
    consistent; note that the executor's answer (highest-numbered R#) is unchanged only when the
    original numbering already increases in order of appearance, as in well-formed sequences.
    """
    mapping: dict[str, str] = {}
    for match in REFERENCE.finditer(actions):
        mapping.setdefault(match[0], f"R{len(mapping) + 1}")
    return lambda text: REFERENCE.sub(lambda match: mapping.get(match[0], match[0]), text)


def reindex(actions: str) -> str:
    """Rename R-variables to R1, R2, ... in order of first appearance, references included (`renumbering`)."""
    return renumbering(actions)(actions)


def gold_actions(task: Task) -> str | None:
    """The task's gold actions as one re-indexed text, or None when the task has none."""
    return reindex(format_actions(task.actions)) if task.actions else None


def gold_subgoals(task: Task) -> tuple[str, ...] | None:
    """The task's gold plan, its references renamed as `gold_actions` renames the actions; None without one."""
    if not task.subgoals:
        return None
    rename = renumbering(format_actions(task.actions))
    return tuple(rename(subgoal) for subgoal in task.subgoals)


def _gold_verdict(task: Task, note: str) -> Verdict:
    """A failure corrected to the gold actions, beside the gold plan they ground (not a critic's own subgoals,
    which were written for other actions)."""
    gold = gold_actions(task)
    if gold is None:
        return Verdict(False, None, note=f"{note}; no gold actions to fall back on")
    return Verdict(False, gold, gold_subgoals(task), note)


# --------------------------------------------------------------------------- simple critics


class ExecutionCritic:
    """Ground truth by execution: success when the actions' answer is right by the task's benchmark rule.

    A failure is corrected with the whole gold action text, renumbered, and the gold plan as its corrected
    subgoals: nothing maps actions to a candidate's subgoals, so QA's three actions per fact and a candidate
    with fewer or more subgoals than the gold plan are handled alike (the recipe pairs the candidate's own
    subgoals with them in `original` mode, Algorithm 1).
    """

    name = "execution"

    def judge(self, items: Sequence[CriticInput]) -> list[Verdict]:
        return [self._judge_one(item) for item in items]

    @staticmethod
    def _judge_one(item: CriticInput) -> Verdict:
        trace = execute(item.actions, item.task.family)
        if trace.error is not None:
            return _gold_verdict(item.task, f"execution failed: {trace.error}"[:300])
        if not answer_correct(trace.answer, item.task.answer, item.task.family, item.task.dataset):
            return _gold_verdict(item.task, "wrong answer")
        return Verdict(True, item.actions, note="correct answer")


class NoCritic:
    """The "w/o critic" ablation: every generated sample is trusted as it is."""

    name = "none"

    def judge(self, items: Sequence[CriticInput]) -> list[Verdict]:
        return [Verdict(True, item.actions, note="not judged") for item in items]


# --------------------------------------------------------------------------- LLM critic: prompt and parsing


REACHED = "Final answer reached"


def critic_prompt(item: CriticInput) -> str:
    """The paper's critic prompt (A.3) in substance, with the task family's tool list."""
    task = item.task
    if task.family not in TOOL_PREAMBLES:
        raise KeyError(f"no tool list for family {task.family!r}; known: {sorted(TOOL_PREAMBLES)}")
    reference = gold_actions(task) or "(none)"
    return (
        "You check the work of an agent that solves problems by calling tools.\n"
        "Below are a problem, a possibly incomplete series of subgoals, and the actions written for "
        "those subgoals. Judge whether the subgoals and their actions reach the final answer of the "
        "problem. Every action must use the available action list:\n"
        f"{TOOL_PREAMBLES[task.family]}"
        "Reference actions that solve the problem are given for comparison; correct work need not "
        "resemble them.\n\n"
        f"Problem: {task.question.strip()}\n"
        f"Subgoals: {format_subgoals(item.subgoals) or '(none)'}\n"
        f"Actions: {item.actions.strip() or '(none)'}\n"
        f"Reference actions: {reference}\n\n"
        f'If the actions reach the final answer, output exactly "{REACHED}".\n'
        "Otherwise output exactly two lines, which need not resemble the given ones:\n"
        "Corrected Subgoals: Subgoal 1: ...; Subgoal 2: ...\n"
        "Corrected Actions: R1 = Tool(...); R2 = Tool(...)"
    )


_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S | re.I)
_THINK_CLOSE = re.compile(r"\A.*</think>", re.S | re.I)
# A field line, tolerating markdown around the label (`**Corrected Actions:**`, `- `, `1. `, `> `).
# Markup is never removed from values: `**` is also a power operator inside actions.
_FIELD = re.compile(
    r"^[\s>#*_`+\-\d.)]*Corrected\s+(?P<field>Subgoals|Actions)[\s*_`]*:[\s*_]*(?P<value>.*)$", re.M | re.I
)
_MARKUP = re.compile(r"[*_`#>]+")
# Inside one parsed subgoal: the next field's label, or a subgoal head `parse_subgoals` could not split off.
_RUN_ON = re.compile(r"Corrected\s+(?:Subgoals|Actions)[\s*_`]*:|\bSubgoal\s+\d+\s*:", re.I)
_WORD = re.compile(r"\w")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _strip_reasoning(text: str) -> str:
    """Drop `<think>` blocks (an unclosed one runs to the end) and reasoning before a lone `</think>`.

    Reasoning models' templates often open `<think>` in the prompt, so only the close appears.
    """
    return _THINK_CLOSE.sub("", _THINK_BLOCK.sub("", text))


def _unwrap(value: str) -> str:
    """Remove one pair of wrappers a model may add around a value: backticks, the prompt's <>, quotes."""
    value = value.strip()
    for left, right in (("`", "`"), ("<", ">"), ('"', '"'), ("'", "'")):
        if len(value) >= 2 and value.startswith(left) and value.endswith(right):
            value = value[1:-1].strip()
    return value


def _field_value(lines: list[str], index: int, value: str) -> str:
    """A field's value: the rest of its line, or the next line with text (past a code fence)."""
    if not _MARKUP.sub("", value).strip():
        value = next((line for line in lines[index + 1 :] if _MARKUP.sub("", line).strip()), "")
    return _unwrap(value)


def _says_reached(body: str) -> bool:
    """A sentence of the reply is the verdict itself, "Final answer reached" (markup, quotes and a closing
    `.` or `!` aside): not a question about it ("Final answer reached? No.") nor a negation ("No final
    answer reached")."""
    sentences = (s for line in body.splitlines() for s in _SENTENCE_END.split(line))
    return any(
        " ".join(_MARKUP.sub(" ", s).split()).strip("\"'").rstrip(".!").lower() == REACHED.lower() for s in sentences
    )


def _corrected_subgoals(value: str) -> tuple[str, ...] | None:
    """A reply's corrected subgoals (text, only ever parsed), or None unless each has content of its own: an empty
    subgoal, the prompt's `...` placeholder echoed back, a dangling `Subgoal 2:` or a line running on into the
    next field (`Subgoal 1: Add; Corrected Actions: R1 = ...`) is no plan."""
    try:
        subgoals = tuple(parse_subgoals(value))
    except FormatError:
        return None
    return None if any(not _WORD.search(s) or _RUN_ON.search(s) for s in subgoals) else subgoals


def parse_verdict(text: str) -> tuple[str, tuple[str, ...] | None, str | None]:
    """(kind, corrected subgoals, corrected actions) from a critic's reply.

    kind is "reached", "corrected" (subgoals and/or actions may still be None when their line is
    missing or malformed, `_corrected_subgoals`) or "unparseable". A `Corrected Actions:` line wins over a stray
    "final answer reached" in the chatter, because a correction is the more specific claim.
    """
    body = _strip_reasoning(text)
    lines = body.splitlines()
    fields: dict[str, str] = {}
    for index, line in enumerate(lines):
        match = _FIELD.match(line)
        if match and match["field"].lower() not in fields:
            fields[match["field"].lower()] = _field_value(lines, index, match["value"])
    actions = fields.get("actions") or None
    subgoals = _corrected_subgoals(fields["subgoals"]) if fields.get("subgoals") else None
    if actions is not None:
        return "corrected", subgoals, actions
    if _says_reached(body):
        return "reached", None, None
    if "subgoals" in fields:
        return "corrected", subgoals, None
    return "unparseable", None, None


def transformers_backend(agent: Agent, max_new_tokens: int = 256) -> Complete:
    """Greedy completion with a local model; use it with max_concurrency=1 (one model, one stream)."""
    from coalign.models.agents import generate  # torch loads only when a local critic is asked for

    def complete(prompt: str) -> str:
        return generate(agent, [prompt], max_new_tokens, batch_size=1, desc="critic")[0][0]

    return complete


# --------------------------------------------------------------------------- LLM critic


class LLMCritic:
    """The paper's critic: an LLM judges each sample and writes corrections.

    `budget.max_calls` caps the calls (retries included) over this critic's lifetime, `max_seconds` the
    time from its first `judge` (a call in flight then runs to its own timeout; back-off sleeps
    stop at the deadline); items left when either is spent get `actions=None` ("critic budget
    exhausted" / "critic time budget exhausted"), as do items whose calls failed: without a
    judgement the sample can be neither trusted nor corrected. `stats` is cumulative: calls,
    retries, failures by kind (every failed call, plus unparseable replies), and the items left
    unjudged by each budget (budget_exhausted: calls, time_exhausted: seconds).

    A correction's subgoals are the reply's `Corrected Subgoals` line, renumbered with its actions; a reply
    whose actions parse but whose plan does not gives None (the recipe keeps the candidate's), and one
    corrected to the gold actions (no actions, or none that parse) gets the gold plan with them.
    """

    name = "llm"

    def __init__(self, complete: Complete, budget: CriticBudget = CriticBudget()):
        self.complete, self.budget = complete, budget
        self.stats: dict = {
            "calls": 0,
            "retries": 0,
            "failures": dict.fromkeys(FAILURE_KINDS, 0),
            "budget_exhausted": 0,
            "time_exhausted": 0,
        }
        self._lock = threading.Lock()
        self._deadline: float | None = None

    def __repr__(self) -> str:
        return f"LLMCritic(complete={self.complete!r}, budget={self.budget!r})"

    def judge(self, items: Sequence[CriticInput]) -> list[Verdict]:
        if not items:
            return []
        if self._deadline is None and self.budget.max_seconds is not None:
            self._deadline = time.monotonic() + self.budget.max_seconds
        with ThreadPoolExecutor(max_workers=min(self.budget.max_concurrency, len(items))) as pool:
            return list(pool.map(self._judge_one, items))

    def _judge_one(self, item: CriticInput) -> Verdict:
        reply = self._call(critic_prompt(item))
        if isinstance(reply, Verdict):
            return reply
        kind, subgoals, actions = parse_verdict(reply)
        if kind == "reached":
            return Verdict(True, item.actions, note="critic: final answer reached")
        if kind == "unparseable":
            self._count_failure("unparseable")
            return _gold_verdict(item.task, "unparseable verdict")
        if actions is None:
            return _gold_verdict(item.task, "critic gave no corrected actions; gold used")
        try:
            formatted = format_actions(parse_actions(actions))
        except FormatError:
            return _gold_verdict(item.task, "critic's corrected actions do not parse; gold used")
        rename = renumbering(formatted)
        subgoals = tuple(map(rename, subgoals)) if subgoals else None
        return Verdict(False, rename(formatted), subgoals, "critic: corrected")

    def _call(self, prompt: str) -> str | Verdict:
        """The reply text, or the verdict for an item the critic could not judge."""
        failure = Verdict(False, None, note="critic call failed")
        for attempt in range(self.budget.max_retries + 1):
            refusal = self._take_call()
            if refusal is not None:
                return Verdict(False, None, note=refusal)
            try:
                return self.complete(prompt)
            except CallError as exc:
                self._count_failure(exc.kind)
                failure = Verdict(False, None, note=f"{exc.detail} after {attempt + 1} tries")
                if exc.kind not in RETRYABLE or attempt == self.budget.max_retries:
                    break
                with self._lock:
                    self.stats["retries"] += 1
                time.sleep(min(retry_delay(self.budget, attempt, exc.retry_after_s), self._time_left()))
        return failure

    def _take_call(self) -> str | None:
        """Count a call and return None, or, when a budget is spent, return the note saying which."""
        with self._lock:
            if self._time_left() <= 0:
                self.stats["time_exhausted"] += 1
                return "critic time budget exhausted"
            if self.budget.max_calls is not None and self.stats["calls"] >= self.budget.max_calls:
                self.stats["budget_exhausted"] += 1
                return "critic budget exhausted"
            self.stats["calls"] += 1
            return None

    def _time_left(self) -> float:
        return math.inf if self._deadline is None else self._deadline - time.monotonic()

    def _count_failure(self, kind: str) -> None:
        with self._lock:
            self.stats["failures"][kind] += 1


def verdict_counts(verdicts: Sequence[Verdict]) -> dict[str, int]:
    """The critic stage's record: how many judged, kept as generated (successes), corrected, dropped
    (nothing to train on: a failed call, a spent budget, no gold), and usable = the examples stage 2 gets."""
    usable = sum(bool(v.actions) for v in verdicts)
    return {
        "judged": len(verdicts),
        "successes": sum(v.success for v in verdicts),
        "corrected": sum(bool(v.actions) and not v.success for v in verdicts),
        "dropped": len(verdicts) - usable,
        "usable": usable,
    }


# --------------------------------------------------------------------------- factory


def make_critic(name: str, **kwargs) -> Critic:
    """A critic by its config name: execution, none or llm.

    For llm, `backend` (openai, the default, or transformers) takes the options it names
    (`endpoint_options.BACKEND_OPTIONS`: base_url, model, ... or agent, max_new_tokens) and the rest are
    the critic's `CriticBudget`.
    """
    if name == "execution":
        return ExecutionCritic(**kwargs)
    if name == "none":
        return NoCritic(**kwargs)
    if name == "llm":
        backend, backend_options, budget = split_llm_options(kwargs)
        if backend == "transformers":
            budget.setdefault("max_concurrency", 1)
        if backend == "openai":
            complete = OpenAIChat(OpenAIOptions(**backend_options))
        else:
            complete = transformers_backend(**backend_options)
        return LLMCritic(complete, CriticBudget(**budget))
    raise ValueError(f"unknown critic {name!r}; known: execution, none, llm")
