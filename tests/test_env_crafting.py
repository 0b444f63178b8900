"""Crafting: TextCraft's commands and answers, a recipe-tree expert from any state, hostile text."""

from __future__ import annotations

import copy

import pytest

from coalign.envs import make_env
from coalign.envs.crafting import BASE, RECIPES, depth

HOSTILE = [
    "",
    "x" * 1_000_000,
    "get 2\x00 coal",
    "\u202eget 2 coal\u202c",
    "ｇｅｔ ２ ｃｏａｌ",
    "__import__('os').system('x')",
    "(" * 10_000 + ")" * 10_000,
    "\n\n  \nget 1 coal\ncraft 1 bucket using 3 iron ingot",
    "get 99999999999999999999 coal",
    "craft 0 stick using 0 plank",
    "craft 4 stick using 2 plank, 2 plank",
    "get -3 coal",
]


def test_first_observation_lists_commands_and_goal() -> None:
    env = make_env("crafting")
    first = env.reset(0)
    lines = first.splitlines()
    assert lines[0] == "Crafting commands:" and lines[-1] == f"Goal: craft {env.target}."
    assert f"craft {RECIPES[env.target][0]} {env.target} using" in first
    assert depth(env.target) >= 2
    assert sum(line.startswith("craft ") for line in lines) >= 7  # needed + distractors


def test_expert_succeeds_in_optimal_steps() -> None:
    env = make_env("crafting")
    targets = set()
    for seed in range(300):
        env.reset(seed)
        targets.add(env.target)
        assert 3 <= env.optimal_steps <= 12
        plan = env.expert_plan()
        assert len(plan) == env.optimal_steps and all(len(step.split()) <= 12 for step in plan)
        assert [env.plan_action(step) for step in plan][0] == env.expert_action()
        while not env.done:
            observation = env.step(env.expert_action()).observation
            assert observation.startswith(("Got ", "Crafted ")), observation
        assert env.success and env.reward() == 1.0 and env.steps_taken == env.optimal_steps
    assert len(targets) >= 15


def test_plan_steps_read_back_to_expert_actions() -> None:
    env = make_env("crafting")
    for seed in range(60):
        env.reset(seed)
        while not env.done:
            assert env.plan_action(env.expert_plan()[0]) == env.expert_action()
            env.step(env.expert_action())


def test_expert_recovers_after_deviation() -> None:
    env = make_env("crafting")
    for seed in range(100):
        env.reset(seed)
        for action in ("get 3 wood log", "craft 4 plank using 1 wood log", "get 1 coal", "craft 1 boat using 5 plank"):
            if not env.done:
                env.step(action)
        while not env.done:
            env.step(env.expert_action())
        assert env.success


def test_textcraft_answers() -> None:
    env = make_env("crafting")
    env.reset(0)
    assert env.step("inventory").observation == "Inventory: You are not carrying anything."
    assert env.step("get 2 iron ore").observation == "Got 2 iron ore"
    assert env.step("get 1 iron ingot").observation == "Could not find iron ingot"
    assert env.step("get 1 diamond").observation == "Could not find diamond"
    assert env.step("craft 1 iron ingot using 1 iron ore, 1 coal").observation == (
        "Could not find enough items to craft iron ingot"
    )
    assert env.step("get coal").observation == "Got 1 coal"
    assert env.step("craft 1 iron ingot using 1 coal, 1 iron ore").observation == "Crafted 1 iron ingot"
    assert env.step("craft 2 iron ingot using 1 iron ore, 1 coal").observation == (
        "Could not find a valid recipe for iron ingot"
    )
    assert env.step("craft 1 rocket using 1 coal").observation == "Could not find a valid recipe for rocket"
    assert env.step("Inventory").observation == "Inventory: [iron ore] (1) [iron ingot] (1)"
    assert env.step("get 2 wood logs").observation == "Got 2 wood log"
    assert env.step("craft 8 planks using 2 wood logs").observation == "Crafted 8 plank"
    assert env.step("dance").observation == "Could not execute dance"


def test_step_limit_ends_the_episode() -> None:
    env = make_env("crafting")
    env.reset(3)
    for _ in range(env.max_steps - 1):
        assert not env.step("inventory").done
    assert env.step("inventory").done and not env.success


def test_deterministic_per_seed() -> None:
    a, b = make_env("crafting"), make_env("crafting")
    for seed in (0, 5, 777, 2**35):
        assert a.reset(seed) == b.reset(seed)
        assert a.expert_plan() == b.expert_plan()
    assert len({make_env("crafting").reset(s) for s in range(30)}) > 20


def test_plan_action() -> None:
    env = make_env("crafting")
    env.reset(0)
    assert env.plan_action("get 2 iron ore for the iron ingot") == "get 2 iron ore"
    assert env.plan_action("First, get 3 sticks from the pile") is None  # stick is not a base material
    assert env.plan_action("craft 8 plank using 2 wood log for the fence") == "craft 8 plank using 2 wood log"
    assert env.plan_action("Craft 1 lantern using 1 glass, 1 iron ingot, 1 torch.") == (
        "craft 1 lantern using 1 glass, 1 iron ingot, 1 torch"
    )
    assert env.plan_action("check the inventory") == "inventory"
    assert env.plan_action("gather what the recipe needs") is None
    assert set(BASE).isdisjoint(RECIPES)


@pytest.mark.parametrize("action", HOSTILE)
def test_hostile_actions_never_raise(action: str) -> None:
    env = make_env("crafting")
    env.reset(6)
    assert isinstance(env.step(action).observation, str)
    env.step(env.expert_action())
    assert isinstance(env.step(action).observation, str)
    assert env.plan_action(action) is None or isinstance(env.plan_action(action), str)
    while not env.done:
        env.step(env.expert_action())
    assert env.success and env.step(action).observation == "The episode is over."


def test_deepcopy_is_independent() -> None:
    env = make_env("crafting")
    env.reset(8)
    twin = copy.deepcopy(env)
    while not twin.done:
        twin.step(twin.expert_action())
    assert twin.success and not env.done and env.inventory == {}
    assert env.step(env.expert_action()).observation.startswith("Got ")
