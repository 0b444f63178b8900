"""Lumos's web actions (CLICK, TYPE, SELECT) on pages of elements, stepped the way Mind2Web is scored.

Action syntax, as in Lumos's web annotations and its Mind2Web evaluation (allenai/lumos
`data/incontext.py`, `eval/mind2web/run_eval.py`):

    R1 = TYPE(Env, QUERY: Type Atlanta as the departure location, TEXT: Atlanta)
    R2 = CLICK(R1, QUERY: Choose the option Atlanta (ATL))
    R3 = SELECT(R2, QUERY: Set 6 nights as the living period, TEXT: 6 nights)

`Env` names the first page and each `R#` the page its action led to. The grounder never sees the
page (Lumos leaves the HTML out of its prompts: too long); the environment finds the element the
QUERY describes, as Lumos does with MindAct's candidate ranker. Offline the ranker is lexical
(`rank`): the element whose words the query covers best.

Episodes are teacher-forced like Mind2Web's offline evaluation: step k is scored against the
gold step k, and the page after it is gold page k+1 whatever was done. One action is one step.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from coalign.envs.base import Step
from coalign.envs.episode import Turn, play_turn
from coalign.formats.lumos import FormatError, parse_action, split_actions
from coalign.formats.lumos_iterative import web_feedback

OPERATIONS = ("CLICK", "TYPE", "SELECT")
START_PAGE = "Env"
QUERY_MARK = "QUERY:"
TEXT_MARK = ", TEXT:"
NAMING_ATTRIBUTES = ("aria_label", "placeholder", "title", "name", "alt", "value")  # read when text is missing


@dataclass(frozen=True)
class Element:
    """One candidate element: Mind2Web's `backend_node_id`, its tag or role, visible text and attributes."""

    id: str
    tag: str
    text: str = ""
    attributes: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        """`[button] Search flights`, as Mind2Web's action_reprs write an element (naming attributes if no text)."""
        named = self.text or " ".join(v for k, v in self.attributes if k in NAMING_ATTRIBUTES)
        return f"[{self.tag}] {named}".strip()

    def to_json(self) -> dict:
        return {"id": self.id, "tag": self.tag, "text": self.text, "attributes": dict(self.attributes)}

    @classmethod
    def from_json(cls, row: Mapping) -> Element:
        return cls(row["id"], row["tag"], row.get("text", ""), tuple(row.get("attributes", {}).items()))


@dataclass(frozen=True)
class GoldStep:
    """One Mind2Web step: the page before it, the operation and value, and the elements that count as right."""

    page: tuple[Element, ...]
    op: str
    value: str
    positives: frozenset[str]

    def to_json(self) -> dict:
        return {
            "page": [e.to_json() for e in self.page],
            "op": self.op,
            "value": self.value,
            "positives": sorted(self.positives),
        }

    @classmethod
    def from_json(cls, row: Mapping) -> GoldStep:
        page = tuple(Element.from_json(e) for e in row["page"])
        return cls(page, row["op"], row["value"], frozenset(row["positives"]))


@dataclass(frozen=True)
class WebCall:
    """A parsed web action: `R2 = TYPE(R1, QUERY: ..., TEXT: ...)`."""

    output: str
    op: str
    page: str
    query: str
    text: str  # "" for CLICK


_PAGE = re.compile(rf"\s*(?P<page>{START_PAGE}|R\d+)\s*,\s*{QUERY_MARK}\s*(?P<rest>.*)", re.S)


def parse_web_action(text: str) -> WebCall:
    """`R# = OP(page, QUERY: ...[, TEXT: ...])`; TEXT follows the last `, TEXT:` and TYPE/SELECT need it."""
    action = parse_action(text)
    if len(action.outputs) != 1:
        raise FormatError(f"a web action names one output, got {', '.join(action.outputs)}")
    if action.tool not in OPERATIONS:
        raise FormatError(f"unknown web operation {action.tool!r}; available: {', '.join(OPERATIONS)}")
    match = _PAGE.fullmatch(action.argument)
    if not match:
        raise FormatError(f"{action.tool} takes (Env or R#, QUERY: ...), got ({action.argument[:60]})")
    query, marked, value = match["rest"].rpartition(TEXT_MARK)
    if not marked:
        query, value = match["rest"], ""
    if action.tool != "CLICK" and not marked:
        raise FormatError(f"{action.tool} needs a value: ({match['page']}, QUERY: ..., TEXT: ...)")
    if not query.strip():
        raise FormatError(f"{action.tool} has an empty QUERY")
    return WebCall(action.outputs[0], action.tool, match["page"], query.strip(), value.strip())


def format_web_action(output: str, op: str, page: str, query: str, text: str = "") -> str:
    """The inverse of `parse_web_action`."""
    value = f"{TEXT_MARK} {text}" if op != "CLICK" else ""
    return f"{output} = {op}({page}, {QUERY_MARK} {query}{value})"


# --------------------------------------------------------------------------- the element ranker

_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    """Lowercased runs of letters and digits: what the ranker compares."""
    return _WORD.findall(text.lower())


def _content(element: Element) -> set[str]:
    """The words an element shows or is named by (an input's aria label or placeholder, an image's alt)."""
    named = " ".join(v for k, v in element.attributes if k in NAMING_ATTRIBUTES)
    return set(words(f"{element.text} {named}"))


def rank(page: Sequence[Element], query: str) -> list[Element]:
    """Elements sharing words with the query, best first: the larger share of the element's own words the
    query says, then more words shared, then the query naming the tag; ties keep page order."""
    said = set(words(query))
    scored = []
    for index, element in enumerate(page):
        content = _content(element)
        shared = len(content & said)
        if shared:
            scored.append((-shared / len(content), -shared, element.tag.lower() not in said, index, element))
    return [element for *_, element in sorted(scored, key=lambda row: row[:4])]


