"""Agent Lumos training rows (`{"id", "dataset", "messages"}` JSONL) and their link to Task records.

A task becomes two onetime rows with the same id: a planner row (question -> subgoals) and a
grounder row (question + subgoals -> actions); `tasks_from_rows` reads such a pair back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from coalign.errors import DataError
from coalign.formats import (
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
from coalign.runs import write_jsonl
from coalign.tasks import Task
from coalign.tasks.jsonl import read_jsonl, require

ROLES = ("user", "assistant")


@dataclass(frozen=True)
class LumosRow:
    """One chat example; `messages` are `{"role": "user"|"assistant", "content": str}` turns in order."""

    id: str
    dataset: str
    messages: tuple[dict[str, str], ...]

    def to_json(self) -> dict:
        return {"id": self.id, "dataset": self.dataset, "messages": [dict(m) for m in self.messages]}


def load_lumos_rows(path: str | Path) -> list[LumosRow]:
    """Rows of a Lumos JSONL file; any bad field raises DataError with file, line and field (`messages[1].role`)."""
    return [_row(row, path, line) for line, row in read_jsonl(path)]


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


def _task(planner: LumosRow, grounder: LumosRow) -> Task:
    plan_prompt, plan = _turn_pair(planner, "planner")
    ground_prompt, actions = _turn_pair(grounder, "grounder")
    question = parse_planner_prompt(plan_prompt)
    grounder_question, grounded_subgoals = parse_grounder_prompt(ground_prompt)
    subgoals = parse_subgoals(plan)
    if grounder_question != question or parse_subgoals(grounded_subgoals) != subgoals:
        raise FormatError("planner and grounder rows disagree on the question or the subgoals")
    families = [domain for domain, preamble in TOOL_PREAMBLES.items() if preamble in ground_prompt]
    if not families:
        raise FormatError("grounder prompt shows no known tool list")
    return Task(
        id=planner.id,
        family=families[0],
        dataset=planner.dataset,
        question=question,
        subgoals=tuple(subgoals),
        actions=tuple(split_actions(actions)),
        answer="",
    )


def _turn_pair(row: LumosRow, kind: str) -> tuple[str, str]:
    roles = [m["role"] for m in row.messages]
    if roles != list(ROLES):
        raise FormatError(f"{kind} row must be one user turn then one assistant turn, got roles {roles}")
    return row.messages[0]["content"], row.messages[1]["content"]


def _row(row: dict, path: str | Path, line: int) -> LumosRow:
    row_id = require(row, "id", str, path, line)
    dataset = require(row, "dataset", str, path, line)
    messages = require(row, "messages", list, path, line)
    if not messages:
        raise DataError(path, line, "messages", "empty; a row needs at least one turn")
    checked = []
    for index, message in enumerate(messages):
        label = f"messages[{index}]"
        if not isinstance(message, dict):
            raise DataError(path, line, label, f"expected an object, got {type(message).__name__}")
        role = require(message, "role", str, path, line, label=f"{label}.role")
        if role not in ROLES:
            raise DataError(path, line, f"{label}.role", f"expected 'user' or 'assistant', got {role!r}")
        content = require(message, "content", str, path, line, label=f"{label}.content")
        checked.append({"role": role, "content": content})
    return LumosRow(row_id, dataset, tuple(checked))
