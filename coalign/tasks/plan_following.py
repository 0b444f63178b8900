"""Plan-following examples: grounder training rows whose task text cannot give the actions away.

A grounder trained only on (task, gold subgoals) -> gold actions can learn each task
template's action pattern from the task text and ignore the subgoals; given a task of a new
structure it then fails even when the subgoals spell every action out. Pairing a task's
subgoals and actions with another training task's text breaks that shortcut: in such a row the
actions can be read only from the subgoals. Only tasks whose subgoals spell out what their actions
take from the task text qualify (maths: every number; QA: every entity looked up), so every row stays
solvable from its subgoals alone. The borrowed text is another task of the same family, so a row's
tool list and task text still belong together.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace

from coalign.tasks import Task

_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")  # a literal, not the 1 of R1
_LOOKUP = re.compile(r"\bKnowledgeQuery\((?P<query>[^)]*)\)")
_REFERENCE = re.compile(r"R\d+")


def _numbers_written(subgoals: str, actions: str) -> bool:
    return set(_NUMBER.findall(actions)) <= set(_NUMBER.findall(subgoals))


def _lookups_named(subgoals: str, actions: str) -> bool:
    names = {m["query"].strip() for m in _LOOKUP.finditer(actions)}
    return all(name in subgoals for name in names if not _REFERENCE.fullmatch(name))


# Per family: do the subgoals hold what the actions would otherwise copy from the task text?
_READABLE: dict[str, Callable[[str, str], bool]] = {"maths": _numbers_written, "qa": _lookups_named}


def readable_from_subgoals(task: Task) -> bool:
    """True when the subgoals spell out what the actions take from the task text: every literal number
    (maths), every entity a KnowledgeQuery looks up (QA); never for a family without such a rule."""
    rule = _READABLE.get(task.family)
    return bool(task.subgoals) and rule is not None and rule(" ".join(task.subgoals), " ".join(task.actions))


def plan_following(tasks: list[Task], share: float, seed: int = 0) -> list[Task]:
    """For `share` of the qualifying tasks, a copy whose task text is another task's of the same family
    (ids end in `-pf`); none for a family with fewer than two distinct task texts."""
    if not 0 <= share <= 1:
        raise ValueError(f"share must be in [0, 1], got {share}")
    rng = random.Random(f"plan-following/{seed}")
    pools: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        pools[task.family].append(task)
    borrowable = {family for family, pool in pools.items() if len({t.question for t in pool}) >= 2}
    out = []
    for task in tasks:
        if task.family in borrowable and readable_from_subgoals(task) and rng.random() < share:
            pool = pools[task.family]
            other = rng.choice(pool)
            while other.question == task.question:
                other = rng.choice(pool)
            out.append(replace(task, id=f"{task.id}-pf", question=other.question))
    return out
