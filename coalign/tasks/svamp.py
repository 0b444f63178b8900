"""SVAMP (arkilpatel/SVAMP) as Lumos tasks: the gold equation becomes one Calculator action per operation."""

from __future__ import annotations

from pathlib import Path

from coalign.core.errors import DataError, SkippedRows
from coalign.core.jsonl import convert_json_list, require, require_text
from coalign.formats.answers import svamp_gold_answer
from coalign.tasks import Task
from coalign.tasks.arithmetic import Expression, parse

_VERBS = {"+": "Add {b} to {a}", "-": "Subtract {b} from {a}", "*": "Multiply {a} by {b}", "/": "Divide {a} by {b}"}


def load_svamp(path: str | Path, skipped: SkippedRows | None = None) -> list[Task]:
    """Tasks from `SVAMP.json` (a JSON list of ID, Body, Question, Equation, Answer, Type records).

    SVAMP has no sub-questions, so the subgoals are synthetic: one per Calculator action, worded
    from its operation ("Calculate 8 * 5", "Add 2 to R1"). Errors give the 1-based record index as
    the line; a bad record raises DataError, or is recorded in `skipped` and left out. A file that
    is not a JSON list has no records to skip and always raises.
    """
    seen: dict[str, int] = {}
    return convert_json_list(
        path, "SVAMP records", lambda path, index, record: _task(record, path, index, seen), skipped
    )


def equation_to_plan(tree: Expression) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(subgoals, actions): one Calculator action per operation, innermost first, later ones citing `R#`."""
    subgoals: list[str] = []
    actions: list[str] = []

    def emit(node: Expression) -> str:
        if isinstance(node, str):
            return node
        a, b = emit(node.left), emit(node.right)
        literal = not (a.startswith("R") or b.startswith("R"))
        subgoals.append(f"Calculate {a} {node.op} {b}" if literal else _VERBS[node.op].format(a=a, b=b))
        actions.append(f"R{len(actions) + 1} = Calculator({a} {node.op} {b})")
        return f"R{len(actions)}"

    if isinstance(tree, str):  # a bare number is its own answer; still one action so it is executed
        return (f"Take the given number {tree}",), (f"R1 = Calculator({tree})",)
    emit(tree)
    return tuple(subgoals), tuple(actions)


def _task(record: object, path: Path, index: int, seen: dict[str, int]) -> Task:
    """The record's task; `seen` (ID -> record index) refuses a repeated ID, which would make two tasks one."""
    if not isinstance(record, dict):
        raise DataError(path, index, None, f"expected a JSON object, got {type(record).__name__}", "not an object")
    record_id = require_text(record, "ID", path, index)
    body = require(record, "Body", str, path, index)
    question = require_text(record, "Question", path, index)
    equation = require_text(record, "Equation", path, index)
    answer = require(record, "Answer", (int, float), path, index)
    kind = require(record, "Type", str, path, index)
    try:
        subgoals, actions = equation_to_plan(parse(equation))
    except ValueError as exc:
        shown = equation if len(equation) <= 80 else equation[:80] + "..."  # a long equation would bury the cause
        raise DataError(path, index, "Equation", f"cannot parse {shown!r}: {exc}") from None
    try:
        gold = svamp_gold_answer(answer)  # Agent Lumos's rule, shared with the metrics
    except OverflowError:  # an integer past float range (JSON allows 10**400)
        raise DataError(path, index, "Answer", "number too large (past the float range)") from None
    if seen.setdefault(record_id, index) != index:
        raise DataError(path, index, "ID", f"{record_id!r} repeats record {seen[record_id]}", "duplicate id")
    return Task(
        id=f"svamp-{record_id}",
        family="maths",
        dataset="svamp",
        question=f"{body.strip()} {question.strip()}",
        subgoals=subgoals,
        actions=actions,
        answer=gold,
        meta={"source": path.name, "equation": equation, "type": kind},
    )
