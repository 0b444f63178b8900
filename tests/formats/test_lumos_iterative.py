"""Lumos's iterative formulation: exact web and shop wording, lossless round trips, model text refused cleanly."""

import pytest

from coalign.formats.lumos import TOOL_FAMILIES, TOOL_PREAMBLES, FormatError
from coalign.formats.lumos_iterative import (
    STOP_PLANNING,
    chat_prompt,
    grounder_first_prompt,
    grounder_messages,
    grounder_next_prompt,
    parse_grounder_messages,
    parse_planner_messages,
    parse_planner_turn,
    planner_messages,
    planner_turn,
    result_feedback,
    web_feedback,
)

TASK = "Book a flight from Atlanta to Miami on May 3 for 2 adults."
SUBGOALS = ["Type Atlanta as the departure location.", "Choose the option Atlanta (ATL)", "Search flights; then stop"]
ACTIONS = [
    ["R1 = TYPE(Env, QUERY: Type Atlanta as the departure location, TEXT: Atlanta)"],
    ["R2 = CLICK(R1, QUERY: Choose the option Atlanta (ATL))"],
    ["R3 = CLICK(R2, QUERY: Search flights; then stop)", "R4 = CLICK(R3, QUERY: Continue)"],
]


def test_web_and_shop_tool_lists_belong_to_the_web_family() -> None:
    assert TOOL_PREAMBLES["web"].startswith(
        "The available action list is 'CLICK', 'TYPE', 'SELECT'.\nCLICK(Env, Query)"
    )
    assert "Pick(Item_names, Item_features, Query)" in TOOL_PREAMBLES["shop"]
    assert TOOL_FAMILIES["web"] == TOOL_FAMILIES["shop"] == "web" and set(TOOL_FAMILIES) == set(TOOL_PREAMBLES)


def test_planner_turns_and_feedback_are_lumos_spelling() -> None:
    assert planner_turn(1, " Click the search button. ") == "Subgoal 1: Click the search button."
    assert planner_turn(3, "Click it") == "No, I will keep planning. Subgoal 3: Click it"
    assert web_feedback("Type Atlanta as the departure location.") == (
        "We have already type Atlanta as the departure location. Should we stop planning?"
    )
    assert (
        result_feedback(2, "black, large.")
        == "The executed result for Subgoal 2 is black, large. Should we stop planning?"
    )


def test_planner_conversation_round_trips() -> None:
    feedback = [web_feedback(s) for s in SUBGOALS]
    messages = planner_messages(TASK, SUBGOALS, feedback)
    assert [m["role"] for m in messages] == ["user", "assistant"] * 4
    assert messages[3]["content"] == "No, I will keep planning. Subgoal 2: Choose the option Atlanta (ATL)"
    assert messages[-1]["content"] == STOP_PLANNING
    parsed = parse_planner_messages(messages)
    assert (parsed.task, parsed.subgoals, parsed.feedback) == (TASK, tuple(SUBGOALS), tuple(feedback))


def test_grounder_conversation_is_lumos_spelling_and_round_trips() -> None:
    messages = grounder_messages(TASK, SUBGOALS, ACTIONS, "web")
    assert messages[0]["content"] == (
        "Please ground the given subgoal to corresponding executable actions for solving the given task. The grounded "
        f"actions must be the one in available action list.\n\n{TOOL_PREAMBLES['web']}Task: {TASK} \n"
        "Subgoal to be grounded: Subgoal 1: Type Atlanta as the departure location.\n"
    )
    assert messages[2]["content"] == "Subgoal to be grounded: Subgoal 2: Choose the option Atlanta (ATL)\n"
    assert messages[5]["content"] == "R3 = CLICK(R2, QUERY: Search flights; then stop); R4 = CLICK(R3, QUERY: Continue)"
    parsed = parse_grounder_messages(messages)
    assert (parsed.task, parsed.tools, parsed.subgoals) == (TASK, "web", tuple(SUBGOALS))
    assert parsed.actions == tuple(tuple(group) for group in ACTIONS)
    assert parse_grounder_messages(grounder_messages(TASK, SUBGOALS[:1], ACTIONS[:1], "shop")).tools == "shop"


