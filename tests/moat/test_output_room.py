"""The generation limits leave room for every gold turn: a cut plan cannot be right, however good the planner."""

import pytest

from coalign.config import load_config
from coalign.formats.lumos import parse_actions, parse_subgoals
from coalign.formats.lumos_iterative import parse_planner_turn
from coalign.moat.data import round_tasks
from coalign.moat.output_room import gold_outputs, room
from coalign.models.bases import base_path
from coalign.models.load import load_tokenizer
from coalign.tasks.maths_suite import generate_suite
from coalign.tasks.sources import load_sources
from coalign.tasks.web_suite import generate_web_suite


class Words:
    """A tokenizer with one token per space-separated word."""

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        return {"input_ids": text.split()}


def test_gold_outputs_are_what_the_agents_write():
    (task,) = generate_suite("train", 1)
    (plan,), (actions,) = gold_outputs(task)
    assert parse_subgoals(plan) == list(task.subgoals)
    assert [str(a) for a in parse_actions(actions)] == [str(a) for a in parse_actions("; ".join(task.actions))]
    (web,) = generate_web_suite("train", 1)
    turns, groundings = gold_outputs(web)
    assert [parse_planner_turn(t) for t in turns] == [(i, s) for i, s in enumerate(web.subgoals, start=1)]
    assert len(groundings) == len(web.subgoals) and "; ".join(groundings) == "; ".join(web.actions)


def test_room_counts_the_tasks_a_limit_cuts_and_says_which_setting_to_raise():
    tasks = generate_suite("train", 40)
    longest = max(len(gold_outputs(t)[0][0].split()) for t in tasks)
    assert room(tasks, "planner", Words(), longest).tasks_over == 0
    cut = room(tasks, "planner", Words(), longest - 1)
    assert cut.tasks_over >= 1 and cut.longest == longest
    one = room([t for t in tasks if len(gold_outputs(t)[0][0].split()) == longest][:1], "planner", Words(), longest - 1)
    assert one.warning("heldin/x", "eval.max_new_tokens_plan") == (
        f"heldin/x: 1 task has a gold planner turn longer than eval.max_new_tokens_plan = {longest - 1} tokens "
        f"(the longest {longest}); the planner cannot write it in full. Raise eval.max_new_tokens_plan."
    )
    assert room(tasks, "planner", Words(), 0).warning("s", "x").startswith("s: 40 tasks have a gold planner turn")
    assert room(tasks, "planner", Words(), longest).warning("heldin/x", "eval.max_new_tokens_plan") is None
    fewer = room(tasks, "grounder", Words(), 3)
    assert fewer.tasks_over == sum(len(gold_outputs(t)[1][0].split()) > 3 for t in tasks)


@pytest.mark.parametrize("name", ["tiny", "tiny-six", "tiny-mixed", "tiny-web", "tiny-web-moat"])
def test_bundled_configs_leave_room_for_every_gold_turn(name: str):
    """In each agent's own tokenizer: the evaluation sets under eval's limits, the round tasks under MOAT's."""
    config = load_config(name)
    planner = load_tokenizer(base_path(config.models.planner))
    grounder = load_tokenizer(base_path(config.models.grounder))
    e, m = config.eval, config.moat
    for split in ("heldin", "heldout"):
        tasks = load_sources(getattr(config.data, split))
        assert room(tasks, "planner", planner, e.max_new_tokens_plan).tasks_over == 0, (name, split)
        assert room(tasks, "grounder", grounder, e.max_new_tokens_ground).tasks_over == 0, (name, split)
    rounds = round_tasks(config, load_sources(config.data.train))
    assert room(rounds, "planner", planner, m.max_new_tokens_plan).tasks_over == 0, (name, "moat")
    assert room(rounds, "grounder", grounder, m.max_new_tokens_ground).tasks_over == 0, (name, "moat")
