"""IQA-like interactive question answering: walk a kitchen grid, look, then answer a yes/no question.

Our own small world after IQUAD (Gordon et al., 2018): "Is there a mug in the fridge 1?" can only be
answered after seeing inside: a container must be opened (it must be right in front of the agent),
a surface must come into view. An answer ends the episode; it succeeds iff it is right and the agent
has looked (a blind guess scores nothing, so a policy cannot win half the episodes by guessing).
Answers alternate with the seed's parity, so they are balanced True/False.

Observations: "You are at row 3, column 2, facing north. You see the fridge 1 (closed), 2 cells ahead."
("right in front of you" when adjacent, "a wall" when no fixture is in line; an open container or
a surface adds "In it, you see ..." / "On it, you see ...").

The expert (`iqa`) knows only what the agent has observed: the fixtures' places (the first observation), where
it stands and faces, and the contents each observation has shown (`IQAEnv.seen`). Its plan walks to the
subject and opens it; until an observation has shown the subject's contents, its last step names no answer
("answer after looking: is there a mug in the fridge 1?", left to the one acting: `delegates`), and the plan
revised after that observation states it ("answer True: there is a mug in the fridge 1"). `iqa_oracle`'s
expert states the answer from the start, read from the simulator (ablations only).

Plan steps each begin with the exact action, then an optional purpose: "turn left on the way to the
fridge 1", "move ahead on the way to the fridge 1", "open fridge 1 to look inside", "answer True: there is a
mug in the fridge 1". `plan_action` reads the action at the start of a step (after an optional "Step 3:",
"3.", "-" or "Action:").
"""

from __future__ import annotations

import random
import re
from collections import deque

from coalign.envs.base import PlannedEnv, plain_step
from coalign.envs.text import match_action, step_text

NOTHING = "Nothing happened."
ROWS = COLS = 4
HEADINGS = ("north", "east", "south", "west")  # turning right goes forward in this tuple
DELTA = {"north": (-1, 0), "east": (0, 1), "south": (1, 0), "west": (0, -1)}
CONTAINERS = ("cabinet 1", "cabinet 2", "drawer 1", "fridge 1", "microwave 1")
SURFACES = ("counter 1", "shelf 1", "table 1")
OBJECTS = ("apple", "bowl", "bread", "cup", "egg", "knife", "lettuce", "mug", "plate", "potato", "spoon", "tomato")
MOVES = ("move ahead", "turn left", "turn right")

ACTIONS = (  # verb, pattern
    ("move ahead", r"move (?:ahead|forward)()"),
    ("turn left", r"turn left()"),
    ("turn right", r"turn right()"),
    ("open", r"open (?:the )?([a-z]+ \d+)"),
    ("answer", r"answer (true|false)"),
)

Cell = tuple[int, int]
Pose = tuple[int, int, str]


def article(name: str) -> str:
    return ("an " if name[0] in "aeiou" else "a ") + name


def listing(names: list[str]) -> str:
    items = [article(n) for n in names]
    return " and ".join(items) if len(items) <= 2 else ", ".join(items[:-1]) + ", and " + items[-1]


