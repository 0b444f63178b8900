"""The ALFWorld adapter (the optional `alfworld` environment) on a fake TextWorld-like game (injected), and on a
real TextWorld game when installed."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from pathlib import Path

import pytest

from coalign.config import PilotRLSettings
from coalign.core.errors import RunError
from coalign.envs import HELDIN, HELDOUT, env_class, make_env
from coalign.envs.alfworld import AlfworldEnv, start_textworld_game
from coalign.pilotrl.rewards import accepted

SOLUTION = ["go to countertop 1", "take apple 1 from countertop 1", "go to fridge 1", "move apple 1 to fridge 1"]
BANNER = "-= Welcome to TextWorld, ALFRED! =-\n\n"


class FakeGame:
    """A game with one right command per state, answering TextWorld's way: (state, score, done)."""

    started = 0

    def __init__(self, path: Path):
        FakeGame.started += 1
        spec = json.loads(path.read_text())
        self.goal, self.expert, self.progress = spec["goal"], spec["expert"], 0

    def _state(self, feedback: str) -> dict:
        won = self.progress == len(SOLUTION)
        state = {"feedback": feedback, "won": won, "admissible_commands": ["look", "inventory"]}
        if not won:
            state["admissible_commands"].append(SOLUTION[self.progress])
            if self.expert:
                state["extra.expert_plan"] = [SOLUTION[self.progress]]
        return state

    def reset(self) -> dict:
        self.progress = 0
        room = "You are in the middle of a room. Looking quickly around you, you see a countertop 1, and a fridge 1."
        return self._state(f"{BANNER}{room}\n\nYour task is to: {self.goal}")

    def step(self, command: str) -> tuple[dict, float, bool]:
        if self.progress < len(SOLUTION) and command == SOLUTION[self.progress]:
            self.progress += 1
            return self._state(f"You did: {command}.\n\n\n\n"), float(self.progress == len(SOLUTION)), self.won
        return self._state("Nothing happens."), 0.0, False

    @property
    def won(self) -> bool:
        return self.progress == len(SOLUTION)


@pytest.fixture
def games(tmp_path: Path) -> Path:
    specs = [("put some apple in fridge.", True), ("put a cool apple in fridge.", False)]
    for index, (goal, expert) in enumerate(specs):
        trial = tmp_path / "json_2.1.1" / "train" / f"task-{index}" / "trial_1"
        trial.mkdir(parents=True)
        (trial / "game.tw-pddl").write_text(json.dumps({"goal": goal, "expert": expert}))
    (tmp_path / "README.md").write_text("not a game")
    return tmp_path


INSTALL = r"pip install -e '\.\[alfworld\]'.*alfworld-download"
INSTALLED = importlib.util.find_spec("alfworld") is not None and importlib.util.find_spec("textworld") is not None


def test_missing_games_and_missing_packages_say_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RunError, match=r"no game files under .*game\.tw-pddl.*alfworld-download.*pip install -e"):
        AlfworldEnv(tmp_path, start_game=FakeGame)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "nowhere"))
    assert AlfworldEnv.optional and AlfworldEnv.missing()  # no games under $ALFWORLD_DATA, if not no package
    if not INSTALLED:
        assert re.search(INSTALL, AlfworldEnv.missing())
    if importlib.util.find_spec("textworld") is None:
        with pytest.raises(ImportError, match=INSTALL):
            start_textworld_game(tmp_path / "game.tw-pddl")
        with pytest.raises(RunError, match=INSTALL):
            make_env("alfworld")


