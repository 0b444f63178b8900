"""Lumos formats: exact prompt spelling and lossless round trips."""

import pytest

from coalign.formats import (
    Action,
    FormatError,
    format_actions,
    format_subgoals,
    grounder_prompt,
    lumos_chat,
    lumos_generation_prompt,
    parse_actions,
    parse_grounder_prompt,
    parse_planner_prompt,
    parse_subgoals,
    planner_prompt,
)


def test_planner_prompt_is_lumos_spelling():
    assert planner_prompt(" Add 2 and 3. ") == (
        "Please provide a reasonable subgoal-based plan to solve the given task.\n"
        "Task: Add 2 and 3.; Initial Environment Description: None."
    )


def test_grounder_prompt_has_tool_preamble_task_and_subgoals():
    text = grounder_prompt("Add 2 and 3.", "Subgoal 1: Add 2 and 3")
    assert text.startswith("Please ground the given subgoal to corresponding executable actions")
    assert "Calculator(formula): Calculate the input formula" in text
    assert text.endswith("Task: Add 2 and 3. \nSubgoals to be grounded: Subgoal 1: Add 2 and 3")


@pytest.mark.parametrize("task", ["Tom has 3 apples; he eats 1. How many are left?", "x", "Line one.\nLine two."])
def test_prompts_round_trip(task):
    assert parse_planner_prompt(planner_prompt(task)) == task
    subgoals = format_subgoals(["Subtract 1 from 3", "Report R1"])
    assert parse_grounder_prompt(grounder_prompt(task, subgoals)) == (task, subgoals)


def test_subgoals_round_trip_and_separator():
    subgoals = ["Calculate 48 / 2, the clips sold in May", "Add R1 to 48; that is the total"]
    text = format_subgoals(subgoals)
    assert text == "Subgoal 1: Calculate 48 / 2, the clips sold in May; Subgoal 2: Add R1 to 48; that is the total"
    assert parse_subgoals(text) == subgoals


@pytest.mark.parametrize("bad", ["", "Calculate it", "Step 1: add", "blah Subgoal 1: x"])
def test_malformed_subgoals_raise_format_error(bad):
    with pytest.raises(FormatError):
        parse_subgoals(bad)


def test_actions_round_trip_with_multi_output_and_semicolon_inside_argument():
    text = "R1 = Calculator(28 * 1/7); R2 = Calculator(28 - R1); R5, R6 = SolveEquation(x + y = 3; x - y = 1)"
    actions = parse_actions(text)
    assert actions[0] == Action(("R1",), "Calculator", "28 * 1/7")
    assert actions[2] == Action(("R5", "R6"), "SolveEquation", "x + y = 3; x - y = 1")
    assert format_actions(actions) == text


@pytest.mark.parametrize("bad", ["", "Calculator(1 + 2)", "R1 = Calculator(1 + 2", "R1 = (1+2)", "R1 = 5"])
def test_malformed_actions_raise_format_error(bad):
    with pytest.raises(FormatError):
        parse_actions(bad)


def test_lumos_chat_serialisation():
    messages = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]
    assert lumos_chat(messages) == "<|user|>\nQ\n<|assistant|>\nA</s>\n"
    assert lumos_generation_prompt("Q") == "<|user|>\nQ\n<|assistant|>\n"
    with pytest.raises(FormatError):
        lumos_chat([{"role": "system", "content": "S"}])