class IQAEnv(PlannedEnv):
    """A 4x4 kitchen with four fixtures along the walls, objects in and on them, one question per seed. Its
    expert answers from what the agent has seen (module docstring)."""

    name = "iqa"
    max_steps = 20
    expert_revises = True
    invalid_reply = r"Nothing happened\."
    instructions = (
        "You are in a kitchen grid and must answer a question about it. Act with one command per turn: "
        "move ahead, turn left, turn right, open X (X right in front of you, e.g. open fridge 1), "
        "answer True, answer False. Look before you answer: open a container, or bring a surface into view."
    )

    def reset(self, seed: int | None = None) -> str:
        self.seed = random.randrange(2**32) if seed is None else seed
        rng = random.Random(self.seed)
        names = rng.sample(CONTAINERS, rng.randint(2, 3))
        names += rng.sample(SURFACES, 4 - len(names))
        self.fixtures = self._place_fixtures(rng, sorted(names))
        self.is_open = {f: False for f in self.fixtures if f in CONTAINERS}
        self.subject = rng.choice(list(self.fixtures))
        self.asked = rng.choice(OBJECTS)
        self.truth = self.seed % 2 == 0
        self.contents: dict[str, list[str]] = {f: [] for f in self.fixtures}
        others = [f for f in self.fixtures if f != self.subject]
        if self.truth:
            self.contents[self.subject].append(f"{self.asked} 1")
        elif rng.random() < 0.7:  # the asked object is often elsewhere: seeing it somewhere is no answer
            self.contents[rng.choice(others)].append(f"{self.asked} 1")
        for other in rng.sample([o for o in OBJECTS if o != self.asked], rng.randint(2, 4)):
            self.contents[rng.choice(list(self.fixtures))].append(f"{other} 1")
        for items in self.contents.values():
            items.sort()
        free = [(r, c) for r in range(1, ROWS + 1) for c in range(1, COLS + 1) if (r, c) not in self.cells]
        while True:
            row, col = rng.choice(free)
            self.pose: Pose = (row, col, rng.choice(HEADINGS))
            if self._in_view(self.pose)[0] != self.subject:  # the start shows no answer
                break
        self.looked = False
        self.seen: dict[str, list[str]] = {}  # the belief: each fixture whose contents the agent has seen, and them
        where = "in" if self.subject in CONTAINERS else "on"
        self.goal = f"Is there {article(self.asked)} {where} the {self.subject}?"
        self.distance = self._distances()
        self.steps_taken, self.success, self.done = 0, False, False
        self.optimal_steps = len(self._plan())  # the expert's steps: only the answer's wording is ever revised
        room = ", ".join(f"the {f} (row {r}, column {c})" for f, (r, c) in self.fixtures.items())
        return (
            f"You are in a kitchen of {ROWS} rows and {COLS} columns. In it: {room}.\n"
            f"{self._where()}\nQuestion: {self.goal}"
        )

    @property
    def cells(self) -> dict[Cell, str]:
        return {cell: name for name, cell in self.fixtures.items()}

    @staticmethod
    def _place_fixtures(rng: random.Random, names: list[str]) -> dict[str, Cell]:
        """Fixtures on wall cells, drawn again until every free cell is reachable and every fixture has a
        free neighbour (so every question can be answered)."""
        wall = [(r, c) for r in range(1, ROWS + 1) for c in range(1, COLS + 1) if r in (1, ROWS) or c in (1, COLS)]
        while True:
            fixtures = dict(zip(names, rng.sample(wall, len(names))))
            taken = set(fixtures.values())
            free = {(r, c) for r in range(1, ROWS + 1) for c in range(1, COLS + 1)} - taken
            if _connected(free) and all(_neighbours(cell) & free for cell in taken):
                return fixtures

    # --- acting ---

    def _act(self, action: str) -> str:
        parsed = _parse(action.lower().rstrip(".!"), whole=True)
        if parsed is None:
            return NOTHING
        verb, arg = parsed
        if verb == "answer":
            return self._answer(arg == "true")
        observation = self._open(arg) if verb == "open" else self._move(verb)
        if shown := re.search(r"You (?:open|see) the ([a-z]+ \d+)[^.]*\. (?:In|On) it, you see (.*)\.$", observation):
            self.seen[shown[1]] = re.findall(r"\b[a-z]+ \d+\b", shown[2])
        return observation

    def _move(self, verb: str) -> str:
        moved = _next_pose(self.pose, verb, self.cells)
        blocked = verb == "move ahead" and moved == self.pose
        self.pose = moved
        self.looked = self.looked or self._shows_subject(self.pose, contents=True)
        return ("You cannot move ahead. " if blocked else "") + self._where()

    def _open(self, name: str) -> str:
        thing, distance = self._in_view(self.pose)
        if thing != name or distance != 1 or self.is_open.get(name, True):
            return NOTHING
        self.is_open[name] = True
        self.looked = self.looked or name == self.subject
        return f"You open the {name}. In it, you see {listing(self.contents[name]) or 'nothing'}."

    def _answer(self, answer: bool) -> str:
        self.done = True
        if not self.looked:
            return f"You answered without looking at the {self.subject}. The episode is over."
        self.success = answer == self.truth
        return "Your answer is correct." if self.success else "Your answer is wrong."

    def _where(self) -> str:
        """Where the agent is and what it sees straight ahead, with what is in or on it when visible."""
        row, col, heading = self.pose
        thing, distance = self._in_view(self.pose)
        away = "right in front of you" if distance == 1 else f"{distance} cells ahead"
        if thing is None:
            return f"You are at row {row}, column {col}, facing {heading}. You see a wall, {away}."
        state = "" if thing in SURFACES else (" (open)" if self.is_open[thing] else " (closed)")
        seen = ""
        if thing in SURFACES or self.is_open[thing]:
            where = "On" if thing in SURFACES else "In"
            seen = f" {where} it, you see {listing(self.contents[thing]) or 'nothing'}."
        return f"You are at row {row}, column {col}, facing {heading}. You see the {thing}{state}, {away}.{seen}"

    def _in_view(self, pose: Pose) -> tuple[str | None, int]:
        """The first fixture straight ahead (None: a wall) and how many cells away it is."""
        row, col, heading = pose
        d_row, d_col = DELTA[heading]
        cells = self.cells
        distance = 1
        while True:
            row, col = row + d_row, col + d_col
            if not (1 <= row <= ROWS and 1 <= col <= COLS):
                return None, distance
            if (row, col) in cells:
                return cells[(row, col)], distance
            distance += 1

    # --- the expert ---

    def plan_action(self, step: str) -> str | None:
        parsed = _parse(step_text(step), whole=False)
        if parsed is None or (parsed[0] == "open" and parsed[1] not in self.fixtures):
            return None
        verb, arg = parsed
        return {"answer": f"answer {arg.capitalize()}", "open": f"open {arg}"}.get(verb, verb)

    def delegates(self, step: str) -> bool:
        """This task's answer-after-looking step exactly (case, spacing and a final full stop aside): the
        expert answers there once the subject has been seen, and otherwise takes its next step."""
        return plain_step(step) == plain_step(self._question())

    def to_go(self) -> float:
        """The omniscient solver's remaining steps: the same walk, and the answer it knows."""
        return 0.0 if self.success else float(len(self._oracle_plan()))

    def _plan(self) -> list[tuple[str, str]]:
        """(action, plan step) pairs on what the agent has seen: the answer once the subject's contents have been
        seen; before that the walk, the opening and a step asking the question (never the first step: the
        start shows no answer, and the pose that shows the subject shows its contents or needs opening)."""
        if self.done:
            return []
        if self.subject in self.seen:
            return [self._answer_step(any(o.rsplit(" ", 1)[0] == self.asked for o in self.seen[self.subject]))]
        question = self._question()
        return [*self._walk(), (question, question)]

    def _oracle_plan(self) -> list[tuple[str, str]]:
        """The omniscient expert's pairs: the same walk, then the answer read from the simulator."""
        if self.done:
            return []
        return [*([] if self.looked else self._walk()), self._answer_step(self.truth)]

    def _walk(self) -> list[tuple[str, str]]:
        """The shortest walk to a pose that shows the subject (right in front for a container), and opening it.
        Each move is the first in MOVES that brings the goal one step nearer, so replanning after an expert
        move gives the rest of the same walk."""
        steps = []
        distance = self.distance
        pose, cells, way = self.pose, self.cells, f"on the way to the {self.subject}"
        while distance[pose] > 0:
            move = next(m for m in MOVES if distance[_next_pose(pose, m, cells)] == distance[pose] - 1)
            steps.append((move, f"{move} {way}"))
            pose = _next_pose(pose, move, cells)
        if self.subject in CONTAINERS:
            steps.append((f"open {self.subject}", f"open {self.subject} to look inside"))
        return steps

    def _answer_step(self, answer: bool) -> tuple[str, str]:
        word = "True" if answer else "False"
        where = "in" if self.subject in CONTAINERS else "on"
        fact = f"there is {article(self.asked)}" if answer else f"there is no {self.asked}"
        return f"answer {word}", f"answer {word}: {fact} {where} the {self.subject}"

    def _question(self) -> str:
        where = "in" if self.subject in CONTAINERS else "on"
        return f"answer after looking: is there {article(self.asked)} {where} the {self.subject}?"

    def _distances(self) -> dict[Pose, int]:
        """Moves from every pose to the nearest that shows the subject (breadth-first from those, backwards);
        it depends on the layout only, so it is computed once per episode."""
        cells = self.cells
        poses = [
            (r, c, h) for r in range(1, ROWS + 1) for c in range(1, COLS + 1) if (r, c) not in cells for h in HEADINGS
        ]
        before: dict[Pose, list[Pose]] = {pose: [] for pose in poses}
        for pose in poses:
            for move in MOVES:
                before[_next_pose(pose, move, cells)].append(pose)
        frontier = deque(pose for pose in poses if self._shows_subject(pose, contents=False))
        distance = dict.fromkeys(frontier, 0)
        while frontier:
            pose = frontier.popleft()
            for previous in before[pose]:
                if previous not in distance:
                    distance[previous] = distance[pose] + 1
                    frontier.append(previous)
        return distance

    def _shows_subject(self, pose: Pose, contents: bool) -> bool:
        """Whether `pose` has the subject in view: with its contents visible now (`contents`: a surface, or
        an open container), or where the expert can see them (a surface, or a container right in front)."""
        thing, distance = self._in_view(pose)
        if thing != self.subject:
            return False
        if self.subject in SURFACES:
            return True
        return self.is_open[thing] if contents else distance == 1


