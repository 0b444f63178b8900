"""Crafting: TextCraft's commands and answers, a recipe-tree expert that recovers from any state and plans only
on the recipes the first observation shows (it never needs to rewrite: nothing is hidden).

`test_envs` checks what every environment owes (expert in optimal steps, determinism, hostile text, step limit,
copies)."""

from __future__ import annotations

import pytest

from coalign.envs import crafting as crafting_module
from coalign.envs import make_env
from coalign.envs.crafting import BASE, ITEMS, RECIPES, CraftingEnv, depth
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


def item_names(text: str) -> set[str]:
    """The items a text names: at each word, the longest item name starting there (a plural "s" forgiven), so
    that "stone block" is one name and "stone" another."""
    words, names, i = text.lower().replace(",", " ").replace(".", " ").split(), set(), 0
    while i < len(words):
        for n in range(4, 0, -1):
            name = " ".join(words[i : i + n])
            item = name if name in ITEMS else name[:-1] if name.endswith("s") and name[:-1] in ITEMS else None
            if item:
                names.add(item)
                i += n - 1
                break
        i += 1
    return names


def unshown_items(seeds: range) -> list[tuple[int, int, str, set[str]]]:
    """(seed, step, plan step, names) wherever a step of the expert's current plan names an item that nothing
    the agent has read so far names (the instructions, the observations, its own actions)."""
    found = []
    env = CraftingEnv()
    for seed in seeds:
        read = [env.instructions, env.reset(seed)]
        while not env.done:
            seen = set().union(*map(item_names, read))
            found += [(seed, env.steps_taken, step, item_names(step) - seen) for step in env.expert_plan()]
            read.append(env.expert_action())
            read.append(env.step(read[-1]).observation)
    return [leak for leak in found if leak[3]]


def test_the_expert_names_only_items_the_first_observation_shows() -> None:
    """Every item every plan step names, at every step of 150 episodes, is in the recipes and goal the first
    observation shows; the check finds a step naming an unshown item."""
    assert unshown_items(range(150)) == []
    env = make_env("crafting")
    first = env.reset(0)
    unshown = sorted(set(RECIPES) - item_names(first))[0]
    assert item_names(f"craft 1 {unshown} using 2 plank for the {env.target}") - item_names(first) == {unshown}


def test_the_plan_is_the_same_whatever_the_unshown_recipes_say(monkeypatch: pytest.MonkeyPatch) -> None:
    """The expert reads no recipe the first observation does not show: rewriting all the others changes no plan
    at any step."""
    env = make_env("crafting")
    for seed in range(100):
        first = env.reset(seed)
        while not env.done:
            plan = env.expert_plan()
            with monkeypatch.context() as patch:
                for item in set(RECIPES) - item_names(first):
                    patch.setitem(crafting_module.RECIPES, item, (7, {"gold ore": 9}))
                assert env.expert_plan() == plan, seed
            env.step(env.expert_action())


def test_to_go_is_the_expert_steps_left_and_zero_once_crafted() -> None:
    env = make_env("crafting")
    env.reset(5)
    left = [env.to_go()]
    while not env.done:
        env.step(env.expert_action())
        left.append(env.to_go())
    assert left == [float(n) for n in range(env.optimal_steps, -1, -1)]
    env.reset(5)
    for _ in range(env.max_steps):
        env.step("inventory")
    assert not env.success and env.to_go() == env.optimal_steps  # a failed task still has its way to go
