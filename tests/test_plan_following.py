"""Plan-following grounder examples: only tasks readable from their subgoals, each paired with another task's text."""

import pytest

from coalign.config import ConfigError, load_config
from coalign.tasks import Task
from coalign.tasks.plan_following import plan_following, readable_from_subgoals
from coalign.tasks.maths_suite import generate_suite


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
