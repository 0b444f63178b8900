"""The bundled QA suite: multi-hop questions about the bundled world, with gold Lumos QA plans.

Held-in ("train", "heldin"; disjoint questions) is StrategyQA-like: yes/no questions that compare
two facts, some reached through a bridge entity ("Was the founder of the Orvel Guild born before
Brennholt was founded?"), scored by Lumos's yes/no rule. Held-out is HotpotQA-like: bridge
questions whose answer is a value or a name ("What is the population of the city where Kalone
Vastrid was born?") and "A or B?" comparisons answered with a name, scored by SQuAD exact match.

Every fact is fetched the Lumos way, `KnowledgeQuery` -> `ParagraphRetrieve` -> `QA`, one subgoal
per fact; a bridge's second lookup names the first one's answer by reference (`KnowledgeQuery(R3)`).
Yes/no questions end with `Calculator(R3 < R6)`, comparisons with `QA([R2, R5], Question: ...)` over
the two retrieved paragraphs (a bare value does not say whose it is). Held-out text uses only words
of the train text, names aside, since a model trained from scratch can read nothing else.
Subgoals come in the maths suite's three styles: explicit ones give the entity and the exact
question to ask, descriptive ones only name the fact in words, vague ones say nothing.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from coalign.tasks import Task
from coalign.tasks.maths_suite import SPLITS, STYLE_WEIGHTS
from coalign.tools.qa_world import Entity, World, bundled_world, number

HELDIN_SHARE = 5  # one question in HELDIN_SHARE (by text digest) belongs to "heldin", the rest to "train"
VAGUE_SUBGOALS = ("Find the needed fact", "Look up the next piece of information", "Work out the answer")
BLANK_SUBGOAL = VAGUE_SUBGOALS[0]  # what evaluation puts in place of every subgoal to blank a plan

# (kind, attribute) -> (question, description); {e} is how an action names the entity (a name or R#),
# {d} how words describe it (a name, or "the city where Kalone Vastrid was born").
ATTRIBUTES: dict[tuple[str, str], tuple[str, str]] = {
    ("person", "born"): ("When was {e} born?", "the year {d} was born"),
    ("person", "birthplace"): ("Where was {e} born?", "the city where {d} was born"),
    ("person", "height"): ("How tall is {e}?", "the height of {d}"),
    ("city", "founded"): ("When was {e} founded?", "the year {d} was founded"),
    ("city", "population"): ("What is the population of {e}?", "the population of {d}"),
    ("city", "country"): ("In which country is {e}?", "the country {d} is in"),
    ("organisation", "founded"): ("When was {e} founded?", "the year {d} was founded"),
    ("organisation", "founder"): ("Who founded {e}?", "the founder of {d}"),
    ("organisation", "headquarters"): (
        "In which city does {e} have its headquarters?",
        "the city where {d} has its headquarters",
    ),
    ("organisation", "employees"): ("How many employees does {e} have?", "the number of employees of {d}"),
    ("mountain", "height"): ("How tall is {e}?", "the height of {d}"),
    ("mountain", "climbed"): ("When was {e} first climbed?", "the year {d} was first climbed"),
    ("mountain", "country"): ("In which country is {e}?", "the country {d} is in"),
    ("country", "capital"): ("What is the capital of {e}?", "the capital of {d}"),
    ("country", "population"): ("What is the population of {e}?", "the population of {d}"),
}
YEARS = frozenset({"born", "founded", "climbed"})
# bridges: the kind reached -> (kind started from, link attribute)
_BRIDGES: dict[str, tuple[tuple[str, str], ...]] = {
    "person": (("organisation", "founder"),),
    "city": (("person", "birthplace"), ("organisation", "headquarters"), ("country", "capital")),
    "country": (("city", "country"), ("mountain", "country")),
}
# dated facts: kind -> (attribute, participle); "Was Brennholt founded before Kalone Vastrid was born?"
_DATES: dict[str, tuple[str, str]] = {
    "person": ("born", "born"),
    "city": ("founded", "founded"),
    "organisation": ("founded", "founded"),
    "mountain": ("climbed", "first climbed"),
}
# amounts: (kind, attribute) -> (larger, smaller) comparatives and the verb phrase they follow
_AMOUNTS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("person", "height"): ("taller", "shorter", "is"),
    ("mountain", "height"): ("taller", "shorter", "is"),
    ("city", "population"): ("a larger population", "a smaller population", "has"),
    ("country", "population"): ("a larger population", "a smaller population", "has"),
    ("organisation", "employees"): ("more employees", "fewer employees", "has"),
}
# "A or B?" comparisons: (kind, attribute) -> (asking for the larger value, asking for the smaller)
_CHOICES: dict[tuple[str, str], tuple[str, str]] = {
    ("person", "born"): ("Who was born later", "Who was born first"),
    ("city", "founded"): ("Which was founded later", "Which was founded first"),
    ("organisation", "founded"): ("Which was founded later", "Which was founded first"),
    ("mountain", "climbed"): ("Which was climbed later", "Which was climbed first"),
    ("person", "height"): ("Who is taller", "Who is shorter"),
    ("mountain", "height"): ("Which is taller", "Which is shorter"),
    ("city", "population"): ("Which city has the larger population", "Which city has the smaller population"),
    ("country", "population"): ("Which country has the larger population", "Which country has the smaller population"),
    ("organisation", "employees"): ("Which has more employees", "Which has fewer employees"),
}

_LOOKUP_FORMS = ("Search for {e} and answer: {q}", "Look up {e} to find out: {q}")
_DESCRIBE_FORMS = ("Find {d}", "Obtain {d}", "Look up {d}")


@dataclass(frozen=True)
class _Subject:
    """What a fact is about: an entity named in the question, or one reached through a bridge."""

    entity: Entity  # the entity whose page holds the fact
    start: Entity  # the entity the question names (the same unless bridged)
    link: str | None  # the bridge attribute from `start` to `entity`

    @property
    def words(self) -> str:
        """How the question and descriptive subgoals name it."""
        if self.link is None:
            return self.entity.mention
        return ATTRIBUTES[(self.start.kind, self.link)][1].format(d=self.start.mention)


@dataclass(frozen=True)
class _Lookup:
    """One fact to fetch with KnowledgeQuery -> ParagraphRetrieve -> QA."""

    entity: str  # the KnowledgeQuery argument: a page title or the R# of an earlier answer
    question: str  # what ParagraphRetrieve and QA are asked
    description: str  # the fact in words, for descriptive subgoals


def _value(entity: Entity, attribute: str) -> str:
    value = entity.facts[attribute]
    return str(value) if attribute in YEARS or isinstance(value, str) else number(value)


def _lookup(entity: Entity, attribute: str, named: str, described: str) -> _Lookup:
    question, description = ATTRIBUTES[(entity.kind, attribute)]
    return _Lookup(
        entity=entity.name if named == entity.mention else named,
        question=question.format(e=named),
        description=description.format(d=described),
    )


class _Fetched(NamedTuple):
    paragraph: str  # R# of the retrieved paragraph
    answer: str  # R# of the QA answer


class _Plan:
    """Gold subgoals (one text per style but vague) and actions, built step by step."""

    def __init__(self) -> None:
        self.actions: list[str] = []
        self.subgoals: list[dict[str, str]] = []
        self.facts = 0

    def _act(self, action: str) -> str:
        self.actions.append(f"R{len(self.actions) + 1} = {action}")
        return f"R{len(self.actions)}"

    def fetch(self, lookup: _Lookup, rng: random.Random) -> _Fetched:
        """KnowledgeQuery, ParagraphRetrieve, QA: one subgoal."""
        self.facts += 1
        page = self._act(f"KnowledgeQuery({lookup.entity})")
        paragraph = self._act(f"ParagraphRetrieve({page}, Query: {lookup.question})")
        self.subgoals.append(
            {
                "explicit": rng.choice(_LOOKUP_FORMS).format(e=lookup.entity, q=lookup.question),
                "descriptive": rng.choice(_DESCRIBE_FORMS).format(d=lookup.description),
            }
        )
        return _Fetched(paragraph, self._act(f"QA([{paragraph}], Question: {lookup.question})"))

    def final(self, action: str, explicit: str, descriptive: str) -> None:
        self.subgoals.append({"explicit": explicit, "descriptive": descriptive})
        self._act(action)


@dataclass(frozen=True)
class _Draft:
    question: str
    plan: _Plan
    answer: str
    answer_kind: str  # "yes/no", "year", "number" or "name"


def _cap(text: str) -> str:
    return text[0].upper() + text[1:]


def _subject(rng: random.Random, world: World, kind: str, bridged: bool) -> _Subject:
    if not bridged:
        entity = rng.choice(world.of_kind(kind))
        return _Subject(entity, entity, None)
    start_kind, link = rng.choice(_BRIDGES[kind])
    start = rng.choice(world.of_kind(start_kind))
    return _Subject(world.entities[start.facts[link]], start, link)


def _fetch_subject(plan: _Plan, subject: _Subject, attribute: str, rng: random.Random) -> _Fetched:
    """The lookups for `attribute` of the subject: one, or two when bridged (the second names R#)."""
    if subject.link is None:
        return plan.fetch(_lookup(subject.entity, attribute, subject.entity.mention, subject.words), rng)
    bridge = _lookup(subject.start, subject.link, subject.start.mention, subject.start.mention)
    reference = plan.fetch(bridge, rng).answer
    return plan.fetch(_lookup(subject.entity, attribute, reference, subject.words), rng)


_RELATION_WORDS = {
    ("<", True): "earlier than",
    (">", True): "later than",
    ("<", False): "less than",
    (">", False): "greater than",
}


def _compare(
    rng: random.Random, question: str, first: tuple[_Subject, str], second: tuple[_Subject, str], op: str
) -> _Draft:
    """A yes/no question decided by `Calculator(R_first op R_second)` over two fetched numbers."""
    plan = _Plan()
    left = _fetch_subject(plan, first[0], first[1], rng).answer
    right = _fetch_subject(plan, second[0], second[1], rng).answer
    values = [int(s.entity.facts[a]) for s, a in (first, second)]
    holds = values[0] < values[1] if op == "<" else values[0] > values[1]
    dated = first[1] in YEARS
    described = [ATTRIBUTES[(s.entity.kind, a)][1].format(d=s.words) for s, a in (first, second)]
    plan.final(
        f"Calculator({left} {op} {right})",
        explicit=rng.choice(("Check whether {l} {op} {r} or not", "Calculate whether {l} {op} {r}")).format(
            l=left, op=op, r=right
        ),
        descriptive=f"Decide whether {described[0]} is {_RELATION_WORDS[(op, dated)]} {described[1]}",
    )
    return _Draft(question, plan, "yes" if holds else "no", "yes/no")


def _two_subjects(
    rng: random.Random,
    world: World,
    kinds_a: tuple[str, ...],
    kinds_b: tuple[str, ...],
    bridged: bool,
    distinct_by: Callable[[_Subject], int | str],
) -> tuple[_Subject, _Subject] | None:
    """Two subjects of the given kinds about different entities whose values (per `distinct_by`) differ."""
    a = _subject(rng, world, rng.choice(kinds_a), bridged)
    b = _subject(rng, world, rng.choice(kinds_b), False)
    if len({a.entity.name, a.start.name, b.entity.name}) < (3 if bridged else 2):
        return None
    if distinct_by(a) == distinct_by(b):
        return None
    return a, b


# ---- held-in: yes/no (StrategyQA-like)


def _dates(rng: random.Random, world: World, bridged: bool = False) -> _Draft | None:
    kinds_a = tuple(k for k in _DATES if not bridged or k in _BRIDGES)
    pair = _two_subjects(
        rng, world, kinds_a, tuple(_DATES), bridged, lambda s: s.entity.facts[_DATES[s.entity.kind][0]]
    )
    if pair is None:
        return None
    a, b = pair
    (attr_a, part_a), (attr_b, part_b) = _DATES[a.entity.kind], _DATES[b.entity.kind]
    ages = "mountain" not in (a.entity.kind, b.entity.kind) and not bridged and rng.random() < 0.3
    if ages:
        word = rng.choice(("older", "younger"))
        question = f"Is {a.words} {word} than {b.words}?"
        op = "<" if word == "older" else ">"
    else:
        word = rng.choice(("before", "after"))
        question = f"Was {a.words} {part_a} {word} {b.words} was {part_b}?"
        op = "<" if word == "before" else ">"
    return _compare(rng, question, (a, attr_a), (b, attr_b), op)


def _amounts(rng: random.Random, world: World, bridged: bool = False) -> _Draft | None:
    kind, attribute = rng.choice([k for k in _AMOUNTS if not bridged or k[0] in _BRIDGES])
    pair = _two_subjects(rng, world, (kind,), (kind,), bridged, lambda s: s.entity.facts[attribute])
    if pair is None:
        return None
    a, b = pair
    larger, smaller, verb = _AMOUNTS[(kind, attribute)]
    bigger = rng.random() < 0.5
    lead = "Is" if verb == "is" else "Does"
    have = "" if verb == "is" else " have"
    question = f"{lead} {a.words}{have} {larger if bigger else smaller} than {b.words}?"
    return _compare(rng, question, (a, attribute), (b, attribute), ">" if bigger else "<")


def _bridge_dates(rng: random.Random, world: World) -> _Draft | None:
    return _dates(rng, world, bridged=True)


def _bridge_amounts(rng: random.Random, world: World) -> _Draft | None:
    return _amounts(rng, world, bridged=True)


# ---- held-out: values, names, and "A or B?" (HotpotQA-like)


def _bridge(rng: random.Random, world: World) -> _Draft:
    """Two hops: the fact about an entity reached through another ("the city where X was born")."""
    kind = rng.choice(tuple(_BRIDGES))
    subject = _subject(rng, world, kind, True)
    # asking the country of a capital would only lead back to the country the question names
    attribute = rng.choice([a for k, a in ATTRIBUTES if k == kind and (subject.link, a) != ("capital", "country")])
    plan = _Plan()
    _fetch_subject(plan, subject, attribute, rng)
    question = ATTRIBUTES[(kind, attribute)][0].format(e=subject.words)
    answer_kind = (
        "year" if attribute in YEARS else "name" if isinstance(subject.entity.facts[attribute], str) else "number"
    )
    return _Draft(_cap(question), plan, _value(subject.entity, attribute), answer_kind)


def _choice(rng: random.Random, world: World) -> _Draft | None:
    """An "A or B?" question ("Which was founded first, A or B?"): both facts looked up, then QA reads
    the two retrieved paragraphs and names the winner."""
    (kind, attribute), (ask_larger, ask_smaller) = rng.choice(list(_CHOICES.items()))
    other = kind if attribute != "founded" else rng.choice(("city", "organisation"))
    pair = _two_subjects(rng, world, (kind,), (other,), False, lambda s: s.entity.facts[attribute])
    if pair is None:
        return None
    a, b = pair
    larger = rng.random() < 0.5
    ask = ask_larger if larger else ask_smaller
    question = f"{ask}, {a.words} or {b.words}?"
    plan = _Plan()
    left = _fetch_subject(plan, a, attribute, rng).paragraph
    right = _fetch_subject(plan, b, attribute, rng).paragraph
    plan.final(
        f"QA([{left}, {right}], Question: {question})",
        explicit=rng.choice(("Search {l} and {r} and answer: {q}", "Look up {l} and {r} to find out: {q}")).format(
            l=left, r=right, q=question
        ),
        descriptive=f"Decide {ask[0].lower()}{ask[1:]}",
    )
    winner = max((a, b), key=lambda s: s.entity.facts[attribute] * (1 if larger else -1))
    return _Draft(question, plan, winner.entity.name, "name")


HELDIN_TEMPLATES: dict[str, Callable[[random.Random, World], _Draft | None]] = {
    "dates": _dates,
    "amounts": _amounts,
    "bridge_dates": _bridge_dates,
    "bridge_amounts": _bridge_amounts,
}
HELDOUT_TEMPLATES: dict[str, Callable[[random.Random, World], _Draft | None]] = {
    "heldout_bridge": _bridge,
    "heldout_choice": _choice,
}


def _in_heldin(question: str) -> bool:
    """Which held-in split a question belongs to, from its text alone: train and heldin never share one."""
    return int(hashlib.sha256(question.encode()).hexdigest(), 16) % HELDIN_SHARE == 0


def _style(rng: random.Random) -> str:
    return rng.choices(list(STYLE_WEIGHTS), weights=list(STYLE_WEIGHTS.values()))[0]


def generate_qa_suite(split: str, n: int, seed: int = 0) -> list[Task]:
    """`n` tasks of `split` about the bundled world, the same for the same (split, n, seed); a longer
    list extends a shorter one. The world is the same for every seed (the tools read one corpus)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {SPLITS}")
    rng = random.Random(f"coalign-qa-suite/{split}/{seed}")
    world = bundled_world()
    templates = HELDOUT_TEMPLATES if split == "heldout" else HELDIN_TEMPLATES
    tasks: list[Task] = []
    seen: set[str] = set()
    while len(tasks) < n:
        name = rng.choice(list(templates))
        draft = templates[name](rng, world)
        if draft is None or draft.question in seen:
            continue
        if split != "heldout" and _in_heldin(draft.question) != (split == "heldin"):
            continue
        seen.add(draft.question)
        style = _style(rng)
        subgoals = [s[style] if style != "vague" else rng.choice(VAGUE_SUBGOALS) for s in draft.plan.subgoals]
        tasks.append(
            Task(
                id=f"qa-{split}-{len(tasks):05d}",
                family="qa",
                dataset="qa-suite-heldout" if split == "heldout" else "qa-suite-heldin",
                question=draft.question,
                subgoals=tuple(subgoals),
                actions=tuple(draft.plan.actions),
                answer=draft.answer,
                subgoal_styles=(style,) * len(subgoals),
                meta={"template": name, "facts": draft.plan.facts, "answer_kind": draft.answer_kind},
            )
        )
    return tasks