def test_registered_as_optional_and_in_no_default(games: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert env_class("alfworld") is AlfworldEnv and "alfworld" not in (*HELDIN, *HELDOUT)
    assert "alfworld" not in PilotRLSettings().heldin + PilotRLSettings().heldout
    assert not any(env_class(name).optional or env_class(name).missing() for name in (*HELDIN, *HELDOUT))
    monkeypatch.setenv("ALFWORLD_DATA", str(games))
    assert AlfworldEnv.missing() == "" if INSTALLED else re.search(INSTALL, AlfworldEnv.missing())
    env = make_env("alfworld", start_game=FakeGame)  # $ALFWORLD_DATA's games by default
    assert env.games == games and len(env.files) == 2
    env.reset(0)
    assert not accepted("alfworld", env.step("xyzzy").observation)
    assert accepted("alfworld", env.step(SOLUTION[0]).observation)


def test_seed_picks_a_game_and_the_expert_from_infos_solves_it(games: Path) -> None:
    env = AlfworldEnv(games, start_game=FakeGame)
    first = env.reset(0)
    assert first.startswith("You are in the middle of a room.") and "-= Welcome" not in first
    assert env.goal == "put some apple in fridge." and env.game_file.parent.parent.name == "task-0"
    assert env.optimal_steps == len(SOLUTION)
    for action in SOLUTION:
        assert env.expert_plan() == [action] and env.plan_action(f"Step 1: {action} now") == action
        assert env.expert_action() == action
        result = env.step(action)
    assert result.done and env.success and result.reward == 1.0 and env.steps_taken == len(SOLUTION)
    assert env.reset(2) == first and env.steps_taken == 0 and not env.done


def test_without_an_expert_the_expert_methods_raise(games: Path) -> None:
    env = AlfworldEnv(games, start_game=FakeGame)
    env.reset(1)
    assert env.goal == "put a cool apple in fridge." and env.optimal_steps == 0
    with pytest.raises(NotImplementedError):
        env.expert_action()
    with pytest.raises(NotImplementedError):
        env.expert_plan()
    assert env.plan_action("go to fridge 1 to cool the apple") == "go to fridge 1"  # ALFWorld's grammar
    assert env.plan_action("think about the apple") is None


def test_put_is_read_as_move_where_the_game_wants_move(games: Path) -> None:
    env = AlfworldEnv(games, start_game=FakeGame)
    env.reset(0)
    for action in SOLUTION[:3]:
        env.step(action)
    assert env.step("put apple 1 in/on fridge 1").done and env.success
    assert env.history[-1] == "move apple 1 to fridge 1"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "x" * 1_000_000,
        "\x00\x00",
        "\u202eevil\u202c",
        "__import__('os').system('x')",
        "(" * 10_000,
        "42",
        "line\n" * 100_000,
    ],
)
def test_hostile_text_is_passed_on_and_answered(games: Path, text: str) -> None:
    env = AlfworldEnv(games, start_game=FakeGame)
    env.reset(0)
    assert env.step(text).observation in ("Nothing happened.", "Nothing happens.")
    env.step(SOLUTION[0])
    assert env.step(text).observation in ("Nothing happened.", "Nothing happens.")
    for action in SOLUTION[1:]:
        env.step(action)
    assert env.step(text).observation == "The episode is over."


def test_step_limit_and_deepcopy_replays(games: Path) -> None:
    env = AlfworldEnv(games, start_game=FakeGame, max_steps=3)
    env.reset(0)
    env.step(SOLUTION[0])
    started = FakeGame.started
    clone = copy.deepcopy(env)
    assert FakeGame.started == started + 1 and clone.history == env.history
    for action in SOLUTION[1:3]:
        clone.step(action)
    assert clone.done and not clone.success  # the limit, one step short
    assert env.steps_taken == 1 and not env.done and env.expert_action() == SOLUTION[1]


@pytest.mark.skipif(importlib.util.find_spec("textworld") is None, reason="textworld is not installed")
def test_a_real_textworld_game(tmp_path: Path) -> None:
    import textworld
    from textworld.generator import compile_game, make_game

    options = textworld.GameOptions()
    options.seeds, options.nb_rooms, options.nb_objects, options.quest_length = 3, 2, 3, 2
    options.path = str(tmp_path / "game.z8")
    compile_game(make_game(options), options)
    env = AlfworldEnv(tmp_path)
    env.reset(0)
    assert env.optimal_steps > 0 and env.goal
    plan = env.expert_plan()
    assert env.step("__import__('os').system('x')").observation
    clone = copy.deepcopy(env)
    for step in plan:
        assert clone.plan_action(step) == clone.expert_action() == step
        clone.step(step)
    assert clone.success and not env.done and env.steps_taken == 1