def _parse(text: str, whole: bool) -> tuple[str, str] | None:
    """(verb, argument) of an action; `whole`: the text is only the action, else it may go on (a plan step)."""
    for verb, pattern in ACTIONS:
        match = match_action(pattern, text, whole)
        if match:
            return verb, match.group(1)
    return None


def _next_pose(pose: Pose, move: str, cells: dict[Cell, str]) -> Pose:
    row, col, heading = pose
    turn = {"turn left": -1, "turn right": 1}.get(move)
    if turn is not None:
        return row, col, HEADINGS[(HEADINGS.index(heading) + turn) % 4]
    d_row, d_col = DELTA[heading]
    ahead = (row + d_row, col + d_col)
    inside = 1 <= ahead[0] <= ROWS and 1 <= ahead[1] <= COLS
    return (ahead[0], ahead[1], heading) if inside and ahead not in cells else pose


def _neighbours(cell: Cell) -> set[Cell]:
    row, col = cell
    return {(row + dr, col + dc) for dr, dc in DELTA.values()}


def _connected(free: set[Cell]) -> bool:
    start = next(iter(sorted(free)))
    seen, frontier = {start}, [start]
    while frontier:
        for cell in _neighbours(frontier.pop()) & free:
            if cell not in seen:
                seen.add(cell)
                frontier.append(cell)
    return seen == free


class OracleIQAEnv(IQAEnv):
    """The same kitchen with an omniscient expert, for ablations only: it reads the answer from the simulator,
    so its first plan ends on it ("answer True: there is a mug in the fridge 1") and an executor given that
    plan could copy the answer without looking."""

    name = "iqa_oracle"
    expert_revises = False

    def _plan(self) -> list[tuple[str, str]]:
        return self._oracle_plan()
