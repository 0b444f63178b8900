"""MAZE in LMRL-Gym's text format: a 10x13 double-T maze walked one cell at a time.

Actions: "move up", "move down", "move left", "move right". Positions are "row, column" from the top
left corner (0-based; moving down adds 1 to the row, right adds 1 to the column).
First observation: "The goal is at position 8, 6. Your current position is at position 1, 2. There
are walls above you, below you." Each move answers "Your current position is at position r, c."
and the walls around the new cell: "There is a wall above you." / "There are walls to your right,
to your left." (order: right, left, above, below). A move into a wall leaves the position as it
is. Reaching the goal answers "Success." and ends the episode; any other text answers
"Invalid action." with the position.

Expert (`maze`): it knows only what the observations said (the layout is never shown). Its belief: the cells
it stood on, the cells next to them that a wall sentence named (walls) and those it did not (known open). It
plans on the free-space assumption, as a robot does: a cell not yet seen is open, within the extent seen so
far (the goal, the cells seen and their walls; widened a cell at a time only when no way fits: unbounded, the
way strays around the maze's outer wall). Of the ways to the goal it takes the one through the fewest unseen
cells, then the shortest, then the straightest: through known cells to the frontier cell nearest the goal, as
frontier exploration does (the plain shortest way over the same cells runs along the wrong arm of the bar on 3
of the 452 start and goal pairs, 29 or 30 moves where 25 are allowed; this one needs at most 24 on every
pair). A wall sentence that refutes the assumed way rewrites the plan. `optimal_steps` is this expert's step
count (7.77 moves on average over all pairs, against the shortest path's 7.09); `to_go` the shortest path's
length. `maze_oracle` (`OracleMazeEnv`) keeps the omniscient breadth-first expert, for ablations.
Plan steps: one per move. A move into a cell the agent has observed (stood on, or seen open next to one) or
into the goal names it: "move down to position 6, 6" (`plan_action` -> "move down"); a move past the known
frontier names no position: "move down to explore toward the goal" (`plan_action` -> "move down"), the
hypothesis the next wall sentence may refute.
"""

from __future__ import annotations

import copy
import heapq
import itertools
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
_HERE = re.compile(r"Your current position is at position (\d+), (\d+)\.(.*)")


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


def _beside(cell: Cell, direction: str) -> Cell:
    """The cell one move away, wall or not (a coordinate, as the agent reckons it)."""
    return cell[0] + MOVES[direction][0], cell[1] + MOVES[direction][1]


def _cheapest(
    start: Cell, goal: Cell, known: set[Cell], walls: set[Cell], box: tuple[int, int, int, int]
) -> list[tuple[str, Cell]] | None:
    """The moves and cells of the way from `start` to `goal` inside `box` (top, bottom, left, right) that
    passes the fewest cells outside `known`, then the fewest moves, then the fewest turns; None if none fits.
    A uniform-cost search over (cell, last move); ties go up, down, left, right."""
    top, bottom, left, right = box
    origin = (start, "")
    best: dict[tuple[Cell, str], tuple[int, int, int]] = {origin: (0, 0, 0)}
    back: dict[tuple[Cell, str], tuple[Cell, str]] = {}
    order = itertools.count()
    queue = [((0, 0, 0), next(order), origin)]
    while queue:
        cost, _, state = heapq.heappop(queue)
        if cost > best[state]:
            continue
        cell, last = state
        if cell == goal:
            route = []
            while state != origin:
                route.append((state[1], state[0]))
                state = back[state]
            return route[::-1]
        for direction in MOVES:
            nxt = _beside(cell, direction)
            if nxt in walls or not (top <= nxt[0] <= bottom and left <= nxt[1] <= right):
                continue
            unseen = nxt not in known and nxt != goal
            step = (cost[0] + unseen, cost[1] + 1, cost[2] + (last not in ("", direction)))
            if (nxt, direction) not in best or step < best[(nxt, direction)]:
                best[(nxt, direction)] = step
                back[(nxt, direction)] = state
                heapq.heappush(queue, (step, next(order), (nxt, direction)))
    return None