def resolve(page: Sequence[Element], query: str) -> Element | None:
    """The element a query points at (the ranker's first), or None when no element shares a word with it."""
    ranked = rank(page, query)
    return ranked[0] if ranked else None


# --------------------------------------------------------------------------- episodes


class SiteEpisode:
    """A Mind2Web-like task run action by action; `score()` is its step success rate.

    Model text is the input here, so nothing raises: a malformed action, an unknown page name or a
    query that matches nothing fails its step, and the episode moves on to the next gold step.
    """

    metric = "step_success_rate"

    def __init__(self, steps: Sequence[GoldStep], goal: str = "") -> None:
        if not steps:
            raise ValueError("an episode needs at least one gold step")
        self.steps = list(steps)
        self.goal = goal
        self.reset()

    def reset(self, seed: int | None = None) -> str:
        """Restart the task (a site episode is one task: `seed` is not used); returns the goal."""
        self.pages: dict[str, tuple[Element, ...]] = {START_PAGE: self.steps[0].page}
        self.flags: list[bool] = []
        return self.goal

    @property
    def done(self) -> bool:
        return len(self.flags) >= len(self.steps)

    def step(self, action: str) -> Step:
        """One web action: its value is the element it chose (`[button] Search`), or it fails with an error."""
        value, error = self._step(action)
        return Step(error or value, self.score(), self.done, {"value": value, "error": error})

    def act(self, actions: str | Sequence[str]) -> Turn:
        """A grounder turn: its actions (text split at `;`, or a list), one step each."""
        return play_turn(self, split_actions(actions) if isinstance(actions, str) else list(actions))

    def score(self) -> float:
        return task_step_success(self.flags, len(self.steps))

    @staticmethod
    def set_score(episodes: Sequence[SiteEpisode]) -> float:
        """Mind2Web's step success rate of a set, micro-averaged over all gold steps (right steps / steps)."""
        return step_success_rate((e.flags, len(e.steps)) for e in episodes)

    def feedback(self, index: int, subgoal: str, turn: Turn) -> str:
        """What the planner hears after subgoal `index`: Lumos's web restatement of the subgoal as done."""
        return web_feedback(subgoal)

    def judge_turn(self, gold: Sequence[str], actions: str) -> tuple[bool, str]:
        """Whether `actions`, run here, do what the gold turn does (and why not): exactly as many steps as the
        gold turn, every one right by Mind2Web's rule (`step_correct`: a positive element, the
        operation, and for TYPE/SELECT the value), the rule the step success rate counts, and no action fails
        (e.g. one past the last step)."""
        before = len(self.flags)
        errors = [r.error for r in self.act(actions).records if r.error]
        flags = self.flags[before:]
        if len(flags) != len(gold):
            return False, f"{len(flags)} steps taken where the gold turn takes {len(gold)}"
        if not all(flags) or errors:
            why = f": {errors[0]}" if errors else ""
            return False, f"wrong step (element, operation or value){why}"[:300]
        return True, "right step"

    def _step(self, text: str) -> tuple[str | None, str | None]:
        """(value, error) of one action."""
        if self.done:
            return None, f"the task has no step left (all {len(self.steps)} taken)"
        gold = self.steps[len(self.flags)]
        following = self.steps[len(self.flags) + 1].page if len(self.flags) + 1 < len(self.steps) else ()
        try:
            call = parse_web_action(text)
        except FormatError as exc:
            self.flags.append(False)
            output = re.match(r"\s*(R\d+)\s*=", text)  # the page still gets a name, as in Lumos's evaluation
            if output:
                self.pages[output[1]] = following
            return None, str(exc)
        page = self.pages.get(call.page)
        self.pages[call.output] = following
        if page is None:
            self.flags.append(False)
            return None, f"{call.page} names no page yet"
        element = resolve(page, call.query)
        self.flags.append(step_correct(element.id if element else None, call.op, call.text, gold))
        if element is None:
            return None, f"no element on the page matches {call.query!r}"
        return element.describe(), None


# --------------------------------------------------------------------------- Mind2Web's step metrics
# Mind2Web step success, as Lumos's evaluation scores it: the chosen element is one of the step's
# positive candidates, the operation equals the gold one, and for TYPE and SELECT the value equals
# the gold value (case and surrounding spaces aside). The rate is micro-averaged over all steps of
# all tasks (Lumos: correct steps / steps); Mind2Web's paper also reports the per-task mean.


def step_correct(element: str | None, op: str, value: str, gold: GoldStep) -> bool:
    """Is one step right: the element (its id) a positive candidate, the operation and (TYPE/SELECT) the value equal."""
    if element is None or element not in gold.positives or op != gold.op:
        return False
    return op == "CLICK" or value.strip().lower() == gold.value.strip().lower()


def task_step_success(flags: Sequence[bool], steps: int) -> float:
    """One task's share of its `steps` gold steps done right; steps never taken count as wrong."""
    if steps < 1:
        raise ValueError("a task has at least one step")
    return sum(bool(f) for f in flags[:steps]) / steps


def step_success_rate(tasks: Iterable[tuple[Sequence[bool], int]]) -> float:
    """Lumos's step success rate over (flags, gold step count) per task: right steps / all gold steps."""
    right = total = 0
    for flags, steps in tasks:
        right += sum(bool(f) for f in flags[:steps])
        total += steps
    return right / total if total else 0.0
