"""Agent Lumos training rows (`{"id", "dataset", "messages"}` JSONL) and their link to Task records.

A task becomes two rows with the same id: a planner row (question -> subgoals) and a grounder row
(question + subgoals -> actions), each one turn pair in the onetime formulation (`task_to_rows`) or
one turn pair per subgoal in the iterative one (`task_to_iterative_rows`, Lumos's web formulation).
`tasks_from_rows` reads a pair of either kind back (a planner row of more than two turns is
iterative), and `load_lumos_tasks` does the same from the two files, naming file, line and field
of any problem. Iterative grounder rows are read when their later turns carry only the subgoal
(web, maths); Lumos's QA rows also list earlier results there and are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from coalign.core.errors import DataError, SkippedRows, keep_or_skip
from coalign.core.jsonl import convert_rows, read_jsonl, require, require_text
from coalign.core.runs import write_jsonl
from coalign.formats.lumos import (
    TOOL_FAMILIES,
    TOOL_PREAMBLES,
    FormatError,
    format_actions,
    format_subgoals,
    grounder_prompt,
    parse_grounder_prompt,
    parse_planner_prompt,
    parse_subgoals,
    planner_prompt,
    split_actions,
)
from coalign.formats.lumos_iterative import parse_grounder_messages, parse_planner_messages
from coalign.tasks import Task
from coalign.tasks.episodes import grounder_conversation, planner_conversation

ROLES = ("user", "assistant")
Parsed = TypeVar("Parsed")


@dataclass(frozen=True)
class LumosRow:
    """One chat example; `messages` are `{"role": "user"|"assistant", "content": str}` turns in order."""

    id: str
    dataset: str
    messages: tuple[dict[str, str], ...]

    def to_json(self) -> dict:
        return {"id": self.id, "dataset": self.dataset, "messages": [dict(m) for m in self.messages]}


def load_lumos_rows(path: str | Path, skipped: SkippedRows | None = None) -> list[LumosRow]:
    """Rows of a Lumos JSONL file; any bad field raises DataError with file, line and field (`messages[1].role`),
    or, when `skipped` is given, the row is recorded there and left out."""
    return [row for _, row in _located_rows(path, skipped)]


def load_lumos_tasks(
    planner_path: str | Path, grounder_path: str | Path, skipped: SkippedRows | None = None
) -> list[Task]:
    """Tasks from a planner-row file and a grounder-row file paired by id, in planner order.

    Every problem raises DataError at the row at fault: a bad row, an id that repeats in its file or
    has no partner in the other, a pair that is not two onetime turns or disagrees. With `skipped`
    it is recorded there instead and the task left out (a repeated id keeps its first row).
    """
    planners = _by_id(_located_rows(planner_path, skipped), planner_path, skipped)
    grounders = _by_id(_located_rows(grounder_path, skipped), grounder_path, skipped)
    for row_id, (line, _) in grounders.items():
        if row_id not in planners:
            problem = f"{row_id!r} has no planner row in {planner_path}"
            keep_or_skip(DataError(grounder_path, line, "id", problem, "unpaired row"), skipped)

    def pair(planner_line: int, planner: LumosRow) -> Task:
        if planner.id not in grounders:
            problem = f"{planner.id!r} has no grounder row in {grounder_path}"
            raise DataError(planner_path, planner_line, "id", problem, "unpaired row")
        grounder_line, grounder = grounders[planner.id]
        try:
            return _task(planner, grounder)
        except _RowProblem as exc:
            at_planner = exc.side == "planner"
            path, line = (planner_path, planner_line) if at_planner else (grounder_path, grounder_line)
            raise DataError(path, line, exc.field, str(exc), "bad pair") from None

    return convert_rows(planners.values(), pair, skipped)


def save_lumos_rows(path: str | Path, rows: Iterable[LumosRow]) -> None:
    """Write rows as JSONL atomically (an interrupted save keeps the previous file)."""
    write_jsonl(path, (row.to_json() for row in rows))


def task_to_rows(task: Task) -> tuple[LumosRow, LumosRow]:
    """(planner row, grounder row) for a task's gold plan, both carrying the task's id and dataset."""
    if not task.subgoals:
        raise ValueError(f"task {task.id!r} has no subgoals; a planner row needs at least one")
    subgoals = format_subgoals(task.subgoals)
    planner = (
        {"role": "user", "content": planner_prompt(task.question)},
        {"role": "assistant", "content": subgoals},
    )
    grounder = (
        {"role": "user", "content": grounder_prompt(task.question, subgoals, domain=task.family)},
        {"role": "assistant", "content": format_actions(task.actions)},
    )
    return LumosRow(task.id, task.dataset, planner), LumosRow(task.id, task.dataset, grounder)


def task_to_iterative_rows(task: Task) -> tuple[LumosRow, LumosRow]:
    """(planner row, grounder row) of a web task's gold plan in Lumos's iterative formulation; the planner
    hears `episodes.gold_feedback` after each subgoal (for the shop, the gold actions are run for it)."""
    if not task.subgoals:
        raise ValueError(f"task {task.id!r} has no subgoals; a planner row needs at least one")
    planner, grounder = planner_conversation(task), grounder_conversation(task)
    return LumosRow(task.id, task.dataset, tuple(planner)), LumosRow(task.id, task.dataset, tuple(grounder))


def tasks_from_rows(planner_rows: Sequence[LumosRow], grounder_rows: Sequence[LumosRow]) -> list[Task]:
    """Tasks from planner and grounder rows paired by id, in planner order; the answer is "" (rows hold none).

    The family is the domain whose tool list the grounder prompt shows. Raises FormatError, naming
    the id, for an unpaired row, a row that is not one onetime turn pair, or a pair that disagrees.
    """
    grounders = {row.id: row for row in grounder_rows}
    missing = sorted(set(grounders) - {row.id for row in planner_rows})
    if missing:
        raise FormatError(f"grounder rows without a planner row: {missing[:5]}")
    tasks = []
    for planner in planner_rows:
        if planner.id not in grounders:
            raise FormatError(f"row {planner.id!r}: no grounder row with this id")
        try:
            tasks.append(_task(planner, grounders[planner.id]))
        except FormatError as exc:
            raise FormatError(f"row {planner.id!r}: {exc}") from None
    return tasks


class _RowProblem(FormatError):
    """A FormatError in one row of a pair: `side` ("planner" or "grounder") and the message field at fault."""

    def __init__(self, side: str, field: str, problem: str):
        super().__init__(problem)
        self.side, self.field = side, field


def _parsed(side: str, field: str, parse: Callable[[Any], Parsed], text: Any) -> Parsed:
    """`parse(text)`, its FormatError located at `side`'s `field`."""
    try:
        return parse(text)
    except FormatError as exc:
        raise _RowProblem(side, field, str(exc)) from None


