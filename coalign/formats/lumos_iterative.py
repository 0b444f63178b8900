"""Agent Lumos's iterative formulation: one subgoal per planner turn, one grounding per grounder turn.

The web family is trained and evaluated this way (Lumos released no onetime web data). Wording is
Lumos's, from its data builder (`data/process_for_train.py`) and evaluation scripts:

    planner  user       Please provide a reasonable subgoal-based plan ...\\nTask: {task}; Initial Environment ...
             assistant  Subgoal 1: {s1}
             user       We have already {s1, first letter lowercased}. Should we stop planning?
             assistant  No, I will keep planning. Subgoal 2: {s2}
             ...
             user       We have already {sN}. Should we stop planning?
             assistant  Yes, I will stop planning.

    grounder user       {instruction}{tool list}Task: {task} \\nSubgoal to be grounded: Subgoal 1: {s1}\\n
             assistant  R1 = CLICK(Env, QUERY: ...)
             user       Subgoal to be grounded: Subgoal 2: {s2}\\n
             assistant  R2 = TYPE(R1, QUERY: ..., TEXT: ...)

Lumos's web feedback repeats the subgoal ("we won't put the html results here (too long..)");
tools that return values (maths, QA, the WebShop tools) are answered with `result_feedback`
("The executed result for Subgoal 2 is ..."). Lumos's QA grounder also lists earlier results in
later turns; the web and shop grounders do not, so neither does this module.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from coalign.formats.lumos import (
    GROUNDER_INSTRUCTION,
    TOOL_PREAMBLES,
    FormatError,
    format_actions,
    lumos_chat,
    lumos_generation_prompt,
    parse_planner_prompt,
    planner_prompt,
    split_actions,
)

KEEP_PLANNING = "No, I will keep planning. "
STOP_PLANNING = "Yes, I will stop planning."
STOP_QUESTION = ". Should we stop planning?"
GROUND_HEAD = "Subgoal to be grounded: "

Message = dict[str, str]


# --------------------------------------------------------------------------- planner


def planner_turn(index: int, subgoal: str) -> str:
    """The planner's k-th answer: `Subgoal 1: ...`, later ones after `No, I will keep planning. `."""
    head = "" if index == 1 else KEEP_PLANNING
    return f"{head}Subgoal {index}: {subgoal.strip()}"


_PLANNER_TURN = re.compile(r"(?:No, I will keep planning\.\s*)?Subgoal ([0-9]{1,9}): (.*\S)", re.S)  # int() takes it


def parse_planner_turn(text: str) -> tuple[int, str] | None:
    """(k, subgoal) from a planner answer, or None when it stops planning; FormatError otherwise.

    Model output is the input here: `No, I will keep planning. ` may be missing, as Lumos's own
    evaluation tolerates (it splits on that phrase and keeps what follows).
    """
    text = text.strip()
    if text == STOP_PLANNING:
        return None
    match = _PLANNER_TURN.fullmatch(text)
    if not match:
        raise FormatError(f"not a planner turn ('Subgoal k: ...' or {STOP_PLANNING!r}): {text[:80]!r}")
    return int(match[1]), match[2].strip()


def web_feedback(subgoal: str) -> str:
    """Lumos's web feedback to the planner: the subgoal restated as done, then the stop question."""
    text = subgoal.strip()
    done = f"We have already {text[:1].lower()}{text[1:]}".strip(".").strip()
    return f"{done}{STOP_QUESTION}"


def result_feedback(index: int, result: str) -> str:
    """Lumos's feedback for tools that return values: the k-th subgoal's last result, then the stop question."""
    return f"The executed result for Subgoal {index} is {result.strip().strip('.')}".strip() + STOP_QUESTION


@dataclass(frozen=True)
class PlannerConversation:
    """A whole planner row: the task, its subgoals in order, and the feedback heard after each."""

    task: str
    subgoals: tuple[str, ...]
    feedback: tuple[str, ...]


def planner_messages(task: str, subgoals: Sequence[str], feedback: Sequence[str]) -> list[Message]:
    """The planner's conversation for a gold plan: one turn per subgoal, each followed by its feedback."""
    if not subgoals or len(feedback) != len(subgoals):
        raise ValueError(f"need one feedback text per subgoal, got {len(subgoals)} subgoals, {len(feedback)} texts")
    messages = [{"role": "user", "content": planner_prompt(task)}]
    for index, (subgoal, heard) in enumerate(zip(subgoals, feedback), start=1):
        messages.append({"role": "assistant", "content": planner_turn(index, subgoal)})
        messages.append({"role": "user", "content": heard})
    messages.append({"role": "assistant", "content": STOP_PLANNING})
    return messages


def parse_planner_messages(messages: Sequence[Message]) -> PlannerConversation:
    """Inverse of `planner_messages`; FormatError names the turn that breaks the pattern."""
    _roles(messages, "planner")
    if len(messages) < 4:
        raise FormatError("planner conversation needs a subgoal, its feedback and the stop turn (4 turns or more)")
    task = parse_planner_prompt(messages[0]["content"])
    subgoals, feedback = [], []
    for index, at in enumerate(range(1, len(messages) - 1, 2), start=1):
        parsed = parse_planner_turn(messages[at]["content"])
        if parsed is None or parsed[0] != index:
            raise FormatError(f"turn {at}: expected 'Subgoal {index}: ...', got {messages[at]['content'][:60]!r}")
        subgoals.append(parsed[1])
        feedback.append(messages[at + 1]["content"])
    if messages[-1]["content"].strip() != STOP_PLANNING:
        raise FormatError(f"turn {len(messages) - 1}: the last planner turn must be {STOP_PLANNING!r}")
    return PlannerConversation(task, tuple(subgoals), tuple(feedback))


