"""A WebShop-like shop and Lumos's WebShop actions (Search, Click, FeatureRetrieve, Pick), run offline.

Action syntax, as in Lumos's WebShop evaluation (allenai/lumos `eval/webshop/examplars.py`):

    R1 = Search(Find me organic green tea with flavor: mint, and price lower than 30.00 dollars)
    R2 = Click(b0k2m4x8qa)
    R3 = FeatureRetrieve(R2, Query: Find me organic green tea ...)
    R4 = Click(< prev)
    R5 = Click(b0p7d1c3zs)
    R6 = FeatureRetrieve(R5, Query: Find me organic green tea ...)
    R7 = Pick(Item_names: R1, Item_features: [R3, R6], Query: Find me organic green tea ...)
    R8 = Click(< prev)
    R9 = Click(R7)
    R10 = Click(mint)
    R11 = Click(buy now)

Search reports the first two products found ("asin - name ** asin - name"); Click on a product opens
its page, on an option value chooses it, on `buy now` buys and ends the episode with the WebShop
reward (`webshop_reward`, below); FeatureRetrieve keeps the three option values of an opened
product closest to the query; Pick chooses among Search's products by their names and features.
Lumos ranks with a cross-encoder; here the search is BM25 and the rankers count shared words.
Where we differ from WebShop: one results page (its first ten products), no description, feature
or review sub-pages, and Search works from any page (Lumos replays each episode from the start).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import mean

from rank_bm25 import BM25Plus

from coalign.envs.base import Step
from coalign.envs.episode import Turn, play_turn
from coalign.envs.web import words
from coalign.formats.lumos import R_VARIABLE, FormatError, parse_action, split_actions
from coalign.formats.lumos_iterative import result_feedback

SEARCH_RETURN = 50  # products a search finds (WebShop's SEARCH_RETURN_N)
SHOWN = 10  # products on the results page (WebShop's PRODUCT_WINDOW)
TOLD = 2  # products Search reports (Lumos: the first two on the page)
FEATURES_TOLD = 3  # option values FeatureRetrieve keeps (Lumos)
BUY, PREV, BACK = "buy now", "< prev", "back to search"
TOOLS = ("Search", "Click", "FeatureRetrieve", "Pick")
PRICE_STEPS = tuple(10.0 * i for i in range(1, 100))  # WebShop's PRICE_RANGE
NO_PRICE_LIMIT = 1_000_000.0  # WebShop's price_upper when no limit is stated
MAX_ARGUMENT_CHARS = 2_000  # model text is hostile input: a 100k-character Search took 1-2 s of BM25 (qa's limit)


@dataclass(frozen=True)
class Product:
    """A product as WebShop's engine holds it: `options` maps each option name to its values, in order."""

    asin: str
    name: str
    query: str  # the search query the product was scraped for (WebShop's type match reads it)
    product_category: str  # "Grocery › Beverages › Tea"
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: float
    text: str = ""  # bullet points and description, where WebShop also looks for goal attributes

    def option_values(self) -> list[str]:
        return [value for _, values in self.options for value in values]

    def to_json(self) -> dict:
        row = {k: getattr(self, k) for k in ("asin", "name", "query", "product_category", "price", "text")}
        return {**row, "attributes": list(self.attributes), "options": {k: list(v) for k, v in self.options}}


@dataclass(frozen=True)
class Goal:
    """What a shopper wants (WebShop's goal): attributes, option values and a price limit, and the product it
    was written for (name, query and category feed the type match)."""

    asin: str
    instruction: str
    name: str
    query: str
    product_category: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]
    price_upper: float

    def to_json(self) -> dict:
        row = {k: getattr(self, k) for k in ("asin", "instruction", "name", "query", "product_category")}
        return {
            **row,
            "attributes": list(self.attributes),
            "options": list(self.options),
            "price_upper": self.price_upper,
        }

    @classmethod
    def from_json(cls, row: Mapping) -> Goal:
        fields = ("asin", "instruction", "name", "query", "product_category")
        return cls(*(row[k] for k in fields), tuple(row["attributes"]), tuple(row["options"]), row["price_upper"])


def price_upper(rng: random.Random, price: float) -> float:
    """WebShop's goal price limit: the larger of two of the four next multiples of ten above the price."""
    above = [p for p in PRICE_STEPS if p > price][:4]
    return max(rng.sample(above, 2)) if len(above) >= 2 else NO_PRICE_LIMIT


class Catalogue:
    """Products and a BM25 search over their names, texts and option values."""

    def __init__(self, products: Sequence[Product]) -> None:
        if not products:
            raise ValueError("a catalogue needs at least one product")
        self.products = list(products)
        self.by_asin = {p.asin.lower(): p for p in self.products}
        if len(self.by_asin) != len(self.products):
            raise ValueError("two products share an asin")
        self.terms = [words(f"{p.name} {p.text} {' '.join(p.option_values())}") or [""] for p in self.products]
        self.index = BM25Plus(self.terms)

    def search(self, query: str) -> list[Product]:
        """Products sharing a word with the query, best BM25 score first (ties in catalogue order)."""
        said = words(query)
        if not said:
            return []
        scores = self.index.get_scores(said)
        wanted = set(said)
        found = [i for i in range(len(self.products)) if wanted & set(self.terms[i])]
        found.sort(key=lambda i: (-scores[i], i))
        return [self.products[i] for i in found[:SEARCH_RETURN]]


