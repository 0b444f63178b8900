"""An ALFWorld-like household: numbered receptacles in one room, objects in them, one goal per seed.

Our own small simulator in ALFWorld's words, so that PilotRL trains and evaluates on CPU without
ALFWorld's game files (`coalign.envs.alfworld` wraps the real game for users who have them). The six
task types are ALFWorld's; actions are ALFWorld's commands; an invalid, impossible or malformed
action is answered "Nothing happened." Observations are short on purpose: tiny models read them.

The expert (`household`) knows only what the agent has observed: the receptacles (listed in the first
observation), the goal, and what each observation since has shown in them (`HouseholdEnv.seen`,
`searched`, `lamp_seen`). While the object is unseen its plan is a hypothesis: it lies in the next receptacle
not yet searched (in the room's listed order, receptacles of the goal's kind last), and the steps that need
it call it by its kind, since an unseen object has no number yet: "go to cabinet 1 to look for an apple",
"take the apple", "heat the apple with microwave 1", "put the apple in countertop 1". Such steps name no
action; `delegates` leaves them to the one acting. Once an observation shows the object the plan names it
("take apple 1 from cabinet 2"); once one refutes the hypothesis, the plan searches the next receptacle.
`household_oracle` is the omniscient expert, which reads where everything lies (ablations only).

Other plan steps each begin with the exact action, then an optional purpose: "go to countertop 1 to find
the apple", "open fridge 1 to put the apple 1 in", "take apple 1 from countertop 1", "clean apple 1 with
sinkbasin 1", "put apple 1 in fridge 1", "use desklamp 1 to look at the book 1". `plan_action` reads the
action at the start of a step (after an optional "Step 3:", "3.", "-" or "Action:"), and returns it in
canonical form.
"""

from __future__ import annotations

import copy
import random
import re

from coalign.envs.base import PlannedEnv, plain_step
from coalign.envs.text import match_action, step_text

TASK_TYPES = (
    "pick_and_place",
    "look_at_obj_in_light",
    "pick_clean_then_place",
    "pick_heat_then_place",
    "pick_cool_then_place",
    "pick_two_obj_and_place",
)
NOTHING = "Nothing happened."
LAMP = "desklamp 1"

OPENABLE = frozenset({"fridge", "microwave", "cabinet", "drawer"})
INSIDE = frozenset({"fridge", "microwave", "cabinet", "drawer", "sinkbasin", "garbagecan"})  # "in"; others "on"
APPLIANCE = {
    "pick_clean_then_place": "sinkbasin 1",
    "pick_heat_then_place": "microwave 1",
    "pick_cool_then_place": "fridge 1",
}
STATE = {"pick_clean_then_place": "clean", "pick_heat_then_place": "hot", "pick_cool_then_place": "cool"}
VERB = {"sinkbasin": "clean", "microwave": "heat", "fridge": "cool"}
UNDOES = {"hot": "cool", "cool": "hot"}

KITCHEN = ("fridge 1", "microwave 1", "sinkbasin 1")
KITCHEN_EXTRA = (
    "cabinet 1",
    "cabinet 2",
    "cabinet 3",
    "countertop 1",
    "countertop 2",
    "drawer 1",
    "drawer 2",
    "diningtable 1",
    "garbagecan 1",
    "shelf 1",
)
BEDROOM = ("desk 1", "sidetable 1")
BEDROOM_EXTRA = ("bed 1", "cabinet 1", "drawer 1", "drawer 2", "dresser 1", "garbagecan 1", "shelf 1", "shelf 2")
KITCHEN_OBJECTS = (
    "apple",
    "bowl",
    "bread",
    "cup",
    "egg",
    "knife",
    "lettuce",
    "mug",
    "plate",
    "potato",
    "spoon",
    "tomato",
)
BEDROOM_OBJECTS = ("alarmclock", "book", "cd", "cellphone", "creditcard", "keychain", "pen", "pencil")
TASK_OBJECTS = {
    "pick_clean_then_place": ("apple", "bowl", "cup", "knife", "lettuce", "mug", "plate", "potato", "spoon", "tomato"),
    "pick_heat_then_place": ("apple", "bread", "cup", "egg", "mug", "plate", "potato", "tomato"),
    "pick_cool_then_place": ("apple", "bread", "cup", "egg", "lettuce", "mug", "plate", "potato", "tomato"),
}
PLACES = {  # receptacle types a goal may name, per room
    "kitchen": ("cabinet", "countertop", "diningtable", "drawer", "fridge", "garbagecan", "microwave", "shelf"),
    "bedroom": ("bed", "cabinet", "desk", "drawer", "dresser", "garbagecan", "shelf", "sidetable"),
}
NOT_PLACES = {"pick_heat_then_place": {"fridge", "microwave"}, "pick_cool_then_place": {"fridge", "microwave"}}

