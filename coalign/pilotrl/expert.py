"""Expert demonstrations for PilotRL's environments: plans chosen by generate-then-select, trajectories
in AdaPlan and ReAct format (the SFT cold start).

The paper has a frontier model write candidate plans and keeps the one its judge scores best on
correctness, executability and standard format. Here the candidates come from the environment's
expert solver (its plan, and variants of it with a step dropped, two steps swapped, a step repeated or
two steps merged into one line) and, when configured, from an LLM over an OpenAI-compatible endpoint
(`LLMPlans`; its replies are untrusted text, only ever scored), and each is scored by rule, 1-5 on each criterion
(`plan_quality`): correct = 1 + 4 x the progress that following the plan on a copy of the environment makes
toward the goal, floored (`plan_progress`: 1 for a plan that succeeds, 0 for one that ends the task in failure,
else the share of the environment's `to_go` it removes; so 5 for a plan that succeeds and only for one, 4 for one
that stops a step short of a long goal, 3 for one that gets half way;
a step that names no action is sent as it stands, and the environment answers it as the invalid action it is:
a plan of filler lines makes no progress, however many steps it has; the one exception is a step that the
environment's own plans write to leave the choice to the one acting, `TextEnv.delegates`, where the expert
chooses); executable = the share of steps that name an action the environment reads or that it
delegates; standard = one short, non-empty step per line. PilotRL's stage-2 plan-quality reward scores
with the same rules.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from dataclasses import dataclass

from coalign.envs import TextEnv, make_env
from coalign.envs.base import plain_step
from coalign.formats.adaplan import (
    PLAN_CLOSE,
    PLAN_OPEN,
    first_message,
    format_turn,
    observation_message,
    parse_turn,
    plan_due,
    task_text,
    update_plan,
    window_message,
)
from coalign.models.endpoint import CallError, Complete

MAX_STEP_WORDS = 20
MAX_REPLY_CHARS = 20_000  # an LLM's reply is cut here before it is read: no plan needs more
PLAN_PROMPT = (
    "{instructions}\n{observation}\n\nWrite a global plan for this task: the steps an agent would carry out, "
    f"one action per step, as\n{PLAN_OPEN}\nStep 1: ...\nStep 2: ...\n{PLAN_CLOSE}"
)


@dataclass(frozen=True)
class PlanQuality:
    """Rule-based plan scores, each 1-5 (the paper's judge scale)."""

    correctness: int
    executability: int
    standard: int

    @property
    def total(self) -> int:
        return self.correctness + self.executability + self.standard


def plan_quality(env: TextEnv, plan: Sequence[str]) -> PlanQuality:
    """Score a plan for the task `env` is at (1-5 each; a plan of no steps scores 1 everywhere)."""
    if not plan:
        return PlanQuality(1, 1, 1)
    correct = 1 + int(4 * plan_progress(env, plan))  # floored: 5 for a plan that succeeds, and only then
    named = sum(env.plan_action(step) is not None or env.delegates(step) for step in plan) / len(plan)
    standard = sum(bool(s.strip()) and "\n" not in s and len(s.split()) <= MAX_STEP_WORDS for s in plan) / len(plan)
    return PlanQuality(correct, 1 + round(4 * named), 1 + round(4 * standard))


def follow_plan(env: TextEnv, plan: Sequence[str]) -> bool:
    """Whether following `plan` from `env`'s current state succeeds, run on a copy (`followed`). The plan
    alone: it fails if it ends too early."""
    return followed(env, plan).success


def plan_progress(env: TextEnv, plan: Sequence[str]) -> float:
    """How far following `plan` from `env`'s state gets toward the goal, in [0, 1]: 1 when it succeeds, 0 when
    the task ends in failure (a wrong answer, the tries or steps used up), else the share of the environment's
    `to_go` that it removes (none where it adds to it)."""
    trial = followed(env, plan)
    if trial.success:
        return 1.0
    before = env.to_go()
    if trial.done or before <= 0:
        return 0.0
    return max(0.0, 1.0 - trial.to_go() / before)


def followed(env: TextEnv, plan: Sequence[str]) -> TextEnv:
    """A copy of `env` after following `plan` until the task ends: each step's named action, the expert's where
    the environment delegates the step, or the step's own text for any other step that names none."""
    trial = copy.deepcopy(env)
    for step in plan:
        if trial.done:
            break
        action = trial.plan_action(step)
        if action is None:
            action = trial.expert_action() if trial.delegates(step) else step
        trial.step(action)
    return trial


def candidate_plans(plan: Sequence[str], rng: random.Random, n: int = 4) -> list[list[str]]:
    """The expert's plan and `n` variants of it, as a noisy plan writer would give."""
    out = [list(plan)]
    for _ in range(n):
        variant = list(plan)
        kind = rng.choice(("drop", "swap", "repeat", "merge"))
        if len(variant) < 2:
            kind = "repeat"
        i = rng.randrange(len(variant) - 1) if len(variant) >= 2 else 0
        if kind == "drop":
            del variant[i]
        elif kind == "swap":
            variant[i], variant[i + 1] = variant[i + 1], variant[i]
        elif kind == "repeat":
            variant.insert(i, variant[i])
        else:
            variant[i : i + 2] = [f"{variant[i]}, then {variant[i + 1]}"]
        out.append(variant)
    return out


class LLMPlans:
    """Candidate plans from an LLM for a task, as the paper's frontier model writes them: `candidates` calls
    per task, each reply's plan block read (`parse_turn`); a failed call or a reply without a readable block
    adds none. `max_calls` bounds the calls over its lifetime (None: no cap). `stats` counts calls, failures,
    unreadable replies and plans given."""

    def __init__(self, complete: Complete, candidates: int = 2, max_calls: int | None = None):
        if candidates < 1 or (max_calls is not None and max_calls < 0):
            raise ValueError("need candidates >= 1 and max_calls >= 0")
        self.complete, self.candidates, self.max_calls = complete, candidates, max_calls
        self.stats = {"calls": 0, "failures": 0, "unreadable": 0, "plans": 0, "budget_exhausted": 0}

    def __call__(self, env: TextEnv, observation: str) -> list[list[str]]:
        plans = []
        for _ in range(self.candidates):
            if self.max_calls is not None and self.stats["calls"] >= self.max_calls:
                self.stats["budget_exhausted"] += 1
                break
            self.stats["calls"] += 1
            try:
                reply = self.complete(PLAN_PROMPT.format(instructions=env.instructions, observation=observation))
            except CallError:
                self.stats["failures"] += 1
                continue
            plan = parse_turn(str(reply)[:MAX_REPLY_CHARS], expect_plan=True).plan
            if plan:
                plans.append(list(plan))
                self.stats["plans"] += 1
            else:
                self.stats["unreadable"] += 1
        return plans


def select_plan(env: TextEnv, candidates: Sequence[Sequence[str]]) -> list[str]:
    """The best candidate by total quality; ties go to the shorter plan, then the earlier candidate."""
    scored = [(plan_quality(env, plan).total, -len(plan), -i) for i, plan in enumerate(candidates)]
    return list(candidates[max(range(len(candidates)), key=lambda i: scored[i])])


def expert_conversation(
    name: str, seed: int, mode: str, every: int = 1, llm: LLMPlans | None = None
) -> list[dict[str, str]]:
    """The expert's episode on task (`name`, `seed`) as one conversation ending with its last action
    (`expert_conversations` with the whole episode as the context)."""
    (messages,) = expert_conversations(name, seed, mode, every, llm)
    return messages


def expert_conversations(
    name: str, seed: int, mode: str, every: int = 1, llm: LLMPlans | None = None, history: int | None = None
) -> list[list[dict[str, str]]]:
    """The expert's episode on task (`name`, `seed`) as the conversations a model trains on: the whole episode
    as one (`history` None), or with a bounded context one per turn, each turn's context as the runtime gives
    it (`formats.adaplan.window_message`, `history` turns before the last one) and the turn. Its first plan is
    chosen among the expert's candidates and, with `llm`, an LLM's.

    AdaPlan: the selected plan first; after each `every` steps the remaining steps of the expert's plan
    from the state reached (steps done stay as they were, Eq. 1). The thought is the plan step being
    carried out, and the action the one it names (the expert's own where it names none); for an expert that
    plans on a hypothesis (`expert_revises`), where an observation has refuted it since the plan's last
    update, the expert's current step instead. ReAct: the same thoughts and actions, no plan."""
    env = make_env(name)
    observation = env.reset(seed)
    task = task_text(env.instructions, observation)
    # a hypothesis plan (`expert_revises`) fails as written whenever the hypothesis does, so the rule judge
    # cannot rank noisy variants of it (a shorter broken one would win): the expert's own plan stands
    own = [env.expert_plan()] if env.expert_revises else candidate_plans(env.expert_plan(), random.Random(seed))
    candidates = own + (llm(env, observation) if llm else [])
    chosen = select_plan(env, candidates)
    plan: list[str] = []  # the plan so far, as the runtime keeps it
    user = first_message(env.instructions, observation, mode)
    messages: list[dict[str, str]] = []
    turns: list[list[dict[str, str]]] = []
    recent: list[tuple[str, str]] = []
    while not env.done:
        t = env.steps_taken
        due = plan_due(mode, t, every)
        if t == 0:
            future = chosen if due else None
        else:
            future = env.expert_plan() if due else None
        shown = update_plan(plan, t, future) if future is not None else plan
        thought = shown[t] if t < len(shown) else env.expert_plan()[0]
        if env.expert_revises and not _carries_out(env, thought):
            thought = env.expert_plan()[0]  # a hypothesis refuted since the plan's last update
        named = env.plan_action(thought)
        action = named if named is not None else env.expert_action()
        reply = {"role": "assistant", "content": format_turn(thought, action, future, first=t + 1)}
        messages += [{"role": "user", "content": user}, reply]
        turns.append([{"role": "user", "content": user}, reply])
        plan = shown
        step = env.step(action)
        if not env.done:
            update = plan_due(mode, env.steps_taken, every)
            if history is None:
                user = observation_message(step.observation, update)
            else:
                recent = [*recent, (action, step.observation)][-(history + 1) :]
                user = window_message(task, plan if mode == "adaplan" else None, env.steps_taken, recent, update)
    if not env.success:
        raise RuntimeError(f"the {name} expert failed on seed {seed}: its environment or solver has a bug")
    return [messages] if history is None else turns


def _carries_out(env: TextEnv, step: str) -> bool:
    """Whether the expert's next action carries out plan step `step`: the step names that action, or it is the
    expert's own current step (an unnumbered "take the apple" is, only while the expert's plan still says so)."""
    return env.plan_action(step) == env.expert_action() or plain_step(step) == plain_step(env.expert_plan()[0])