class MazeEnv(TextEnv):
    """Walk from the start to the goal of the double-T maze."""

    name = "maze"
    invalid_reply = r"Invalid action\."
    max_steps = 25
    expert_revises = True
    instructions = (
        "You are in a maze. Reach the goal in as few moves as possible. Actions: move up, move down, "
        "move left, move right. Positions are row, column: move down adds 1 to the row, move right adds 1 "
        "to the column. Each observation tells your position and the walls around you."
    )

    def __init__(self) -> None:
        super().__init__()
        self.position: Cell = OPEN[0]
        self.target: Cell = OPEN[0]
        # the expert's belief, from the observations alone
        self.here: Cell = OPEN[0]  # the position the last observation told
        self.known: set[Cell] = set()  # cells stood on, and their neighbours no wall sentence named
        self.walls: set[Cell] = set()  # neighbours of cells stood on that a wall sentence named

    def reset(self, seed: int | None = None) -> str:
        rng = random.Random(random.randrange(2**31) if seed is None else seed)
        while True:
            start, goal = rng.sample(OPEN, 2)
            if MIN_DISTANCE <= len(shortest_path(start, goal)) <= MAX_DISTANCE:
                break
        return self.start(start, goal)

    def start(self, start: Cell, goal: Cell) -> str:
        """The task from `start` to `goal` (what `reset` draws); its first observation."""
        self.position, self.target = start, goal
        self.steps_taken = 0
        self.success = self.done = False
        self.goal = f"reach the goal at position {goal[0]}, {goal[1]}"
        self.known, self.walls = set(), set()
        observation = f"The goal is at position {goal[0]}, {goal[1]}. {describe(start)}"
        self._observe(observation)
        trial = copy.deepcopy(self)
        while not trial.done:
            trial.step(trial.expert_action())
        self.optimal_steps = trial.steps_taken
        return observation

    def _act(self, action: str) -> str:
        observation = self._move(action)
        self._observe(observation)
        return observation

    def _move(self, action: str) -> str:
        match = _MOVE.fullmatch(action.lower().rstrip("."))
        if not match:
            return f"Invalid action. {describe(self.position)}"
        self.position = _next(self.position, match.group(1))
        if self.position == self.target:
            self.success = self.done = True
            return "Success."
        return describe(self.position)

    def _observe(self, observation: str) -> None:
        """Update the belief from an observation's text: the position it tells, and which sides have walls."""
        match = _HERE.search(observation)
        if not match:
            return
        self.here = (int(match.group(1)), int(match.group(2)))
        self.known.add(self.here)
        for direction, words in WALL_WORDS:
            (self.walls if words in match.group(3) else self.known).add(_beside(self.here, direction))

    def _route(self) -> list[tuple[str, Cell]]:
        """The way to the goal on the free-space assumption (see the module docstring): the extent seen so far,
        widened a cell at a time until a way fits (one does once it holds the maze, whose way no wall seen
        blocks)."""
        seen = self.known | self.walls | {self.target}
        rows, cols = [r for r, _ in seen], [c for _, c in seen]
        for margin in itertools.count():
            box = (min(rows) - margin, max(rows) + margin, min(cols) - margin, max(cols) + margin)
            route = _cheapest(self.here, self.target, self.known, self.walls, box)
            if route is not None:
                return route

    def expert_action(self) -> str:
        route = [] if self.done else self._route()
        return f"move {route[0][0]}" if route else "move up"

    def expert_plan(self) -> list[str]:
        if self.done:
            return []
        return [
            f"move {direction} to position {cell[0]}, {cell[1]}"
            if cell in self.known or cell == self.target
            else f"move {direction} to explore toward the goal"
            for direction, cell in self._route()
        ]

    def to_go(self) -> float:
        """The shortest path's length from the true position (the expert's plan is a hypothesis)."""
        return float(len(shortest_path(self.position, self.target)))

    def plan_action(self, step: str) -> str | None:
        match = _MOVE.search(str(step).lower())
        return f"move {match.group(1)}" if match else None


class OracleMazeEnv(MazeEnv):
    """The same maze, its expert reading the layout: a breadth-first shortest path (ties broken up, down, left,
    right). For ablations only (`maze_oracle`): its plans name cells the agent has not seen and never change."""

    name = "maze_oracle"
    expert_revises = False

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
