"""Web metrics on hand-written cases: Mind2Web step success, thefuzz's token set ratio, the WebShop reward."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coalign.envs.shop import (
    Goal,
    Product,
    attribute_matches,
    option_matches,
    token_set_ratio,
    type_factor,
    webshop_reward,
)
from coalign.envs.web import Element, GoldStep, step_correct, step_success_rate, task_step_success

PAGE = (
    Element("7", "button", "Search"),
    Element("8", "span", "Search"),
    Element("9", "input", "", (("aria_label", "From"),)),
)


def _gold(op: str, value: str = "") -> GoldStep:
    return GoldStep(PAGE, op, value, frozenset({"7", "8"}))


@pytest.mark.parametrize(
    ("element", "op", "value", "gold", "right"),
    [
        ("7", "CLICK", "", _gold("CLICK"), True),
        ("8", "CLICK", "anything", _gold("CLICK"), True),  # any positive; a CLICK's value is not compared
        ("9", "CLICK", "", _gold("CLICK"), False),  # a negative candidate
        (None, "CLICK", "", _gold("CLICK"), False),  # nothing chosen
        ("7", "TYPE", "", _gold("CLICK"), False),  # the operation differs
        ("7", "TYPE", " brennholt ", _gold("TYPE", "Brennholt"), True),  # value: case and spaces aside
        ("7", "TYPE", "Brenholt", _gold("TYPE", "Brennholt"), False),
        ("7", "SELECT", "2 adults", _gold("SELECT", "2 Adults"), True),
        ("7", "SELECT", "3 adults", _gold("SELECT", "2 adults"), False),
    ],
)
def test_step_success_needs_a_positive_element_the_operation_and_the_value(element, op, value, gold, right) -> None:
    assert step_correct(element, op, value, gold) is right


def test_step_success_rate_is_micro_averaged_over_all_steps_as_lumos_does() -> None:
    tasks = [([True, False], 2), ([True], 1), ([True], 3)]  # the last task stopped after one of its three steps
    assert [task_step_success(flags, steps) for flags, steps in tasks] == [0.5, 1.0, pytest.approx(1 / 3)]
    assert step_success_rate(tasks) == pytest.approx(3 / 6)  # not the per-task mean, 0.61
    assert step_success_rate([]) == 0.0
    assert task_step_success([True, True, True], 2) == 1.0  # extra actions earn nothing
    with pytest.raises(ValueError):
        task_step_success([], 0)


@pytest.mark.parametrize(
    ("a", "b", "score"),
    [
        ("sulfate free", "Sulfate-Free shampoo", 100),  # one side's words within the other's: 100
        ("essential oils", "essential oil", 96),  # WebShop counts this pair as a match
        ("tea tree", "tea bag", 60),
        ("20 count", "40 count", 88),
        ("20 count", "100 count", 82),
        ("", "anything", 0),
        ("navy", "navy", 100),
    ],
)
def test_token_set_ratio_matches_thefuzz(a: str, b: str, score: int) -> None:
    assert token_set_ratio(a, b) == score == token_set_ratio(b, a)


def _product(**changes) -> Product:
    base = dict(
        asin="b0tea00001",
        name="Vorlan Caffeine Free Green Tea Bags",
        query="green tea",
        product_category="Grocery › Beverages › Tea",
        attributes=("caffeine free", "organic"),
        options=(("flavor", ("mint", "lemon")), ("size", ("20 count", "40 count"))),
        price=12.99,
        text="Hand picked.\nNatural ingredients.",
    )
    return Product(**(base | changes))


GOAL = Goal(
    asin="b0tea00001",
    instruction="i need caffeine free organic green tea with flavor: mint, and size: 20 count",
    name="Vorlan Caffeine Free Green Tea Bags",
    query="green tea",
    product_category="Grocery › Beverages › Tea",
    attributes=("caffeine free", "organic", "natural ingredients"),
    options=("mint", "20 count"),
    price_upper=20.0,
)


def test_attributes_match_fuzzily_or_by_the_product_text_and_options_fuzzily() -> None:
    assert attribute_matches(GOAL, _product()) == 3  # two listed, one in the text
    assert attribute_matches(GOAL, _product(attributes=("caffeine-free",), text="")) == 1
    assert attribute_matches(GOAL, _product(attributes=(), name="Organic Tea", text="")) == 1  # the title
    assert option_matches(GOAL, ["Mint", "20 Count"]) == 2
    assert option_matches(GOAL, ["lemon", "20 count pack"]) == 1
    assert option_matches(GOAL, []) == 0


@pytest.mark.parametrize(
    ("changes", "factor"),
    [
        ({}, 1.0),
        ({"query": "tea", "product_category": "Grocery › Snacks", "name": "Quibble Caffeine Free Green Tea"}, 1.0),
        ({"query": "mug", "product_category": "Home › Mugs", "name": "Kestrel Stoneware Mug"}, 0.0),
        ({"query": "mug", "product_category": "Home › Mugs", "name": "Vorlan Stoneware Mug"}, 0.5),  # 1 of 6
        ({"name": "Vorlan Stoneware Mug"}, 1.0),  # the same query makes up for the title
        ({"query": "mug", "name": "Vorlan Stoneware Mug", "product_category": "Grocery › Beverages › Mugs"}, 1.0),
    ],
)
def test_type_factor_follows_webshop(changes: dict, factor: float) -> None:
    assert type_factor(GOAL, _product(**changes)) == factor


def test_type_factor_is_a_tenth_below_a_tenth_of_the_title() -> None:
    long_goal = replace(GOAL, name="Vorlan Caffeine Free Green Tea Bags Box Loose Leaf Blend Pack")  # 1 of 11
    assert type_factor(long_goal, _product(query="mug", name="Vorlan Mug", product_category="Home")) == 0.1


def test_webshop_reward_counts_attributes_options_and_price_over_their_number() -> None:
    product = _product()
    assert webshop_reward(GOAL, product, ["mint", "20 count"], 12.99) == 1.0
    assert webshop_reward(GOAL, product, ["mint", "20 count"], 25.0) == pytest.approx(5 / 6)  # over the price limit
    assert webshop_reward(GOAL, product, ["lemon", "100 count"], 12.99) == pytest.approx(4 / 6)
    # WebShop's fuzzy match takes "40 count" for "20 count" (ratio 88 > 85): kept, for comparable rewards
    assert webshop_reward(GOAL, product, ["lemon", "40 count"], 12.99) == pytest.approx(5 / 6)
    assert webshop_reward(GOAL, product, [], 12.99) == pytest.approx(4 / 6)
    other_kind = _product(query="mug", product_category="Home › Mugs", name="Vorlan Stoneware Mug")
    assert webshop_reward(GOAL, other_kind, ["mint", "20 count"], 12.99) == 0.5  # everything matches but the kind
