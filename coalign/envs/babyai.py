"""BabyAI: real levels of the `minigrid` package behind a text wrapper of our own, in AgentGym's style.

Levels (one per seed, `LEVELS[seed % 7]`, the level itself seeded by `seed`): GoToRedBall, GoToObj,
GoToLocal, PickupLoc, GoToDoor, OpenDoor, UnlockLocal. The mission is the goal.

Observation (what the agent's 7x7 view shows, with minigrid's occlusion): "In front of you in this
room, you can see several objects: There is a red ball 1 2 steps in front of you and 1 step to
your left. There is a grey closed door 1 right in front of you 1 step away. You are facing a wall 3
steps away. You are carrying a red key 1." Objects are named "<color> <type> <n>" (doors
"<color> <state> door <n>", state open/closed/locked), n numbering same-looking objects in reading
order at reset. A failed action says why first: "You cannot see red ball 2." / "You cannot reach
red ball 1." / "The red door 1 is locked. You need a red key." / "Invalid action."

Actions: "turn left", "turn right", "move forward", "toggle", "drop" (one minigrid step each: drop
puts down what is carried, in the cell in front, to undo a wrong pick-up); macros run by
a breadth-first planner over the grid, for an object the agent can see now: "go to <color>
<object> <n>" (end facing it), "pick up <color> <object> <n>", "go through <color> door <n>" (an
open door: into it and one step beyond), "toggle and go through <color> door <n>" (open it, with
the key of its colour carried if locked, then go through). A door may be named with its state.

Expert (`babyai`): it plans only from what the agent has observed. Its belief (`BabyAIEnv.seen`) is the
set of cells the agent's view has shown (minigrid's own view with occlusion, after each action); it reads
the grid at those cells only (they are as last seen: only the agent's own actions change the world, in
the cell it faces), so an object is known, and named with its number, once it was in view. While no
seen object fits the mission, it explores: the first primitive of the shortest turn/move sequence, over
cells it has seen to be free, to a pose that would show cells it has not seen (unseen cells count as
see-through; of the nearest poses, the one showing most). Once the target is seen and reachable over
seen cells, the macro for it (the key of a locked door's colour first; a wrong object carried on a
pick-up mission is dropped first), after the turns/moves that bring it back into view. Its plan is
a hypothesis: the scan it would make (the turns, supposing the cells they show empty), then "explore
the room to find the red ball" where more is left to see, then "go to the red ball for the goal";
those two name no action and are left to the one acting (`delegates`). An observation that shows the
target rewrites it: "go to red ball 1 for the goal" (`plan_action` -> "go to red ball 1"), "pick up
blue key 1 to open the door", "turn left to look for the red ball", "drop to free your hands".
`to_go` is measured from the true state, by the omniscient expert's remaining steps.

`babyai_oracle` (for ablations only): the omniscient expert, which reads the whole grid and the objects
that fit the mission; while the target is out of view, it takes the first primitive of the shortest
turn/move sequence that brings it into view, and its plan is its own future played out on a copy of the
true state. Levels the oracle cannot solve (objects walled in) are redrawn for both.
"""

from __future__ import annotations

import contextlib
import copy
import io
import random
import re
from collections import deque
from collections.abc import Callable

import gymnasium as gym
import minigrid  # noqa: F401  (registers the BabyAI levels with gymnasium)
from minigrid.core.actions import Actions
from minigrid.core.world_object import Door, WorldObj
from minigrid.envs.babyai.core.verifier import OpenInstr, PickupInstr

from coalign.envs.base import PlannedEnv, plain_step

LEVELS = ("GoToRedBall", "GoToObj", "GoToLocal", "PickupLoc", "GoToDoor", "OpenDoor", "UnlockLocal")
PRIMITIVES = {"turn left": Actions.left, "turn right": Actions.right, "move forward": Actions.forward,
              "toggle": Actions.toggle, "drop": Actions.drop}  # fmt: skip
