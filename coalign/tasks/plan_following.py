"""Plan-following examples: grounder training rows whose task text cannot give the actions away.

A grounder trained only on (task, gold subgoals) -> gold actions can learn each task
template's action pattern from the task text and ignore the subgoals; given a task of a new
structure it then fails even when the subgoals spell every action out. Pairing a task's
subgoals and actions with another training task's text breaks that shortcut: in such a row the
actions can be read only from the subgoals. Only tasks whose subgoals spell out what their actions
take from the task text qualify (maths: every number; QA: every entity looked up), so every row stays
solvable from its subgoals alone. The borrowed text is another task of the same family, so a row's
tool list and task text still belong together.

Composed plans go one step further: the copies still show each template's steps in their order, so a
grounder can write the template's next step instead of the subgoal's; a composed plan chains such steps of
different tasks in new orders (`plan_compositions`).
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

from coalign.formats.lumos import REFERENCE, FormatError, parse_action
from coalign.tasks import Task
from coalign.tools.executor import execute

_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")  # a literal, not the 1 of R1
_LOOKUP = re.compile(r"\bKnowledgeQuery\((?P<query>[^)]*)\)")
_RESULT_NAME = re.compile(r"R\d+")


def _numbers_written(subgoals: str, actions: str) -> bool:
    return set(_NUMBER.findall(actions)) <= set(_NUMBER.findall(subgoals))


def _lookups_named(subgoals: str, actions: str) -> bool:
    names = {m["query"].strip() for m in _LOOKUP.finditer(actions)}
    return all(name in subgoals for name in names if not _RESULT_NAME.fullmatch(name))


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


# --------------------------------------------------------------------------- composed plans


@dataclass(frozen=True)
class Step:
    """One readable (subgoal, action) of a training task, its references in order of first use."""

    subgoal: str
    tool: str
    argument: str
    references: tuple[str, ...]
    style: str


def readable_steps(task: Task) -> list[Step]:
    """The steps of `task` that a grounder can ground from their own subgoal alone: one action of one output
    each (none for a task with several actions per subgoal, as QA's), every literal (or looked-up entity) in
    the subgoal, and the subgoal naming exactly the results it uses."""
    rule = _READABLE.get(task.family)
    if rule is None or len(task.subgoals) != len(task.actions):
        return []
    styles = task.subgoal_styles or ("",) * len(task.subgoals)
    steps = []
    for subgoal, text, style in zip(task.subgoals, task.actions, styles):
        try:
            action = parse_action(text)
        except FormatError:
            return []
        references = tuple(dict.fromkeys(REFERENCE.findall(action.argument)))
        if len(action.outputs) == 1 and rule(subgoal, text) and set(REFERENCE.findall(subgoal)) == set(references):
            steps.append(Step(subgoal, action.tool, action.argument, references, style))
    return steps


def _renamed(text: str, names: dict[str, str]) -> str:
    return REFERENCE.sub(lambda m: names.get(m[0], m[0]), text)


def _compose(fitting: list[list[Step]], length: int, rng: random.Random) -> tuple[list[str], ...] | None:
    """A plan of `length` steps, step j drawn from `fitting[j - 1]` (the steps using at most j - 1 results):
    a step's first reference becomes R(j-1), the result just made, and any others distinct earlier results;
    a step with none may stand anywhere (a second chain, as where two quantities are worked out and then
    compared)."""
    subgoals, actions, styles = [], [], []
    for j in range(1, length + 1):
        pool = fitting[min(j, len(fitting)) - 1]
        if not pool:
            return None
        step = rng.choice(pool)
        earlier = [f"R{i}" for i in range(1, j - 1)]
        targets = [f"R{j - 1}", *rng.sample(earlier, len(step.references) - 1)] if step.references else []
        names = dict(zip(step.references, targets))
        subgoals.append(_renamed(step.subgoal, names))
        actions.append(f"R{j} = {step.tool}({_renamed(step.argument, names)})")
        styles.append(step.style)
    return subgoals, actions, styles


def plan_compositions(tasks: list[Task], share: float, seed: int = 0) -> list[Task]:
    """About `share` x len(tasks) grounder rows whose plans chain readable steps of different training tasks
    in new orders, each row with another task's text and its actions run to an answer.

    A grounder trained only on the training plans learns which step follows which in each template and, on a
    task of a new structure, writes the template's next action instead of the subgoal's. In a composed row no
    template predicts the next step: only its subgoal does. Rows whose actions do not run (a division by
    zero, a lookup of nothing) are left out. Lengths follow the qualifying tasks' plans; ids end in `-pc`."""
    if not 0 <= share <= 4:
        raise ValueError(f"share must be in [0, 4], got {share}")
    rng = random.Random(f"plan-compositions/{seed}")
    steps: dict[str, list[Step]] = defaultdict(list)
    lengths: dict[str, list[int]] = defaultdict(list)
    texts: dict[str, list[str]] = defaultdict(list)
    for task in tasks:
        texts[task.family].append(task.question)
        if readable_from_subgoals(task) and (readable := readable_steps(task)):
            steps[task.family] += readable
            lengths[task.family].append(len(task.subgoals))
    out: list[Task] = []
    for family, pool in sorted(steps.items()):
        if len(set(texts[family])) < 2:
            continue
        most = max(len(s.references) for s in pool)
        fitting = [[s for s in pool if len(s.references) <= uses] for uses in range(most + 1)]
        wanted, made = round(share * len(texts[family])), 0
        for _ in range(4 * wanted):  # a few tries per row: some compositions do not run
            if made == wanted:
                break
            plan = _compose(fitting, rng.choice(lengths[family]), rng)
            if plan is None:
                break
            trace = execute(plan[1], domain=family)
            if trace.error is None:
                made += 1
                out.append(
                    Task(
                        id=f"{family}-composed-{len(out):05d}-pc",
                        family=family,
                        dataset=f"{family}-compositions",
                        question=rng.choice(texts[family]),
                        subgoals=tuple(plan[0]),
                        actions=tuple(plan[1]),
                        answer=trace.answer,
                        subgoal_styles=tuple(plan[2]),
                    )
                )
    return out
