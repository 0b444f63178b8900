"""BabyAI: real minigrid levels in words, macro actions, an expert that solves every level drawn.

`test_envs` checks what every environment owes (expert in optimal steps, determinism, hostile text, step limit,
copies)."""

from __future__ import annotations

import time

from coalign.envs import make_env
from coalign.envs.babyai import LEVELS


def test_expert_completes_every_level_fast() -> None:
    env = make_env("babyai")
    levels, step_times = set(), []
    for seed in range(200):
        first = env.reset(seed)
        levels.add(env.level)
        assert first.startswith(f"Your goal: {env.goal}\n") and env.goal
        while not env.done:
            start = time.perf_counter()
            step = env.step(env.expert_action())
            step_times.append(time.perf_counter() - start)
        assert step.observation == "Mission complete."
    assert levels == set(LEVELS)
    assert sum(step_times) / len(step_times) < 0.02


def test_observation_wording() -> None:
    env = make_env("babyai")
    first = env.reset(0)
    assert "In front of you in this room, you can see several objects: There is a " in first
    assert "You are facing a wall" in first
    assert env.step("go to red ball 7").observation.startswith("You cannot see red ball 7.")
    assert env.step("fly").observation.startswith("Invalid action.")
    locked = next(s for s in range(6, 400, 7) if "locked door" in make_env("babyai").reset(s))
    env.reset(locked)
    door = next(w for w in env.describe().split("There is a ")[1:] if "locked door" in w)
    color, n = door.split()[0], door.split()[3]
    if env.env.carrying is None:
        observation = env.step(f"toggle and go through {color} door {n}").observation
        assert observation.startswith(f"The {color} door {n} is locked. You need a {color} key.")


def test_expert_drops_a_wrong_pickup_and_recovers() -> None:
    env = make_env("babyai")
    recovered = 0
    for seed in range(LEVELS.index("PickupLoc"), 140, len(LEVELS)):
        env.reset(seed)
        wrong = [o for o, _, _ in env.visible() if o not in env.env.instrs.desc.obj_set and o.type != "door"]
        if not wrong:
            continue
        env.step(f"pick up {env.label(wrong[0])}")
        assert env.env.carrying is wrong[0] and not env.done
        assert "You are carrying a " in env.describe()
        plan = env.expert_plan()
        assert any(env.plan_action(step) == "drop" for step in plan)
        while not env.done:
            env.step(env.expert_action())
        recovered += env.success
    assert recovered >= 3


def test_plan_action() -> None:
    env = make_env("babyai")
    env.reset(0)
    assert env.plan_action("go to red ball 1 for the goal") == "go to red ball 1"
    assert env.plan_action("Pickup the blue key 2 to open the door") == "pick up blue key 2"
    assert env.plan_action("toggle and go through the grey locked door 1") == "toggle and go through grey door 1"
    assert env.plan_action("go through yellow door 2 into the next room") == "go through yellow door 2"
    assert env.plan_action("turn left to look for the red ball") == "turn left"
    assert env.plan_action("drop to free your hands") == "drop"
    assert env.plan_action("find the ball") is None
