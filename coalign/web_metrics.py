"""Web family metrics: Mind2Web's step success rate and WebShop's reward (pure functions).

Mind2Web step success, as Lumos's evaluation scores it: the chosen element is one of the step's
positive candidates, the operation equals the gold one, and for TYPE and SELECT the value equals
the gold value (case and surrounding spaces aside). The rate is micro-averaged over all steps of
all tasks (Lumos: correct steps / steps); Mind2Web's paper also reports the per-task mean.

WebShop reward, following `web_agent_site/engine/goal.py::get_reward` term by term:

    reward = r_type * (attribute matches + option matches + [price <= price_upper])
                    / (goal attributes + goal options + 1)

- an attribute matches when a product attribute is a fuzzy match (token set ratio > 85) or the
  attribute text occurs in the title, bullet points or description, as in WebShop;
- an option matches when a chosen option is a fuzzy match (token set ratio > 85), as in WebShop;
- r_type is WebShop's type factor: 1 when the search query or two category levels match or more
  than 20% of the goal title's words are in the purchased title, else 0.5; 0.1 below 10%; 0 at 0%.

Simplifications, stated: the title share counts every non-stopword word where WebShop counts only
spaCy nouns and proper nouns; option values are compared as they are, without WebShop's
`normalize_color` (which keeps the first colour word of a value); the fuzzy ratio is the Indel
similarity that rapidfuzz (thefuzz's engine) computes, implemented here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coalign.envs.shop import Goal, Product
    from coalign.envs.web import GoldStep

FUZZY_THRESHOLD = 85  # WebShop: token_set_ratio(...) > 85
_NON_WORD = re.compile(r"[^a-z0-9]+")
_TITLE_STOPWORDS = frozenset("a an and the of for with in on to by from or at & - x".split())


# --------------------------------------------------------------------------- Mind2Web


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


# --------------------------------------------------------------------------- WebShop


def _process(text: str) -> str:
    """thefuzz's default processing: lowercase, anything but letters and digits becomes a space."""
    return _NON_WORD.sub(" ", text.lower()).strip()


def _indel_ratio(a: str, b: str) -> float:
    """100 * 2 * LCS(a, b) / (|a| + |b|): rapidfuzz's `fuzz.ratio`."""
    if not a and not b:
        return 100.0
    previous = [0] * (len(b) + 1)
    for ca in a:
        current = [0]
        for j, cb in enumerate(b, start=1):
            current.append(previous[j - 1] + 1 if ca == cb else max(previous[j], current[j - 1]))
        previous = current
    return 200.0 * previous[-1] / (len(a) + len(b))


def token_set_ratio(a: str, b: str) -> int:
    """thefuzz's `token_set_ratio`: the shared words against each side's words, best of three ratios, 0..100."""
    ta, tb = set(_process(a).split()), set(_process(b).split())
    if not ta or not tb:
        return 0
    shared = " ".join(sorted(ta & tb))
    left = f"{shared} {' '.join(sorted(ta - tb))}".strip()
    right = f"{shared} {' '.join(sorted(tb - ta))}".strip()
    return round(max(_indel_ratio(shared, left), _indel_ratio(shared, right), _indel_ratio(left, right)))


def fuzzy_match(a: str, b: str) -> bool:
    return token_set_ratio(a, b) > FUZZY_THRESHOLD


def attribute_matches(goal: Goal, product: Product) -> int:
    """Goal attributes the product has: a fuzzy match among its attributes, else the text in its title or text."""
    text = f"{product.name}\n{product.text}".lower()
    return sum(
        any(fuzzy_match(mine, wanted) for mine in product.attributes) or wanted.lower() in text
        for wanted in goal.attributes
    )


def option_matches(goal: Goal, chosen: Iterable[str]) -> int:
    """Goal options among the chosen ones (fuzzy match)."""
    chosen = list(chosen)
    return sum(any(fuzzy_match(option, wanted) for option in chosen) for wanted in goal.options)


def _title_words(title: str) -> set[str]:
    return {w for w in _process(title).split() if w not in _TITLE_STOPWORDS}


def type_factor(goal: Goal, product: Product) -> float:
    """WebShop's r_type: is the purchase the wanted kind of product (query, category levels, title words)?"""
    query_match = product.query == goal.query
    categories = {c.strip() for c in product.product_category.split("›")}
    category_match = len(categories & {c.strip() for c in goal.product_category.split("›")}) >= 2
    wanted = _title_words(goal.name)
    title_score = len(wanted & _title_words(product.name)) / len(wanted) if wanted else 0.2
    if title_score == 0.0:
        return 0.0
    if title_score < 0.1:
        return 0.1
    return 1.0 if query_match or category_match or title_score > 0.2 else 0.5


def webshop_reward(goal: Goal, product: Product, chosen: Sequence[str], price: float) -> float:
    """The reward for buying `product` with the `chosen` option values at `price`, in [0, 1]."""
    matched = attribute_matches(goal, product) + option_matches(goal, chosen) + (price <= goal.price_upper)
    return type_factor(goal, product) * matched / (len(goal.attributes) + len(goal.options) + 1)
