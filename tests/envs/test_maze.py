"""MAZE: LMRL-Gym's wording, a shortest-path expert from any cell.

`test_envs` checks what every environment owes (expert in optimal steps, determinism, hostile text, step limit,
copies)."""

from __future__ import annotations

from coalign.envs import make_env
from coalign.envs.maze import LAYOUT, OPEN, describe, shortest_path
from tests.envs.test_envs import HOSTILE, NEAR_MISSES, expert_runs


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


def test_expert_reaches_goals_at_many_distances() -> None:
    lengths = set()
    for env, _, observations in expert_runs("maze", range(300)):
        assert 3 <= env.optimal_steps <= 12 and observations[-1] == "Success."
        lengths.add(env.optimal_steps)
    assert len(lengths) >= 6


def test_wall_bump_keeps_position_and_invalid_text_is_answered() -> None:
    env = make_env("maze")
    env.reset(0)
    env.position = (1, 2)
    assert env.step("move up").observation.startswith("Your current position is at position 1, 2.")
    assert env.step("fly away").observation.startswith("Invalid action. Your current position is at position 1, 2.")
    assert env.step("Move Right").observation.startswith("Your current position is at position 1, 3.")


def test_seeds_draw_different_tasks() -> None:
    assert len({make_env("maze").reset(s) for s in range(40)}) > 20


def test_plan_action() -> None:
    env = make_env("maze")
    env.reset(0)
    assert env.plan_action("move down to position 6, 6") == "move down"
    assert env.plan_action("Then MOVE LEFT twice") == "move left"
    assert env.plan_action("head towards the goal") is None
    assert env.plan_action("go left") is None


def test_plan_action_reads_only_moves_from_hostile_text() -> None:
    env = make_env("maze")
    env.reset(4)
    for text in HOSTILE + NEAR_MISSES["maze"]:
        assert env.plan_action(text) in (None, "move up", "move down", "move left", "move right")
