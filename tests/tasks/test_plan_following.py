"""Plan-following grounder examples: only tasks readable from their subgoals, each paired with another task's text;
and composed plans, chaining such steps of different tasks."""

import re

import pytest

from coalign.config import ConfigError, load_config
from coalign.tasks import Task
from coalign.tasks.maths_suite import generate_suite
from coalign.tasks.plan_following import plan_compositions, plan_following, readable_from_subgoals, readable_steps
from coalign.tools.executor import execute


def _task(subgoals, actions, question="q") -> Task:
    return Task("t", "maths", "d", question, tuple(subgoals), tuple(actions), "1")


def test_readable_when_every_literal_of_the_actions_is_in_the_subgoals():
    assert readable_from_subgoals(
        _task(["Add 7 to 50", "Divide R1 by 3"], ["R1 = Calculator(50 + 7)", "R2 = Calculator(R1 / 3)"])
    )
    assert not readable_from_subgoals(
        _task(["Find the total", "Divide R1 by 3"], ["R1 = Calculator(50 + 7)", "R2 = Calculator(R1 / 3)"])
    )
    assert not readable_from_subgoals(_task(["Add 7 to 5"], ["R1 = Calculator(50 + 7)"]))  # 5 is not 50
    assert readable_from_subgoals(_task(["Halve 2.5 by 0.5"], ["R1 = Calculator(2.5 / 0.5)"]))
    assert not readable_from_subgoals(_task([], []))


def test_on_the_suite_explicit_subgoals_qualify_and_vague_or_descriptive_do_not():
    tasks = generate_suite("train", 300)
    for task in tasks:
        assert readable_from_subgoals(task) == (task.subgoal_styles[0] == "explicit"), task.subgoals


def test_copies_keep_plan_and_actions_and_take_another_tasks_text():
    tasks = generate_suite("train", 200)
    copies = plan_following(tasks, 1.0, seed=3)
    qualifying = [t for t in tasks if readable_from_subgoals(t)]
    assert len(copies) == len(qualifying) > 50
    by_id = {t.id: t for t in tasks}
    questions = {t.question for t in tasks}
    for copy in copies:
        source = by_id[copy.id.removesuffix("-pf")]
        assert (copy.subgoals, copy.actions, copy.answer) == (source.subgoals, source.actions, source.answer)
        assert copy.question != source.question and copy.question in questions
    assert plan_following(tasks, 1.0, seed=3) == copies
    assert plan_following(tasks, 0.0) == []
    assert 0 < len(plan_following(tasks, 0.5)) < len(copies)
    assert plan_following(tasks[:1], 1.0) == []  # no other task text to borrow


def test_share_is_validated():
    with pytest.raises(ValueError, match="share"):
        plan_following([], 1.5)
    with pytest.raises(ConfigError, match="plan_following"):
        load_config("tiny", {"data": {"plan_following": 2}})


# --------------------------------------------------------------------------- composed plans

_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")


def test_composed_plans_chain_readable_steps_of_other_tasks_and_run():
    tasks = generate_suite("train", 300, seed=1)
    composed = plan_compositions(tasks, 0.5, seed=2)
    assert len(composed) == 150
    steps = {(s, a.split(" = ", 1)[1]) for t in tasks for s, a in zip(t.subgoals, t.actions)}
    questions = {t.question for t in tasks}
    plans = {t.subgoals for t in tasks}
    lengths = {len(t.subgoals) for t in tasks if readable_from_subgoals(t)}
    for row in composed:
        assert row.id.endswith("-pc") and row.family == "maths" and row.question in questions
        assert len(row.subgoals) == len(row.actions) in lengths
        for j, (subgoal, action) in enumerate(zip(row.subgoals, row.actions), start=1):
            output, expression = action.split(" = ", 1)
            assert output == f"R{j}"
            assert set(_NUMBER.findall(expression)) <= set(_NUMBER.findall(subgoal))  # readable on its own
            used = set(re.findall(r"\bR\d+\b", expression))
            assert used == set(re.findall(r"\bR\d+\b", subgoal))
            assert all(int(r[1:]) < j for r in used)  # only results made before
            if used:
                assert f"R{j - 1}" in used  # builds on the step just before
        assert execute(list(row.actions)).answer == row.answer
    # new plans, made of steps that exist (references renamed): some steps sit where no training plan has them
    assert sum(row.subgoals not in plans for row in composed) > 140
    unrenamed = [(s, a.split(" = ", 1)[1]) for row in composed for s, a in zip(row.subgoals, row.actions)]
    assert sum(step in steps for step in unrenamed) > len(unrenamed) / 3


def test_composed_plans_are_seeded_and_sized_by_share():
    tasks = generate_suite("train", 200)
    assert plan_compositions(tasks, 1.0, seed=3) == plan_compositions(tasks, 1.0, seed=3)
    assert plan_compositions(tasks, 1.0, seed=3) != plan_compositions(tasks, 1.0, seed=4)
    assert len(plan_compositions(tasks, 2.0)) == 400
    assert plan_compositions(tasks, 0.0) == []
    assert plan_compositions(tasks[:1], 1.0) == []  # no other task text to borrow
    vague = [t for t in tasks if not readable_from_subgoals(t)]
    assert plan_compositions(vague, 1.0) == []  # no step a grounder could read from its subgoal alone


def test_a_step_is_readable_alone_only_when_its_subgoal_names_its_numbers_and_results():
    task = _task(
        ["Add 7 to 50", "Divide R1 by 3", "Take 4 away from the rest", "Add R3 and 2"],
        ["R1 = Calculator(50 + 7)", "R2 = Calculator(R1 / 3)", "R3 = Calculator(R2 - 4)", "R4 = Calculator(R3 + 2)"],
    )
    assert [s.subgoal for s in readable_steps(task)] == ["Add 7 to 50", "Divide R1 by 3", "Add R3 and 2"]


def test_compositions_share_is_validated():
    with pytest.raises(ValueError, match="share"):
        plan_compositions([], 4.5)
    with pytest.raises(ConfigError, match="plan_compositions"):
        load_config("tiny", {"data": {"plan_compositions": -1}})


def test_the_grounder_data_holds_the_composed_plans_a_config_asks_for():
    from coalign.moat.sft_data import grounder_data

    train = generate_suite("train", 120)
    plain = grounder_data(load_config("tiny", {"data": {"plan_following": 0, "plan_compositions": 0}}), train)
    composed = grounder_data(load_config("tiny", {"data": {"plan_following": 0, "plan_compositions": 0.5}}), train)
    assert len(plain) == 120 and len(composed) == 180 and composed[:120] == plain