_N = r"(?:the )?([a-z]+ \d+)"
ACTIONS = (  # verb, pattern; groups are entity names (and the preposition for put)
    ("go", rf"go to {_N}"),
    ("open", rf"open {_N}"),
    ("close", rf"close {_N}"),
    ("take", rf"take {_N} from {_N}"),
    ("put", rf"put {_N} (in/on|in|on|into|onto) {_N}"),
    ("apply", rf"(heat|cool|clean) {_N} with {_N}"),
    ("use", rf"use {_N}"),
    ("examine", rf"examine {_N}"),
    ("look", r"look(?! at)"),
    ("inventory", r"inventory"),
)


def kind(name: str) -> str:
    """ "cabinet 2" -> "cabinet"."""
    return name.rsplit(" ", 1)[0]


def article(name: str) -> str:
    return ("an " if name[0] in "aeiou" else "a ") + name


def prep(receptacle: str) -> str:
    return "in" if kind(receptacle) in INSIDE else "on"


def listing(names: list[str]) -> str:
    """ALFWorld's list: "a cabinet 1, a fridge 1, and a mug 1"; "nothing" for none."""
    items = [article(n) for n in names]
    if not items:
        return "nothing"
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + ", and " + items[-1]


class HouseholdEnv(PlannedEnv):
    """One room, one ALFWorld task per seed; `seed % 6` picks the task type, so types are balanced. Its expert
    plans on what the agent has observed (module docstring); `optimal_steps` is that expert's step count."""

    name = "household"
    max_steps = 30
    expert_revises = True
    invalid_reply = r"Nothing happened\."
    instructions = (
        "You are in a household. Act with one command per turn: go to X, open X, close X, take O from R, "
        "put O in/on R, heat O with microwave 1, cool O with fridge 1, clean O with sinkbasin 1, "
        "use desklamp 1, examine X, look, inventory. X, O and R are names with their number (fridge 1)."
    )

    def reset(self, seed: int | None = None) -> str:
        self.seed = random.randrange(2**32) if seed is None else seed
        rng = random.Random(self.seed)
        self.task = TASK_TYPES[self.seed % len(TASK_TYPES)]
        room = "bedroom" if self.task == "look_at_obj_in_light" else "kitchen"
        if self.task in ("pick_and_place", "pick_two_obj_and_place"):
            room = rng.choice(("kitchen", "bedroom"))
        fixed, extra = (KITCHEN, KITCHEN_EXTRA) if room == "kitchen" else (BEDROOM, BEDROOM_EXTRA)
        self.receptacles = sorted(fixed + tuple(rng.sample(extra, rng.randint(3, 5))), key=_order)
        self.lamp = rng.choice(BEDROOM) if room == "bedroom" else None
        self.is_open = {r: False for r in self.receptacles if kind(r) in OPENABLE}

        objects = TASK_OBJECTS.get(self.task, KITCHEN_OBJECTS if room == "kitchen" else BEDROOM_OBJECTS)
        self.target = rng.choice(objects)
        present = {kind(r) for r in self.receptacles}
        places = [p for p in PLACES[room] if p in present and p not in NOT_PLACES.get(self.task, ())]
        self.place = "" if self.task == "look_at_obj_in_light" else rng.choice(places)
        count = 2 if self.task == "pick_two_obj_and_place" else rng.randint(1, 2)
        away = [r for r in self.receptacles if kind(r) != self.place]
        self.where: dict[str, str] = {f"{self.target} {i}": rng.choice(away) for i in range(1, count + 1)}
        pool = [o for o in (KITCHEN_OBJECTS if room == "kitchen" else BEDROOM_OBJECTS) if o != self.target]
        for other in rng.sample(pool, rng.randint(2, 4)):
            self.where[f"{other} 1"] = rng.choice(self.receptacles)
        self.states: dict[str, set[str]] = {o: set() for o in self.where}
        self.holding: str | None = None
        self.location: str | None = None
        self.lamp_on = False

        self.seen: dict[str, str] = {}  # the belief: each object seen, where it was last seen (or put)
        self.searched: set[str] = set()  # receptacles whose contents the agent has seen
        self.lamp_seen: str | None = None  # where the agent has seen the desklamp

        self.goal = self._goal_text()
        self.steps_taken, self.success, self.done = 0, False, False
        trial = copy.deepcopy(self)
        while not trial.done:
            trial.step(trial.expert_action())
        self.optimal_steps = trial.steps_taken
        return (
            "You are in the middle of a room. Looking quickly around you, you see "
            f"{listing(self.receptacles)}.\nYour task is to: {self.goal}"
        )

    def _goal_text(self) -> str:
        where = f"{prep(self.place + ' 1')} {self.place}"
        return {
            "pick_and_place": f"put {article(self.target)} {where}.",
            "look_at_obj_in_light": f"look at {article(self.target)} under the desklamp.",
            "pick_clean_then_place": f"put a clean {self.target} {where}.",
            "pick_heat_then_place": f"put a hot {self.target} {where}.",
            "pick_cool_then_place": f"put a cool {self.target} {where}.",
            "pick_two_obj_and_place": f"put two {self.target} {where}.",
        }[self.task]

    # --- acting ---

    def _act(self, action: str) -> str:
        parsed = self._parse(action.lower().rstrip(".!"), whole=True)
        if parsed is None:
            return NOTHING
        verb, args = parsed
        observation = getattr(self, f"_do_{verb}")(*args)
        self._observe(observation)
        if self._goal_met():
            self.success = self.done = True
        return observation

    def _observe(self, observation: str) -> None:
        """The belief updated from the text of `observation` alone: an object picked up or put down, and the
        contents listed for the receptacle the agent is at (objects move only when the agent moves them)."""
        if taken := re.match(r"You pick up the ([a-z]+ \d+) from", observation):
            self.seen.pop(taken[1], None)
        elif put := re.match(r"You put the ([a-z]+ \d+) (?:in|on) the ([a-z]+ \d+)\.", observation):
            self.seen[put[1]] = put[2]
        elif self.location is not None and (shown := re.search(r"you see (.*)\.$", observation)):
            listed = set(re.findall(r"\b[a-z]+ \d+\b", shown[1]))
            self.searched.add(self.location)
            if LAMP in listed:
                self.lamp_seen = self.location
            self.seen = {o: r for o, r in self.seen.items() if r != self.location}
            self.seen.update(dict.fromkeys(listed - {LAMP}, self.location))

    def _do_go(self, receptacle: str) -> str:
        if receptacle not in self.receptacles or receptacle == self.location:
            return NOTHING
        self.location = receptacle
        return f"You arrive at {receptacle}. {self._describe(receptacle)}"

    def _do_open(self, receptacle: str) -> str:
        if receptacle != self.location or self.is_open.get(receptacle, True):
            return NOTHING
        self.is_open[receptacle] = True
        return f"You open the {receptacle}. In it, you see {listing(self._contents(receptacle))}."

    def _do_close(self, receptacle: str) -> str:
        if receptacle != self.location or not self.is_open.get(receptacle, False):
            return NOTHING
        self.is_open[receptacle] = False
        return f"You close the {receptacle}."

    def _do_take(self, obj: str, receptacle: str) -> str:
        if self.holding or receptacle != self.location or not self._reachable(receptacle):
            return NOTHING
        if self.where.get(obj) != receptacle:
            return NOTHING
        del self.where[obj]
        self.holding = obj
        return f"You pick up the {obj} from the {receptacle}."

    def _do_put(self, obj: str, _prep: str, receptacle: str) -> str:
        if obj != self.holding or receptacle != self.location or not self._reachable(receptacle):
            return NOTHING
        self.where[obj] = receptacle
        self.holding = None
        return f"You put the {obj} {prep(receptacle)} the {receptacle}."

    def _do_apply(self, verb: str, obj: str, appliance: str) -> str:
        if obj != self.holding or appliance != self.location or VERB.get(kind(appliance)) != verb:
            return NOTHING
        state = {"clean": "clean", "heat": "hot", "cool": "cool"}[verb]
        self.states[obj].add(state)
        self.states[obj].discard(UNDOES.get(state, ""))
        return f"You {verb} the {obj} using the {appliance}."

    def _do_use(self, thing: str) -> str:
        if thing != LAMP or self.lamp is None or self.location != self.lamp:
            return NOTHING
        self.lamp_on = True
        return f"You turn on the {LAMP}."

    def _do_examine(self, thing: str) -> str:
        if thing == self.location:
            return self._describe(thing)
        if thing == LAMP and self.location == self.lamp:
            return f"The {LAMP} is {'on' if self.lamp_on else 'off'}."
        visible = thing == self.holding or (thing in self.where and thing in self._contents(self.location))
        if not visible:
            return NOTHING
        states = sorted(self.states[thing])
        return f"The {thing} is {' and '.join(states)}." if states else f"There's nothing special about {thing}."

    def _do_look(self) -> str:
        if self.location is None:
            return f"You are in the middle of a room. Looking quickly around you, you see {listing(self.receptacles)}."
        return f"You are facing the {self.location}. {self._describe(self.location)}"

    def _do_inventory(self) -> str:
        return f"You are carrying: {article(self.holding)}." if self.holding else "You are not carrying anything."

    def _reachable(self, receptacle: str) -> bool:
        return self.is_open.get(receptacle, True)

    def _contents(self, receptacle: str | None) -> list[str]:
        """What an agent at `receptacle` can see there (nothing inside a closed one)."""
        if receptacle is None or not self._reachable(receptacle):
            return []
        lamp = [LAMP] if receptacle == self.lamp else []
        return lamp + sorted(o for o, r in self.where.items() if r == receptacle)

    def _describe(self, receptacle: str) -> str:
        if receptacle in self.is_open:
            if not self.is_open[receptacle]:
                return f"The {receptacle} is closed."
            return f"The {receptacle} is open. In it, you see {listing(self._contents(receptacle))}."
        where = "In" if kind(receptacle) in INSIDE else "On"
        return f"{where} the {receptacle}, you see {listing(self._contents(receptacle))}."

    def _goal_met(self) -> bool:
        if self.task == "look_at_obj_in_light":
            held = self.holding is not None and kind(self.holding) == self.target
            return held and self.lamp_on and self.location == self.lamp
        return self._placed(self._goal_receptacle()) >= (2 if self.task == "pick_two_obj_and_place" else 1)

    def _qualifies(self, obj: str) -> bool:
        return kind(obj) == self.target and (self.task not in STATE or STATE[self.task] in self.states[obj])

    def _placed(self, receptacle: str) -> int:
        return sum(1 for o, r in self.where.items() if r == receptacle and self._qualifies(o))

    def _goal_receptacle(self) -> str:
        """The goal's receptacle of the named kind holding the most qualifying objects (the first on a tie)."""
        places = [r for r in self.receptacles if kind(r) == self.place]
        return max(places, key=self._placed)

    # --- the expert ---

    def plan_action(self, step: str) -> str | None:
        parsed = self._parse(step_text(step), whole=False)
        return None if parsed is None else _canonical(*parsed)

    def delegates(self, step: str) -> bool:
        """A step the expert writes for an object not yet seen ("take the apple"): delegated while the expert's
        own plan holds it (the one acting searches there as the expert does), and once the object has been
        seen only where it reads as the expert's next action ("take the apple" for "take apple 1 from
        cabinet 2"), so that a plan padded with such a step gets no more than the search done for it."""
        if self.done or not self.goal:  # over, or no task yet
            return False
        wanted = plain_step(step)
        unseen = [plain_step(s) for s in self.expert_plan() if self.plan_action(s) is None]
        return wanted in unseen or wanted == plain_step(self._unnumbered(self.expert_action()))

    def to_go(self) -> float:
        """The omniscient solver's remaining steps from the true state: the expert's plan is a hypothesis."""
        return 0.0 if self.success else float(len(self._solve(self._true_view())))

    def _plan(self) -> list[tuple[str, str]]:
        return [] if self.done else self._solve(self._view())

    def _view(self) -> _Planner:
        """The expert's planner on the belief: objects where they were seen, the receptacles not yet searched
        in the order to search them (the goal's kind last: the object is never there at the start)."""
        unsearched = [r for r in self.receptacles if r not in self.searched]
        unsearched.sort(key=lambda r: kind(r) == self.place)
        return _Planner(self, self.seen, self.lamp_seen, unsearched)

    def _true_view(self) -> _Planner:
        return _Planner(self, self.where, self.lamp, [])

    def _solve(self, plan: _Planner) -> list[tuple[str, str]]:
        """(action, plan step) pairs from the current state to success on `plan`'s view of the room."""
        if self.task == "look_at_obj_in_light":
            plan.fetch(self.target)
            plan.go_to_lamp()
            if not self.lamp_on:
                plan.add(f"use {LAMP}", f"to look at the {plan.holding}")
            return plan.steps
        goal = plan.goal_receptacle()
        needed = (2 if self.task == "pick_two_obj_and_place" else 1) - plan.placed(goal)
        for _ in range(needed):
            plan.fetch(self.target, counted=goal)
            obj = plan.holding
            if self.task in STATE and STATE[self.task] not in self.states.get(obj, set()):
                appliance = APPLIANCE[self.task]
                verb = VERB[kind(appliance)]
                plan.go(appliance, f"to {verb} the {obj}")
                plan.add(f"{verb} {ref(obj)} with {appliance}")
            plan.go(goal, f"to place the {obj}")
            plan.open(goal, f"to put the {obj} in")
            plan.add(f"put {ref(obj)} {prep(goal)} {goal}")
            plan.holding = None
        return plan.steps

    def _unnumbered(self, action: str) -> str:
        """How the expert words `action` had its object not been seen: "take apple 1 from cabinet 2" ->
        "take the apple", "put apple 1 in fridge 1" -> "put the apple in fridge 1"."""
        verb, args = self._parse(action, whole=True) or ("", ())
        if verb == "take":
            return f"take the {kind(args[0])}"
        if verb == "apply":
            return f"{args[0]} the {kind(args[1])} with {args[2]}"
        if verb == "put":
            return f"put the {kind(args[0])} {prep(args[2])} {args[2]}"
        return action

    def _parse(self, text: str, whole: bool) -> tuple[str, tuple[str, ...]] | None:
        """(verb, arguments) of an action naming this room's things; `whole`: the text must be only the
        action (acting), else the action may be followed by more words (a plan step)."""
        for verb, pattern in ACTIONS:
            match = match_action(pattern, text, whole)
            if match and all(self._known(arg) for arg in match.groups() if " " in arg):
                return verb, match.groups()
        return None

    def _known(self, name: str) -> bool:
        return name in self.receptacles or name in self.states or (name == LAMP and self.lamp is not None)


