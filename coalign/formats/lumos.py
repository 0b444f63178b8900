"""Agent Lumos text formats: prompts, subgoal and action sequences, chat rows (pure functions).

Everything a model reads or writes passes through here, so the planner, the grounder, the
executor and the data loaders agree on one spelling. The onetime formulation is here; the iterative
one (one subgoal per turn, Lumos's web formulation) is in `coalign.formats.lumos_iterative` and reuses these pieces.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

PLANNER_INSTRUCTION = "Please provide a reasonable subgoal-based plan to solve the given task.\n"

GROUNDER_INSTRUCTION = (
    "Please ground the given subgoal to corresponding executable actions for solving the given task. "
    "The grounded actions must be the one in available action list.\n\n"
)

TOOL_PREAMBLES: dict[str, str] = {
    "maths": (
        "The available action list is 'Calculator', 'SetEquation', 'SolveEquation', 'Count', "
        "'SolveInequality', 'Code', and 'Define'.\n"
        "Calculator(formula): Calculate the input formula; SetEquation(equation): Set up an equation to be "
        "solved; SolveEquation(equation): Solve the previous set equation; Count(list): Count the number of "
        "elements in the given list; SolveInequality(inequality): Solve the previous set inequality; "
        "Code(pseudo_code): Generate a Python function that corresponds to the pseudo code; "
        "Define(variable/number): Define a variable or a number for latter usage.\n\n"
    ),
    # Lumos's complex-QA tool list word for word (Calculator listed twice, as in its training rows and
    # evaluation scripts), so that prompts match the released data and `lumos` rows map to this family.
    "qa": (
        "The available action list is 'KnowledgeQuery', 'ParagraphRetrieve', 'QA', 'Calculator', and 'Code'.\n"
        "Calculator(formula): Calculate the input formula; KnowledgeQuery(query): Capture the relevant webpages "
        "according to the query; ParagraphRetrieve(context, query): Given a query, retrieve the most relevant "
        "paragraphs from the given context; QA(context, query): Given context, answer the given query; "
        "Calculator(formula): Calculate the input formula; Code(pseudo_code): Generate a Python function that "
        "corresponds to the pseudo code.\n\n"
    ),
    # Lumos's web tool list word for word (its Mind2Web training rows and evaluation script).
    "web": (
        "The available action list is 'CLICK', 'TYPE', 'SELECT'.\n"
        "CLICK(Env, Query): Click the relevant html region in Env according to Query; TYPE(Env, Query, Text): "
        "Type Text into the relevant html region in Env according to Query; SELECT(Env, Query, Text): Select the "
        "value Text of the relevant selection box in Env according to Query.\n\n"
    ),
    # Lumos's WebShop tool list word for word (its WebShop evaluation script; no training rows use it).
    "shop": (
        "The available action list is 'Search', 'FeatureRetrieve', 'Pick' and 'Click'.\n"
        "Search(Query): Search related items according to the Query; FeatureRetrieve(Feature_list, Query): Select "
        "the most relevant features from Feature_list according to Query; Pick(Item_names, Item_features, Query): "
        "Pick the most relevant item from Item_names according to Query, Item_names and Item_features; "
        "Click(Item): Click the Item to check more information.\n\n"
    ),
}
# The benchmark family of each tool list: the web family has two (Mind2Web's and WebShop's).
TOOL_FAMILIES: dict[str, str] = {"maths": "maths", "qa": "qa", "web": "web", "shop": "web"}

SUBGOAL_SEPARATOR = "; "
ACTION_SEPARATOR = "; "


class FormatError(ValueError):
    """Text that does not follow a Lumos format (model output is often such text)."""


# --------------------------------------------------------------------------- prompts


def planner_prompt(task: str) -> str:
    """User turn of the onetime planner (Lumos `lumos_onetime`, maths/QA/web alike)."""
    return f"{PLANNER_INSTRUCTION}Task: {task.strip()}; Initial Environment Description: None."


def grounder_prompt(task: str, subgoals: str, domain: str = "maths") -> str:
    """User turn of the onetime grounder: instruction, the domain's tool list, task, subgoals."""
    if domain not in TOOL_PREAMBLES:
        raise KeyError(f"unknown domain {domain!r}; known: {sorted(TOOL_PREAMBLES)}")
    head = f"{GROUNDER_INSTRUCTION}{TOOL_PREAMBLES[domain]}"
    return f"{head}Task: {task.strip()} \nSubgoals to be grounded: {subgoals.strip()}"


