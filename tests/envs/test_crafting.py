"""Crafting: TextCraft's commands and answers, a recipe-tree expert that recovers from any state.

`test_envs` checks what every environment owes (expert in optimal steps, determinism, hostile text, step limit,
copies)."""

from __future__ import annotations

from coalign.envs import make_env
from coalign.envs.crafting import BASE, RECIPES, depth
from tests.envs.test_envs import expert_runs


def test_first_observation_lists_commands_and_goal() -> None:
    env = make_env("crafting")
    first = env.reset(0)
    lines = first.splitlines()
    assert lines[0] == "Crafting commands:" and lines[-1] == f"Goal: craft {env.target}."
    assert f"craft {RECIPES[env.target][0]} {env.target} using" in first
    assert depth(env.target) >= 2
    assert sum(line.startswith("craft ") for line in lines) >= 7  # needed + distractors


def test_expert_only_gets_and_crafts_many_targets() -> None:
    targets = set()
    for env, _, observations in expert_runs("crafting", range(300)):
        targets.add(env.target)
        assert 3 <= env.optimal_steps <= 12
        assert all(observation.startswith(("Got ", "Crafted ")) for observation in observations[1:]), observations
    assert len(targets) >= 15


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


def test_seeds_draw_different_tasks() -> None:
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
