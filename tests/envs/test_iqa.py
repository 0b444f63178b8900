"""The IQA environment: the expert looks, then answers right; questions balanced and answered only after looking.

`test_envs` checks what every environment owes (expert in optimal steps, determinism, hostile text, step limit,
copies)."""

from __future__ import annotations

import copy
import random

from coalign.envs import make_env
from coalign.envs.iqa import CONTAINERS, IQAEnv
from tests.envs.test_envs import HOSTILE, NEAR_MISSES, expert_runs, run_expert


def test_expert_looks_then_answers_and_answers_balance() -> None:
    truths = []
    for env, plan, _ in expert_runs("iqa", range(300)):
        assert env.optimal_steps >= 2 and None not in map(env.plan_action, plan)
        assert env.plan_action(plan[-1]) == f"answer {env.truth}"
        truths.append(env.truth)
    assert truths.count(True) == truths.count(False) == 150


def random_action(env: IQAEnv, rng: random.Random) -> str:
    return rng.choice(["move ahead", "move ahead", "turn left", "turn right", f"open {rng.choice(list(env.fixtures))}"])


def test_expert_recovers_after_the_agent_wanders() -> None:
    for seed in range(200):
        env = IQAEnv()
        env.reset(seed)
        rng = random.Random(seed)
        for _ in range(rng.randint(1, 6)):
            env.step(random_action(env, rng))
        left = env.expert_plan()
        assert len(left) <= env.max_steps - env.steps_taken
        assert len(run_expert(env)) == len(left) and env.success, seed


def test_answers_end_the_episode_and_need_looking() -> None:
    env = IQAEnv()
    env.reset(0)  # "Is there a potato in the fridge 1?" -- True
    assert env.goal == "Is there a potato in the fridge 1?" and env.truth
    blind = copy.deepcopy(env)
    result = blind.step("answer True")
    assert result.done and not blind.success and "without looking" in result.observation
    assert env.step("open fridge 1").observation == "Nothing happened."  # not in front yet
    for action in env.expert_plan()[:-1]:
        env.step(env.plan_action(action))
    wrong = copy.deepcopy(env)
    assert wrong.step("answer false").observation == "Your answer is wrong." and wrong.done and not wrong.success
    assert env.step("Answer True.").observation == "Your answer is correct." and env.success
    assert env.step("answer True").observation == "The episode is over."


def test_observations_say_what_is_in_view() -> None:
    env = IQAEnv()
    first = env.reset(0)
    assert first.splitlines()[1] == "You are at row 1, column 2, facing south. You see a wall, 4 cells ahead."
    assert first.endswith("\nQuestion: Is there a potato in the fridge 1?")
    assert "the fridge 1 (row 2, column 1)" in first
    moved = env.step("move ahead").observation
    assert moved == "You are at row 2, column 2, facing south. You see a wall, 3 cells ahead."
    seen = env.step("turn right").observation
    assert seen.endswith("You see the fridge 1 (closed), right in front of you.")
    assert env.step("open fridge 1").observation == "You open the fridge 1. In it, you see a plate 1 and a potato 1."
    assert env.step("turn left").observation.startswith("You are at row 2, column 2, facing south.")
    assert env.step("bad command").observation == "Nothing happened."


def test_blocked_moves_and_seeds_draw_different_kitchens() -> None:
    env = IQAEnv()
    env.reset(2)  # starts facing a wall, right in front
    assert env.step("move ahead").observation.startswith("You cannot move ahead. You are at row 4, column 1")
    assert len({IQAEnv().reset(seed) for seed in range(50)}) == 50
    assert isinstance(make_env("iqa"), IQAEnv)


def test_hostile_text_gets_nothing_happened() -> None:
    env = IQAEnv()
    env.reset(4)
    started = copy.deepcopy(env)
    env.step(env.expert_action())
    for text in HOSTILE + NEAR_MISSES["iqa"]:
        assert env.plan_action(text) is None
        for state in (started, env):
            probe = copy.deepcopy(state)
            assert probe.step(text).observation == "Nothing happened." and not probe.done, text


def test_plan_action_reads_the_action_a_step_begins_with() -> None:
    env = IQAEnv()
    env.reset(0)
    assert env.plan_action("Step 1: Move forward toward the fridge.") == "move ahead"
    assert env.plan_action("2) turn right to face the fridge 1") == "turn right"
    assert env.plan_action("Action: open the fridge 1 to look inside") == "open fridge 1"
    assert env.plan_action("answer TRUE: there is a potato") == "answer True"
    for vague in ["open the fridge", "open cabinet 9", "answer maybe", "walk to the fridge 1", "turn lefty"]:
        assert env.plan_action(vague) is None, vague


def test_questions_ask_about_containers_and_surfaces() -> None:
    kinds = set()
    for seed in range(40):
        env = IQAEnv()
        env.reset(seed)
        kinds.add(env.subject in CONTAINERS)
        assert env.goal.startswith("Is there ") and env.goal.endswith(f" the {env.subject}?")
    assert kinds == {True, False}


def test_the_looking_expert_states_the_answer_only_after_looking() -> None:
    """`iqa_look`: the first plan is the same whatever the answer (its last step names no action), the revised
    plan after looking states the right one, and the expert still solves every seed in `optimal_steps`."""
    from coalign.envs.iqa import LookingIQAEnv

    for seed in range(60):
        env, plain = LookingIQAEnv(), IQAEnv()
        assert env.reset(seed) == plain.reset(seed)
        plan = env.expert_plan()
        assert env.plan_action(plan[-1]) is None and plan[:-1] == plain.expert_plan()[:-1]
        flipped = copy.deepcopy(env)
        flipped.truth = not flipped.truth
        assert flipped.expert_plan() == plan
        while not env.looked:
            env.step(env.expert_action())
        assert env.expert_plan()[-1] == plain.expert_plan()[-1]
        while not env.done:
            env.step(env.expert_action())
        assert env.success and env.steps_taken == env.optimal_steps == plain.optimal_steps
