"""Plan-following examples: grounder training rows whose task text cannot give the actions away.

A grounder trained only on (task, gold subgoals) -> gold actions can learn each task
template's action pattern from the task text and ignore the subgoals; given a task of a new
structure it then fails even when the subgoals spell every action out. Pairing a task's
subgoals and actions with another training task's text breaks that shortcut: in such a row the
actions can be read only from the subgoals. Only tasks whose subgoals name every number their
actions use qualify, so every row stays solvable from its subgoals alone.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

from coalign.tasks import Task

_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")  # a literal, not the 1 of R1


def readable_from_subgoals(task: Task) -> bool:
    """True when every literal number in the actions is written in the subgoals."""
    in_subgoals = set(_NUMBER.findall(" ".join(task.subgoals)))
    needed = set(_NUMBER.findall(" ".join(task.actions)))
    return bool(task.subgoals) and needed <= in_subgoals


def plan_following(tasks: list[Task], share: float, seed: int = 0) -> list[Task]:
    """For `share` of the qualifying tasks, a copy whose task text is another task's (ids end in `-pf`)."""
    if not 0 <= share <= 1:
        raise ValueError(f"share must be in [0, 1], got {share}")
    rng = random.Random(f"plan-following/{seed}")
    if len({t.question for t in tasks}) < 2:
        return []
    out = []
    for task in tasks:
        if readable_from_subgoals(task) and rng.random() < share:
            other = rng.choice(tasks)
            while other.question == task.question:
                other = rng.choice(tasks)
            out.append(replace(task, id=f"{task.id}-pf", question=other.question))
    return out
