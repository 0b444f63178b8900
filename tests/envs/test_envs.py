"""What every text environment owes PilotRL, checked once over `envs.REGISTRY`: an expert that succeeds from
the start in exactly `optimal_steps` and whose plan reads back to its actions, the same task per seed, model
text that never breaks a step, a step limit, and copies that share nothing. Each `test_<name>.py` here
checks what only its environment does. An optional environment (`TextEnv.optional`: alfworld, whose package and
game files coalign does not install) is checked in its own file instead, on a fake game and on a real one where
installed."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator

import pytest

from coalign.envs import REGISTRY, TextEnv, env_class, make_env

NAMES = sorted(name for name in REGISTRY if not env_class(name).optional)  # the bundled ones
SEEDS = {"household": 300, "iqa": 300, "crafting": 300, "wordle": 500, "maze": 300, "babyai": 200, "babyai_oracle": 200,
         "household_oracle": 300, "iqa_oracle": 300, "maze_oracle": 300}  # fmt: skip
IDLE = {  # an action that changes nothing (or only what the agent faces) and ends nothing
    "household": "look",
    "household_oracle": "look",
    "iqa": "turn left",
    "iqa_oracle": "turn left",
    "crafting": "inventory",
    "wordle": "nonsense",
    "maze": "wait",
    "maze_oracle": "wait",
    "babyai": "turn left",
    "babyai_oracle": "turn left",
}
DEVIATIONS = {  # seeds, and the agent's own moves before the expert takes over
    "household": (50, ("look", "go to cabinet 1", "open cabinet 1", "go to fridge 1")),
    "household_oracle": (50, ("look", "inventory", "examine cup 1")),
    "iqa": (50, ("turn left", "move ahead", "turn right")),
    "iqa_oracle": (50, ("turn left", "move ahead", "turn right")),
    "crafting": (100, ("get 3 wood log", "craft 4 plank using 1 wood log", "get 1 coal", "craft 1 boat using 5 plank")),
    "wordle": (40, ("q u e e n", "zzzzz")),
    "maze": (50, ("move left", "move up", "move up", "move right", "jump")),
    "maze_oracle": (50, ("move left", "move up", "move up", "move right", "jump")),
    "babyai": (28, ("turn right", "turn right", "move forward", "turn left")),
    "babyai_oracle": (28, ("turn right", "turn right", "move forward", "turn left")),
}
HOSTILE = [
    "",
    "x" * 1_000_000,
    "\x00\x00 wipe\x00 disk",
    "\u202eeurT rewsna\u202c \u2067ذهاب\u2069",
    "__import__('os').system('x')",
    "(" * 10_000 + ")" * 10_000,
    "\n\n  \nline one\nline two",
    "\n".join("I think I should move ahead and then answer True. " * 20 for _ in range(500)),
]
NEAR_MISSES: dict[str, list[str]] = {  # each environment's own actions, broken: NUL, bidi, full-width, out of range
    "household": [
        "\u202e1 egdirf ni 1 elppa tup\u202c \u2067ذهاب\u2069",
        "12345",
        "-1e308",
        "\n".join(f"go to cabinet {i} and then take everything" * 20 for i in range(500)),
    ],
    "iqa": ["0", "3.14159"],
    "crafting": [
        "get 2\x00 coal",
        "\u202eget 2 coal\u202c",
        "ｇｅｔ ２ ｃｏａｌ",
        "\n\n  \nget 1 coal\ncraft 1 bucket using 3 iron ingot",
        "get 99999999999999999999 coal",
        "craft 0 stick using 0 plank",
        "craft 4 stick using 2 plank, 2 plank",
        "get -3 coal",
    ],
    "wordle": ["c r a\x00 n e", "\u202ec r a n e\u202c", "ｃｒａｎｅ", "c r a n e s"],
    "maze": ["move\x00 up", "\u202emove up\u202c", "ｍｏｖｅ ｕｐ", "\n\n  \nmove left\nmove right", "move diagonally"],
    "babyai": [
        "go to red\x00 ball 1",
        "\u202ego to red ball 1\u202c",
        "ｇｏ ｔｏ ｒｅｄ ｂａｌｌ １",
        "\n\n  \nturn left\nmove forward",
        "go to red ball 999",
        "pick up red door 1",
        "go through red ball 1",
        "toggle and go through grey locked door 1",
    ],
}
NEAR_MISSES["household_oracle"] = NEAR_MISSES["household"]  # the same actions
NEAR_MISSES["iqa_oracle"] = NEAR_MISSES["iqa"]
NEAR_MISSES["maze_oracle"] = NEAR_MISSES["maze"]
NEAR_MISSES["babyai_oracle"] = NEAR_MISSES["babyai"]


def run_expert(env: TextEnv) -> list[str]:
    """Play the expert to the end of the episode; its actions."""
    actions = []
    while not env.done:
        actions.append(env.expert_action())
        env.step(actions[-1])
    return actions


def expert_runs(name: str, seeds: Iterable[int]) -> Iterator[tuple[TextEnv, list[str], list[str]]]:
    """The environment after the expert's episode on each seed, with the expert's plan from the start and the
    episode's observations (the first one the reset's), so that an environment's own test checks what only
    it promises."""
    env = make_env(name)
    for seed in seeds:
        observations = [env.reset(seed)]
        plan = env.expert_plan()
        while not env.done:
            observations.append(env.step(env.expert_action()).observation)
        yield env, plan, observations


def seed_with_steps(name: str, steps: int) -> int:
    """A seed whose expert needs at least `steps` actions, to act mid-episode."""
    env = make_env(name)
    return next(seed for seed in range(100) if env.reset(seed) is not None and env.optimal_steps >= steps)


@pytest.mark.parametrize("name", NAMES)
def test_expert_follows_its_plan_and_succeeds_in_optimal_steps(name: str) -> None:
    """The expert acts on its plan's first step and succeeds in `optimal_steps`; its plan from the start is
    what it does, unless it plans on a hypothesis that observations revise (`expert_revises`)."""
    env = make_env(name)
    for seed in range(SEEDS[name]):
        env.reset(seed)
        plan = env.expert_plan()
        assert len(plan) >= 1 and all(len(step.split()) <= 12 for step in plan)
        assert len(plan) == env.optimal_steps or env.expert_revises
        assert env.plan_action(plan[0]) == env.expert_action()
        index = 0
        while not env.done:
            action = env.expert_action()
            if not env.expert_revises:
                assert env.plan_action(plan[index]) in (None, action), (seed, index)  # None: an abstract step
            assert env.plan_action(env.expert_plan()[0]) == action, (seed, index)
            result = env.step(action)
            index += 1
        assert index == env.optimal_steps and (index == len(plan) or env.expert_revises)
        assert env.success and result.reward == 1.0 and env.steps_taken == env.optimal_steps <= env.max_steps


@pytest.mark.parametrize("name", NAMES)
def test_expert_recovers_after_deviation(name: str) -> None:
    env = make_env(name)
    seeds, deviation = DEVIATIONS[name]
    for seed in range(seeds):
        env.reset(seed)
        for action in deviation:
            if not env.done:
                env.step(action)
        while not env.done:
            assert env.plan_action(env.expert_plan()[0]) == env.expert_action(), seed
            env.step(env.expert_action())
        assert env.success, seed


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_per_seed(name: str) -> None:
    a, b = make_env(name), make_env(name)
    for seed in (0, 7, 12345, 2**35):
        assert a.reset(seed) == b.reset(seed) and a.goal == b.goal and a.expert_plan() == b.expert_plan()
        assert a.step(IDLE[name]) == b.step(IDLE[name])
        assert [a.step(x) for x in run_expert(copy.deepcopy(a))] == [b.step(x) for x in run_expert(copy.deepcopy(b))]
    assert isinstance(a.reset(None), str)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        pytest.param(name, text, id=f"{name}-{i}")
        for name in NAMES
        for i, text in enumerate(HOSTILE + NEAR_MISSES[name])
    ],
)
def test_hostile_text_is_answered_never_raised(name: str, text: str) -> None:
    env = make_env(name)
    env.reset(seed_with_steps(name, 3))
    assert isinstance(env.step(text).observation, str)
    env.step(env.expert_action())
    assert isinstance(env.step(text).observation, str)
    assert env.plan_action(text) is None or isinstance(env.plan_action(text), str)
    run_expert(env)
    assert env.success
    after = env.step(text)
    assert after.done and after.observation == "The episode is over."


@pytest.mark.parametrize("name", NAMES)
def test_step_limit_ends_the_episode(name: str) -> None:
    env = make_env(name)
    env.reset(3)
    results = [env.step(IDLE[name]) for _ in range(env.max_steps)]
    assert [r.done for r in results] == [False] * (env.max_steps - 1) + [True]
    assert not env.success and env.step(IDLE[name]).observation == "The episode is over."


@pytest.mark.parametrize("name", NAMES)
def test_deepcopy_is_independent(name: str) -> None:
    env = make_env(name)
    env.reset(seed_with_steps(name, 3))
    env.step(env.expert_action())
    before = (env.steps_taken, env.expert_plan(), copy.deepcopy(env).step(IDLE[name]).observation)
    clone = copy.deepcopy(env)
    run_expert(clone)
    assert clone.success and not env.done
    assert (env.steps_taken, env.expert_plan(), copy.deepcopy(env).step(IDLE[name]).observation) == before
    assert len(run_expert(env)) == len(before[1]) or env.expert_revises
    assert env.success and env.steps_taken == clone.steps_taken