# --------------------------------------------------------------------------- grounder


def grounder_first_prompt(task: str, subgoal: str, tools: str) -> str:
    """The grounder's first user turn: instruction, the tool list, the task and Subgoal 1."""
    if tools not in TOOL_PREAMBLES:
        raise KeyError(f"unknown tool list {tools!r}; known: {sorted(TOOL_PREAMBLES)}")
    return f"{GROUNDER_INSTRUCTION}{TOOL_PREAMBLES[tools]}Task: {task.strip()} \n{grounder_next_prompt(1, subgoal)}"


def grounder_next_prompt(index: int, subgoal: str) -> str:
    """A later grounder user turn: just the next subgoal (with its `Subgoal k: ` head, as Lumos writes it)."""
    return f"{GROUND_HEAD}Subgoal {index}: {subgoal.strip()}\n"


@dataclass(frozen=True)
class GrounderConversation:
    """A whole grounder row: task, tool list, subgoals and the action texts grounding each."""

    task: str
    tools: str
    subgoals: tuple[str, ...]
    actions: tuple[tuple[str, ...], ...]


def grounder_messages(
    task: str, subgoals: Sequence[str], actions: Sequence[Sequence[str]], tools: str
) -> list[Message]:
    """The grounder's conversation for a gold plan: each subgoal, then its actions joined by `; `."""
    if not subgoals or len(actions) != len(subgoals):
        raise ValueError(f"need one action group per subgoal, got {len(subgoals)} subgoals, {len(actions)} groups")
    messages = []
    for index, (subgoal, group) in enumerate(zip(subgoals, actions), start=1):
        user = grounder_first_prompt(task, subgoal, tools) if index == 1 else grounder_next_prompt(index, subgoal)
        messages.append({"role": "user", "content": user})
        messages.append({"role": "assistant", "content": format_actions(list(group))})
    return messages


_FIRST_SUBGOAL = f" \n{GROUND_HEAD}Subgoal 1: "
_NEXT_GROUNDER = re.compile(GROUND_HEAD + r"Subgoal (?P<index>[0-9]{1,9}): (?P<subgoal>.*?)\n?\Z", re.S)


def _first_grounder_turn(first: str) -> tuple[str, str, str] | None:
    """(tool list, task, first subgoal) of a first grounder turn, found with `find`s (a regex over a task
    holding many `Task: ` would retry from each one: quadratic); the task runs to the last subgoal head."""
    mark = first.rfind(_FIRST_SUBGOAL)
    for name, preamble in TOOL_PREAMBLES.items():
        head = f"{GROUNDER_INSTRUCTION}{preamble}Task: "
        if first.startswith(head) and mark >= len(head):
            return name, first[len(head) : mark], first[mark + len(_FIRST_SUBGOAL) :].removesuffix("\n")
    return None


def parse_grounder_messages(messages: Sequence[Message]) -> GrounderConversation:
    """Inverse of `grounder_messages`; the tool list is the one whose preamble the first turn shows."""
    _roles(messages, "grounder")
    if len(messages) % 2:
        raise FormatError("grounder conversation must end with an assistant turn")
    found = _first_grounder_turn(messages[0]["content"])
    if found is None:
        raise FormatError("turn 0: not an iterative grounder prompt (instruction, a known tool list, 'Task: ...')")
    tools, task, subgoal = found
    subgoals, groups = [subgoal.strip()], []
    for at in range(1, len(messages), 2):
        groups.append(tuple(split_actions(messages[at]["content"])))
        if not groups[-1]:
            raise FormatError(f"turn {at}: no actions ground Subgoal {len(groups)}")
        if at + 1 == len(messages):
            break
        following = _NEXT_GROUNDER.fullmatch(messages[at + 1]["content"])
        if not following or int(following["index"]) != len(subgoals) + 1:
            wanted = f"{GROUND_HEAD}Subgoal {len(subgoals) + 1}: ..."
            raise FormatError(f"turn {at + 1}: expected {wanted!r}, got {messages[at + 1]['content'][:60]!r}")
        subgoals.append(following["subgoal"].strip())
    return GrounderConversation(task, tools, tuple(subgoals), tuple(groups))


# --------------------------------------------------------------------------- training rows


def turn_examples(messages: Sequence[Message]) -> list[tuple[tuple[Message, ...], str]]:
    """One SFT example per assistant turn of a whole conversation: (the conversation before it, the turn).

    Lumos trains on the whole conversation with the loss on every assistant turn; these rows give the
    same teacher-forced targets, each in the context it has there, as (prompt, completion) pairs, which is
    what the SFT stage trains on (TRL's completion-only loss). The prompt is rendered exactly as the
    iterative loop renders it at generation time (`chat_prompt`, or the model's chat template).
    """
    _roles(messages, "training")
    if len(messages) % 2:
        raise FormatError("a training conversation must end with an assistant turn")
    return [(tuple(messages[:at]), messages[at]["content"]) for at in range(1, len(messages), 2)]


# --------------------------------------------------------------------------- serialisation


def chat_prompt(messages: Sequence[Message]) -> str:
    """A conversation so far, ending with a user turn, serialised Lumos's way up to where the assistant writes."""
    if not messages or messages[-1]["role"] != "user":
        raise FormatError("a generation prompt must end with a user turn")
    return lumos_chat(list(messages[:-1])) + lumos_generation_prompt(messages[-1]["content"])


def _roles(messages: Sequence[Message], kind: str) -> None:
    roles = [m["role"] for m in messages]
    expected = ["user", "assistant"] * (len(roles) // 2) + ["user"] * (len(roles) % 2)
    if not roles or roles != expected:
        raise FormatError(f"{kind} conversation must alternate user and assistant turns, got roles {roles}")
