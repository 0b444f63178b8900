"""MAZE in LMRL-Gym's text format: a 10x13 double-T maze walked one cell at a time.

Actions: "move up", "move down", "move left", "move right". Positions are "row, column" from the top
left corner (0-based; moving down adds 1 to the row, right adds 1 to the column).
First observation: "The goal is at position 8, 6. Your current position is at position 1, 2. There
are walls above you, below you." Each move answers "Your current position is at position r, c."
and the walls around the new cell: "There is a wall above you." / "There are walls to your right,
to your left." (order: right, left, above, below). A move into a wall leaves the position as it
is. Reaching the goal answers "Success." and ends the episode; any other text answers
"Invalid action." with the position.

Expert: a breadth-first shortest path (ties broken up, down, left, right).
Plan steps: one per move, "move down to position 6, 6" (`plan_action` -> "move down").
"""

from __future__ import annotations

import random
import re
from collections import deque

from coalign.envs.base import TextEnv

# Our drawing of the double-T shape LMRL-Gym uses: two T junctions on a bar over a central stem.
LAYOUT = (
    "#############",
    "#.....#.....#",
    "###.#####.###",
    "###.#####.###",
    "###.#####.###",
    "###.......###",
    "######.######",
    "######.######",
    "######.######",
    "#############",
)
MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
WALL_WORDS = (("right", "to your right"), ("left", "to your left"), ("up", "above you"), ("down", "below you"))
MIN_DISTANCE, MAX_DISTANCE = 3, 12
Cell = tuple[int, int]

OPEN: tuple[Cell, ...] = tuple((r, c) for r, row in enumerate(LAYOUT) for c, ch in enumerate(row) if ch == ".")
_MOVE = re.compile(r"\bmove (up|down|left|right)\b")


def _next(cell: Cell, direction: str) -> Cell:
    dr, dc = MOVES[direction]
    target = (cell[0] + dr, cell[1] + dc)
    return target if LAYOUT[target[0]][target[1]] == "." else cell


def shortest_path(start: Cell, goal: Cell) -> list[str]:
    """The moves of a shortest path (breadth-first search from the goal, so each cell knows its
    distance; then walk downhill from the start)."""
    distance = {goal: 0}
    queue = deque([goal])
    while queue:
        cell = queue.popleft()
        for direction in MOVES:
            neighbour = _next(cell, direction)
            if neighbour not in distance:
                distance[neighbour] = distance[cell] + 1
                queue.append(neighbour)
    moves, cell = [], start
    while cell != goal:
        direction = next(d for d in MOVES if distance.get(_next(cell, d), -1) == distance[cell] - 1)
        moves.append(direction)
        cell = _next(cell, direction)
    return moves


def describe(cell: Cell) -> str:
    walls = [words for direction, words in WALL_WORDS if _next(cell, direction) == cell]
    where = f"Your current position is at position {cell[0]}, {cell[1]}."
    if not walls:
        return f"{where} There are no walls around you."
    if len(walls) == 1:
        return f"{where} There is a wall {walls[0]}."
    return f"{where} There are walls {', '.join(walls)}."


class MazeEnv(TextEnv):
    """Walk from the start to the goal of the double-T maze."""

    name = "maze"
    invalid_reply = r"Invalid action\."
    max_steps = 25
    instructions = (
        "You are in a maze. Reach the goal in as few moves as possible. Actions: move up, move down, "
        "move left, move right. Positions are row, column: move down adds 1 to the row, move right adds 1 "
        "to the column. Each observation tells your position and the walls around you."
    )

    def __init__(self) -> None:
        super().__init__()
        self.position: Cell = OPEN[0]
        self.target: Cell = OPEN[0]

    def reset(self, seed: int | None = None) -> str:
        rng = random.Random(random.randrange(2**31) if seed is None else seed)
        while True:
            start, goal = rng.sample(OPEN, 2)
            if MIN_DISTANCE <= len(shortest_path(start, goal)) <= MAX_DISTANCE:
                break
        self.position, self.target = start, goal
        self.steps_taken = 0
        self.success = self.done = False
        self.goal = f"reach the goal at position {goal[0]}, {goal[1]}"
        self.optimal_steps = len(shortest_path(start, goal))
        return f"The goal is at position {goal[0]}, {goal[1]}. {describe(start)}"

    def _act(self, action: str) -> str:
        match = _MOVE.fullmatch(action.lower().rstrip("."))
        if not match:
            return f"Invalid action. {describe(self.position)}"
        self.position = _next(self.position, match.group(1))
        if self.position == self.target:
            self.success = self.done = True
            return "Success."
        return describe(self.position)

    def expert_action(self) -> str:
        moves = shortest_path(self.position, self.target)
        return f"move {moves[0]}" if moves else "move up"

    def expert_plan(self) -> list[str]:
        if self.done:
            return []
        steps, cell = [], self.position
        for direction in shortest_path(self.position, self.target):
            cell = _next(cell, direction)
            steps.append(f"move {direction} to position {cell[0]}, {cell[1]}")
        return steps

    def plan_action(self, step: str) -> str | None:
        match = _MOVE.search(str(step).lower())
        return f"move {match.group(1)}" if match else None
