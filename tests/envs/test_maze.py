"""MAZE: LMRL-Gym's wording; an expert that plans on what the agent has observed (the free-space assumption),
names no cell it has not seen and rewrites its plan when a wall refutes it, from any cell; the shortest-path expert
(`maze_oracle`) kept for ablations.

`test_envs` checks what every environment owes (expert in optimal steps, determinism, hostile text, step limit,
copies)."""

from __future__ import annotations

import re
import statistics

import pytest

from coalign.envs import make_env
from coalign.envs import maze as maze_module
from coalign.envs.maze import (
    LAYOUT,
    MAX_DISTANCE,
    MIN_DISTANCE,
    MOVES,
    OPEN,
    MazeEnv,
    OracleMazeEnv,
    describe,
    shortest_path,
)
from coalign.formats.adaplan import parse_turn
from coalign.pilotrl.expert import expert_conversation
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
        goal, start = positions(observations[0])
        assert 3 <= len(shortest_path(start, goal)) <= env.optimal_steps <= 24
        assert observations[-1] == "Success."
        lengths.add(env.optimal_steps)
    assert len(lengths) >= 6


PAIRS = [(a, b) for a in OPEN for b in OPEN if MIN_DISTANCE <= len(shortest_path(a, b)) <= MAX_DISTANCE]


def test_the_expert_reaches_every_goal_from_every_start_within_the_step_limit() -> None:
    """Every start and goal `reset` can draw (452 pairs): the observing expert needs at most 24 of the 25 moves,
    7.77 on average against the shortest path's 7.09 (a plain shortest free-space path needed 30 on 3 pairs)."""
    env, oracle, steps = MazeEnv(), OracleMazeEnv(), []
    for start, goal in PAIRS:
        env.start(start, goal)
        oracle.start(start, goal)
        assert oracle.optimal_steps == len(shortest_path(start, goal)) <= env.optimal_steps <= 24
        steps.append(env.optimal_steps)
        while not env.done:
            env.step(env.expert_action())
        assert env.success and env.steps_taken == steps[-1]
    assert len(PAIRS) == 452 and statistics.mean(steps) < 7.8


def positions(text: str) -> list[tuple[int, int]]:
    """The positions a text names, as (row, column)."""
    return [(int(r), int(c)) for r, c in re.findall(r"\b(\d+), (\d+)\b", text)]


def observed(texts: list[str]) -> set[tuple[int, int]]:
    """The cells the agent has observed, read off the texts alone: the goal, every position told, and each
    neighbour of one that its wall sentence does not name (known open)."""
    cells = set(positions(texts[0])[:1])  # the goal
    for text in texts:
        for r, c, walls in re.findall(r"current position is at position (\d+), (\d+)\.(.*)", text):
            here = (int(r), int(c))
            cells.add(here)
            sides = {"to your right": (0, 1), "to your left": (0, -1), "above you": (-1, 0), "below you": (1, 0)}
            cells |= {(here[0] + dr, here[1] + dc) for words, (dr, dc) in sides.items() if words not in walls}
    return cells


def unseen_cells(env: MazeEnv, seeds: range) -> list[tuple[int, int, str]]:
    """(seed, step, plan step) for every step of the expert's current plan, at every step of its episodes, that
    names a position the agent has not observed (`observed`) in the first observation and those since."""
    found = []
    for seed in seeds:
        read = [env.reset(seed)]
        while not env.done:
            seen = observed(read)
            found += [(seed, env.steps_taken, step) for step in env.expert_plan() if not set(positions(step)) <= seen]
            read.append(env.step(env.expert_action()).observation)
    return found


def test_the_expert_names_no_cell_it_has_not_observed() -> None:
    """Every step of every plan names only the goal and cells the agent stood on or saw open next to one; past
    the known frontier a step names its move alone. The omniscient expert is caught, in its first plan."""
    assert unseen_cells(MazeEnv(), range(300)) == []
    caught = unseen_cells(OracleMazeEnv(), range(100))
    assert len({seed for seed, *_ in caught}) >= 90 and caught[0][:2] == (0, 0)
    env = MazeEnv()
    env.reset(0)
    assert env.expert_plan()[1] == "move down to explore toward the goal"


def flipped(texts: list[str]) -> tuple[str, ...]:
    """The layout with every inner cell that the texts show nothing of flipped, wall for open: all but the goal,
    the positions told and their neighbours (known open or walls)."""
    told = [cell for text in texts for cell in positions(text.partition("current position")[2])]
    kept = set(positions(texts[0])[:1]) | {(r + dr, c + dc) for r, c in told for dr, dc in MOVES.values()} | set(told)
    flip = {"#": ".", ".": "#"}
    return tuple(
        "".join(ch if (r, c) in kept or not (0 < r < len(LAYOUT) - 1 and 0 < c < len(row) - 1) else flip[ch]
                for c, ch in enumerate(row))
        for r, row in enumerate(LAYOUT)
    )  # fmt: skip


def test_the_plan_is_the_same_whatever_the_agent_has_not_observed(monkeypatch: pytest.MonkeyPatch) -> None:
    """At every step the expert's plan and next action are the same in a maze whose unobserved cells are all
    flipped; the omniscient expert's plan is not (or it finds no way at all)."""
    changed = 0
    for seed in range(100):
        env, oracle = MazeEnv(), OracleMazeEnv()
        read = [env.reset(seed)]
        oracle.reset(seed)
        while not env.done:
            plan, action, oracle_plan = env.expert_plan(), env.expert_action(), oracle.expert_plan()
            with monkeypatch.context() as patch:
                patch.setattr(maze_module, "LAYOUT", flipped(read))
                assert (env.expert_plan(), env.expert_action()) == (plan, action), seed
                try:
                    changed += oracle.expert_plan() != oracle_plan
                except KeyError:  # no way from its position to the goal in the flipped maze
                    changed += 1
            oracle.step(action)
            read.append(env.step(action).observation)
    assert changed >= 100


def test_adaplan_episodes_rewrite_the_plan_when_a_wall_refutes_it() -> None:
    """AdaPlan episodes show plans whose moves are rewritten after an observation (a wall where the plan assumed
    none), beyond dropping the step done, on a good share of seeds (measured: 46 of 100; the wording changes on
    all 100, as cells become known); the omniscient expert's never are."""
    env = MazeEnv()

    def rewritten(name: str, seed: int) -> bool:
        plans = [[env.plan_action(step) for step in parse_turn(m["content"], expect_plan=True).plan]
                 for m in expert_conversation(name, seed, "adaplan") if m["role"] == "assistant"]  # fmt: skip
        return any(b != a[1:] for a, b in zip(plans, plans[1:]))

    assert sum(rewritten("maze", seed) for seed in range(100)) >= 40
    assert not any(rewritten("maze_oracle", seed) for seed in range(30))


def test_to_go_is_the_shortest_path_from_the_true_position() -> None:
    env = make_env("maze")
    env.reset(4)
    assert env.to_go() == len(shortest_path(env.position, env.target)) == 9 < env.optimal_steps == 11
    while not env.done:
        env.step(env.expert_action())
    assert env.to_go() == 0.0


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
