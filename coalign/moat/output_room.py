"""Whether the generation limits leave room for the gold outputs.

A planner capped at `max_new_tokens_plan` tokens cannot write a plan longer than that, however good it is:
the cut plan scores as wrong, and a MOAT round that samples under the cap ranks cut candidates low. How
many tokens a text takes depends on the tokenizer (the shipped bases give every digit its own token), so
the check runs against each agent's own tokenizer, on the texts a perfect agent would write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console

from coalign.formats.lumos import format_actions, format_subgoals
from coalign.formats.lumos_iterative import planner_turn
from coalign.models.load import longest_in_tokens
from coalign.tasks import Task


def gold_outputs(task: Task) -> tuple[list[str], list[str]]:
    """What a perfect planner and grounder generate for `task`, one text per model turn: the plan and the
    action sequence of a onetime task; a planner turn and its actions per subgoal of an iterative one."""
    if task.iterative:
        plans = [planner_turn(i, s) for i, s in enumerate(task.subgoals, start=1)]
        return plans, [format_actions(list(group)) for group in task.action_groups()]
    return [format_subgoals(task.subgoals)], [format_actions(list(task.actions))]


@dataclass(frozen=True)
class Room:
    """For one set and one agent: how many tasks have a gold turn longer than the limit, and the longest."""

    role: str  # "planner" or "grounder"
    limit: int
    tasks_over: int
    longest: int

    def warning(self, name: str, setting: str) -> str | None:
        """A line for the console when some gold turn cannot be generated in full, else None."""
        if not self.tasks_over:
            return None
        some = "1 task has" if self.tasks_over == 1 else f"{self.tasks_over} tasks have"
        return (
            f"{name}: {some} a gold {self.role} turn longer than {setting} = {self.limit} tokens (the longest "
            f"{self.longest}); the {self.role} cannot write it in full. Raise {setting}."
        )


def room(tasks: Sequence[Task], role: str, tokenizer, limit: int) -> Room:
    """How the gold turns of `role` ("planner" or "grounder") fit in `limit` new tokens of `tokenizer`."""
    side = 0 if role == "planner" else 1
    lengths = [longest_in_tokens(tokenizer, gold_outputs(t)[side]) for t in tasks]
    return Room(role, limit, sum(n > limit for n in lengths), max(lengths, default=0))


def check_room(console: Console, name: str, tasks: list[Task], tokenizers: tuple, limits, block: str) -> dict[str, int]:
    """`room` for the planner and the grounder (`tokenizers`, in that order) under the limits of `limits` (the
    `eval` or `moat` settings, named `block`), said on the console when a gold turn does not fit; the number of
    tasks over each agent's limit. An evaluation records that number with its metrics; a MOAT round only warns."""
    over = {}
    for (role, setting), tokenizer in zip((("planner", "plan"), ("grounder", "ground")), tokenizers):
        field = f"max_new_tokens_{setting}"
        fit = room(tasks, role, tokenizer, getattr(limits, field))
        if line := fit.warning(name, f"{block}.{field}"):
            console.print(f"[yellow]{line}[/yellow]")
        over[role] = fit.tasks_over
    return over
