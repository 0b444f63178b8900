"""The bundled maths suite: generated word problems whose gold subgoals matter.

No model or dataset can be downloaded in the default run, so tiny models are trained from
scratch on this suite. MOAT's premise needs a grounder that depends on the plan: a probe on an
easy template suite found a tiny grounder solved tasks from the task text alone, leaving
nothing for planner alignment to learn. Here the decomposition is the hard part: events are
narrated out of order, quantities are referred back to, distractor numbers are mixed in,
multiplication or division is mixed with addition or subtraction, and several people or items
compete. Explicit subgoals name the operation and its operands, so a grounder given a good plan
only copies; a grounder given vague subgoals must untangle the story itself.

"heldout" is SVAMP-like: structures never built by a "train" or "heldin" template (reversed
questions, reordered facts, events of two templates combined, other question targets), told only
with held-in words, clauses and subgoal phrasings, since a model trained from scratch can read
nothing else.

"composed" (the planner's `data.composed_stories`, off by default) recombines the held-in events in
new ways, never into a structure a held-out template builds (`structure_keys`).

"near" is a held-out set one step from training: held-in templates told with a surface no task of the
other splits uses (`NEAR_SURFACE`: names, items, verbs, numbers above their held-in ranges, more and new
distractors), so it tests reading a story told in new words, where "heldout" tests new structures.
`Surface` holds its difficulty knobs; `generate_near` draws it with other ones.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Callable

from coalign.tasks import Task

SPLITS = ("train", "heldin", "heldout")  # every bundled suite's; the maths suite also has COMPOSED (training only)
COMPOSED = "composed"
NEAR = "near"  # the maths suite's second held-out set: held-in structures, a new surface
MATHS_SPLITS = (*SPLITS, COMPOSED, NEAR)
STYLES = ("explicit", "descriptive", "vague")
STYLE_WEIGHTS: dict[str, float] = {"explicit": 0.55, "descriptive": 0.25, "vague": 0.20}
VAGUE_SUBGOALS = ("Work out the next step", "Find the total", "Calculate the answer", "Compute the result")
BLANK_SUBGOAL = VAGUE_SUBGOALS[0]

OUT_OF_ORDER_RATE = 0.5  # share of stories whose narration order differs from the computation order
DISTRACTOR_COUNTS: dict[int, float] = {0: 0.45, 1: 0.40, 2: 0.15}  # irrelevant facts per task
HELDIN_SHARE = 5  # one question in HELDIN_SHARE (by text digest) belongs to "heldin", the rest to "train"
MAX_ANSWER = 10_000

NAMES = (
    "Mia", "Leo", "Ana", "Ben", "Eva", "Sam", "Zoe", "Max", "Ivy", "Tom",
    "Lily", "Noah", "Ruby", "Jack", "Emma", "Omar", "Nina", "Alex", "Rosa", "Finn",
)  # fmt: skip


@dataclass(frozen=True)
class _Kind:
    """Items that share verbs: `get` is (base, past, gerund); `lose` holds (past clause, gerund clause)."""

    items: tuple[str, ...]
    get: tuple[str, str, str]
    lose: tuple[tuple[str, str], ...]


_GIVE = ("gave {n} {item} to {q}", "giving some to {q}")
_KINDS: dict[str, _Kind] = {
    "fruit": _Kind(
        ("apples", "pears", "plums", "lemons", "oranges"),
        ("pick", "picked", "picking"),
        (_GIVE, ("sold {n} {item}", "selling some"), ("ate {n} {item}", "eating some")),
    ),
    "collect": _Kind(
        ("stickers", "cards", "stamps", "marbles", "shells", "beads"),
        ("find", "found", "finding"),
        (_GIVE, ("lost {n} {item}", "losing some")),
    ),
    "baked": _Kind(
        ("cookies", "muffins", "cupcakes", "rolls"),
        ("bake", "baked", "baking"),
        (_GIVE, ("sold {n} {item}", "selling some"), ("ate {n} {item}", "eating some")),
    ),
    "school": _Kind(
        ("pencils", "crayons", "books"),
        ("buy", "bought", "buying"),
        (_GIVE, ("lost {n} {item}", "losing some")),
    ),
}
_THINGS = ("kite", "ball", "hat", "cup", "bag", "game")  # priced objects in distractors and savings stories


@dataclass(frozen=True)
class Surface:
    """What a story is told with, its structure aside: the near split's difficulty knobs.

    `kinds` has `_KINDS`'s keys (templates pick a kind by name), each kind's first `lose` clause `_GIVE`.
    `number_scale` above 1 draws every number above its held-in range, up to that many times its top (2 to 6
    bags becomes 7 to 12); 1 keeps the held-in ranges. `distractors` are more irrelevant sentences beside the
    held-in ones: (held-in range of n, text with {person}, {thing} and {n})."""

    names: tuple[str, ...]
    kinds: dict[str, _Kind]
    things: tuple[str, ...]
    number_scale: float
    distractor_counts: dict[int, float]
    out_of_order_rate: float
    distractors: tuple[tuple[tuple[int, int], str], ...] = ()

    def numbers(self, lo: int, hi: int) -> tuple[int, int]:
        """The range a number of held-in range lo..hi is drawn from."""
        return (hi + 1, max(hi + 1, round(hi * self.number_scale))) if self.number_scale > 1 else (lo, hi)


HELDIN_SURFACE = Surface(NAMES, _KINDS, _THINGS, 1.0, DISTRACTOR_COUNTS, OUT_OF_ORDER_RATE)
# Names from the pretraining corpus's list (`pretraining.words`); items, verbs, priced things and distractors
# no task of the other splits uses (a test checks).
_NEAR_NAMES = (
    "Ada", "Amir", "Bea", "Cato", "Dara", "Eli", "Hana", "Ines", "Jun", "Kai",
    "Mara", "Milo", "Noor", "Pia", "Quin", "Rafi", "Uma", "Wren", "Yara", "Zeno",
)  # fmt: skip
NEAR_SURFACE = Surface(
    names=_NEAR_NAMES,
    kinds={
        "fruit": _Kind(
            ("peaches", "cherries", "figs", "limes"),
            ("gather", "gathered", "gathering"),
            (_GIVE, ("traded {n} {item}", "trading some"), ("dropped {n} {item}", "dropping some")),
        ),
        "collect": _Kind(
            ("coins", "badges", "feathers", "pebbles", "buttons", "ribbons"),
            ("win", "won", "winning"),
            (_GIVE, ("misplaced {n} {item}", "misplacing some")),
        ),
        "baked": _Kind(
            ("pies", "tarts", "scones", "biscuits"),
            ("make", "made", "making"),
            (_GIVE, ("served {n} {item}", "serving some"), ("dropped {n} {item}", "dropping some")),
        ),
        "school": _Kind(
            ("erasers", "rulers", "notebooks", "markers"),
            ("order", "ordered", "ordering"),
            (_GIVE, ("used up {n} {item}", "using some up")),
        ),
    },
    things=("lantern", "basket", "candle", "scarf", "drum", "clock"),
    number_scale=2.0,
    distractor_counts={0: 0.15, 1: 0.45, 2: 0.30, 3: 0.10},  # held in: 0.70 a task, here 1.35
    out_of_order_rate=OUT_OF_ORDER_RATE,
    distractors=(
        ((10, 60), "{person} lives {n} miles from the market."),
        ((2, 40), "{person} spent {n} minutes on the bus."),
        ((2, 30), "The {thing} was {n} dollars cheaper last week."),
    ),
)


class _Teller(random.Random):
    """A seeded random source that carries the surface its stories are told with."""

    def __init__(self, seed: str, surface: Surface) -> None:
        super().__init__(seed)
        self.surface = surface


def _surface(rng: random.Random) -> Surface:
    return rng.surface if isinstance(rng, _Teller) else HELDIN_SURFACE


# --------------------------------------------------------------------------- steps and subgoals

Operand = int | str  # a number written in the question, or an earlier result "R1"


@dataclass(frozen=True)
class _Step:
    """One Calculator call; `what` says in words (no numbers) which quantity it computes."""

    op: str
    left: Operand
    right: Operand
    what: str

    def action(self, index: int) -> str:
        return f"R{index} = Calculator({self.left} {self.op} {self.right})"


class _Steps:
    """Collects the gold steps of one story; each call returns the `R#` name of its result."""

    def __init__(self) -> None:
        self.items: list[_Step] = []

    def __call__(self, op: str, left: Operand, right: Operand, what: str) -> str:
        self.items.append(_Step(op, left, right, what))
        return f"R{len(self.items)}"


_OP_PHRASES: dict[str, tuple[tuple[str, str], ...]] = {
    "+": (("Add {r} to {l}", "adding {r} to {l}"), ("Add {l} and {r}", "adding {l} and {r}")),
    "-": (
        ("Subtract {r} from {l}", "subtracting {r} from {l}"),
        ("Take {r} away from {l}", "taking {r} away from {l}"),
    ),
    "*": (("Multiply {l} by {r}", "multiplying {l} by {r}"),),
    "/": (("Divide {l} by {r}", "dividing {l} by {r}"),),
}
_EXPLICIT_FORMS = ("{op} to find {what}", "{op} to get {what}", "Find {what} by {op_ing}")
_DESCRIPTIVE_FORMS = ("Calculate {what}", "Find {what}", "Work out {what}")


def _subgoal(step: _Step, style: str, rng: random.Random) -> str:
    """One annotator-like subgoal: explicit names operation and operands, descriptive only the quantity."""
    if style == "vague":
        return rng.choice(VAGUE_SUBGOALS)
    if style == "descriptive":
        return rng.choice(_DESCRIPTIVE_FORMS).format(what=step.what)
    op, op_ing = rng.choice(_OP_PHRASES[step.op])
    form = rng.choice(_EXPLICIT_FORMS)
    return form.format(
        op=op.format(l=step.left, r=step.right), op_ing=op_ing.format(l=step.left, r=step.right), what=step.what
    )


_APPLY: dict[str, Callable[[Fraction, Fraction], Fraction]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
}


def _value(operand: Operand, values: list[int]) -> int:
    """A number, or the value of the earlier result it names."""
    return values[int(operand[1:]) - 1] if isinstance(operand, str) else operand


def _evaluate(steps: list[_Step]) -> list[int] | None:
    """Each step's value, or None when one is not a positive integer below MAX_ANSWER."""
    values: list[int] = []
    for step in steps:
        left, right = (_value(o, values) for o in (step.left, step.right))
        if step.op == "/" and right == 0:
            return None
        value = _APPLY[step.op](Fraction(left), Fraction(right))
        if value.denominator != 1 or not 0 < value < MAX_ANSWER:
            return None
        values.append(int(value))
    return values


