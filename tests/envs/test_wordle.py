"""Wordle: the feedback rule on repeated letters, an expert that solves every answer, tries and invalid words.

`test_envs` checks what every environment owes (expert in optimal steps, determinism, hostile text, step limit,
copies)."""

from __future__ import annotations

import pytest

from coalign.envs import make_env
from coalign.envs.wordle import ABSTRACT_STEP, answers, feedback, vocabulary
from tests.envs.test_envs import expert_runs


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


def test_expert_solves_every_answer_in_six_tries() -> None:
    seen = set()
    for env, plan, _ in expert_runs("wordle", range(len(answers()))):
        seen.add(env.answer)
        assert 1 <= env.optimal_steps == env.tries <= 6
        assert all(env.plan_action(step) is None for step in plan[1:])  # later guesses wait on the feedback
    assert seen == set(answers())


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


def test_seeds_draw_different_answers() -> None:
    env = make_env("wordle")
    assert len({(env.reset(s), env.answer)[1] for s in range(30)}) > 20


def test_plan_action_reads_steps() -> None:
    env = make_env("wordle")
    env.reset(0)
    assert env.plan_action("guess c r a n e first") == "c r a n e"
    assert env.plan_action("Guess CRANE to test common letters") == "c r a n e"
    assert env.plan_action(ABSTRACT_STEP) is None
    assert env.plan_action("think about vowels") is None
    assert env.plan_action("guess x q z z j") is None
    assert all(len(step.split()) <= 12 for step in env.expert_plan())
