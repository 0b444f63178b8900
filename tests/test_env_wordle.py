"""Wordle: the feedback rule on repeated letters, an expert that solves every answer, hostile text."""

from __future__ import annotations

import copy

import pytest

from coalign.envs import make_env
from coalign.envs.wordle import ABSTRACT_STEP, answers, feedback, vocabulary

HOSTILE = [
    "",
    "x" * 1_000_000,
    "c r a\x00 n e",
    "\u202ec r a n e\u202c",
    "ｃｒａｎｅ",
    "__import__('os').system('x')",
    "(" * 10_000 + ")" * 10_000,
    "\n\n  \nline one\nline two",
    "c r a n e s",
]


@pytest.mark.parametrize(
    ("answer", "guess", "marks"),
    [
        ("abbey", "babes", "y y g g b"),
        ("crane", "eerie", "b b y b g"),
        ("crane", "crane", "g g g g g"),
        ("hello", "llama", "y y b b b"),
        ("hello", "lolly", "b y g g b"),
        ("speed", "eerie", "y y b b b"),
        ("abide", "speed", "b b y b y"),
        ("eerie", "emcee", "g b b y g"),
    ],
)
def test_feedback_repeated_letters(answer: str, guess: str, marks: str) -> None:
    assert feedback(guess, answer) == marks


def test_word_lists() -> None:
    assert len(answers()) == 500 and len(set(answers())) == 500
    assert set(answers()) <= vocabulary()
    assert all(len(w) == 5 and w.isascii() and w.isalpha() and w.islower() for w in vocabulary())


def test_expert_solves_every_answer_in_optimal_steps() -> None:
    env = make_env("wordle")
    seen = set()
    for seed in range(len(answers())):
        env.reset(seed)
        seen.add(env.answer)
        assert 1 <= env.optimal_steps <= 6
        plan = env.expert_plan()
        assert len(plan) == env.optimal_steps
        assert env.plan_action(plan[0]) == env.expert_action()
        assert all(env.plan_action(step) is None for step in plan[1:])
        while not env.done:
            env.step(env.expert_action())
        assert env.success and env.steps_taken == env.optimal_steps == env.tries
    assert seen == set(answers())


def test_expert_recovers_after_deviation() -> None:
    env = make_env("wordle")
    for seed in range(40):
        env.reset(seed)
        env.step("q u e e n" if env.answer != "queen" else "m o n e y")
        env.step("zzzzz")
        while not env.done:
            env.step(env.expert_action())
        assert env.success and env.tries <= 6


def test_invalid_word_costs_a_step_not_a_try() -> None:
    env = make_env("wordle")
    env.reset(3)
    assert env.step("x y z z y").observation == "invalid word"
    assert env.step("crane!").observation == "invalid word"
    assert env.tries == 0 and env.steps_taken == 2
    step = env.step("C R A N E")
    assert len(step.observation.split()) == 5 and env.tries == 1


def test_six_tries_end_the_episode() -> None:
    env = make_env("wordle")
    env.reset(0)
    wrong = [w for w in ("house", "water", "money", "night", "point", "music", "paper") if w != env.answer]
    for word in wrong[:5]:
        assert not env.step(" ".join(word)).done
    assert env.step(" ".join(wrong[5])).done and not env.success
    assert env.step(env.expert_action()).observation == "The episode is over."


def test_step_limit_ends_the_episode() -> None:
    env = make_env("wordle")
    env.reset(1)
    for _ in range(env.max_steps - 1):
        assert not env.step("nonsense").done
    assert env.step("nonsense").done and not env.success


def test_deterministic_per_seed() -> None:
    a, b = make_env("wordle"), make_env("wordle")
    for seed in (0, 7, 12345, 10**9):
        assert a.reset(seed) == b.reset(seed) and a.answer == b.answer
        assert a.step("r a i s e") == b.step("r a i s e")
    assert len({(a.reset(s), a.answer)[1] for s in range(30)}) > 20


def test_plan_action_reads_steps() -> None:
    env = make_env("wordle")
    env.reset(0)
    assert env.plan_action("guess c r a n e first") == "c r a n e"
    assert env.plan_action("Guess CRANE to test common letters") == "c r a n e"
    assert env.plan_action(ABSTRACT_STEP) is None
    assert env.plan_action("think about vowels") is None
    assert env.plan_action("guess x q z z j") is None
    assert all(len(step.split()) <= 12 for step in env.expert_plan())


@pytest.mark.parametrize("action", HOSTILE)
def test_hostile_actions_never_raise(action: str) -> None:
    env = make_env("wordle")
    env.reset(5)
    assert isinstance(env.step(action).observation, str)
    env.step(env.expert_action())
    assert isinstance(env.step(action).observation, str)
    assert env.plan_action(action) is None or isinstance(env.plan_action(action), str)
    while not env.done:
        env.step(env.expert_action())
    assert env.step(action).observation == "The episode is over."


def test_deepcopy_is_independent() -> None:
    env = make_env("wordle")
    env.reset(9)
    env.step("r a i s e")
    twin = copy.deepcopy(env)
    while not twin.done:
        twin.step(twin.expert_action())
    assert twin.success and not env.done and env.tries == 1
    assert env.step(env.expert_action()).observation