# --------------------------------------------------------------------------- narration


@dataclass(frozen=True)
class _Sentence:
    """A story sentence; `anchored` ones lean on the sentence before ("Before that, ...")."""

    text: str
    anchored: bool = False


@dataclass(frozen=True)
class _Clock:
    """Consecutive time slots: `when` ("on Tuesday"), openers for one slot back and for a jump back."""

    when: tuple[str, ...]
    adjacent: tuple[str, ...]
    far: str


_DAYS = tuple(f"on {d}" for d in ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday"))
_PARTS = ("in the morning", "at noon", "in the afternoon", "in the evening")
_MONTHS = tuple(f"in {m}" for m in ("March", "April", "May", "June"))
_BACK = {
    _DAYS: (("Before that,", "The day before,"), "Earlier, {when},"),
    _PARTS: (("Before that,", "Earlier that day,"), "Earlier that day, {when},"),
    _MONTHS: (("Before that,", "The month before,"), "Earlier, {when},"),
}


def _clock(rng: random.Random, slots: tuple[str, ...], k: int) -> _Clock:
    start = rng.randrange(len(slots) - k + 1)
    return _Clock(slots[start : start + k], *_BACK[slots])


def _cap(text: str) -> str:
    return text[0].upper() + text[1:]


def _reorder(rng: random.Random, k: int) -> list[int]:
    """A narration order other than chronological: reversed, last first, first last, or one swap."""
    swap = rng.randrange(k - 1)
    chrono = list(range(k))
    options = [
        chrono[::-1],
        [k - 1, *chrono[:-1]],
        [*chrono[1:], 0],
        chrono[:swap] + [swap + 1, swap] + chrono[swap + 2 :],
    ]
    return rng.choice([o for o in options if o != chrono])


def _narrate(rng: random.Random, clock: _Clock, clauses: list[str], shuffle: bool) -> list[_Sentence]:
    """Timed clauses (chronological) as sentences; a shuffled story says when it steps back."""
    order = _reorder(rng, len(clauses)) if shuffle and len(clauses) > 1 else list(range(len(clauses)))
    out, prev = [], None
    for idx in order:
        when = clock.when[idx]
        if prev is not None and idx == prev - 1:
            out.append(_Sentence(f"{rng.choice(clock.adjacent)} {clauses[idx]}.", anchored=True))
        elif prev is not None and idx < prev:
            out.append(_Sentence(f"{clock.far.format(when=when)} {clauses[idx]}."))
        else:
            out.append(_Sentence(f"{_cap(when)}, {clauses[idx]}."))
        prev = idx
    return out


def _place(sentences: list[_Sentence], extra: str, early: bool) -> list[_Sentence]:
    """`extra` at the end, or (early) before the facts it refers back to."""
    return [_Sentence(extra), *sentences] if early else [*sentences, _Sentence(extra)]


def _static(rng: random.Random, facts: list[str], shuffle: bool) -> list[_Sentence]:
    """Untimed facts in dependency order, or (shuffle) in another order so references point forward."""
    order = _reorder(rng, len(facts)) if shuffle else list(range(len(facts)))
    return [_Sentence(facts[i]) for i in order]


# --------------------------------------------------------------------------- drafts


@dataclass(frozen=True)
class _Draft:
    """A story before distractors and subgoals; `item` may be reused by a distractor (None: ambiguous)."""

    story: list[_Sentence]
    question: str
    steps: list[_Step]
    out_of_order: bool
    people: tuple[str, ...]
    item: str | None


def _num(rng: random.Random, lo: int = 2, hi: int = 60) -> int:
    return rng.randint(*_surface(rng).numbers(lo, hi))


def _people(rng: random.Random, k: int) -> list[str]:
    return rng.sample(_surface(rng).names, k)


def _kind(rng: random.Random, *names: str) -> tuple[_Kind, str]:
    kinds = _surface(rng).kinds
    kind = kinds[rng.choice(names or tuple(kinds))]
    return kind, rng.choice(kind.items)


def _shuffled(rng: random.Random) -> bool:
    return rng.random() < _surface(rng).out_of_order_rate


# ---- held-in templates


def _day_chain(rng: random.Random) -> _Draft:
    """One person's items over consecutive days: gains, losses, bags bought, a final equal split."""
    p, q = _people(rng, 2)
    kind, item = _kind(rng)
    _, got, getting = kind.get
    plan = rng.choice(_DAY_PLANS)
    clock = _clock(rng, _DAYS, len(plan) + 1)
    steps = _Steps()
    x: Operand = _num(rng)
    clauses = [f"{p} {got} {x} {item}"]
    question = f"How many {item} did {p} have in the end?"
    for event, when in zip(plan, clock.when[1:]):
        if event == "add":
            b = _num(rng, 2, 40)
            clauses.append(f"{p} {got} {b} more {item}")
            x = steps("+", x, b, f"how many {item} {p} had after {getting} more {when}")
        elif event == "sub":
            (clause, gerund), b = rng.choice(kind.lose), _num(rng, 2, 30)
            clauses.append(f"{p} {clause.format(n=b, item=item, q=q)}")
            x = steps("-", x, b, f"how many {item} {p} had after {gerund.format(q=q)}")
        elif event == "bags":
            c, m = _num(rng, 2, 6), _num(rng, 3, 12)
            clauses.append(f"{p} bought {c} bags of {item} with {m} {item} in each bag")
            r = steps("*", c, m, f"how many {item} were in the bags {p} bought")
            x = steps("+", x, r, f"how many {item} {p} had after buying the bags")
        else:
            d = _num(rng, 2, 6)
            clauses.append(f"{p} put all the {item} equally into {d} boxes")
            x = steps("/", x, d, f"how many {item} went into each box")
            question = f"How many {item} were in each box?"
    shuffle = _shuffled(rng)
    return _Draft(_narrate(rng, clock, clauses, shuffle), question, steps.items, shuffle, (p, q), item)


_DAY_PLANS = (
    ("sub", "add"), ("add", "sub"), ("sub", "div"), ("add", "div"), ("bags",),
    ("sub", "add", "div"), ("add", "sub", "div"), ("bags", "div"), ("sub", "bags"), ("bags", "sub"),
    ("sub", "bags", "div"), ("bags", "sub", "div"), ("add", "sub", "add", "div"), ("sub", "add", "sub", "div"),
)  # fmt: skip


def _times_as_many(rng: random.Random) -> _Draft:
    """A second person gets k times what the first got on one day, or on both days together."""
    p, q = _people(rng, 2)
    kind, item = _kind(rng, "fruit", "collect", "baked")
    get, got, _ = kind.get
    clock = _clock(rng, _DAYS, 2)
    a, b, k = _num(rng), _num(rng), _num(rng, 2, 5)
    ref = rng.choice((0, 1, None))
    steps = _Steps()
    both = f"how many {item} {p} {got} on the two days"
    if ref is None:
        base = steps("+", a, b, both)
        ref_text = "on the two days together"
        asks = ("q", "all", "more", "share")
    else:
        base = None
        ref_text = clock.when[ref]
        asks = ("all", "more", "share")
    qx = steps("*", base or (a, b)[ref], k, f"how many {item} {q} {got}")
    ask = rng.choice(asks)
    if ask == "q":
        question = f"How many {item} did {q} {get}?"
    elif ask == "share":
        d = _num(rng, 2, 6)
        question = f"If {q} shares the {item} {q} {got} equally among {d} friends, how many does each friend get?"
        steps("/", qx, d, f"how many {item} each friend gets")
    else:
        total = base or steps("+", a, b, both)
        if ask == "all":
            question = f"How many {item} did {p} and {q} {get} in all?"
            steps("+", total, qx, f"how many {item} {p} and {q} {got} in all")
        else:
            question = f"How many more {item} did {q} {get} than {p} did on the two days?"
            steps("-", qx, total, f"how many more {item} {q} {got} than {p}")
    shuffle, early = _shuffled(rng), rng.random() < 0.5
    story = _narrate(rng, clock, [f"{p} {got} {a} {item}", f"{p} {got} {b} {item}"], shuffle)
    rel = f"{q} {got} {k} times as many {item} as {p} did {ref_text}."
    return _Draft(_place(story, rel, early), question, steps.items, shuffle or early, (p, q), None)


def _relation_chain(rng: random.Random) -> _Draft:
    """Three people compared in a chain (more/fewer, then k times), told in any order."""
    p, q, r = _people(rng, 3)
    _, item = _kind(rng)
    a, b, k = _num(rng), _num(rng, 2, 30), _num(rng, 2, 5)
    more = rng.random() < 0.5
    steps = _Steps()
    rq = steps("+" if more else "-", a, b, f"how many {item} {q} has")
    rr = steps("*", rq, k, f"how many {item} {r} has")
    ask = rng.choice(("r", "more", "all"))
    if ask == "r":
        question = f"How many {item} does {r} have?"
    elif ask == "more":
        question = f"How many more {item} does {r} have than {p}?"
        steps("-", rr, a, f"how many more {item} {r} has than {p}")
    else:
        question = f"How many {item} do {p}, {q} and {r} have in all?"
        pq = steps("+", a, rq, f"how many {item} {p} and {q} have together")
        steps("+", pq, rr, f"how many {item} the three children have in all")
    facts = [
        f"{p} has {a} {item}.",
        f"{q} has {b} {'more' if more else 'fewer'} {item} than {p}.",
        f"{r} has {k} times as many {item} as {q}.",
    ]
    shuffle = _shuffled(rng)
    return _Draft(_static(rng, facts, shuffle), question, steps.items, shuffle, (p, q, r), None)


def _packs_share(rng: random.Random) -> _Draft:
    """Packs bought, some given away (maybe more found), the rest shared equally among friends."""
    p, q = _people(rng, 2)
    kind, item = _kind(rng, "fruit", "collect", "school")
    n, m, k, each = _num(rng, 2, 6), _num(rng, 3, 12), _num(rng, 2, 6), _num(rng, 2, 12)
    found = _num(rng, 2, 20) if rng.random() < 0.5 else 0
    g = n * m + found - k * each
    steps = _Steps()
    x = steps("*", n, m, f"how many {item} {p} bought")
    x = steps("-", x, g, f"how many {item} {p} had after giving some to {q}")
    clauses = [f"{p} bought {n} packs of {item} with {m} {item} in each pack", f"{p} gave {g} {item} to {q}"]
    if found:
        x = steps("+", x, found, f"how many {item} {p} had after finding more")
        clauses.append(f"{p} found {found} more {item}")
    steps("/", x, k, f"how many {item} each friend got")
    clauses.append(f"{p} shared all the {item} left equally among {k} friends")
    clock = _clock(rng, _PARTS, len(clauses))
    question = f"How many {item} did each friend get?"
    shuffle = _shuffled(rng)
    return _Draft(_narrate(rng, clock, clauses, shuffle), question, steps.items, shuffle, (p, q), item)


def _bake_boxes(rng: random.Random) -> _Draft:
    """Trays baked, some sold, the rest boxed, some boxes given away: division in mid-chain."""
    p, q = _people(rng, 2)
    item = rng.choice(_surface(rng).kinds["baked"].items)
    t, c, b = _num(rng, 2, 6), _num(rng, 4, 12), _num(rng, 2, 6)
    sold = _num(rng, 2, 30) if rng.random() < 0.6 else 0
    gift = _num(rng, 2, 9) if rng.random() < 0.6 or not sold else 0
    steps = _Steps()
    clauses = [f"{p} baked {t} trays of {item} with {c} {item} on each tray"]
    x = steps("*", t, c, f"how many {item} {p} baked")
    if sold:
        clauses.append(f"{p} sold {sold} {item}")
        x = steps("-", x, sold, f"how many {item} were left after the sale")
    clauses.append(f"{p} put all the {item} left into boxes of {b}")
    x = steps("/", x, b, f"how many boxes {p} filled")
    question = f"How many boxes did {p} fill?"
    if gift:
        clauses.append(f"{p} gave {gift} boxes to {q}")
        steps("-", x, gift, f"how many boxes {p} kept")
        question = f"How many boxes did {p} keep?"
    clock = _clock(rng, _PARTS, len(clauses))
    shuffle = _shuffled(rng)
    return _Draft(_narrate(rng, clock, clauses, shuffle), question, steps.items, shuffle, (p, q), item)


def _class_teams(rng: random.Random) -> _Draft:
    """Students at tables, some joined or away, teams formed (and balls handed out per team)."""
    (teacher,) = _people(rng, 1)
    g, s, t = _num(rng, 2, 8), _num(rng, 3, 9), _num(rng, 2, 6)
    change = _num(rng, 2, 12)
    joined = rng.random() < 0.5
    steps = _Steps()
    x = steps("*", g, s, "how many students sit at the tables")
    x = steps("+" if joined else "-", x, change, "how many students were in class that day")
    x = steps("/", x, t, "how many teams there were")
    facts = [
        f"{teacher} teaches a class with {g} tables and {s} students at each table.",
        f"{change} more students joined the class." if joined else f"{change} students were away that day.",
        f"The students were put into teams of {t}.",
    ]
    question = "How many teams were there?"
    if rng.random() < 0.5:
        k = _num(rng, 2, 6)
        facts.append(f"Each team got {k} balls.")
        steps("*", x, k, "how many balls the teams got")
        question = "How many balls did the teams get in all?"
    shuffle = _shuffled(rng)
    return _Draft(_static(rng, facts, shuffle), question, steps.items, shuffle, (teacher,), None)


def _give_compare(rng: random.Random) -> _Draft:
    """Two people, one gives to the other: compare them after, or pack the receiver's items."""
    p, q = _people(rng, 2)
    kind, item = _kind(rng)
    a, b, c = _num(rng), _num(rng), _num(rng, 2, 20)
    clauses = [f"{p} had {a} {item} and {q} had {b} {item}", f"{p} gave {c} {item} to {q}"]
    steps = _Steps()
    compare = rng.random() < 0.6
    rp = steps("-", a, c, f"how many {item} {p} had left") if compare else None
    rq = steps("+", b, c, f"how many {item} {q} had after getting some from {p}")
    if rng.random() < 0.5:
        (clause, gerund), e = rng.choice(kind.lose[1:]), _num(rng, 2, 15)  # not "gave": p's count stays put
        clauses.append(f"{q} {clause.format(n=e, item=item)}")
        rq = steps("-", rq, e, f"how many {item} {q} had after {gerund}")
    if compare:
        steps("-", rq, rp, f"how many more {item} {q} had than {p}")
        question = f"How many more {item} did {q} have than {p} in the end?"
    else:
        d = _num(rng, 2, 6)
        steps("/", rq, d, f"how many bags {q} can fill")
        question = f"How many bags of {d} {item} can {q} fill in the end?"
    clock = _clock(rng, _PARTS, len(clauses))
    shuffle = _shuffled(rng)
    return _Draft(_narrate(rng, clock, clauses, shuffle), question, steps.items, shuffle, (p, q), None)


def _weekly_savings(rng: random.Random) -> _Draft:
    """Weekly savings, a purchase, then a second saver measured against what is left."""
    p, q = _people(rng, 2)
    a, w, b, k = _num(rng, 2, 20), _num(rng, 2, 8), _num(rng, 2, 40), _num(rng, 2, 5)
    thing = rng.choice(_surface(rng).things)
    clock = _clock(rng, _MONTHS, 2)
    steps = _Steps()
    x = steps("*", a, w, f"how many dollars {p} saved")
    left = steps("-", x, b, f"how many dollars {p} had left after buying the {thing}")
    ask = rng.choice(("left", "q", "all"))
    question = f"How many dollars did {p} have left?"
    if ask != "left":
        rq = steps("*", left, k, f"how many dollars {q} saved")
        question = f"How many dollars did {q} save?"
        if ask == "all":
            steps("+", left, rq, f"how many dollars {p} and {q} have together")
            question = f"How many dollars do {p} and {q} have in all now?"
    clauses = [f"{p} saved {a} dollars each week for {w} weeks", f"{p} spent {b} dollars on a {thing}"]
    shuffle, early = _shuffled(rng), ask != "left" and rng.random() < 0.5
    story = _narrate(rng, clock, clauses, shuffle)
    if ask != "left":
        story = _place(story, f"{q} saved {k} times as much money as {p} had left.", early)
    return _Draft(story, question, steps.items, shuffle or early, (p, q), None)


# ---- held-out templates (SVAMP-like: held-in words and clauses, structures no held-in template builds)
#
# A model trained from scratch knows only the words of "train", so held-out stories reuse the held-in
# people, items, verbs, clause wordings, question wordings and subgoal phrasings. What is new is the
# structure: the end amount given and the start asked, a relation chain read backwards, events from
# two held-in templates combined, or a question about another person or quantity.


def _reverse_start(rng: random.Random) -> _Draft:
    """day_chain told forwards but asked backwards: the end amount is given, the first day's asked."""
    p, q = _people(rng, 2)
    kind, item = _kind(rng)
    _, got, getting = kind.get
    events = rng.choice((("sub", "add"), ("add", "sub"), ("bags", "sub"), ("sub", "add", "sub"), ("add", "bags")))
    clock = _clock(rng, _DAYS, len(events) + 1)
    clauses, undo = [f"{p} had some {item}"], []
    for event, when in zip(events, clock.when[1:]):
        if event == "add":
            b = _num(rng, 2, 30)
            clauses.append(f"{p} {got} {b} more {item}")
            undo.append(("-", b, f"how many {item} {p} had before {getting} more {when}"))
        elif event == "sub":
            (clause, gerund), c = rng.choice(kind.lose), _num(rng, 2, 30)
            clauses.append(f"{p} {clause.format(n=c, item=item, q=q)}")
            undo.append(("+", c, f"how many {item} {p} had before {gerund.format(q=q)}"))
        else:
            n, m = _num(rng, 2, 6), _num(rng, 3, 12)
            clauses.append(f"{p} bought {n} bags of {item} with {m} {item} in each bag")
            undo.append(("bags", (n, m), f"how many {item} {p} had before buying the bags"))
    end = _num(rng, 5, 60)
    steps = _Steps()
    x: Operand = end
    for op, amount, what in reversed(undo):
        if op == "bags":
            amount = steps("*", amount[0], amount[1], f"how many {item} were in the bags {p} bought")
            op = "-"
        x = steps(op, x, amount, what)
    shuffle = _shuffled(rng)
    story = [*_narrate(rng, clock, clauses, shuffle), _Sentence(f"In the end, {p} had {end} {item}.")]
    question = f"How many {item} did {p} have {clock.when[0]}?"
    return _Draft(story, question, steps.items, True, (p, q), item)


def _relation_reverse(rng: random.Random) -> _Draft:
    """relation_chain's facts with the last person's count given and the first person's asked."""
    p, q, r = _people(rng, 3)
    _, item = _kind(rng)
    rq, b, k = _num(rng, 4, 30), _num(rng, 2, 30), _num(rng, 2, 5)
    more = rng.random() < 0.5
    x = rq * k
    steps = _Steps()
    sq = steps("/", x, k, f"how many {item} {q} has")
    sp = steps("-" if more else "+", sq, b, f"how many {item} {p} has")
    question = f"How many {item} does {p} have?"
    if rng.random() < 0.5:
        pq = steps("+", sp, sq, f"how many {item} {p} and {q} have together")
        question = f"How many {item} do {p}, {q} and {r} have in all?"
        steps("+", pq, x, f"how many {item} the three children have in all")
    facts = [
        f"{q} has {b} {'more' if more else 'fewer'} {item} than {p}.",
        f"{r} has {k} times as many {item} as {q}.",
        f"{r} has {x} {item}.",
    ]
    shuffle = _shuffled(rng)
    return _Draft(_static(rng, facts, shuffle), question, steps.items, True, (p, q, r), None)


def _bags_times(rng: random.Random) -> _Draft:
    """day_chain's bags, then times_as_many measured against them; a plan no held-in template makes."""
    p, q = _people(rng, 2)
    kind, item = _kind(rng, "fruit", "collect", "baked")
    get, got, _ = kind.get
    clock = _clock(rng, _DAYS, 2)
    a, c, m, k = _num(rng), _num(rng, 2, 6), _num(rng, 3, 12), _num(rng, 2, 5)
    steps = _Steps()
    bags = steps("*", c, m, f"how many {item} were in the bags {p} bought")
    if rng.random() < 0.5:
        base, ref_text = bags, f"{p} bought in bags"
    else:
        base = steps("+", a, bags, f"how many {item} {p} had after buying the bags")
        ref_text = f"{p} had {clock.when[1]}"
    qx = steps("*", base, k, f"how many {item} {q} {got}")
    ask = rng.choice(("q", "share", "more"))
    if ask == "q":
        question = f"How many {item} did {q} {get}?"
    elif ask == "share":
        d = _num(rng, 2, 6)
        question = f"If {q} shares the {item} {q} {got} equally among {d} friends, how many does each friend get?"
        steps("/", qx, d, f"how many {item} each friend gets")
    else:
        total = base if base != bags else steps("+", a, bags, f"how many {item} {p} had after buying the bags")
        question = f"How many more {item} did {q} {get} than {p} did on the two days?"
        steps("-", qx, total, f"how many more {item} {q} {got} than {p}")
    clauses = [f"{p} {got} {a} {item}", f"{p} bought {c} bags of {item} with {m} {item} in each bag"]
    shuffle, early = _shuffled(rng), rng.random() < 0.5
    story = _narrate(rng, clock, clauses, shuffle)
    rel = f"{q} {got} {k} times as many {item} as {ref_text}."
    return _Draft(_place(story, rel, early), question, steps.items, shuffle or early, (p, q), None)


def _give_split(rng: random.Random) -> _Draft:
    """give_compare's gift, then day_chain's boxes or packs_share's friends for the giver or the receiver."""
    p, q = _people(rng, 2)
    kind, item = _kind(rng)
    _, got, getting = kind.get
    a, b, c, d = _num(rng), _num(rng), _num(rng, 2, 20), _num(rng, 2, 6)
    clauses = [f"{p} had {a} {item} and {q} had {b} {item}", f"{p} gave {c} {item} to {q}"]
    steps = _Steps()
    if rng.random() < 0.5:
        x = steps("-", a, c, f"how many {item} {p} had left")
        e = _num(rng, 2, 20)
        clauses.append(f"{p} {got} {e} more {item}")
        x = steps("+", x, e, f"how many {item} {p} had after {getting} more")
        clauses.append(f"{p} shared all the {item} left equally among {d} friends")
        steps("/", x, d, f"how many {item} each friend got")
        question = f"How many {item} did each friend get?"
    else:
        x = steps("+", b, c, f"how many {item} {q} had after getting some from {p}")
        if rng.random() < 0.5:
            (clause, gerund), e = rng.choice(kind.lose[1:]), _num(rng, 2, 15)  # not "gave": q keeps the gift
            clauses.append(f"{q} {clause.format(n=e, item=item)}")
            x = steps("-", x, e, f"how many {item} {q} had after {gerund}")
        else:
            e = _num(rng, 2, 20)
            clauses.append(f"{q} {got} {e} more {item}")
            x = steps("+", x, e, f"how many {item} {q} had after {getting} more")
        clauses.append(f"{q} put all the {item} equally into {d} boxes")
        steps("/", x, d, f"how many {item} went into each box")
        question = f"How many {item} did {q} put in each box?"
    clock = _clock(rng, _PARTS, len(clauses))
    shuffle = _shuffled(rng)
    return _Draft(_narrate(rng, clock, clauses, shuffle), question, steps.items, shuffle, (p, q), item)


def _bags_compare(rng: random.Random) -> _Draft:
    """Four steps mixing day_chain and give_compare: both people gain, one by bags; then compare them."""
    p, q = _people(rng, 2)
    kind, item = _kind(rng)
    _, got, getting = kind.get
    a, b, c, m, e = _num(rng), _num(rng), _num(rng, 2, 6), _num(rng, 3, 12), _num(rng, 2, 30)
    clauses = [f"{p} had {a} {item} and {q} had {b} {item}"]
    steps = _Steps()
    bags = steps("*", c, m, f"how many {item} were in the bags {p} bought")
    rp = steps("+", a, bags, f"how many {item} {p} had after buying the bags")
    clauses.append(f"{p} bought {c} bags of {item} with {m} {item} in each bag")
    if rng.random() < 0.5:
        clauses.append(f"{q} {got} {e} more {item}")
        rq = steps("+", b, e, f"how many {item} {q} had after {getting} more")
    else:
        (clause, gerund) = rng.choice(kind.lose[1:] or kind.lose)
        clauses.append(f"{q} {clause.format(n=e, item=item)}")
        rq = steps("-", b, e, f"how many {item} {q} had after {gerund}")
    steps("-", rp, rq, f"how many more {item} {p} had than {q}")
    question = f"How many more {item} did {p} have than {q} in the end?"
    clock = _clock(rng, _PARTS, len(clauses))
    shuffle = _shuffled(rng)
    return _Draft(_narrate(rng, clock, clauses, shuffle), question, steps.items, shuffle, (p, q), item)


# ---- composed stories (split "composed", training data only)
#
# A held-out story is a new combination of held-in clauses. Composed stories show the planner many
# such combinations: the gains, losses, gifts and bags of day_chain, give_compare and packs_share, for
# one person or two, in any order, ending in a held-in question. A draft that some held-out template
# can also build (either view of `structure_keys`: the steps' quantities, or the flow with the question)
# is drawn again, so no held-out structure is trained on; its neighbours (an event more or less) are.

_COMPOSED_EVENTS = ("more", "lose", "give", "bags")
_COMPOSED_ENDS = ("count", "compare", "boxes", "friends", "bags_of")


def _compose_once(rng: random.Random) -> _Draft:
    """One to three held-in events for one person or two, then a held-in question about them."""
    p, q = _people(rng, 2)
    kind, item = _kind(rng)
    _, got, getting = kind.get
    pair = rng.random() < 0.6
    start = {p: _num(rng), q: _num(rng)}
    opening = f"{p} had {start[p]} {item} and {q} had {start[q]} {item}" if pair else f"{p} {got} {start[p]} {item}"
    clauses = [opening]
    events: list[tuple[str, str, Operand | tuple[int, int], str]] = []  # (person, op, amount, what) in time order
    for _ in range(rng.randint(1, 3)):
        who = rng.choice((p, q)) if pair else p
        other = q if who == p else p
        event = rng.choice(_COMPOSED_EVENTS)
        if event == "more":
            e = _num(rng, 2, 30)
            clauses.append(f"{who} {got} {e} more {item}")
            events.append((who, "+", e, f"how many {item} {who} had after {getting} more"))
        elif event == "lose":
            (clause, gerund), e = rng.choice(kind.lose[1:]), _num(rng, 2, 30)
            clauses.append(f"{who} {clause.format(n=e, item=item)}")
            events.append((who, "-", e, f"how many {item} {who} had after {gerund}"))
        elif event == "give":
            c = _num(rng, 2, 20)
            clauses.append(f"{who} gave {c} {item} to {other}")
            if pair:
                events.append((who, "-", c, f"how many {item} {who} had left"))
                events.append((other, "+", c, f"how many {item} {other} had after getting some from {who}"))
            else:
                events.append((who, "-", c, f"how many {item} {who} had after giving some to {other}"))
        else:
            c, m = _num(rng, 2, 6), _num(rng, 3, 12)
            clauses.append(f"{who} bought {c} bags of {item} with {m} {item} in each bag")
            events.append((who, "bags", (c, m), f"how many {item} {who} had after buying the bags"))
    steps = _Steps()

    def told(person: str) -> Operand:
        """The person's steps, in time order, from the count the story opens with; their last result."""
        held: Operand = start[person]
        for who, op, amount, what in events:
            if who != person:
                continue
            if op == "bags":
                c, m = amount  # type: ignore[misc]
                amount, op = steps("*", c, m, f"how many {item} were in the bags {person} bought"), "+"
            held = steps(op, held, amount, what)  # type: ignore[arg-type]
        return held

    x = rng.choice((p, q)) if pair else p
    end = rng.choice(_COMPOSED_ENDS if pair else tuple(e for e in _COMPOSED_ENDS if e != "compare"))
    question = f"How many {item} did {x} have in the end?"
    if end == "compare":
        counts = {p: told(p), q: told(q)}
        values = _evaluate(steps.items) or []  # none: a step is invalid and `_draw` draws again whatever the order
        big, small = sorted((p, q), key=lambda who: -_value(counts[who], values)) if values else (p, q)
        steps("-", counts[big], counts[small], f"how many more {item} {big} had than {small}")
        question = f"How many more {item} did {big} have than {small} in the end?"
    elif end != "count":
        held, d = told(x), _num(rng, 2, 6)
        if end == "boxes":
            clauses.append(f"{x} put all the {item} equally into {d} boxes")
            steps("/", held, d, f"how many {item} went into each box")
            question = f"How many {item} were in each box?"
        elif end == "friends":
            clauses.append(f"{x} shared all the {item} left equally among {d} friends")
            steps("/", held, d, f"how many {item} each friend got")
            question = f"How many {item} did each friend get?"
        else:
            steps("/", held, d, f"how many bags {x} can fill")
            question = f"How many bags of {d} {item} can {x} fill in the end?"
    else:
        told(x)
    clock = _clock(rng, _DAYS if len(clauses) > len(_PARTS) or rng.random() < 0.5 else _PARTS, len(clauses))
    shuffle = _shuffled(rng)
    return _Draft(_narrate(rng, clock, clauses, shuffle), question, steps.items, shuffle, (p, q), item)


def _composed(rng: random.Random) -> _Draft:
    """A composed story that no held-out template could have built."""
    while True:
        draft = _compose_once(rng)
        if not set(structure_keys(draft.steps, draft.question)) & heldout_structures():
            return draft


_NAME_WORD = re.compile(r"\b(?:" + "|".join(NAMES) + r")\b")
_ITEM_WORD = re.compile(r"\b(?:" + "|".join(i for k in _KINDS.values() for i in k.items) + r")\b")
_WHEN_WORDS = re.compile(r" (?:" + "|".join(_DAYS + _PARTS + _MONTHS) + r")\b")
_PLAIN_WORDING = (
    (_ITEM_WORD, "ITEM"),
    (_WHEN_WORDS, ""),
    (re.compile(r"\b\d+\b"), "N"),
    (re.compile(r"\b(?:" + "|".join(k.get[2] for k in _KINDS.values()) + r") more\b"), "getting more"),
    (re.compile(r"\b(?:selling|eating|losing) some\b"), "losing some"),
    (re.compile(r"had after giving some to P\d\b"), "had left"),
)


def structure_keys(steps: list[_Step], question: str) -> tuple[tuple, tuple]:
    """Two views of what a story computes, its wording aside (names by first mention, items, days,
    numbers and synonyms made one): every step's operation, operands (a number or an earlier result)
    and quantity; and the operations' flow with the question asked."""
    names: dict[str, str] = {}

    def plain(text: str) -> str:
        text = _NAME_WORD.sub(lambda m: names.setdefault(m.group(0), f"P{len(names) + 1}"), text)
        for pattern, same in _PLAIN_WORDING:
            text = pattern.sub(same, text)
        return text

    flow = tuple((s.op, *(o if isinstance(o, str) else "n" for o in (s.left, s.right))) for s in steps)
    quantities = tuple(plain(s.what) for s in steps)
    return ("steps", *zip(flow, quantities)), ("asked", *flow, plain(question))


HELDOUT_STRUCTURE_DRAWS = 4000  # per held-out template: every branch many times over (a test checks closure)


@lru_cache(maxsize=1)
def heldout_structures() -> frozenset[tuple]:
    """Every structure key a held-out template builds, from many seeded drafts of each."""
    rng = random.Random("coalign-suite/heldout-structures")
    drafts = (template(rng) for template in HELDOUT_TEMPLATES.values() for _ in range(HELDOUT_STRUCTURE_DRAWS))
    return frozenset(key for draft in drafts for key in structure_keys(draft.steps, draft.question))


HELDIN_TEMPLATES: dict[str, Callable[[random.Random], _Draft]] = {
    "day_chain": _day_chain,
    "times_as_many": _times_as_many,
    "relation_chain": _relation_chain,
    "packs_share": _packs_share,
    "bake_boxes": _bake_boxes,
    "class_teams": _class_teams,
    "give_compare": _give_compare,
    "weekly_savings": _weekly_savings,
}
HELDOUT_TEMPLATES: dict[str, Callable[[random.Random], _Draft]] = {
    "heldout_reverse_start": _reverse_start,
    "heldout_relation_reverse": _relation_reverse,
    "heldout_bags_times": _bags_times,
    "heldout_give_split": _give_split,
    "heldout_bags_compare": _bags_compare,
}
COMPOSED_TEMPLATES: dict[str, Callable[[random.Random], _Draft]] = {"composed": _composed}
# class_teams names no item and one person: told near, its questions share 13-word runs with train's
# (4 of 500 before it was left out, `tests/tasks/test_maths_suite.py`).
NEAR_TEMPLATES = {name: template for name, template in HELDIN_TEMPLATES.items() if name != "class_teams"}

# --------------------------------------------------------------------------- distractors


def _distractor(rng: random.Random, draft: _Draft, used: set[int]) -> str:
    """An irrelevant fact with a fresh number: an age, a price, someone's count of another item, or one of
    the surface's own."""
    surface = _surface(rng)
    in_story = bool(draft.people) and rng.random() < 0.6
    person = rng.choice(draft.people) if in_story else rng.choice(surface.names)
    thing = rng.choice([t for t in surface.things if t not in draft.question])
    items = [i for k in surface.kinds.values() for i in k.items]
    other = rng.choice([i for i in items if i != draft.item and i not in draft.question])
    options = [
        ((5, 15), f"{person} is {{n}} years old."),
        ((2, 40), f"A {thing} costs {{n}} dollars."),
        ((2, 60), f"{person} {'also has' if in_story else 'has'} {{n}} {other}."),
    ]
    if draft.item is not None:
        outsider = rng.choice([x for x in surface.names if x not in draft.people])
        options.append(((2, 60), f"{outsider} has {{n}} {draft.item} at home."))
    options += [(span, text.format(person=person, thing=thing, n="{n}")) for span, text in surface.distractors]
    (lo, hi), text = rng.choice(options)
    lo, hi = surface.numbers(lo, hi)
    n = rng.choice([v for v in range(lo, hi + 1) if v not in used])
    used.add(n)
    return text.format(n=n)


def _numbers(text: str) -> list[int]:
    return [int(t) for t in re.findall(r"\b\d+\b", text)]


def _with_distractors(rng: random.Random, draft: _Draft, count: int) -> list[_Sentence]:
    """Insert `count` distractors where no "Before that," sentence would lose its anchor."""
    story = list(draft.story)
    used = set(_numbers(" ".join(s.text for s in story) + " " + draft.question))
    for _ in range(count):
        slots = [i for i in range(len(story) + 1) if i == len(story) or not story[i].anchored]
        story.insert(rng.choice(slots), _Sentence(_distractor(rng, draft, used)))
    return story


# --------------------------------------------------------------------------- suite


def _weighted(rng: random.Random, weights: dict) -> object:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def _in_heldin(question: str) -> bool:
    """Which held-in split a question belongs to, from its text alone: train and heldin never share one."""
    return int(hashlib.sha256(question.encode()).hexdigest(), 16) % HELDIN_SHARE == 0


def _draw(rng: random.Random, templates: dict[str, Callable[[random.Random], _Draft]]) -> tuple[str, _Draft, int]:
    """A uniformly chosen template's valid draft (redrawn until the numbers in the text are distinct, each
    at least 2, and every step gives a positive integer), with its distractor count."""
    name = rng.choice(list(templates))
    while True:
        draft = templates[name](rng)
        numbers = _numbers(" ".join(s.text for s in draft.story) + " " + draft.question)
        literals = [o for step in draft.steps for o in (step.left, step.right) if isinstance(o, int)]
        if (
            2 <= len(draft.steps) <= 4
            and min(literals) >= 2
            and len(numbers) == len(set(numbers))
            and _evaluate(draft.steps)
        ):
            return name, draft, _weighted(rng, _surface(rng).distractor_counts)


def generate_suite(split: str, n: int, seed: int = 0) -> list[Task]:
    """`n` tasks of `split`, the same for the same (split, n, seed); a longer list extends a shorter one."""
    if split not in MATHS_SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {MATHS_SPLITS}")
    if split == NEAR:
        return generate_near(n, seed)
    rng = random.Random(f"coalign-suite/{split}/{seed}")
    templates = {"heldout": HELDOUT_TEMPLATES, COMPOSED: COMPOSED_TEMPLATES}.get(split, HELDIN_TEMPLATES)
    return _tasks(split, n, rng, templates)


def generate_near(n: int, seed: int = 0, surface: Surface = NEAR_SURFACE) -> list[Task]:
    """`n` tasks of the near split: held-in templates (`NEAR_TEMPLATES`) told with `surface`; another
    surface than the bundled `NEAR_SURFACE` measures what each knob costs a model before one is changed."""
    return _tasks(NEAR, n, _Teller(f"coalign-suite/{NEAR}/{seed}", surface), NEAR_TEMPLATES)


def _tasks(
    split: str, n: int, rng: random.Random, templates: dict[str, Callable[[random.Random], _Draft]]
) -> list[Task]:
    """`n` distinct tasks drawn from `templates`; train, heldin and composed keep the questions their digest
    gives them."""
    tasks: list[Task] = []
    seen: set[str] = set()
    while len(tasks) < n:
        name, draft, distractors = _draw(rng, templates)
        story = _with_distractors(rng, draft, distractors)
        question = " ".join([*(s.text for s in story), draft.question])
        if question in seen or (split in ("train", "heldin", COMPOSED) and _in_heldin(question) != (split == "heldin")):
            continue
        seen.add(question)
        style = _weighted(rng, STYLE_WEIGHTS)
        tasks.append(
            Task(
                id=f"suite-{split}-{len(tasks):05d}",
                family="maths",
                dataset=f"suite-{split}" if split in ("heldout", NEAR) else "suite-heldin",  # composed: as held-in
                question=question,
                subgoals=tuple(_subgoal(step, style, rng) for step in draft.steps),
                actions=tuple(step.action(i) for i, step in enumerate(draft.steps, start=1)),
                answer=str(_evaluate(draft.steps)[-1]),
                subgoal_styles=(style,) * len(draft.steps),
                meta={
                    "template": name,
                    "steps": len(draft.steps),
                    "distractors": distractors,
                    "out_of_order": draft.out_of_order,
                },
            )
        )
    return tasks


def blank_subgoals(task: Task) -> tuple[str, ...]:
    """The task's subgoals with all content removed (same count), to measure how much the plan matters."""
    return (BLANK_SUBGOAL,) * len(task.subgoals)