MACRO = re.compile(
    r"(go to|pick up|pickup|go through|toggle and go through) (?:the )?(red|green|blue|purple|yellow|grey) "
    r"(?:(?:open|closed|locked) )?(ball|box|key|door) (\d{1,3})"
)
REDRAWS = 20  # a level the oracle cannot solve (objects walled in) is redrawn from a derived seed
SCAN = 3  # turns a plan spells out before it leaves the rest of the search to the one acting
NAMED = ("ball", "box", "key", "door")  # the objects the observations name
DIRS = ((1, 0), (0, 1), (-1, 0), (0, -1))  # minigrid's directions: east, south, west, north
TURNS = ("turn left", "turn right")
DELEGATED = re.compile(  # the plan steps that name no action and leave it to the one acting
    r"(?:explore the room to find|go to|pick up|open) the (?:(?:red|green|blue|purple|yellow|grey) )?"
    r"(?:ball|box|key|door)(?: for the goal| to open the door)?"
)
State = tuple[int, int, int]
Cell = tuple[int, int]
Step = tuple[str | None, str]  # (action, plan step in words); None: a step left to the one acting


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _passable(cell: WorldObj | None) -> bool:
    return cell is None or cell.can_overlap()


def _turned(state: State, move: str) -> State:
    """The pose after a turn or a step forward (the step assumed free)."""
    x, y, d = state
    if move in TURNS:
        return x, y, (d + (1 if move == "turn right" else -1)) % 4
    return x + DIRS[d][0], y + DIRS[d][1], d


def _ahead(state: State) -> Cell:
    """The cell the agent faces in `state`."""
    return state[0] + DIRS[state[2]][0], state[1] + DIRS[state[2]][1]


def _moves(state: State, free: Callable[[Cell], bool]) -> list[tuple[str, State]]:
    """(primitive, pose after it) for the turns, and the step forward onto a cell that is `free`."""
    moves = [(move, _turned(state, move)) for move in TURNS]
    return moves + [("move forward", _turned(state, "move forward"))] if free(_ahead(state)) else moves


