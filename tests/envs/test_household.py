"""The household environment: ALFWorld's six task types and answers, an expert that recovers from wandering.

`test_envs` checks what every environment owes (expert in optimal steps, determinism, hostile text, step limit,
copies)."""

from __future__ import annotations

import copy
import random
from collections import Counter

import pytest

from coalign.envs import make_env
from coalign.envs.household import TASK_TYPES, HouseholdEnv, kind
from tests.envs.test_envs import HOSTILE, NEAR_MISSES, expert_runs, run_expert


def test_every_plan_step_is_an_action_that_happens_and_task_types_balance() -> None:
    solved = Counter()
    for env, plan, observations in expert_runs("household", range(300)):
        assert 3 <= env.optimal_steps <= 12 and None not in map(env.plan_action, plan)
        assert "Nothing happened." not in observations[1:], env.task
        solved[env.task] += 1
    assert set(solved) == set(TASK_TYPES) and min(solved.values()) == 50


def random_action(env: HouseholdEnv, rng: random.Random) -> str:
    """A plausible action naming this room's things: most are impossible where the agent stands."""
    receptacle = rng.choice(env.receptacles)
    obj = rng.choice(sorted(env.states))
    return rng.choice(
        [
            f"go to {receptacle}",
            f"open {receptacle}",
            f"close {receptacle}",
            f"take {obj} from {receptacle}",
            f"put {obj} in/on {receptacle}",
            f"heat {obj} with microwave 1",
            f"clean {obj} with {receptacle}",
            "use desklamp 1",
            f"examine {obj}",
            "look",
            "inventory",
        ]
    )


@pytest.mark.parametrize("wander", [3, 10])
def test_expert_recovers_after_the_agent_wanders(wander: int) -> None:
    for seed in range(120):
        env = HouseholdEnv()
        env.reset(seed)
        rng = random.Random(seed)
        for _ in range(wander):
            env.step(random_action(env, rng))
        if env.done:
            continue
        left = env.expert_plan()
        assert len(left) <= env.max_steps - env.steps_taken
        assert len(run_expert(env)) == len(left) and env.success, seed


def test_first_observation_and_seeds_draw_different_rooms() -> None:
    first = HouseholdEnv().reset(7)
    assert first.startswith("You are in the middle of a room. Looking quickly around you, you see a ")
    assert "\nYour task is to: " in first and first.endswith(".")
    assert len({HouseholdEnv().reset(seed) for seed in range(50)}) == 50
    assert isinstance(make_env("household"), HouseholdEnv)


def test_invalid_actions_get_nothing_happened() -> None:
    env = HouseholdEnv()
    env.reset(2)  # a clean cup in fridge; the cup is in sinkbasin 1
    for action in [
        "go to fridge 9",
        "take cup 1 from sinkbasin 1",
        "put cup 1 in fridge 1",
        "open sinkbasin 1",
        "dance",
        "go to",
        "use desklamp 1",
        "clean cup 1 with fridge 1",
        "examine cup 1",
        "look at cup 1",
    ]:
        assert env.step(action).observation == "Nothing happened.", action
    assert env.step("go to the Sinkbasin 1.").observation.startswith("You arrive at sinkbasin 1.")
    assert env.step("take cup 1 from sinkbasin 1").observation == "You pick up the cup 1 from the sinkbasin 1."
    assert env.step("take apple 1 from sinkbasin 1").observation == "Nothing happened."  # one hand
    assert env.step("inventory").observation == "You are carrying: a cup 1."
    assert env.step("examine cup 1").observation == "There's nothing special about cup 1."
    assert not env.done


def test_hostile_text_gets_nothing_happened() -> None:
    env = HouseholdEnv()
    env.reset(11)
    started = copy.deepcopy(env)
    env.step(env.expert_action())
    for text in HOSTILE + NEAR_MISSES["household"]:
        assert env.plan_action(text) is None
        for state in (started, env):
            assert copy.deepcopy(state).step(text).observation == "Nothing happened.", text


def test_plan_action_reads_the_action_a_step_begins_with() -> None:
    env = HouseholdEnv()
    env.reset(2)
    assert env.plan_action("Step 2: Go to the sinkbasin 1 to find the cup.") == "go to sinkbasin 1"
    assert env.plan_action("3. put cup 1 in/on fridge 1") == "put cup 1 in fridge 1"
    assert env.plan_action("- Action: clean cup 1 with sinkbasin 1, then go on") == "clean cup 1 with sinkbasin 1"
    assert env.plan_action("look around the room") == "look"
    for vague in ["find a cup", "go to the fridge", "go to spaceship 1", "look at the cup under the lamp", ""]:
        assert env.plan_action(vague) is None, vague


def test_goal_states_and_lamp() -> None:
    env = HouseholdEnv()
    env.reset(1)  # look at a pencil under the desklamp
    assert env.goal == "look at a pencil under the desklamp."
    assert env.expert_plan()[-1] == "use desklamp 1 to look at the pencil 1"
    env.step("go to sidetable 1")
    assert env.step("use desklamp 1").observation == "You turn on the desklamp 1."
    assert not env.done  # lit, but no pencil in hand
    assert env.expert_plan()[-1] == "go to sidetable 1 where the desklamp is"
    run_expert(env)
    assert env.success


def test_the_searching_expert_plans_on_what_it_has_seen_and_revises_on_observations() -> None:
    """`household_search`: moving the object between receptacles not yet seen changes nothing in the expert's
    plan (it cannot know), and its AdaPlan episodes revise the plan after an observation, where the
    omniscient household expert's never do."""
    from coalign.envs.household import SearchingHouseholdEnv
    from coalign.formats.adaplan import parse_turn
    from coalign.pilotrl.expert import expert_conversation

    for seed in range(60):
        env = SearchingHouseholdEnv()
        env.reset(seed)
        plan = env.expert_plan()
        obj = next(o for o in env.where if kind(o) == env.target)
        elsewhere = [r for r in env.receptacles if r != env.where[obj] and kind(r) != env.place]
        moved = copy.deepcopy(env)
        moved.where[obj] = elsewhere[seed % len(elsewhere)]
        assert moved.expert_plan() == plan, seed
        assert copy.deepcopy(moved).reset(seed) == env.reset(seed)

    def revisions(name: str) -> int:
        count = 0
        for seed in range(24):
            plans = [parse_turn(m["content"], expect_plan=True).plan
                     for m in expert_conversation(name, seed, "adaplan") if m["role"] == "assistant"]  # fmt: skip
            count += sum(list(b) != list(a[1:]) for a, b in zip(plans, plans[1:]))
        return count

    assert revisions("household") == 0 and revisions("household_search") >= 10
    for seed in range(40):  # between plan updates a refuted hypothesis is not acted on: every episode succeeds
        expert_conversation("household_search", seed, "adaplan", every=5)