class ShopError(ValueError):
    """An action the shop cannot do where it is (clicking what the page does not show)."""


@dataclass
class Session:
    """Where a shopper is: the search page, a results page, a product page (with options chosen), or done."""

    catalogue: Catalogue
    page: str = "search"
    results: list[Product] = field(default_factory=list)
    product: Product | None = None
    chosen: dict[str, str] = field(default_factory=dict)
    bought: Product | None = None

    def clickables(self) -> list[str]:
        if self.page == "results":
            return [BACK, *(p.asin.lower() for p in self.results[:SHOWN])]
        if self.page == "item":
            return [BACK, PREV, BUY, *self.product.option_values()]
        return []

    def search(self, query: str) -> list[Product]:
        self.results, self.page, self.product = self.catalogue.search(query), "results", None
        return self.results

    def click(self, target: str) -> None:
        target = target.strip().lower()
        if target not in self.clickables():
            shown = ", ".join(self.clickables()) or "nothing (search first)"
            raise ShopError(f"cannot click {target!r} on the {self.page} page; it shows {shown}")
        if target == BACK:
            self.page, self.product = "search", None
        elif target == PREV:
            self.page, self.product = "results", None
        elif target == BUY:
            self.page, self.bought = "done", self.product
        elif self.page == "results":
            self.page, self.product, self.chosen = "item", self.catalogue.by_asin[target], {}
        else:
            name = next(n for n, values in self.product.options if target in values)
            self.chosen[name] = target


@dataclass(frozen=True)
class ShopValue:
    """What an R# holds: its text, and for Search and a product Click what later tools read."""

    text: str
    items: tuple[Product, ...] = ()
    product: Product | None = None


def _overlap(query: str, text: str) -> int:
    return len(set(words(query)) & set(words(text)))


_FEATURES = re.compile(r"\s*(?P<page>R\d+)\s*,\s*(?:QUERY|Query):\s*(?P<query>.*\S)", re.S)
_PICK = re.compile(
    r"\s*Item_names:\s*(?P<items>R\d+)\s*,\s*Item_features:\s*\[(?P<features>[^\]]*)\]\s*,"
    r"\s*(?:QUERY|Query):\s*(?P<query>.*\S)",
    re.S,
)