def _task(planner: LumosRow, grounder: LumosRow) -> Task:
    if len(planner.messages) > 2:
        return _iterative_task(planner, grounder)
    plan_prompt, plan = _turn_pair(planner, "planner")
    ground_prompt, actions = _turn_pair(grounder, "grounder")
    question = _parsed("planner", "messages[0].content", parse_planner_prompt, plan_prompt)
    grounder_question, grounded = _parsed("grounder", "messages[0].content", parse_grounder_prompt, ground_prompt)
    subgoals = _parsed("planner", "messages[1].content", parse_subgoals, plan)
    if (
        grounder_question != question
        or _parsed("grounder", "messages[0].content", parse_subgoals, grounded) != subgoals
    ):
        problem = "planner and grounder rows disagree on the question or the subgoals"
        raise _RowProblem("grounder", "messages[0].content", problem)
    tools = [name for name, preamble in TOOL_PREAMBLES.items() if preamble in ground_prompt]
    if not tools:
        raise _RowProblem("grounder", "messages[0].content", "grounder prompt shows no known tool list")
    return Task(
        id=planner.id,
        family=TOOL_FAMILIES[tools[0]],
        dataset=planner.dataset,
        question=question,
        subgoals=tuple(subgoals),
        actions=tuple(_parsed("grounder", "messages[1].content", split_actions, actions)),
        answer="",
        meta={"tools": tools[0]} if tools[0] != TOOL_FAMILIES[tools[0]] else {},
    )


def _iterative_task(planner: LumosRow, grounder: LumosRow) -> Task:
    """A task from an iterative pair: the subgoals the planner wrote, each grounded by one grounder turn."""
    plan = _parsed("planner", "messages", parse_planner_messages, planner.messages)
    ground = _parsed("grounder", "messages", parse_grounder_messages, grounder.messages)
    if (ground.task, ground.subgoals) != (plan.task, plan.subgoals):
        raise _RowProblem("grounder", "messages", "planner and grounder rows disagree on the question or the subgoals")
    family = TOOL_FAMILIES[ground.tools]
    counts = [len(group) for group in ground.actions]
    meta = {"tools": ground.tools} if ground.tools != family else {}
    return Task(
        id=planner.id,
        family=family,
        dataset=planner.dataset,
        question=plan.task,
        subgoals=plan.subgoals,
        actions=tuple(action for group in ground.actions for action in group),
        answer="",
        meta=meta | ({"subgoal_actions": counts} if set(counts) != {1} else {}) | {"feedback": list(plan.feedback)},
    )


def _turn_pair(row: LumosRow, kind: str) -> tuple[str, str]:
    roles = [m["role"] for m in row.messages]
    if roles != list(ROLES):
        problem = f"{kind} row must be one user turn then one assistant turn, got roles {roles}"
        raise _RowProblem(kind, "messages", problem)
    return row.messages[0]["content"], row.messages[1]["content"]


def _located_rows(path: str | Path, skipped: SkippedRows | None) -> list[tuple[int, LumosRow]]:
    return convert_rows(read_jsonl(path, skipped), lambda line, row: (line, _row(row, path, line)), skipped)


def _by_id(
    rows: list[tuple[int, LumosRow]], path: str | Path, skipped: SkippedRows | None
) -> dict[str, tuple[int, LumosRow]]:
    """id -> (line, row); a repeated id is a bad row, since pairing by id could not tell the two apart."""
    found: dict[str, tuple[int, LumosRow]] = {}
    for line, row in rows:
        if row.id in found:
            problem = f"{row.id!r} repeats line {found[row.id][0]}"
            keep_or_skip(DataError(path, line, "id", problem, "duplicate id"), skipped)
        else:
            found[row.id] = (line, row)
    return found


def _row(row: dict, path: str | Path, line: int) -> LumosRow:
    row_id = require_text(row, "id", path, line)
    dataset = require(row, "dataset", str, path, line)
    messages = require(row, "messages", list, path, line)
    if not messages:
        raise DataError(path, line, "messages", "empty; a row needs at least one turn", "empty")
    checked = []
    for index, message in enumerate(messages):
        label = f"messages[{index}]"
        if not isinstance(message, dict):
            raise DataError(path, line, label, f"expected an object, got {type(message).__name__}", "wrong type")
        role = require(message, "role", str, path, line, label=f"{label}.role")
        if role not in ROLES:
            raise DataError(path, line, f"{label}.role", f"expected 'user' or 'assistant', got {role!r}")
        content = require(message, "content", str, path, line, label=f"{label}.content")  # no actions: ""
        checked.append({"role": role, "content": content})
    return LumosRow(row_id, dataset, tuple(checked))
