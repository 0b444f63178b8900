"""The IQA environment: the expert looks, then answers right, and no plan of its states the answer before an
observation has shown it; questions balanced and answered only after looking; the omniscient expert
(`iqa_oracle`) kept for ablations.

`test_envs` checks what every environment owes (expert in optimal steps, determinism, hostile text, step limit,
copies)."""

from __future__ import annotations

import copy
import random
import re

from coalign.envs import make_env
from coalign.envs.iqa import CONTAINERS, OBJECTS, IQAEnv, OracleIQAEnv
from coalign.formats.adaplan import parse_turn
from coalign.pilotrl.expert import expert_conversation, plan_quality
from tests.envs.test_envs import HOSTILE, NEAR_MISSES, expert_runs, run_expert


def test_expert_looks_then_answers_and_answers_balance() -> None:
    truths = []
    for env, plan, _ in expert_runs("iqa", range(300)):
        assert env.optimal_steps >= 2 and None not in map(env.plan_action, plan[:-1])
        assert env.plan_action(plan[-1]) is None and plan[-1].startswith("answer after looking: is there ")
        truths.append(env.truth)
    assert truths.count(True) == truths.count(False) == 150
    for env, plan, _ in expert_runs("iqa_oracle", range(20)):
        assert env.plan_action(plan[-1]) == f"answer {env.truth}" and env.success


ANSWER = re.compile(r"\banswer (true|false)\b|\bthere is (?:an?|no)\b", re.I)  # an answer, or the fact it rests on


def answers_before_looking(name: str, seeds: range) -> list[tuple[int, int, str]]:
    """(seed, step, plan step) for every step of the expert's current plan, at every step of its episodes, that
    states an answer (or names an object the agent has not read of) before an observation has shown what is in or
    on the question's subject."""
    found = []
    env = make_env(name)
    for seed in seeds:
        read = [env.instructions, env.reset(seed)]
        shown = re.compile(rf"You (?:open|see) the {env.subject}[^.]*\. (?:In|On) it, you see")
        while not env.done:
            settled, seen = any(shown.search(text) for text in read), " ".join(read).lower()
            for step in env.expert_plan():
                names = re.findall(r"\b[a-z]+ \d+\b", step.lower())
                if (ANSWER.search(step) and not settled) or any(name not in seen for name in names):
                    found.append((seed, env.steps_taken, step))
            read.append(env.expert_action())
            read.append(env.step(read[-1]).observation)
    return found


def test_no_plan_states_the_answer_before_the_observation_that_settles_it() -> None:
    assert answers_before_looking("iqa", range(300)) == []
    caught = answers_before_looking("iqa_oracle", range(10))
    assert {seed for seed, *_ in caught} == set(range(10)) and caught[0][1] == 0  # from its first plan on


def test_the_plan_is_the_same_whatever_the_agent_has_not_seen() -> None:
    """Until the subject's contents have been seen the plan is the same whatever they are (the answer flipped,
    the fixtures the agent has not seen into refilled); then it states the right answer, and the expert solves
    every seed in `optimal_steps`, as many as the omniscient one."""
    for seed in range(100):
        env, oracle = IQAEnv(), OracleIQAEnv()
        assert env.reset(seed) == oracle.reset(seed)
        while env.subject not in env.seen:
            other = copy.deepcopy(env)
            other.truth = not other.truth
            rng = random.Random(seed)
            for fixture in set(other.fixtures) - set(env.seen):
                other.contents[fixture] = sorted(f"{o} 1" for o in rng.sample(OBJECTS, 3))
            assert other.expert_plan() == env.expert_plan() and other.expert_action() == env.expert_action()
            env.step(env.expert_action())
        assert env.expert_plan() == [oracle.expert_plan()[-1]]
        run_expert(env)
        assert env.success and env.steps_taken == env.optimal_steps == oracle.optimal_steps


def test_adaplan_episodes_revise_the_answer_once_the_subject_is_seen() -> None:
    """Every AdaPlan episode rewrites its plan once: the question step becomes the answer; the expert's plan is
    the one selected, scores the maximum, and `to_go` is the omniscient solver's remaining steps."""
    for seed in range(60):
        env, oracle = IQAEnv(), OracleIQAEnv()
        env.reset(seed)
        oracle.reset(seed)
        assert plan_quality(env, env.expert_plan()).total == 15 and env.to_go() == env.optimal_steps
        turns = [m["content"] for m in expert_conversation("iqa", seed, "adaplan") if m["role"] == "assistant"]
        plans = [list(parse_turn(turn, expect_plan=True).plan) for turn in turns]
        assert plans[0] == env.expert_plan()
        rewrites = [(a[1:], b) for a, b in zip(plans, plans[1:]) if b != a[1:]]
        assert rewrites == [([env.expert_plan()[-1]], [oracle.expert_plan()[-1]])], seed  # the question, answered


def random_action(env: IQAEnv, rng: random.Random) -> str:
    return rng.choice(["move ahead", "move ahead", "turn left", "turn right", f"open {rng.choice(list(env.fixtures))}"])


def test_expert_recovers_after_the_agent_wanders() -> None:
    for seed in range(200):
        for env in (IQAEnv(), OracleIQAEnv()):
            env.reset(seed)
            rng = random.Random(seed)
            for _ in range(rng.randint(1, 6)):
                env.step(random_action(env, rng))
            left = env.expert_plan()
            assert len(left) <= env.max_steps - env.steps_taken
            assert len(run_expert(env)) == len(left) and env.success and env.to_go() == 0, seed


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
    assert isinstance(make_env("iqa"), IQAEnv) and make_env("iqa").expert_revises
    assert isinstance(make_env("iqa_oracle"), OracleIQAEnv)


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
