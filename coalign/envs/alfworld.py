"""The real ALFWorld (or any TextWorld game) behind `TextEnv`, for users who have its game files.

Optional, registered as `alfworld` and in no default held-in or held-out list: `pip install -e '.[alfworld]'`
(coalign's `alfworld` extra: ALFWorld and TextWorld), then `alfworld-download` for the games, which it puts
under $ALFWORLD_DATA (default ~/.cache/alfworld) as json_2.1.1/<split>/<task>/<trial>/game.tw-pddl. Without
them, making the environment (and a PilotRL run naming it, before any stage) fails saying so (`missing`).
Nothing is imported until a game starts. `reset(seed)` picks one game file of a folder by seed (every game
under $ALFWORLD_DATA unless `games` names a folder, e.g. one split); `step` passes the command on;
success is the game's `won`. The expert is the game's own when its infos offer one: ALFWorld's
handcoded expert (`expert_plan`: the next command) or TextWorld's winning policy (`policy_commands`:
all remaining commands); plan steps are those commands verbatim. Without one, the expert methods
raise NotImplementedError, as the base does.

A game engine is a process-like object that does not deepcopy, so a copy of this environment
starts the same game again and replays the commands so far (games are deterministic).
"""

from __future__ import annotations

import copy
import os
import random
import re
from collections.abc import Callable, Iterator, Mapping
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Protocol

from coalign.core.errors import RunError
from coalign.envs.base import TextEnv
from coalign.envs.household import ACTIONS as HOUSEHOLD_ACTIONS

GAME_SUFFIXES = (".tw-pddl", ".z8", ".ulx")
NOTHING = "Nothing happened."
INSTALL = (
    "the alfworld environment needs ALFWorld and TextWorld, which coalign does not install: "
    "`pip install -e '.[alfworld]'` (coalign's `alfworld` extra), then `alfworld-download` for the game files "
    "(json_2.1.1/<split>/<task>/<trial>/game.tw-pddl, under $ALFWORLD_DATA, default ~/.cache/alfworld)"
)
_PREFIX = re.compile(r"^(?:step\s*\d+\s*[:.)-]?|\d+\s*[.):-]|[-*•]|action\s*:)\s*")
_END = r"(?=$|[\s.,;:!?)])"
_PUT = re.compile(r"put (\S+ \d+) (?:in/on|in|on|into|onto) (\S+ \d+)")
# ALFWorld's command grammar (names are one word and a number): the household's, and ALFWorld 0.4's "move"
GRAMMAR = tuple(pattern.replace("(?:the )?", "") for _, pattern in HOUSEHOLD_ACTIONS) + (
    r"move ([a-z]+ \d+) to ([a-z]+ \d+)",
    r"slice ([a-z]+ \d+) with ([a-z]+ \d+)",
)


def default_games() -> Path:
    """Where `alfworld-download` puts the games: $ALFWORLD_DATA, else ~/.cache/alfworld (ALFWorld's own default)."""
    return Path(os.environ.get("ALFWORLD_DATA") or "~/.cache/alfworld").expanduser()


def _games(games: Path) -> Iterator[Path]:
    return (p for p in games.rglob("*") if p.suffix in GAME_SUFFIXES and p.is_file())


def game_files(games: Path) -> list[Path]:
    """The game files under `games`, searched recursively, in a fixed order."""
    return sorted(_games(games))


def no_games(games: Path) -> str:
    return (
        f"no game files under {games}: expected ALFWorld's game.tw-pddl files "
        "(json_2.1.1/<split>/<task>/<trial>/game.tw-pddl: run `alfworld-download`, after "
        "`pip install -e '.[alfworld]'`) or compiled TextWorld games (.z8, .ulx)"
    )


class Game(Protocol):
    """What a started game offers: TextWorld's `Environment` (`textworld.start(...)`)."""

    def reset(self) -> Mapping[str, Any]: ...

    def step(self, command: str) -> tuple[Mapping[str, Any], float, bool]: ...


def start_textworld_game(path: Path) -> Game:
    """Start a game file with the infos this adapter reads: ALFWorld's wrappers for .tw-pddl files
    (names demangled, the handcoded expert), TextWorld's winning policy for compiled games."""
    try:
        import textworld
    except ImportError as exc:
        raise ImportError(INSTALL) from exc
    if path.suffix != ".tw-pddl":
        infos = textworld.EnvInfos(won=True, admissible_commands=True, policy_commands=True, objective=True)
        return textworld.start(str(path), request_infos=infos)
    try:
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert
    except ImportError as exc:
        raise ImportError(INSTALL) from exc
    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile", "expert_plan"])
    return textworld.start(str(path), request_infos=infos, wrappers=[AlfredDemangler(), AlfredExpert()])