class ShopEpisode:
    """One shopping goal run action by action; `score()` is the WebShop reward of the purchase (0 before one).

    Model text is the input, so nothing raises: a malformed action, an unset R# or a click the page
    does not offer fails that action (recorded) and the shopper stays where they were.
    """

    metric = "reward"

    def __init__(self, catalogue: Catalogue, goal: Goal) -> None:
        self.catalogue = catalogue
        self.goal = goal
        self.reset()

    def reset(self, seed: int | None = None) -> str:
        """Restart the goal on the search page (a shop episode is one goal: `seed` is not used); returns the
        shopper's instruction."""
        self.session = Session(self.catalogue)
        self.values: dict[str, ShopValue] = {}
        self.history: list[str] = []  # every action stepped since the reset, to replay this state
        return self.goal.instruction

    @property
    def done(self) -> bool:
        return self.session.page == "done"

    def step(self, action: str) -> Step:
        """One shop action: its value is what the page or tool gives back, or it fails with an error."""
        self.history.append(action)
        value, error = self._step(action)
        return Step(error or value, self.score(), self.done, {"value": value, "error": error})

    def act(self, actions: str | Sequence[str]) -> Turn:
        """A grounder turn: its actions (text split at `;`, a trailing "." dropped, or a list), one step each."""
        return play_turn(
            self, split_actions(actions.strip().rstrip(".")) if isinstance(actions, str) else list(actions)
        )

    def score(self) -> float:
        bought = self.session.bought
        if bought is None:
            return 0.0
        return webshop_reward(self.goal, bought, list(self.session.chosen.values()), bought.price)

    @staticmethod
    def set_score(episodes: Sequence[ShopEpisode]) -> float:
        """The mean WebShop reward of a set."""
        return mean(e.score() for e in episodes)

    def feedback(self, index: int, subgoal: str, turn: Turn) -> str:
        """What the planner hears after subgoal `index`: the turn's last result (Lumos's WebShop feedback)."""
        return result_feedback(index, turn.result)

    def judge_turn(self, gold: Sequence[str], actions: str) -> tuple[bool, str]:
        """Whether `actions`, run here, do what the gold turn does (and why not): no action fails and the turn
        ends where the gold turn does, with the same last result (the search's items, the picked item, the
        page clicked to), the same done state and the same reward. A different route to the same result
        counts as right; an equally good item other than the gold one does not (a stricter rule than the
        reward, stated)."""
        reference = ShopEpisode(self.catalogue, self.goal)
        for action in self.history:
            reference.step(action)
        wanted = reference.act(list(gold))
        got = self.act(actions)
        errors = [r.error for r in got.records if r.error]
        if errors:
            return False, f"action failed: {errors[0]}"[:300]
        if (got.result, self.done, self.score()) != (wanted.result, reference.done, reference.score()):
            return False, "a different result from the gold turn's"
        return True, "same result as the gold turn"

    def _step(self, text: str) -> tuple[str | None, str | None]:
        """(value, error) of one action."""
        if self.done:
            return None, "the episode is over (the item was bought)"
        try:
            action = parse_action(text.strip().rstrip(".").rstrip())  # Lumos's examplars end some with "."
            if len(action.outputs) != 1:
                raise FormatError(f"a shop action names one output, got {', '.join(action.outputs)}")
            if action.tool not in TOOLS:
                raise FormatError(f"unknown shop action {action.tool!r}; available: {', '.join(TOOLS)}")
            if len(action.argument) > MAX_ARGUMENT_CHARS:
                raise FormatError(
                    f"{action.tool}'s argument is too long"
                    f" ({len(action.argument)} characters, limit {MAX_ARGUMENT_CHARS})"
                )
            tool = {"Search": self._search, "Click": self._click, "FeatureRetrieve": self._features, "Pick": self._pick}
            value = tool[action.tool](action.argument.strip())
        except (FormatError, ShopError) as exc:
            return None, str(exc)
        self.values[action.outputs[0]] = value
        return value.text, None

    def _value(self, name: str) -> ShopValue:
        if name not in self.values:
            raise ShopError(f"{name} not set by an earlier action")
        return self.values[name]

    def _search(self, query: str) -> ShopValue:
        if not query:
            raise FormatError("Search needs a query")
        told = tuple(self.session.search(query)[:TOLD])
        return ShopValue(" ** ".join(f"{p.asin} - {p.name}" for p in told) or "No results.", items=told)

    def _click(self, target: str) -> ShopValue:
        if re.fullmatch(r"R\d+", target):
            target = self._value(target).text
        self.session.click(target)
        if self.done:
            return ShopValue("Done.")
        return ShopValue(", ".join(self.session.clickables()), product=self.session.product)

    def _features(self, argument: str) -> ShopValue:
        match = _FEATURES.fullmatch(argument)
        if not match:
            raise FormatError("FeatureRetrieve takes (R#, Query: ...)")
        product = self._value(match["page"]).product
        if product is None:
            raise ShopError(f"{match['page']} is not a product page")
        features = product.option_values()
        ranked = sorted(range(len(features)), key=lambda i: (-_overlap(match["query"], features[i]), i))
        return ShopValue(", ".join(features[i] for i in ranked[:FEATURES_TOLD]))

    def _pick(self, argument: str) -> ShopValue:
        match = _PICK.fullmatch(argument)
        if not match:
            raise FormatError("Pick takes (Item_names: R#, Item_features: [R#, ...], Query: ...)")
        items = self._value(match["items"]).items
        if not items:
            raise ShopError(f"{match['items']} holds no products")
        names = re.findall(r"\bR[0-9]+\b", match["features"])
        if not all(re.fullmatch(R_VARIABLE, name) for name in names):  # no action names it; int() would refuse it
            raise FormatError("Pick's Item_features name an R# no action sets")
        names.sort(key=lambda r: int(r[1:]))
        features = [self._value(name).text for name in names[: len(items)]]
        features += [""] * (len(items) - len(features))
        scores = [_overlap(match["query"], f"{item.name} {told}") for item, told in zip(items, features)]
        return ShopValue(items[max(range(len(items)), key=lambda i: (scores[i], -i))].asin)


# --------------------------------------------------------------------------- WebShop's reward
# WebShop reward, following `web_agent_site/engine/goal.py::get_reward` term by term:
#
#     reward = r_type * (attribute matches + option matches + [price <= price_upper])
#                     / (goal attributes + goal options + 1)
#
# - an attribute matches when a product attribute is a fuzzy match (token set ratio > 85) or the
#   attribute text occurs in the title, bullet points or description, as in WebShop;
# - an option matches when a chosen option is a fuzzy match (token set ratio > 85), as in WebShop;
# - r_type is WebShop's type factor: 1 when the search query or two category levels match or more
#   than 20% of the goal title's words are in the purchased title, else 0.5; 0.1 below 10%; 0 at 0%.
#
# Simplifications, stated: the title share counts every non-stopword word where WebShop counts only
# spaCy nouns and proper nouns; option values are compared as they are, without WebShop's
# `normalize_color` (which keeps the first colour word of a value); the fuzzy ratio is the Indel
# similarity that rapidfuzz (thefuzz's engine) computes, implemented here.

FUZZY_THRESHOLD = 85  # WebShop: token_set_ratio(...) > 85
_NON_WORD = re.compile(r"[^a-z0-9]+")
_TITLE_STOPWORDS = frozenset("a an and the of for with in on to by from or at & - x".split())


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