_TASK_HEAD = "Task: "
_PLANNER_TAIL = "; Initial Environment Description: None."
_GROUNDER_MARK = " \nSubgoals to be grounded: "

# The prompt parsers search strings instead of matching `Task: (.*)...` regexes: such a regex, tried from
# every `Task: `, takes quadratic time (minutes on a 1 MB line), and rows come from files we did not write.


def parse_planner_prompt(prompt: str) -> str:
    """The task text inside a planner user turn: from the first `Task: ` to the fixed ending."""
    start = prompt.find(_TASK_HEAD) + len(_TASK_HEAD)
    end = len(prompt) - len(_PLANNER_TAIL)
    if start < len(_TASK_HEAD) or start > end or not prompt.endswith(_PLANNER_TAIL):
        raise FormatError("not a Lumos planner prompt (no 'Task: ...; Initial Environment Description: None.')")
    return prompt[start:end]


def parse_grounder_prompt(prompt: str) -> tuple[str, str]:
    """(task, subgoals text) inside a grounder user turn: the task runs from the first `Task: ` to the last
    `Subgoals to be grounded: ` line, so a task may quote that line."""
    start = prompt.find(_TASK_HEAD) + len(_TASK_HEAD)
    mark = prompt.rfind(_GROUNDER_MARK)
    if start < len(_TASK_HEAD) or mark < start:
        raise FormatError("not a Lumos grounder prompt (no 'Task: ... \\nSubgoals to be grounded: ...')")
    return prompt[start:mark], prompt[mark + len(_GROUNDER_MARK) :]


# --------------------------------------------------------------------------- subgoals

_SUBGOAL_HEAD = re.compile(r"(?:^|;\s*)Subgoal (\d+): ")


def format_subgoals(subgoals: list[str] | tuple[str, ...]) -> str:
    """`Subgoal 1: ...; Subgoal 2: ...` (Lumos onetime planner output)."""
    return SUBGOAL_SEPARATOR.join(f"Subgoal {i}: {s.strip()}" for i, s in enumerate(subgoals, start=1))


def parse_subgoals(text: str) -> list[str]:
    """Inverse of `format_subgoals`; raises FormatError when no `Subgoal 1:` heads the text.

    Numbering need not be consecutive in model output; the texts are returned in order.
    """
    text = text.strip()
    heads = list(_SUBGOAL_HEAD.finditer(text))
    if not heads or heads[0].start() != 0:
        raise FormatError(f"subgoal sequence must start with 'Subgoal 1: ', got {text[:60]!r}")
    out = []
    for head, nxt in zip(heads, heads[1:] + [None]):
        end = nxt.start() if nxt is not None else len(text)
        out.append(text[head.end() : end].strip())
    return out


# --------------------------------------------------------------------------- actions

R_VARIABLE = r"R[0-9]{1,9}"  # an output name whose number int() reads: no 5,000-digit R
REFERENCE = re.compile(rf"\b{R_VARIABLE}\b", re.A)  # an output name used in text; a longer R is no reference
_OUTPUTS = rf"{R_VARIABLE}(?:\s*,\s*{R_VARIABLE})*"
_ACTION_RE = re.compile(rf"^\s*(?P<outputs>{_OUTPUTS})\s*=\s*(?P<tool>[A-Za-z_]\w*)\((?P<argument>.*)\)\s*$", re.S)
_ACTION_SPLIT = re.compile(rf";\s*(?={_OUTPUTS}\s*=)")
_ACTION_ON_NEXT_LINE = re.compile(rf"\n\s*{_OUTPUTS}\s*=\s*[A-Za-z_]\w*\(")


