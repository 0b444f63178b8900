"""MAZE: LMRL-Gym's wording, a shortest-path expert from any cell, hostile text."""

from __future__ import annotations

import copy

import pytest

from coalign.envs import make_env
from coalign.envs.maze import LAYOUT, OPEN, describe, shortest_path

HOSTILE = [
    "",
    "x" * 1_000_000,
    "move\x00 up",
    "\u202emove up\u202c",
    "ｍｏｖｅ ｕｐ",
    "__import__('os').system('x')",
    "(" * 10_000 + ")" * 10_000,
    "\n\n  \nmove left\nmove right",
    "move diagonally",
]


def test_layout_is_a_10x13_double_t() -> None:
    assert len(LAYOUT) == 10 and all(len(row) == 13 for row in LAYOUT)
    assert all(row[0] == row[-1] == "#" for row in LAYOUT) and set(LAYOUT[0]) == set(LAYOUT[-1]) == {"#"}
    assert all(shortest_path(OPEN[0], cell) or cell == OPEN[0] for cell in OPEN)  # connected


def test_wording() -> None:
    assert describe((1, 2)) == "Your current position is at position 1, 2. There are walls above you, below you."
    assert describe((6, 6)) == "Your current position is at position 6, 6. There are walls to your right, to your left."
    assert describe((5, 6)) == "Your current position is at position 5, 6. There is a wall above you."
    assert describe((8, 6)).endswith("There are walls to your right, to your left, below you.")
    env = make_env("maze")
    first = env.reset(0)
    assert first.startswith(f"The goal is at position {env.target[0]}, {env.target[1]}. Your current position is")


def test_expert_succeeds_in_optimal_steps() -> None:
    env = make_env("maze")
    lengths = set()
    for seed in range(300):
        env.reset(seed)
        assert 3 <= env.optimal_steps <= 12
        lengths.add(env.optimal_steps)
        plan = env.expert_plan()
        assert len(plan) == env.optimal_steps and all(len(s.split()) <= 12 for s in plan)
        assert env.plan_action(plan[0]) == env.expert_action()
        while not env.done:
            step = env.step(env.expert_action())
        assert env.success and step.observation == "Success." and step.reward == 1.0
        assert env.steps_taken == env.optimal_steps
    assert len(lengths) >= 6


def test_expert_recovers_from_any_cell() -> None:
    env = make_env("maze")
    for seed in range(50):
        env.reset(seed)
        for action in ("move left", "move up", "move up", "move right", "jump"):
            if not env.done:
                env.step(action)
        while not env.done:
            assert env.plan_action(env.expert_plan()[0]) == env.expert_action()
            env.step(env.expert_action())
        assert env.success


def test_wall_bump_keeps_position_and_invalid_text_is_answered() -> None:
    env = make_env("maze")
    env.reset(0)
    env.position = (1, 2)
    assert env.step("move up").observation.startswith("Your current position is at position 1, 2.")
    assert env.step("fly away").observation.startswith("Invalid action. Your current position is at position 1, 2.")
    assert env.step("Move Right").observation.startswith("Your current position is at position 1, 3.")


def test_step_limit_ends_the_episode() -> None:
    env = make_env("maze")
    env.reset(2)
    for _ in range(env.max_steps - 1):
        assert not env.step("wait").done
    assert env.step("wait").done and not env.success


def test_deterministic_per_seed() -> None:
    a, b = make_env("maze"), make_env("maze")
    for seed in (0, 1, 99, 2**40):
        assert a.reset(seed) == b.reset(seed)
        assert a.expert_plan() == b.expert_plan()
    assert len({make_env("maze").reset(s) for s in range(40)}) > 20


def test_plan_action() -> None:
    env = make_env("maze")
    env.reset(0)
    assert env.plan_action("move down to position 6, 6") == "move down"
    assert env.plan_action("Then MOVE LEFT twice") == "move left"
    assert env.plan_action("head towards the goal") is None
    assert env.plan_action("go left") is None


@pytest.mark.parametrize("action", HOSTILE)
def test_hostile_actions_never_raise(action: str) -> None:
    env = make_env("maze")
    env.reset(4)
    assert isinstance(env.step(action).observation, str)
    env.step(env.expert_action())
    assert isinstance(env.step(action).observation, str)
    assert env.plan_action(action) in (None, "move up", "move down", "move left", "move right")
    while not env.done:
        env.step(env.expert_action())
    assert env.step(action).observation == "The episode is over."


def test_deepcopy_is_independent() -> None:
    env = make_env("maze")
    env.reset(11)
    twin = copy.deepcopy(env)
    while not twin.done:
        twin.step(twin.expert_action())
    assert twin.success and not env.done and env.steps_taken == 0
    assert env.expert_plan() and env.position != twin.position