class _Planner:
    """The expert's plan built on a view of the room (`where` objects lie, where the desklamp is, None: not
    known, and the receptacles not yet searched, in the order to search them) and a sketch of the state (where
    the agent is, what it holds, what is open). An object of the kind wanted that the view does not place is
    looked for in the next receptacle not yet searched, and named by its kind from there on ("the apple"): such a
    step's action is its own words, never acted on, as a step searching comes first and its observation revises
    the plan. What state an object is in (`HouseholdEnv._qualifies`) only the agent's own actions change."""

    def __init__(self, env: HouseholdEnv, where: dict[str, str], lamp: str | None, unsearched: list[str]):
        self.env, self.where, self.lamp, self.unsearched = env, where, lamp, unsearched
        self.location = env.location
        self.holding = env.holding
        self.opened = {r for r, is_open in env.is_open.items() if is_open}
        self.taken: set[str] = set()
        self.guessed: set[str] = set()
        self.steps: list[tuple[str, str]] = []

    def add(self, action: str, purpose: str = "") -> None:
        self.steps.append((action, f"{action} {purpose}".strip()))

    def go(self, receptacle: str, purpose: str) -> None:
        if self.location != receptacle:
            self.add(f"go to {receptacle}", purpose)
            self.location = receptacle

    def open(self, receptacle: str, purpose: str) -> None:
        if receptacle in self.env.is_open and receptacle not in self.opened:
            self.add(f"open {receptacle}", purpose)
            self.opened.add(receptacle)

    def fetch(self, target: str, counted: str | None = None) -> None:
        """Hold an object of kind `target`: the one in hand, else one not already counted in the goal's
        receptacle `counted` (`locate`); another object in hand is put down here first."""
        if self.holding is not None and kind(self.holding) == target:
            return
        if self.holding is not None:
            self.open(self.location, "to make room")
            self.add(f"put {self.holding} {prep(self.location)} {self.location}", "to free your hands")
            self.holding = None
        obj, receptacle, purpose = self.locate(target, counted)
        self.go(receptacle, purpose)
        self.open(receptacle, "to look inside")
        self.add(f"take {obj} from {receptacle}" if obj != target else f"take {ref(obj)}")
        self.holding = obj
        self.taken.add(obj)

    def locate(self, target: str, counted: str | None) -> tuple[str, str, str]:
        """(object, receptacle, why go there): the best candidate the view places, where it lies; else the
        object by its kind alone and the next receptacle to search (one not hypothesised for another object
        unless none is left)."""
        env = self.env
        found = [
            o
            for o, r in self.where.items()
            if kind(o) == target and o not in self.taken and not (r == counted and env._qualifies(o))
        ]
        if found:
            obj = min(found, key=lambda o: (not env._qualifies(o), _order(o)))  # in the wanted state first
            return obj, self.where[obj], f"to find the {target}"
        guess = next((r for r in self.unsearched if r not in self.guessed), self.unsearched[0])
        self.guessed.add(guess)
        return target, guess, f"to look for {article(target)}"

    def go_to_lamp(self) -> None:
        if self.lamp is not None:
            self.go(self.lamp, "where the desklamp is")
        else:  # a desklamp stands on the desk or the side table
            self.go(next(r for r in BEDROOM if r in self.unsearched), "to look for the desklamp")

    def placed(self, receptacle: str) -> int:
        return sum(1 for o, r in self.where.items() if r == receptacle and self.env._qualifies(o))

    def goal_receptacle(self) -> str:
        """The goal's receptacle of the named kind holding the most qualifying objects (the first on a tie)."""
        return max((r for r in self.env.receptacles if kind(r) == self.env.place), key=self.placed)


def ref(obj: str) -> str:
    """An object as an action names it: "apple 1" as it is, one not yet seen by its kind ("the apple")."""
    return obj if obj[-1].isdigit() else f"the {obj}"


def _order(name: str) -> tuple[str, int]:
    """Sort by kind, then number: cabinet 2 before cabinet 10."""
    base, _, number = name.rpartition(" ")
    return base, int(number)


def _canonical(verb: str, args: tuple[str, ...]) -> str:
    if verb == "put":
        return f"put {args[0]} {prep(args[2])} {args[2]}"
    if verb == "apply":
        return f"{args[0]} {args[1]} with {args[2]}"
    if verb == "go":
        return f"go to {args[0]}"
    if verb == "take":
        return f"take {args[0]} from {args[1]}"
    return " ".join((verb, *args))


class OracleHouseholdEnv(HouseholdEnv):
    """The same household with an omniscient expert, for ablations only: it walks straight to the object,
    reading where it lies from the simulator, so its first plan names what no agent has seen, and replanning
    after its own actions gives the rest of the same plan."""

    name = "household_oracle"
    expert_revises = False

    def _view(self) -> _Planner:
        return self._true_view()