@dataclass(frozen=True)
class Action:
    """One tool call: `R5, R6 = SolveEquation(...)` has outputs ("R5", "R6")."""

    outputs: tuple[str, ...]
    tool: str
    argument: str

    def __str__(self) -> str:
        return f"{', '.join(self.outputs)} = {self.tool}({self.argument})"


def parse_action(text: str) -> Action:
    match = _ACTION_RE.match(text)
    if not match:
        raise FormatError(f"not an action 'R# = Tool(argument)': {text[:80]!r}")
    if _ACTION_ON_NEXT_LINE.search(match["argument"]):  # else read as one call whose argument holds the next
        raise FormatError(f"actions on separate lines; separate them with '; ': {text[:80]!r}")
    outputs = tuple(o.strip() for o in match["outputs"].split(","))
    if len(set(outputs)) < len(outputs):  # `R1, R1 = ...` would keep one of two values without saying which
        raise FormatError(f"an output name repeats: {', '.join(outputs)}")
    return Action(outputs=outputs, tool=match["tool"], argument=match["argument"].strip())


def split_actions(text: str) -> list[str]:
    """Split an action sequence at the `; ` that precedes each `R# =` (arguments may hold ';')."""
    text = text.strip()
    return [part.strip() for part in _ACTION_SPLIT.split(text) if part.strip()] if text else []


def parse_actions(text: str) -> list[Action]:
    """`R1 = Calculator(28 * 1/7); R2 = Calculator(28 - R1)` -> two Actions; FormatError if any is malformed."""
    parts = split_actions(text)
    if not parts:
        raise FormatError("empty action sequence")
    return [parse_action(part) for part in parts]


def format_actions(actions: list[Action] | list[str] | tuple) -> str:
    return ACTION_SEPARATOR.join(str(a).strip() for a in actions)


# --------------------------------------------------------------------------- chat

USER_TAG = "<|user|>\n"
ASSISTANT_TAG = "<|assistant|>\n"
EOS = "</s>"
LUMOS_SPECIALS = ("<|user|>", "<|assistant|>", EOS, "<s>", "<unk>", "<pad>")
WORD_JOINER = "\u2060"  # invisible; inside a special token's spelling it stops the tokenizer matching it


def plain_text(text: str, specials: Iterable[str] = LUMOS_SPECIALS) -> str:
    """`text` with every spelling of a special token broken by a word joiner after its first character.

    A task, a tool's observation or a model's output is text: written into a serialised prompt it must never
    become a control token (an end of turn, a new user turn), which the tokenizer would otherwise make of
    `</s>` or `<|assistant|>` wherever they stand. Idempotent; text without such spellings is unchanged."""
    pattern = _specials_pattern(tuple(sorted({s for s in specials if len(s) > 1}, key=lambda s: (-len(s), s))))
    return pattern.sub(lambda m: m[0][0] + WORD_JOINER + m[0][1:], text) if pattern else text


@functools.lru_cache(maxsize=64)
def _specials_pattern(specials: tuple[str, ...]) -> re.Pattern | None:
    return re.compile("|".join(map(re.escape, specials))) if specials else None


def lumos_generation_prompt(user: str) -> str:
    """One user turn in Lumos's serialisation, ending where the assistant starts to write (`user` as text:
    `plain_text`)."""
    return f"{USER_TAG}{plain_text(user)}\n{ASSISTANT_TAG}"


def lumos_chat(messages: list[dict[str, str]]) -> str:
    """Lumos's training serialisation: `<|user|>\\n{c}\\n<|assistant|>\\n{c}</s>\\n` per turn pair, each
    content as text (`plain_text`)."""
    out = []
    for message in messages:
        role, content = message["role"], plain_text(message["content"])
        if role == "user":
            out.append(f"{USER_TAG}{content}\n")
        elif role == "assistant":
            out.append(f"{ASSISTANT_TAG}{content}{EOS}\n")
        else:
            raise FormatError(f"unknown chat role {role!r} (Lumos rows hold 'user' and 'assistant')")
    return "".join(out)
