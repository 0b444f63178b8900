"""What a round works on, one planner output per unit: MOAT samples, scores, grounds and judges units, and
the Lumos baseline's matched rounds train on their gold outputs (so both recipes count the same budget).

A onetime task (maths, QA) is one unit: the planner's output is its whole plan, the grounder's its whole
action sequence (Algorithm 1 as the paper writes it). An iterative task (the web family, Lumos's iterative
formulation) gives one unit per planner turn `t` of its gold conversation, as the authors' release samples
the web task: the planner's output is its next turn given the gold prefix (subgoals 1..t-1, each followed by
its gold feedback), and the grounder's is the actions of turn t given its own gold prefix (the gold actions
of turns 1..t-1) and the candidate's subgoal. The stop turn that ends a gold planner conversation has no
gold actions to score a candidate by, so it is no unit.

`round_units` takes the round's tasks (`round_tasks`) in order and, for an iterative task, every turn, or
`moat.web_turns_per_task` of them drawn once per (seed, task) and the same in every round.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from coalign.formats.lumos import FormatError, grounder_prompt, planner_prompt
from coalign.formats.lumos_iterative import Message, grounder_first_prompt, grounder_next_prompt, parse_planner_turn
from coalign.models.agents import grounder_example, planner_example
from coalign.tasks import Task
from coalign.tasks.episodes import grounder_conversation, planner_conversation

Prompt = str | tuple[Message, ...]  # one user turn (onetime) or the conversation so far (iterative)


@dataclass(frozen=True)
class Unit:
    """One planner output to sample: a onetime task (`turn` None) or turn `turn` (from 1) of an iterative one."""

    task: Task
    turn: int | None = None
    planner_gold: tuple[Message, ...] = field(default=(), repr=False)  # iterative: the whole gold conversations
    grounder_gold: tuple[Message, ...] = field(default=(), repr=False)

    @property
    def key(self) -> dict:
        """What identifies the unit in a round's artifacts: the task id, and the turn for an iterative task."""
        return {"id": self.task.id} if self.turn is None else {"id": self.task.id, "turn": self.turn}

    def planner_prompt(self) -> Prompt:
        """What the planner continues: the task's planner turn, or its gold conversation up to turn `turn`."""
        if self.turn is None:
            return planner_prompt(self.task.question)
        return self.planner_gold[: 2 * self.turn - 1]

    def gold_planner_output(self) -> str:
        """The gold planner output: the whole plan, or the gold text of turn `turn`."""
        if self.turn is None:
            return planner_example(self.task.question, self.task.subgoals)[1]
        return self.planner_gold[2 * self.turn - 1]["content"]

    def grounder_prompt(self, candidate: str) -> Prompt:
        """What the grounder continues given a planner candidate (its text, as sampled)."""
        if self.turn is None:
            return grounder_prompt(self.task.question, candidate, self.task.family)
        return self.grounder_prompt_for(turn_subgoal(candidate))

    def grounder_prompt_for(self, subgoal: str) -> tuple[Message, ...]:
        """Iterative: the grounder's gold conversation before turn `turn`, then the user turn asking for `subgoal`."""
        t, task = self.turn, self.task
        user = grounder_first_prompt(task.question, subgoal, task.tools) if t == 1 else grounder_next_prompt(t, subgoal)
        return (*self.grounder_gold[: 2 * (t - 1)], {"role": "user", "content": user})

    def gold_actions(self) -> str:
        """The gold actions a candidate is scored by: the whole action text, or those of turn `turn`."""
        if self.turn is None:
            task = self.task
            return grounder_example(task.question, task.subgoals, task.actions, task.family)[1]
        return self.grounder_gold[2 * self.turn - 1]["content"]


def turn_subgoal(candidate: str) -> str:
    """The subgoal a sampled planner turn asks the grounder for: what follows `Subgoal k:`; a turn that does
    not parse as a subgoal (malformed, or a premature stop) is kept whole, as the onetime stages keep a
    malformed plan whole (`moat._subgoals`), so it is scored, grounded and judged like any other candidate."""
    try:
        parsed = parse_planner_turn(candidate)
    except FormatError:
        parsed = None
    return candidate.strip() if parsed is None else parsed[1]


def task_units(task: Task, turns_per_task: int | None = None, seed: int = 0) -> list[Unit]:
    """A task's units: itself (onetime), or its planner turns (all, or `turns_per_task` drawn by seed and id)."""
    if not task.iterative:
        return [Unit(task)]
    planner, grounder = tuple(planner_conversation(task)), tuple(grounder_conversation(task))
    turns = list(range(1, len(task.subgoals) + 1))
    if turns_per_task and turns_per_task < len(turns):
        turns = sorted(random.Random(f"coalign-moat-turns/{seed}/{task.id}").sample(turns, turns_per_task))
    return [Unit(task, t, planner, grounder) for t in turns]


def round_units(tasks: list[Task], turns_per_task: int | None, seed: int) -> list[Unit]:
    """Every unit of the round's tasks, task by task in their order, turns in order."""
    return [unit for task in tasks for unit in task_units(task, turns_per_task, seed)]
