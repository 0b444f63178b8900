"""The household environment: the expert solves every seed in its plan's steps, and model text never breaks it."""

from __future__ import annotations

import copy
import random
from collections import Counter

import pytest

from coalign.envs import make_env
from coalign.envs.household import TASK_TYPES, HouseholdEnv

HOSTILE = [
    "",
    "x" * 1_000_000,
    "\x00\x00 wipe\x00 disk",
    "\u202e1 egdirf ni 1 elppa tup\u202c \u2067ذهاب\u2069",
    "__import__('os').system('x')",
    "(" * 10_000 + ")" * 10_000,
    "12345",
    "-1e308",
    "\n".join(f"go to cabinet {i} and then take everything" * 20 for i in range(500)),
]


def run_expert(env: HouseholdEnv) -> list[str]:
    actions = []
    while not env.done:
        actions.append(env.expert_action())
        env.step(actions[-1])
    return actions


def test_expert_follows_its_plan_and_solves_every_seed() -> None:
    solved = Counter()
    for seed in range(300):
        env = HouseholdEnv()
        env.reset(seed)
        plan = env.expert_plan()
        assert len(plan) == env.optimal_steps and 3 <= env.optimal_steps <= 12
        assert all(len(step.split()) <= 12 for step in plan)
        for index, step in enumerate(plan):
            action = env.expert_action()
            assert env.plan_action(step) == action == env.plan_action(env.expert_plan()[0])
            result = env.step(action)
            assert result.observation != "Nothing happened.", (seed, index, action)
            assert result.done == (index == len(plan) - 1)
        assert env.success and env.steps_taken == env.optimal_steps <= env.max_steps
        solved[env.task] += 1
    assert set(solved) == set(TASK_TYPES) and min(solved.values()) == 50


def random_action(env: HouseholdEnv, rng: random.Random) -> str:
    """A plausible action naming this room's things: most are impossible where the agent stands."""
    receptacle = rng.choice(env.receptacles)
    obj = rng.choice(sorted(env.states))
    return rng.choice([
        f"go to {receptacle}", f"open {receptacle}", f"close {receptacle}", f"take {obj} from {receptacle}",
        f"put {obj} in/on {receptacle}", f"heat {obj} with microwave 1", f"clean {obj} with {receptacle}",
        "use desklamp 1", f"examine {obj}", "look", "inventory",
    ])


@pytest.mark.parametrize("wander", [3, 10])
def test_expert_recovers_after_the_agent_wanders(wander: int) -> None:
    for seed in range(120):
        env = HouseholdEnv()
        env.reset(seed)
        rng = random.Random(seed)
        for _ in range(wander):
            env.step(random_action(env, rng))
        if env.done:
            continue
        left = env.expert_plan()
        assert len(left) <= env.max_steps - env.steps_taken
        assert len(run_expert(env)) == len(left) and env.success, seed


def test_first_observation_and_determinism() -> None:
    first = HouseholdEnv().reset(7)
    assert first.startswith("You are in the middle of a room. Looking quickly around you, you see a ")
    assert "\nYour task is to: " in first and first.endswith(".")
    a, b = HouseholdEnv(), HouseholdEnv()
    assert a.reset(7) == b.reset(7) and a.goal == b.goal
    assert [a.step(x).observation for x in run_expert(copy.deepcopy(a))] == [
        b.step(x).observation for x in run_expert(copy.deepcopy(b))
    ]
    assert len({HouseholdEnv().reset(seed) for seed in range(50)}) == 50
    assert isinstance(HouseholdEnv().reset(None), str)
    assert isinstance(make_env("household"), HouseholdEnv)


def test_invalid_actions_get_nothing_happened() -> None:
    env = HouseholdEnv()
    env.reset(2)  # a clean cup in fridge; the cup is in sinkbasin 1
    for action in ["go to fridge 9", "take cup 1 from sinkbasin 1", "put cup 1 in fridge 1", "open sinkbasin 1",
                   "dance", "go to", "use desklamp 1", "clean cup 1 with fridge 1", "examine cup 1", "look at cup 1"]:
        assert env.step(action).observation == "Nothing happened.", action
    assert env.step("go to the Sinkbasin 1.").observation.startswith("You arrive at sinkbasin 1.")
    assert env.step("take cup 1 from sinkbasin 1").observation == "You pick up the cup 1 from the sinkbasin 1."
    assert env.step("take apple 1 from sinkbasin 1").observation == "Nothing happened."  # one hand
    assert env.step("inventory").observation == "You are carrying: a cup 1."
    assert env.step("examine cup 1").observation == "There's nothing special about cup 1."
    assert not env.done


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_text_is_answered_never_raised(text: str) -> None:
    env = HouseholdEnv()
    env.reset(11)
    assert env.step(text).observation == "Nothing happened."
    env.step(env.expert_action())
    assert env.step(text).observation == "Nothing happened."
    assert env.plan_action(text) is None
    run_expert(env)
    after = env.step(text)
    assert after.done and isinstance(after.observation, str) and after.observation


def test_step_limit_ends_the_episode() -> None:
    env = HouseholdEnv()
    env.reset(3)
    results = [env.step("look") for _ in range(env.max_steps)]
    assert [r.done for r in results] == [False] * (env.max_steps - 1) + [True]
    assert not env.success and env.step("look").observation == "The episode is over."


def test_deepcopy_is_independent() -> None:
    env = HouseholdEnv()
    env.reset(5)
    env.step(env.expert_action())
    before = (env.step("look").observation, env.steps_taken, env.expert_plan())
    clone = copy.deepcopy(env)
    run_expert(clone)
    assert clone.success and not env.success
    assert (env.step("look").observation, env.steps_taken - 1, env.expert_plan()) == before


def test_plan_action_reads_the_action_a_step_begins_with() -> None:
    env = HouseholdEnv()
    env.reset(2)
    assert env.plan_action("Step 2: Go to the sinkbasin 1 to find the cup.") == "go to sinkbasin 1"
    assert env.plan_action("3. put cup 1 in/on fridge 1") == "put cup 1 in fridge 1"
    assert env.plan_action("- Action: clean cup 1 with sinkbasin 1, then go on") == "clean cup 1 with sinkbasin 1"
    assert env.plan_action("look around the room") == "look"
    for vague in ["find a cup", "go to the fridge", "go to spaceship 1", "look at the cup under the lamp", ""]:
        assert env.plan_action(vague) is None, vague


def test_goal_states_and_lamp() -> None:
    env = HouseholdEnv()
    env.reset(1)  # look at a pencil under the desklamp
    assert env.goal == "look at a pencil under the desklamp."
    assert env.expert_plan()[-1] == "use desklamp 1 to look at the pencil 1"
    env.step("go to sidetable 1")
    assert env.step("use desklamp 1").observation == "You turn on the desklamp 1."
    assert not env.done  # lit, but no pencil in hand
    assert env.expert_plan()[-1] == "go to sidetable 1 where the desklamp is"
    run_expert(env)
    assert env.success