def _bfs(start: State, done: Callable[[State], bool], free: Callable[[Cell], bool]) -> list[str] | None:
    """Breadth-first search over (x, y, direction) for the fewest primitives to a state where `done(state)`
    holds, stepping only onto cells that are `free`."""
    previous: dict[State, tuple[State, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if done(state):
            return _path(previous, state)
        for move, nxt in _moves(state, free):
            if nxt not in previous:
                previous[nxt] = (state, move)
                queue.append(nxt)
    return None


def _path(previous: dict[State, tuple[State, str] | None], state: State) -> list[str]:
    path = []
    while (link := previous[state]) is not None:
        state, move = link
        path.append(move)
    return path[::-1]


def _view_square(state: State, size: int) -> list[tuple[int, int, Cell]]:
    """(i, j, cell) over the agent's view square as `gen_obs_grid` lays it out: the agent at (size // 2,
    size - 1), facing up; j rows ahead, i columns to the right."""
    x, y, d = state
    dx, dy = DIRS[d]
    return [
        (i, j, (x + (size - 1 - j) * dx - (i - size // 2) * dy, y + (size - 1 - j) * dy + (i - size // 2) * dx))
        for i in range(size)
        for j in range(size)
    ]


def _process_vis(clear: list[list[bool]]) -> list[list[bool]]:
    """minigrid's `Grid.process_vis` on a view square given as see-through flags: which cells the agent sees."""
    size = len(clear)
    mask = [[False] * size for _ in range(size)]
    mask[size // 2][size - 1] = True
    for j in reversed(range(size)):
        for i in range(size - 1):
            if mask[i][j] and clear[i][j]:
                mask[i + 1][j] = True
                if j > 0:
                    mask[i + 1][j - 1] = mask[i][j - 1] = True
        for i in reversed(range(1, size)):
            if mask[i][j] and clear[i][j]:
                mask[i - 1][j] = True
                if j > 0:
                    mask[i - 1][j - 1] = mask[i][j - 1] = True
    return mask


class BabyAIEnv(PlannedEnv):
    """A BabyAI level, described in words and acted on with macro actions; its expert knows only what the
    agent has seen (the module docstring)."""

    name = "babyai"
    expert_revises = True
    invalid_reply = (
        r"Invalid action\.|You cannot (?:see|reach) (?!any objects)|You are already carrying "
        r"|The .+? is (?:locked|closed)\."
    )
    max_steps = 20
    instructions = (
        "You are in a grid world and must accomplish the goal. Actions: turn left, turn right, move forward, "
        "go to <color> <object> <n>, pick up <color> <object> <n>, go through <color> door <n> (an open door), "
        "toggle and go through <color> door <n> (a closed or locked door; a locked one needs the key of its "
        "colour), toggle (the door in front of you), drop (put down what you carry). "
        "You can only act on objects you can see."
    )

    def __init__(self) -> None:
        super().__init__()
        self.level = ""
        self.env = None
        self.seen: set[Cell] = set()  # the belief: the cells the agent's view has shown
        self.first_seen: dict[WorldObj, Cell] = {}  # where each object was when it first came into view
        self.start: State = (0, 0, 0)  # the agent's pose at reset, which the mission's "on your left" refers to
        self._planned: list[Step] | None = None  # the expert's plan for the current state
        self._oracle: list[str] | None = None  # the omniscient expert's remaining steps, once played out

    # ----- episode -----
    def reset(self, seed: int | None = None) -> str:
        seed = random.randrange(2**31) if seed is None else seed
        self.level = LEVELS[seed % len(LEVELS)]
        for attempt in range(REDRAWS):
            self._start(seed + attempt * 1_000_003)
            self._oracle = self._oracle_steps()
            if self._oracle is not None:
                break
        self.optimal_steps = self._expert_steps()
        return f"Your goal: {self.goal}\n{self.describe()}"

    def _expert_steps(self) -> int:
        """This expert's step count from the start, played out on a copy."""
        trial = copy.deepcopy(self)
        while not trial.done:
            trial.step(trial.expert_action())
        return trial.steps_taken if trial.success else len(self.expert_plan())

    def _start(self, level_seed: int) -> None:
        env = gym.make(f"BabyAI-{self.level}-v0").unwrapped
        with contextlib.redirect_stdout(io.StringIO()):  # minigrid prints each rejected placement
            env.reset(seed=level_seed)
        env.max_steps = 10**9  # our step limit counts actions; a macro is many minigrid steps
        env.gen_obs = dict  # image observations are never read: skip building them every minigrid step
        self.env = env
        groups: dict[tuple[str, str], list[tuple[int, int, WorldObj]]] = {}
        for y in range(env.grid.height):
            for x in range(env.grid.width):
                obj = env.grid.get(x, y)
                if obj is not None and obj.type in ("ball", "box", "key", "door"):
                    groups.setdefault((obj.color, obj.type), []).append((y, x, obj))
        for objs in groups.values():
            for n, (_, _, obj) in enumerate(sorted(objs, key=lambda t: (t[0], t[1])), 1):
                obj.label_n = n
        self.steps_taken = 0
        self.success = self.done = False
        self.goal = env.mission
        self.seen, self.first_seen, self._planned = set(), {}, None
        self.start = self._pose()
        self._look()

    def _act(self, action: str) -> str:
        self._planned = self._oracle = None
        note = self._execute(action.lower().rstrip("."))
        self._look()
        if self.success:
            return "Mission complete."
        if self.done:
            return f"{note} The mission failed.".strip()
        return f"{note} {self.describe()}".strip()

    def _execute(self, text: str) -> str:
        if text in PRIMITIVES:
            self._primitive(PRIMITIVES[text])
            return ""
        match = MACRO.fullmatch(text)
        if not match:
            return "Invalid action."
        verb, color, kind, n = match.group(1), match.group(2), match.group(3), int(match.group(4))
        name = f"{color} {kind} {n}"
        target = next((o for o, _, _ in self.visible() if self.label(o, state=False) == name), None)
        if target is None:
            return f"You cannot see {name}."
        if verb in ("go through", "toggle and go through") and kind != "door":
            return "Invalid action."
        if verb in ("pick up", "pickup") and kind == "door":
            return "Invalid action."
        if not self._go_to(target):
            return f"You cannot reach {name}."
        if verb in ("pick up", "pickup"):
            if self.env.carrying is not None:
                return f"You are already carrying {self.label(self.env.carrying)}."
            self._primitive(Actions.pickup)
        elif verb == "toggle and go through":
            if target.is_locked and not self._has_key(target.color):
                return f"The {name} is locked. You need a {color} key."
            if not target.is_open:
                self._primitive(Actions.toggle)
            self._through()
        elif verb == "go through":
            if not target.is_open:
                return f"The {name} is closed."
            self._through()
        return ""

    def _primitive(self, action: Actions) -> None:
        if self.done:
            return
        _, reward, terminated, truncated, _ = self.env.step(action)
        if terminated or truncated:
            self.done = True
            self.success = reward > 0

    def _has_key(self, color: str) -> bool:
        carrying = self.env.carrying
        return carrying is not None and carrying.type == "key" and carrying.color == color

    def _through(self) -> None:
        for _ in range(2):
            if self.done or not _passable(self.env.grid.get(*self.env.front_pos)):
                return
            self._primitive(Actions.forward)

    def _search(self, done: Callable[[State], bool]) -> list[str] | None:
        """The fewest primitives over the true grid to a state where `done(state)` holds (the macros' planner,
        and the oracle's)."""
        return _bfs(self._pose(), done, lambda cell: _passable(self.env.grid.get(*cell)))

    def _go_to(self, target: WorldObj) -> bool:
        """Walk to face `target` (already facing it: nothing to do)."""
        tx, ty = (int(v) for v in target.cur_pos)
        path = self._search(lambda state: _ahead(state) == (tx, ty))
        if path is None:
            return False
        for move in path:
            self._primitive(PRIMITIVES[move])
            if self.done:
                break
        return True

    # ----- the belief: what the agent has seen -----
    def _pose(self) -> State:
        return int(self.env.agent_pos[0]), int(self.env.agent_pos[1]), int(self.env.agent_dir)

    def _look(self) -> None:
        """Add the cells the agent's view shows now (minigrid's own view, with occlusion) to the belief."""
        env = self.env
        _, mask = env.gen_obs_grid()
        for i, j, (x, y) in _view_square(self._pose(), env.agent_view_size):
            if mask[i, j] and 0 <= x < env.grid.width and 0 <= y < env.grid.height:
                self.seen.add((x, y))
                obj = env.grid.get(x, y)
                if obj is not None and obj.type in NAMED:
                    self.first_seen.setdefault(obj, (x, y))

    def _seen_objects(self) -> list[WorldObj]:
        """The objects the agent has seen, where they lie now (none carried): objects move only when it moves
        them, under its eyes."""
        lying = []
        for obj in self.first_seen:
            cell = (int(obj.cur_pos[0]), int(obj.cur_pos[1]))
            if cell in self.seen and self.env.grid.get(*cell) is obj:
                lying.append(obj)
        return lying

    def _fits(self, obj: WorldObj) -> bool:
        """Whether a seen object is one the mission's words describe; a place ("on your left") is read, as
        minigrid's verifier does, from where it lay against the agent's pose at reset."""
        desc = self.env.instrs.desc
        if obj.type != desc.type or (desc.color is not None and obj.color != desc.color):
            return False
        if desc.loc not in ("left", "right", "front", "behind"):
            return True
        (x, y), (sx, sy, d) = self.first_seen[obj], self.start
        ahead = (x - sx) * DIRS[d][0] + (y - sy) * DIRS[d][1]
        right = (y - sy) * DIRS[d][0] - (x - sx) * DIRS[d][1]
        return {"left": right < 0, "right": right > 0, "front": ahead > 0, "behind": ahead < 0}[desc.loc]

    # ----- the expert: plans on the belief -----
    def _belief_plan(self) -> list[Step]:
        """The expert's plan from what the agent has seen, one (action, words) per step."""
        env, desc = self.env, self.env.instrs.desc
        belief = _Belief(self)
        words = " ".join(w for w in (desc.color, desc.type) if w)
        targets = [o for o in self._seen_objects() if self._fits(o)]
        if isinstance(env.instrs, OpenInstr):
            here = env.agent_pos  # a door out of reach may be blocked by its own key: the nearest one seen
            door = self._nearest(belief, targets) or min(
                targets, key=lambda o: abs(o.cur_pos[0] - here[0]) + abs(o.cur_pos[1] - here[1]), default=None
            )
            if door is not None and door.is_locked and not self._has_key(door.color):
                keys = [o for o in self._seen_objects() if o.type == "key" and o.color == door.color]
                fetch = self._fetch(belief, "pick up", keys, f"{door.color} key", "to open the door")
                through = f"toggle and go through {self.label(door, state=False)}"
                return [*self._drop(belief), *fetch, (through, f"{through} for the goal")]
            return self._fetch(belief, "toggle and go through", targets, words, "for the goal")
        if isinstance(env.instrs, PickupInstr):
            return self._drop(belief) + self._fetch(belief, "pick up", targets, words, "for the goal")
        return self._fetch(belief, "go to", targets, words, "for the goal")

    def _nearest(self, belief: _Belief, objs: list[WorldObj]) -> WorldObj | None:
        """Of `objs`, the one the agent can face soonest over cells seen free; None if it can face none."""
        cells = {(int(o.cur_pos[0]), int(o.cur_pos[1])): o for o in objs}
        path = belief.search(self._pose(), lambda state: _ahead(state) in cells)
        if path is None:
            return None
        state = self._pose()
        for move in path:
            state = _turned(state, move)
        return cells[_ahead(state)]

    def _fetch(self, belief: _Belief, verb: str, objs: list[WorldObj], words: str, why: str) -> list[Step]:
        """Steps to `verb` the nearest of the seen `objs`: its macro while it is in view (one in view first), else
        the moves that bring it back into view first; where none is seen, the search for the `words`."""
        in_view = [o for o, _, _ in self.visible()]
        found = self._nearest(belief, [o for o in objs if o in in_view]) or self._nearest(belief, objs)
        if found is not None:
            name = self.label(found, state=False)
            macro = (f"{verb} {name}", f"{verb} {name} {why}")
            if found in in_view:
                return [macro]
            cell = (int(found.cur_pos[0]), int(found.cur_pos[1]))
            path = belief.search(self._pose(), lambda state: cell in belief.view(state))
            if path:
                return [*((move, f"{move} to look at {name}") for move in path), macro]
        return self._explore(belief, words, "open" if verb == "toggle and go through" else verb, why)

    def _explore(self, belief: _Belief, words: str, verb: str, why: str) -> list[Step]:
        """The search for the `words`: the scan the agent would make (its turns, supposing the cells they show
        empty), the rest of the search left to the one acting where more is left to see, then the goal's step."""
        hypothesis = _Belief(self, belief.assumed)
        pose, steps = self._pose(), []
        while (path := hypothesis.lookout(pose)) is not None:
            if steps and (len(steps) == SCAN or path[0] not in TURNS):
                steps.append((None, f"explore the room to find the {words}"))
                break
            steps.append((path[0], f"{path[0]} to look for the {words}"))
            pose = _turned(pose, path[0])
            hypothesis.assumed |= hypothesis.unknown(pose)
        if not steps:  # nothing left to see and the target not in reach
            return [("turn left", "turn left to look around")]
        return [*steps, (None, f"{verb} the {words} {why}")]

    def _drop(self, belief: _Belief) -> list[Step]:
        """Putting down what is carried, in a free cell in front (turning or walking to one first)."""
        if self.env.carrying is None:
            return []
        path = belief.search(self._pose(), lambda state: belief.empty(_ahead(state)))
        if path is None:
            return [("turn left", "turn left to find room to drop it")]
        return [*((move, f"{move} to find room to drop it") for move in path), ("drop", "drop to free your hands")]

    def _plan(self) -> list[Step]:
        """The expert's plan for the current state, made once per state (`_planned`)."""
        if self._planned is None:
            self._planned = [] if self.done else self._belief_plan()
        return self._planned

    def delegates(self, step: str) -> bool:
        """The plan's search and goal steps for an object not seen yet ("explore the room to find the red ball",
        "go to the red ball for the goal"): the one acting chooses how."""
        return self.plan_action(step) is None and DELEGATED.fullmatch(plain_step(step)) is not None

    def to_go(self) -> float:
        """The omniscient expert's remaining steps, from the true state (this expert's plan is a hypothesis)."""
        if self.success:
            return 0.0
        steps = self._oracle_plan()
        return float(self.max_steps if steps is None else len(steps))

    # ----- the omniscient expert (task generation, `to_go`, `babyai_oracle`) -----
    def _front_empty(self, state: State) -> bool:
        return self.env.grid.get(*_ahead(state)) is None

    def _sees(self, state: State, target: WorldObj) -> bool:
        env = self.env
        dx, dy = DIRS[state[2]]
        ox, oy = int(target.cur_pos[0]) - state[0], int(target.cur_pos[1]) - state[1]
        ahead, right = ox * dx + oy * dy, oy * dx - ox * dy
        if not (0 <= ahead < env.agent_view_size and abs(right) <= env.agent_view_size // 2):
            return False  # outside the view square: skip the occlusion check
        saved = env.agent_pos, env.agent_dir
        env.agent_pos, env.agent_dir = (state[0], state[1]), state[2]
        try:
            return any(obj is target for obj, _, _ in self.visible())
        finally:
            env.agent_pos, env.agent_dir = saved

    def _oracle_target(self) -> tuple[str, WorldObj] | None:
        """What the expert acts on next: (verb, object)."""
        env, instrs = self.env, self.env.instrs
        objs = [o for o in instrs.desc.obj_set if o.cur_pos is not None or o is env.carrying]
        if not objs:
            return None
        here = env.agent_pos

        def distance(o: WorldObj) -> int:
            return abs(int(o.cur_pos[0]) - int(here[0])) + abs(int(o.cur_pos[1]) - int(here[1]))

        if isinstance(instrs, OpenInstr):
            door = min(objs, key=distance)
            if door.is_locked and not self._has_key(door.color):
                keys = [o for o in self._objects() if o.type == "key" and o.color == door.color]
                return ("pick up", min(keys, key=distance)) if keys else None
            return "toggle and go through", door
        placed = [o for o in objs if o.cur_pos is not None and o is not env.carrying]
        if not placed:
            return None
        if isinstance(instrs, PickupInstr) and env.carrying is not None:
            return "drop", env.carrying
        verb = "pick up" if isinstance(instrs, PickupInstr) else "go to"
        reachable = [o for o in sorted(placed, key=distance) if self._reachable(o)]
        return verb, (reachable or sorted(placed, key=distance))[0]

    def _reachable(self, target: WorldObj) -> bool:
        tx, ty = (int(v) for v in target.cur_pos)
        here = tuple(int(v) for v in self.env.agent_pos)
        return any(
            _passable(self.env.grid.get(tx + dx, ty + dy)) or (tx + dx, ty + dy) == here
            for dx, dy in ((1, 0), (0, 1), (-1, 0), (0, -1))
        )

    def _oracle_step(self) -> tuple[str, str]:
        """(action, why) of the omniscient expert from the current state."""
        nxt = self._oracle_target()
        if nxt is None:
            return "turn left", "to look around"
        verb, target = nxt
        if verb == "drop":
            path = self._search(self._front_empty)
            if path == []:
                return "drop", "to free your hands"
            return (path[0] if path else "turn left"), "to find room to drop it"
        name = self.label(target, state=False)
        if any(obj is target for obj, _, _ in self.visible()):
            return f"{verb} {name}", "for the goal" if verb != "pick up" or target.type != "key" else "to open the door"
        path = self._search(lambda state: self._sees(state, target))
        move = path[0] if path else "turn left"
        return move, f"to look for the {target.color} {target.type}"

    def _oracle_steps(self) -> list[str] | None:
        """The omniscient expert's remaining steps (action with why), played out on a copy; None if it fails."""
        sim = copy.deepcopy(self)
        steps = []
        while not sim.done and len(steps) < self.max_steps:
            action, why = sim._oracle_step()
            steps.append(f"{action} {why}")
            sim.steps_taken += 1
            sim._act(action)
        return steps if sim.success else None

    def _oracle_plan(self) -> list[str] | None:
        if self._oracle is None and not self.done:
            self._oracle = self._oracle_steps()
        return self._oracle

    def plan_action(self, step: str) -> str | None:
        text = " ".join(str(step).lower().replace("pickup", "pick up").split())
        match = MACRO.search(text)
        if match:
            verb = "pick up" if match.group(1) == "pickup" else match.group(1)
            if verb == "go through" and text[: match.start()].endswith("toggle and "):
                verb = "toggle and go through"
            return f"{verb} {match.group(2)} {match.group(3)} {match.group(4)}"
        found = re.search(r"\b(turn left|turn right|move forward|toggle|drop)\b", text)
        return found.group(1) if found else None

    # ----- words -----
    def _objects(self) -> list[WorldObj]:
        grid = self.env.grid
        return [o for o in grid.grid if o is not None and o.type in ("ball", "box", "key", "door")]

    @staticmethod
    def label(obj: WorldObj, state: bool = True) -> str:
        n = getattr(obj, "label_n", 1)
        if obj.type == "door" and state and isinstance(obj, Door):
            status = "locked" if obj.is_locked else "open" if obj.is_open else "closed"
            return f"{obj.color} {status} door {n}"
        return f"{obj.color} {obj.type} {n}"

    def visible(self) -> list[tuple[WorldObj, int, int]]:
        """(object, steps ahead, steps right) for what the agent's view shows, nearest first."""
        env = self.env
        grid, mask = env.gen_obs_grid()
        size = grid.width
        seen = []
        for i in range(size):
            for j in range(size):
                obj = grid.get(i, j)
                if mask[i, j] and obj is not None and obj.type in ("ball", "box", "key", "door"):
                    if obj is env.carrying and (i, j) == (size // 2, size - 1):
                        continue
                    seen.append((obj, size - 1 - j, i - size // 2))
        return sorted(seen, key=lambda t: (t[1] + abs(t[2]), t[1], t[2]))

    def describe(self) -> str:
        parts = []
        for obj, ahead, right in self.visible():
            where = []
            if ahead:
                where.append(f"{_plural(ahead, 'step')} in front of you")
            if right:
                where.append(f"{_plural(abs(right), 'step')} to your {'right' if right > 0 else 'left'}")
            if ahead and not right:
                where = [f"right in front of you {_plural(ahead, 'step')} away"]
            parts.append(f"There is a {self.label(obj)} {' and '.join(where)}.")
        text = (
            ("In front of you in this room, you can see several objects: " + " ".join(parts))
            if parts
            else ("You cannot see any objects in front of you.")
        )
        env = self.env
        x, y = (int(v) for v in env.agent_pos)
        dx, dy = (int(v) for v in env.dir_vec)
        distance = 1
        while _passable(env.grid.get(x + dx * distance, y + dy * distance)) and distance < env.grid.width:
            distance += 1
        ahead = env.grid.get(x + dx * distance, y + dy * distance)
        if ahead is not None and ahead.type == "wall":
            text += f" You are facing a wall {_plural(distance, 'step')} away."
        if env.carrying is not None:
            text += f" You are carrying a {self.label(env.carrying)}."
        return text


class _Belief:
    """What the expert plans on: the cells the agent has seen (`BabyAIEnv.seen`; the grid is read there only)
    and the cells a plan's hypothesis supposes empty. An unknown cell is never walked on, and counts as
    see-through for what a pose would show."""

    def __init__(self, env: BabyAIEnv, assumed: set[Cell] | None = None) -> None:
        self.grid, self.seen, self.size = env.env.grid, env.seen, env.env.agent_view_size
        self.assumed = set(assumed or ())

    def free(self, cell: Cell) -> bool:
        return cell in self.assumed or (cell in self.seen and _passable(self.grid.get(*cell)))

    def empty(self, cell: Cell) -> bool:
        return cell in self.assumed or (cell in self.seen and self.grid.get(*cell) is None)

    def _clear(self, cell: Cell) -> bool:
        x, y = cell
        if not (0 <= x < self.grid.width and 0 <= y < self.grid.height):
            return False
        if cell in self.assumed or cell not in self.seen:
            return True
        obj = self.grid.get(x, y)
        return obj is None or obj.see_behind()

    def view(self, state: State) -> set[Cell]:
        """The cells the agent would see from `state`, by minigrid's occlusion on this belief."""
        square = _view_square(state, self.size)
        clear = [[False] * self.size for _ in range(self.size)]
        for i, j, cell in square:
            clear[i][j] = self._clear(cell)
        mask = _process_vis(clear)
        width, height = self.grid.width, self.grid.height
        return {cell for i, j, cell in square if mask[i][j] and 0 <= cell[0] < width and 0 <= cell[1] < height}

    def unknown(self, state: State) -> set[Cell]:
        """The cells neither seen nor supposed that the agent would see from `state`."""
        return {cell for cell in self.view(state) if cell not in self.seen and cell not in self.assumed}

    def search(self, start: State, done: Callable[[State], bool]) -> list[str] | None:
        return _bfs(start, done, self.free)

    def lookout(self, start: State) -> list[str] | None:
        """The shortest turn/move sequence to a pose that would show unknown cells (of the nearest such poses,
        the first that shows most); None when no pose would."""
        previous: dict[State, tuple[State, str] | None] = {start: None}
        level = [start]
        while level:
            ahead = []
            for state in level:
                for move, nxt in _moves(state, self.free):
                    if nxt not in previous:
                        previous[nxt] = (state, move)
                        ahead.append(nxt)
            level = ahead
            shown = [len(self.unknown(state)) for state in level]
            if shown and max(shown) > 0:
                return _path(previous, level[shown.index(max(shown))])
        return None


class BabyAIOracleEnv(BabyAIEnv):
    """`babyai` with the omniscient expert, for ablations only: it reads the whole grid, so its plans name
    objects and turn toward places the agent has not seen."""

    name = "babyai_oracle"
    expert_revises = False

    def _expert_steps(self) -> int:
        return len(self._oracle or [])

    def expert_action(self) -> str:
        return self._oracle_step()[0]

    def expert_plan(self) -> list[str]:
        if self.done:
            return []
        return list(self._oracle_plan() or [" ".join(self._oracle_step())])
