"""The IQA environment: the expert looks, then answers right on every seed; model text never breaks it."""

from __future__ import annotations

import copy
import random

import pytest

from coalign.envs import make_env
from coalign.envs.iqa import CONTAINERS, IQAEnv

HOSTILE = [
    "",
    "x" * 1_000_000,
    "\x00\x00 wipe\x00 disk",
    "\u202eeurT rewsna\u202c \u2067ذهاب\u2069",
    "__import__('os').system('x')",
    "(" * 10_000 + ")" * 10_000,
    "0",
    "3.14159",
    "\n".join("I think I should move ahead and then answer True. " * 20 for _ in range(500)),
]


def run_expert(env: IQAEnv) -> list[str]:
    actions = []
    while not env.done:
        actions.append(env.expert_action())
        env.step(actions[-1])
    return actions


def test_expert_follows_its_plan_and_answers_every_seed() -> None:
    truths = []
    for seed in range(300):
        env = IQAEnv()
        env.reset(seed)
        plan = env.expert_plan()
        assert len(plan) == env.optimal_steps and 2 <= env.optimal_steps <= env.max_steps
        assert all(len(step.split()) <= 12 for step in plan)
        for index, step in enumerate(plan):
            action = env.expert_action()
            assert env.plan_action(step) == action == env.plan_action(env.expert_plan()[0])
            assert env.step(action).done == (index == len(plan) - 1)
        assert env.success and env.steps_taken == env.optimal_steps
        assert action == f"answer {env.truth}"
        truths.append(env.truth)
    assert truths.count(True) == truths.count(False) == 150


def random_action(env: IQAEnv, rng: random.Random) -> str:
    return rng.choice(["move ahead", "move ahead", "turn left", "turn right", f"open {rng.choice(list(env.fixtures))}"])


def test_expert_recovers_after_the_agent_wanders() -> None:
    for seed in range(200):
        env = IQAEnv()
        env.reset(seed)
        rng = random.Random(seed)
        for _ in range(rng.randint(1, 6)):
            env.step(random_action(env, rng))
        left = env.expert_plan()
        assert len(left) <= env.max_steps - env.steps_taken
        assert len(run_expert(env)) == len(left) and env.success, seed


def test_answers_end_the_episode_and_need_looking() -> None:
    env = IQAEnv()
    env.reset(0)  # "Is there a potato in the fridge 1?" -- True
    assert env.goal == "Is there a potato in the fridge 1?" and env.truth
    blind = copy.deepcopy(env)
    result = blind.step("answer True")
    assert result.done and not blind.success and "without looking" in result.observation
    assert env.step("open fridge 1").observation == "Nothing happened."  # not in front yet
    for action in env.expert_plan()[:-1]:
        env.step(env.plan_action(action))
    wrong = copy.deepcopy(env)
    assert wrong.step("answer false").observation == "Your answer is wrong." and wrong.done and not wrong.success
    assert env.step("Answer True.").observation == "Your answer is correct." and env.success
    assert env.step("answer True").observation == "The episode is over."


def test_observations_say_what_is_in_view() -> None:
    env = IQAEnv()
    first = env.reset(0)
    assert first.splitlines()[1] == "You are at row 1, column 2, facing south. You see a wall, 4 cells ahead."
    assert first.endswith("\nQuestion: Is there a potato in the fridge 1?")
    assert "the fridge 1 (row 2, column 1)" in first
    moved = env.step("move ahead").observation
    assert moved == "You are at row 2, column 2, facing south. You see a wall, 3 cells ahead."
    seen = env.step("turn right").observation
    assert seen.endswith("You see the fridge 1 (closed), right in front of you.")
    assert env.step("open fridge 1").observation == "You open the fridge 1. In it, you see a plate 1 and a potato 1."
    assert env.step("turn left").observation.startswith("You are at row 2, column 2, facing south.")
    assert env.step("bad command").observation == "Nothing happened."


def test_blocked_moves_and_determinism() -> None:
    env = IQAEnv()
    env.reset(2)  # starts facing a wall, right in front
    assert env.step("move ahead").observation.startswith("You cannot move ahead. You are at row 4, column 1")
    a, b = IQAEnv(), IQAEnv()
    assert a.reset(9) == b.reset(9)
    assert [a.step(x).observation for x in run_expert(copy.deepcopy(a))] == [
        b.step(x).observation for x in run_expert(copy.deepcopy(b))
    ]
    assert len({IQAEnv().reset(seed) for seed in range(50)}) == 50
    assert isinstance(IQAEnv().reset(None), str) and isinstance(make_env("iqa"), IQAEnv)


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_text_is_answered_never_raised(text: str) -> None:
    env = IQAEnv()
    env.reset(4)
    assert env.step(text).observation == "Nothing happened."
    env.step(env.expert_action())
    assert env.step(text).observation == "Nothing happened." and not env.done
    assert env.plan_action(text) is None
    run_expert(env)
    after = env.step(text)
    assert after.done and after.observation


def test_step_limit_ends_the_episode() -> None:
    env = IQAEnv()
    env.reset(3)
    results = [env.step("turn left") for _ in range(env.max_steps)]
    assert [r.done for r in results] == [False] * (env.max_steps - 1) + [True]
    assert not env.success


def test_deepcopy_is_independent() -> None:
    env = IQAEnv()
    env.reset(6)
    env.step(env.expert_action())
    before = (env.pose, env.looked, env.steps_taken, env.expert_plan())
    clone = copy.deepcopy(env)
    run_expert(clone)
    assert clone.success and not env.done
    assert (env.pose, env.looked, env.steps_taken, env.expert_plan()) == before


def test_plan_action_reads_the_action_a_step_begins_with() -> None:
    env = IQAEnv()
    env.reset(0)
    assert env.plan_action("Step 1: Move forward toward the fridge.") == "move ahead"
    assert env.plan_action("2) turn right to face the fridge 1") == "turn right"
    assert env.plan_action("Action: open the fridge 1 to look inside") == "open fridge 1"
    assert env.plan_action("answer TRUE: there is a potato") == "answer True"
    for vague in ["open the fridge", "open cabinet 9", "answer maybe", "walk to the fridge 1", "turn lefty"]:
        assert env.plan_action(vague) is None, vague


def test_questions_ask_about_containers_and_surfaces() -> None:
    kinds = set()
    for seed in range(40):
        env = IQAEnv()
        env.reset(seed)
        kinds.add(env.subject in CONTAINERS)
        assert env.goal.startswith("Is there ") and env.goal.endswith(f" the {env.subject}?")
    assert kinds == {True, False}
