"""AdaPlan's text: a global plan, then per turn a thought and an action; observations in between.

One model plays planner and executor (PilotRL). Its first turn writes the whole plan and the first
action; after each observation it writes the next thought and action and, on turns where the plan is
updated, first the plan's *remaining* steps:

    <global_plan>
    Step 3: take apple 1 from countertop 1 to hold it
    Step 4: go to fridge 1 to cool the apple
    </global_plan>
    Thought: take apple 1 from countertop 1 to hold it
    Action: take apple 1 from countertop 1

Steps already executed are never written again: the runtime keeps them verbatim (the paper's Eq. 1,
`update_plan`), so the model cannot rewrite what it did into "what was planned all along". The block
and the `Thought:`/`Action:` lines are the authors' release's formats; the update prompt is ours (the
release has none). ReAct, the baseline, is the same conversation without plans.

A bounded context (`window_message`, the authors' executor prompt) gives each turn after the first one user
message instead of the whole episode: the task, the plan so far and how many of its steps are done, the last
action and its observation (and optionally the `k` turns before it), and what to write. A turn's context then
stays the same size however long the episode runs. `history=None` keeps the whole conversation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from coalign.formats.env_actions import clean_action

PLAN_OPEN = "<global_plan>"
PLAN_CLOSE = "</global_plan>"
FIRST_ADAPLAN = "Write a global plan for the task, then your first thought and action."
FIRST_REACT = "Write your first thought and action."
UPDATE = "Rewrite the remaining steps of the plan, then write your next thought and action."
NEXT = "Write your next thought and action."
MODES = ("adaplan", "react")

_STEP = re.compile(r"^\s*Step\s+([0-9]{1,9})\s*[:.]\s*(.*?)\s*$")
_THOUGHT = re.compile(r"^\s*Thought\s*:\s?(.*?)\s*$")
_ACTION = re.compile(r"^\s*Action\s*:\s?(.*?)\s*$")


@dataclass(frozen=True)
class AgentTurn:
    """One parsed model turn: the plan steps it wrote (None: it wrote no plan block), its thought and its
    action ("" when it wrote no `Action:` line). `errors` lists what did not parse, for the format reward."""

    plan: tuple[str, ...] | None
    thought: str
    action: str
    errors: tuple[str, ...] = ()

    @property
    def well_formed(self) -> bool:
        return not self.errors


def format_plan(steps: Sequence[str], first: int = 1) -> str:
    """A plan block whose steps are numbered from `first` (an update lists the remaining steps only)."""
    lines = [f"Step {first + i}: {step}" for i, step in enumerate(steps)]
    return "\n".join([PLAN_OPEN, *lines, PLAN_CLOSE])


def format_turn(thought: str, action: str, plan: Sequence[str] | None = None, first: int = 1) -> str:
    """A model turn: the plan block when given, then the thought and the action."""
    act = f"Thought: {thought}\nAction: {action}"
    return act if plan is None else f"{format_plan(plan, first)}\n{act}"


def parse_turn(text: str, expect_plan: bool = False) -> AgentTurn:
    """Read a model turn. Never raises: what is missing or malformed is listed in `errors` (a plan that
    was due but absent, a step line out of order, a second plan block, a missing thought, an action missing
    or empty), and the action is taken wherever an `Action:` line stands, so one slip does not end an
    episode."""
    text = str(text)
    errors: list[str] = []
    plan: list[str] | None = None
    lines = text.splitlines()
    rest = lines
    if PLAN_OPEN in text:
        start = next(i for i, line in enumerate(lines) if PLAN_OPEN in line)
        end = next((i for i in range(start + 1, len(lines)) if PLAN_CLOSE in lines[i]), None)
        if end is None:
            errors.append("the plan block is not closed")
            end = len(lines)
        plan, numbers = [], []
        for line in lines[start + 1 : end]:
            match = _STEP.match(line)
            if match and match[2]:
                numbers.append(int(match[1]))
                plan.append(match[2])
            elif line.strip():
                errors.append(f"not a plan step: {line.strip()[:80]!r}")
        if not plan:
            errors.append("the plan block holds no step")
        elif numbers != list(range(numbers[0], numbers[0] + len(numbers))):
            errors.append(f"plan steps are not numbered in order: {numbers[:10]}")
        rest = lines[:start] + lines[end + 1 :]
        if any(PLAN_OPEN in line or PLAN_CLOSE in line for line in rest):
            errors.append("a second plan block or a stray plan tag")
    elif expect_plan:
        errors.append("a plan was due and none was written")
    thought = action = None
    for line in rest:
        if thought is None and (match := _THOUGHT.match(line)):
            thought = match[1]
        elif action is None and (match := _ACTION.match(line)):
            action = match[1]
    if thought is None:
        errors.append("no Thought: line")
    if action is None:
        errors.append("no Action: line")
    elif not clean_action(action):
        errors.append("the Action: line names no action")
    return AgentTurn(tuple(plan) if plan is not None else None, thought or "", action or "", tuple(errors))


def update_plan(plan: Sequence[str], executed: int, future: Sequence[str]) -> list[str]:
    """The paper's Eq. 1: the first `executed` steps stay verbatim, the rest are replaced by `future`.

    A plan shorter than the steps executed (the agent acted past its plan) keeps what it has and leaves the
    steps it never planned empty, so step t stays `plan[t]` and is read against the plan written for it."""
    kept = list(plan[:executed])
    return [*kept, *[""] * (executed - len(kept)), *future]


def task_text(instructions: str, observation: str) -> str:
    """The task as every turn's context states it: the environment's action syntax and its first observation
    (which states the goal)."""
    head = f"{instructions.strip()}\n" if instructions.strip() else ""
    return f"{head}{observation.strip()}"


def first_message(instructions: str, observation: str, mode: str) -> str:
    """The task's opening user turn: the task (`task_text`) and what to write."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    ask = FIRST_ADAPLAN if mode == "adaplan" else FIRST_REACT
    return f"{task_text(instructions, observation)}\n{ask}"


def window_message(
    task: str, plan: Sequence[str] | None, done: int, recent: Sequence[tuple[str, str]], update: bool
) -> str:
    """A turn's user message in a bounded context: the task (`task_text`), the plan so far (AdaPlan; None for
    ReAct) and how many of its steps the `done` actions taken have carried out (`update_plan` keeps them), the
    last actions as the environment read them, each with the observation it got (`recent`, oldest first), and
    what to write."""
    parts = [task.strip()]
    if plan is not None:
        head = f"Your plan (steps 1-{done} done):" if done > 1 else "Your plan (step 1 done):" if done else "Your plan:"
        parts += [head, *(f"Step {i}: {step or '-'}" for i, step in enumerate(plan, 1))] if plan else []
    for action, observation in recent:
        parts += [f"Action: {clean_action(action)}", f"Observation: {observation.strip()}"]
    parts.append(UPDATE if update else NEXT)
    return "\n".join(parts)


def observation_message(observation: str, update: bool) -> str:
    """The user turn after an action: the observation, and whether the plan is to be updated now."""
    return f"Observation: {observation.strip()}\n{UPDATE if update else NEXT}"


def plan_due(mode: str, step: int, every: int) -> bool:
    """Whether the turn after `step` actions writes a plan: AdaPlan plans at the start and updates every
    `every` steps (the paper's default and best: every step); ReAct never plans."""
    return mode == "adaplan" and step % every == 0