def test_a_task_quoting_the_heads_many_times_parses_to_the_last_subgoal_head() -> None:
    """The task runs to the last first-subgoal head; a turn without one is refused after reading it once (a
    regex retrying from each of 20,000 `Task: ` took seconds)."""
    task = "Task: " * 20_000 + "Subgoal to be grounded: Subgoal 1: quoted"
    messages = grounder_messages(task, SUBGOALS[:1], ACTIONS[:1], "web")
    parsed = parse_grounder_messages(messages)
    assert (parsed.task, parsed.subgoals) == (task, tuple(SUBGOALS[:1]))
    headless = messages[0]["content"].split(" \nSubgoal to be grounded: Subgoal 1: ")[0]
    for first in (headless, "Task: x \nSubgoal to be grounded: Subgoal 1: y"):  # no subgoal head / instruction
        with pytest.raises(FormatError, match="turn 0: not an iterative grounder prompt"):
            parse_grounder_messages([{"role": "user", "content": first}, messages[1]])


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("Subgoal 1: Click the search button", (1, "Click the search button")),
        ("No, I will keep planning. Subgoal 4: Pick 2 adults ", (4, "Pick 2 adults")),
        ("Subgoal 4: Pick 2 adults", (4, "Pick 2 adults")),  # the keep-planning phrase may be missing
        (" Yes, I will stop planning.", None),
    ],
)
def test_model_planner_turns_parse(text: str, parsed) -> None:
    assert parse_planner_turn(text) == parsed


@pytest.mark.parametrize(
    "bad", ["", "Click the button", "Subgoal one: x", "Subgoal 2:", "Yes, stop", "Subgoal " + "9" * 5000 + ": x"]
)
def test_malformed_planner_turns_raise_format_error(bad: str) -> None:
    with pytest.raises(FormatError):
        parse_planner_turn(bad)


def test_broken_conversations_name_the_turn() -> None:
    messages = planner_messages(TASK, SUBGOALS, [web_feedback(s) for s in SUBGOALS])
    skipped = messages[:3] + [{"role": "assistant", "content": "No, I will keep planning. Subgoal 3: x"}] + messages[4:]
    with pytest.raises(FormatError, match="turn 3: expected 'Subgoal 2"):
        parse_planner_messages(skipped)
    with pytest.raises(FormatError, match="last planner turn"):
        parse_planner_messages(messages[:-1] + [{"role": "assistant", "content": "Subgoal 4: more"}])
    with pytest.raises(FormatError, match="alternate"):
        parse_planner_messages(messages[:1] + messages[2:])
    grounder = grounder_messages(TASK, SUBGOALS, ACTIONS, "web")
    with pytest.raises(FormatError, match="turn 2: expected 'Subgoal to be grounded: Subgoal 2"):
        parse_grounder_messages(
            grounder[:2] + [{"role": "user", "content": grounder_next_prompt(3, "x")}] + grounder[3:]
        )
    with pytest.raises(FormatError, match="turn 3: no actions ground Subgoal 2"):
        parse_grounder_messages(grounder[:3] + [{"role": "assistant", "content": " "}] + grounder[4:])
    unknown = grounder[0]["content"].replace("'CLICK'", "'TAP'")
    with pytest.raises(FormatError, match="turn 0"):
        parse_grounder_messages([{"role": "user", "content": unknown}, grounder[1]])


def test_chat_prompt_serialises_the_history_and_opens_the_assistant_turn() -> None:
    first = grounder_first_prompt(TASK, SUBGOALS[0], "web")
    history = [
        {"role": "user", "content": first},
        {"role": "assistant", "content": ACTIONS[0][0]},
        {"role": "user", "content": grounder_next_prompt(2, SUBGOALS[1])},
    ]
    assert chat_prompt(history) == (
        f"<|user|>\n{first}\n<|assistant|>\n{ACTIONS[0][0]}</s>\n"
        f"<|user|>\nSubgoal to be grounded: Subgoal 2: {SUBGOALS[1]}\n\n<|assistant|>\n"
    )
    with pytest.raises(FormatError):
        chat_prompt(history[:2])
