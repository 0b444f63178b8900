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

Expert: the next macro toward the mission's target (the key first for a locked door); while the
target is out of view, the first primitive of the shortest turn/move sequence that brings it into
view; carrying a wrong object on a pick-up mission, it drops it first. Plan steps: the action, then a
few words of why: "go to red ball 1 for the goal" (`plan_action` -> "go to red ball 1"), "pick up
blue key 1 to open the door", "turn left to look for the red ball", "drop to free your hands".
"""

from __future__ import annotations

import contextlib
import copy
import io
import random
import re
from collections import deque

import gymnasium as gym
import minigrid  # noqa: F401  (registers the BabyAI levels with gymnasium)
from minigrid.core.actions import Actions
from minigrid.core.world_object import Door, WorldObj
from minigrid.envs.babyai.core.verifier import OpenInstr, PickupInstr

from coalign.envs.base import TextEnv

LEVELS = ("GoToRedBall", "GoToObj", "GoToLocal", "PickupLoc", "GoToDoor", "OpenDoor", "UnlockLocal")
PRIMITIVES = {"turn left": Actions.left, "turn right": Actions.right, "move forward": Actions.forward,
              "toggle": Actions.toggle, "drop": Actions.drop}  # fmt: skip
MACRO = re.compile(
    r"(go to|pick up|pickup|go through|toggle and go through) (?:the )?(red|green|blue|purple|yellow|grey) "
    r"(?:(?:open|closed|locked) )?(ball|box|key|door) (\d{1,3})"
)
REDRAWS = 20  # a level the expert cannot solve (objects walled in) is redrawn from a derived seed
State = tuple[int, int, int]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _passable(cell: WorldObj | None) -> bool:
    return cell is None or cell.can_overlap()


class BabyAIEnv(TextEnv):
    """A BabyAI level, described in words and acted on with macro actions."""

    name = "babyai"
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
        self._plan: list[str] | None = None  # the expert's plan for the current state, once played out

    # ----- episode -----
    def reset(self, seed: int | None = None) -> str:
        seed = random.randrange(2**31) if seed is None else seed
        self.level = LEVELS[seed % len(LEVELS)]
        for attempt in range(REDRAWS):
            self._start(seed + attempt * 1_000_003)
            plan = self._simulate()
            if plan is not None:
                break
        self._plan = plan
        self.optimal_steps = len(plan or [])
        return f"Your goal: {self.goal}\n{self.describe()}"

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

    def _act(self, action: str) -> str:
        self._plan = None
        note = self._execute(action.lower().rstrip("."))
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

    # ----- planning -----
    def _moves(self, state: State) -> list[tuple[str, State]]:
        x, y, d = state
        dx, dy = ((1, 0), (0, 1), (-1, 0), (0, -1))[d]
        moves = [("turn left", (x, y, (d - 1) % 4)), ("turn right", (x, y, (d + 1) % 4))]
        if _passable(self.env.grid.get(x + dx, y + dy)):
            moves.append(("move forward", (x + dx, y + dy, d)))
        return moves

    def _search(self, done) -> list[str] | None:
        """Breadth-first search over (x, y, direction) for the fewest primitives to a state where
        `done(state)` holds."""
        start = (int(self.env.agent_pos[0]), int(self.env.agent_pos[1]), int(self.env.agent_dir))
        previous: dict[State, tuple[State, str] | None] = {start: None}
        queue = deque([start])
        while queue:
            state = queue.popleft()
            if done(state):
                path = []
                while previous[state] is not None:
                    state, move = previous[state]
                    path.append(move)
                return path[::-1]
            for move, nxt in self._moves(state):
                if nxt not in previous:
                    previous[nxt] = (state, move)
                    queue.append(nxt)
        return None

    def _go_to(self, target: WorldObj) -> bool:
        """Walk to face `target` (already facing it: nothing to do)."""
        tx, ty = (int(v) for v in target.cur_pos)

        def facing(state: State) -> bool:
            dx, dy = ((1, 0), (0, 1), (-1, 0), (0, -1))[state[2]]
            return (state[0] + dx, state[1] + dy) == (tx, ty)

        path = self._search(facing)
        if path is None:
            return False
        for move in path:
            self._primitive(PRIMITIVES[move])
            if self.done:
                break
        return True

    def _front_empty(self, state: State) -> bool:
        dx, dy = ((1, 0), (0, 1), (-1, 0), (0, -1))[state[2]]
        return self.env.grid.get(state[0] + dx, state[1] + dy) is None

    def _sees(self, state: State, target: WorldObj) -> bool:
        env = self.env
        dx, dy = ((1, 0), (0, 1), (-1, 0), (0, -1))[state[2]]
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

    def _next_target(self) -> tuple[str, WorldObj] | None:
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

    def _expert_step(self) -> tuple[str, str]:
        """(action, why) of the expert from the current state."""
        nxt = self._next_target()
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

    def _simulate(self) -> list[str] | None:
        """The expert's remaining steps (action with why), played out on a copy; None if it fails."""
        sim = copy.deepcopy(self)
        steps = []
        while not sim.done and len(steps) < self.max_steps:
            action, why = sim._expert_step()
            steps.append(f"{action} {why}")
            sim.steps_taken += 1
            sim._act(action)
        return steps if sim.success else None

    def expert_action(self) -> str:
        return self._expert_step()[0]

    def expert_plan(self) -> list[str]:
        if self.done:
            return []
        if self._plan is None:
            self._plan = self._simulate() or [" ".join(self._expert_step())]
        return list(self._plan)

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