class AlfworldEnv(TextEnv):
    """Game files under `games` (searched recursively; $ALFWORLD_DATA by default), one per seed; `start_game`
    starts one (TextWorld by default; tests and other engines pass their own)."""

    name = "alfworld"
    optional = True
    invalid_reply = r"Nothing happen"  # ALFWorld's "Nothing happens.", the adapter's "Nothing happened."
    instructions = (
        "You are in a household. Act with one command per turn: go to X, open X, close X, take O from R, "
        "move O to R (older games: put O in/on R), heat O with R, cool O with R, clean O with R, use X, "
        "examine X, look, inventory. X, O and R are names with their number (fridge 1)."
    )

    @classmethod
    def missing(cls) -> str:
        """The packages (ALFWorld, TextWorld) or the downloaded games, when either is not here."""
        if find_spec("alfworld") is None or find_spec("textworld") is None:
            return INSTALL
        games = default_games()
        return "" if any(_games(games)) else no_games(games)

    def __init__(
        self, games: str | Path | None = None, start_game: Callable[[Path], Game] | None = None, max_steps: int = 50
    ) -> None:
        super().__init__()
        if start_game is None and find_spec("textworld") is None:
            raise RunError(INSTALL)
        self.games = default_games() if games is None else Path(games)
        self.start_game = start_game or start_textworld_game
        self.max_steps = max_steps
        self.files = game_files(self.games)
        if not self.files:
            raise RunError(no_games(self.games))
        if start_game is None and find_spec("alfworld") is None and any(p.suffix == ".tw-pddl" for p in self.files):
            raise RunError(INSTALL)  # ALFWorld's games need its wrappers (compiled TextWorld games do not)
        self.history: list[str] = []
        self._state: Mapping[str, Any] = {}

    def reset(self, seed: int | None = None) -> str:
        self.seed = random.randrange(2**32) if seed is None else seed
        self.game_file = self.files[self.seed % len(self.files)]
        self._game = self.start_game(self.game_file)
        self._state = self._game.reset()
        self.history = []
        self.steps_taken, self.success, self.done = 0, False, False
        observation = _clean(str(self._state.get("feedback", "")))
        task = re.search(r"Your task is to: (.+)", observation)
        self.goal = task.group(1).strip() if task else str(self._state.get("objective", "")).strip()
        self.optimal_steps = self._expert_length() if self._expert_commands() else 0
        return observation

    def _act(self, action: str) -> str:
        if not action:
            return NOTHING
        command = self._translate(action)
        self.history.append(command)
        self._state, _, done = self._game.step(command)
        self.success = bool(self._state.get("won"))
        self.done = bool(done) or self.success
        return _clean(str(self._state.get("feedback", ""))) or NOTHING

    def _translate(self, action: str) -> str:
        """ "put O in/on R" as "move O to R" where the game offers only the latter (ALFWorld 0.4's grammar),
        so that an agent trained on the household's wording is understood."""
        admissible = self._state.get("admissible_commands") or ()
        put = _PUT.fullmatch(action.lower())
        if put and action not in admissible and f"move {put[1]} to {put[2]}" in admissible:
            return f"move {put[1]} to {put[2]}"
        return action

    # --- the game's expert, when it has one ---

    def _expert_commands(self) -> list[str]:
        for key in ("extra.expert_plan", "expert_plan", "policy_commands"):
            commands = self._state.get(key)
            if commands:
                return [str(c) for c in commands]
        return []

    def expert_action(self) -> str:
        commands = self._expert_commands()
        if not commands:
            return super().expert_action()
        return commands[0]

    def expert_plan(self) -> list[str]:
        if not self._expert_commands():
            return super().expert_plan()
        return [] if self.done else self._expert_commands()

    def plan_action(self, step: str) -> str | None:
        """The command a step begins with: one the game offers now or its expert plans (longest first),
        else one of ALFWorld's command forms."""
        text = " ".join(str(step).lower().split())
        while (stripped := _PREFIX.sub("", text, count=1)) != text:
            text = stripped
        known = [str(c) for c in self._state.get("admissible_commands") or ()] + self._expert_commands()
        for command in sorted(known, key=len, reverse=True):
            if re.match(re.escape(command.lower()) + _END, text):
                return command
        for pattern in GRAMMAR:
            match = re.match(pattern + _END, text)
            if match:
                return match.group(0)
        return None

    def _expert_length(self) -> int:
        """The expert's step count from here, by running it on a copy (0 when it fails within the limit)."""
        probe = copy.deepcopy(self)
        while not probe.done:
            probe.step(probe.expert_action())
        return probe.steps_taken if probe.success else 0

    def __deepcopy__(self, memo: dict) -> AlfworldEnv:
        """A copy with its own game: the same file started again and the commands so far replayed."""
        clone = copy.copy(self)
        memo[id(self)] = clone
        clone.history = list(self.history)
        if hasattr(self, "_game"):
            clone._game = self.start_game(self.game_file)
            clone._state = clone._game.reset()
            for command in self.history:
                clone._state, _, _ = clone._game.step(command)
        return clone


def _clean(feedback: str) -> str:
    """The game's text without TextWorld's welcome banner ("-= Welcome to TextWorld, ALFRED! =-"), its
    prompt and status line ("> ... -= Kitchen =-0/1") and runs of blank lines."""
    lines = [
        line.rstrip()
        for line in feedback.splitlines()
        if not (line.lstrip().startswith(">") or re.fullmatch(r"\s*-= Welcome to .*=-\s*", line))
    ]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
