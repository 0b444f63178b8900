"""Lumos's web actions on pages (parsing, the element ranker, teacher-forced episodes) and the shop's tools."""

from __future__ import annotations

import re

import pytest

from coalign.envs.shop import BUY, Catalogue, Goal, Product, ShopEpisode
from coalign.envs.web import (
    Element,
    GoldStep,
    SiteEpisode,
    WebCall,
    format_web_action,
    parse_web_action,
    rank,
    resolve,
)
from coalign.formats.lumos import FormatError
from coalign.tasks import Task

# --------------------------------------------------------------------------- web actions


@pytest.mark.parametrize(
    ("text", "call"),
    [
        (
            "R1 = CLICK(Env, QUERY: Choose the option Atlanta, GA (ATL))",
            WebCall("R1", "CLICK", "Env", "Choose the option Atlanta, GA (ATL)", ""),
        ),
        (
            "R3 = TYPE(R2, QUERY: Type Atlanta as the departure location, TEXT: Atlanta)",
            WebCall("R3", "TYPE", "R2", "Type Atlanta as the departure location", "Atlanta"),
        ),
        (  # the value follows the last ", TEXT:"
            "R7 = SELECT(R6, QUERY: Set the label, TEXT: as shown, TEXT: 6 nights)",
            WebCall("R7", "SELECT", "R6", "Set the label, TEXT: as shown", "6 nights"),
        ),
    ],
)
def test_web_actions_parse_and_format_back(text: str, call: WebCall) -> None:
    assert parse_web_action(text) == call
    assert format_web_action(call.output, call.op, call.page, call.query, call.text) == text


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("R1 = HOVER(Env, QUERY: x)", "unknown web operation"),
        ("R1 = TYPE(Env, QUERY: the From box)", "TYPE needs a value"),
        ("R1 = CLICK(page 2, QUERY: x)", "takes (Env or R#, QUERY: ...)"),
        ("R1 = CLICK(Env, x)", "takes (Env or R#, QUERY: ...)"),
        ("R1, R2 = CLICK(Env, QUERY: x)", "one output"),
        ("R1 = CLICK(Env, QUERY:  )", "empty QUERY"),
        ("CLICK(Env, QUERY: x)", "not an action"),
    ],
)
def test_malformed_web_actions_raise_format_error(text: str, problem: str) -> None:
    with pytest.raises(FormatError, match=re.escape(problem)):
        parse_web_action(text)


PAGE = (
    Element("1", "link", "Deals"),
    Element("2", "tab", "Flights"),
    Element("3", "span", "Search"),
    Element("4", "button", "Search flights"),
    Element("5", "combobox", "", (("aria_label", "From"), ("class", "big"))),
    Element("6", "link", "Search"),
    Element("7", "button", "Search"),
)


def test_the_ranker_prefers_the_element_whose_words_the_query_covers() -> None:
    assert resolve(PAGE, "Click the button Search flights").id == "4"  # all of its words, and the most
    assert [e.id for e in rank(PAGE, "Click the button Search")] == ["7", "3", "6", "4"]  # the tag breaks the tie
    assert resolve(PAGE, "Type Boston in the From box").id == "5"  # named by its aria label
    assert resolve(PAGE, "Type Boston in the big box") is None  # other attributes do not name it
    assert resolve(PAGE, "nothing here") is None


STEPS = (
    GoldStep(PAGE, "CLICK", "", frozenset({"4"})),
    GoldStep(
        (Element("11", "combobox", "From"), Element("12", "combobox", "To")), "TYPE", "Brennholt", frozenset({"11"})
    ),
    GoldStep(
        (Element("21", "select", "Passengers"), Element("22", "button", "Go")), "SELECT", "2 adults", frozenset({"21"})
    ),
)
GOLD = (
    "R1 = CLICK(Env, QUERY: Click the button Search flights)",
    "R2 = TYPE(R1, QUERY: Type Brennholt in the combobox From, TEXT: Brennholt)",
    "R3 = SELECT(R2, QUERY: Select 2 adults in the select Passengers, TEXT: 2 adults)",
)


def test_gold_actions_score_one_turn_by_turn_and_report_the_element_acted_on() -> None:
    episode = SiteEpisode(STEPS)
    turns = [episode.act(action) for action in GOLD]
    assert [t.result for t in turns] == ["[button] Search flights", "[combobox] From", "[select] Passengers"]
    assert [t.done for t in turns] == [False, False, True] and episode.score() == 1.0
    assert SiteEpisode(STEPS).act("; ".join(GOLD)).done  # a turn may hold several actions, one step each


@pytest.mark.parametrize(
    ("actions", "flags", "error"),
    [
        ((GOLD[0], GOLD[1].replace("TEXT: Brennholt", "TEXT: Dunmere"), GOLD[2]), [True, False, True], None),
        ((GOLD[0], GOLD[1].replace("combobox From", "combobox To"), GOLD[2]), [True, False, True], None),
        ((GOLD[0], GOLD[1].replace("TYPE(", "SELECT("), GOLD[2]), [True, False, True], None),
        ((GOLD[0], GOLD[1], GOLD[2].replace("(R2,", "(R1,")), [True, True, False], "no element"),  # a stale page
        ((GOLD[0], GOLD[1].replace("(R1,", "(Env,"), GOLD[2]), [True, False, True], None),  # the From box of page 1
        ((GOLD[0], GOLD[1], GOLD[2].replace("(R2,", "(R9,")), [True, True, False], "R9 names no page yet"),
        ((GOLD[0], "R2 = TYPE(R1, the From box)", GOLD[2]), [True, False, True], "takes (Env or R#"),
        ((GOLD[0], GOLD[1], "R3 = SELECT(R2, QUERY: zzz, TEXT: 2 adults)"), [True, True, False], "no element"),
    ],
)
def test_a_wrong_step_fails_alone_and_the_episode_moves_on(actions, flags, error) -> None:
    episode = SiteEpisode(STEPS)
    records = [record for action in actions for record in episode.act(action).records]
    assert episode.flags == flags and episode.score() == pytest.approx(sum(flags) / 3)
    errors = [r.error for r in records if r.error]
    assert errors == [] if error is None else len(errors) == 1 and error in errors[0]


def test_steps_past_the_last_and_empty_turns_are_refused_without_changing_the_score() -> None:
    episode = SiteEpisode(STEPS[:1])
    assert episode.act(GOLD[0]).done
    extra = episode.act("R2 = CLICK(R1, QUERY: Deals)").records[0]
    assert "no step left" in extra.error and episode.score() == 1.0
    assert SiteEpisode(STEPS).act("  ").records[0].error == "empty action sequence"
    assert SiteEpisode(STEPS).score() == 0.0  # nothing done yet
    with pytest.raises(ValueError):
        SiteEpisode([])


def test_pages_and_gold_steps_round_trip_through_json() -> None:
    assert all(GoldStep.from_json(step.to_json()) == step for step in STEPS)
    assert Element.from_json(PAGE[4].to_json()) == PAGE[4]


# --------------------------------------------------------------------------- the shop


def _tea(asin: str, name: str, attributes: tuple[str, ...], flavors: tuple[str, ...], price: float) -> Product:
    options = (("flavor", flavors), ("size", ("20 count", "100 count")))
    return Product(asin, name, "green tea", "Grocery › Beverages › Tea", attributes, options, price, "")


CATALOGUE = Catalogue(
    [
        _tea("b0aaaaaaa1", "Vorlan Organic Green Tea", ("organic",), ("lemon", "ginger"), 9.5),
        _tea("b0aaaaaaa2", "Quibble Caffeine Free Green Tea", ("caffeine free",), ("mint", "lemon"), 12.0),
        Product("b0mug00001", "Kestrel Coffee Mug", "coffee mug", "Home › Mugs", ("dishwasher safe",), (), 15.0),
    ]
)
ASK = "caffeine free green tea with flavor: mint, and size: 20 count"
GOAL = Goal(
    "b0aaaaaaa2", ASK, "Quibble Caffeine Free Green Tea", "green tea", "Grocery › Beverages › Tea",
    ("caffeine free",), ("mint", "20 count"), 20.0,
)  # fmt: skip
PLAN = [
    f"R1 = Search({ASK})",
    "R2 = Click(b0aaaaaaa1)",
    f"R3 = FeatureRetrieve(R2, Query: {ASK})",
    "R4 = Click(< prev)",
    "R5 = Click(b0aaaaaaa2)",
    f"R6 = FeatureRetrieve(R5, Query: {ASK})",
    f"R7 = Pick(Item_names: R1, Item_features: [R3, R6], Query: {ASK})",
    "R8 = Click(< prev)",
    "R9 = Click(R7)",
    "R10 = Click(mint)",
    "R11 = Click(20 count)",
    "R12 = Click(buy now)",
]


def test_search_ranks_with_bm25_and_finds_only_products_sharing_a_word() -> None:
    assert [p.asin for p in CATALOGUE.search("caffeine free tea")] == ["b0aaaaaaa2", "b0aaaaaaa1"]
    assert [p.asin for p in CATALOGUE.search("Coffee MUG")] == ["b0mug00001"]
    assert CATALOGUE.search("bicycle") == [] and CATALOGUE.search("  ") == []


def test_lumos_shop_plan_buys_with_reward_one_and_reports_each_value() -> None:
    episode = ShopEpisode(CATALOGUE, GOAL)
    values = [episode.act(action).records[0] for action in PLAN]
    assert [v.error for v in values] == [None] * len(PLAN)
    texts = [v.value for v in values]
    assert texts[0] == "b0aaaaaaa2 - Quibble Caffeine Free Green Tea ** b0aaaaaaa1 - Vorlan Organic Green Tea"
    assert texts[1] == "back to search, < prev, buy now, lemon, ginger, 20 count, 100 count"
    assert texts[2] == "20 count, 100 count, lemon"  # the three closest to the query, best first
    assert texts[5] == "20 count, mint, 100 count"
    assert texts[6] == "b0aaaaaaa2" and texts[-1] == "Done."
    assert episode.done and episode.score() == 1.0


def test_shop_scores_what_was_bought_and_zero_before_buying() -> None:
    episode = ShopEpisode(CATALOGUE, GOAL)
    episode.act([PLAN[0], PLAN[1]])
    assert episode.score() == 0.0
    turn = episode.act(["R3 = Click(lemon)", "R4 = Click(100 count)", f"R5 = Click({BUY})"])
    assert turn.done and turn.result == "Done."
    # attributes 0/1 (organic tea), options 0/2, price 1 -> 1/4; same query, so the type factor is 1
    assert episode.score() == pytest.approx(1 / 4)


@pytest.mark.parametrize(
    ("actions", "error"),
    [
        (["R1 = Click(b0aaaaaaa1)"], "cannot click 'b0aaaaaaa1' on the search page"),
        ([PLAN[0], "R2 = Click(b0mug00001)"], "cannot click 'b0mug00001' on the results page"),
        ([PLAN[0], "R2 = FeatureRetrieve(R1, Query: mint)"], "R1 is not a product page"),
        ([PLAN[0], "R2 = Click(R5)"], "R5 not set by an earlier action"),
        ([PLAN[0], "R2 = Pick(R1, mint)"], "Pick takes"),
        ([PLAN[0], f"R2 = Pick(Item_names: R1, Item_features: [R{'1' * 12}], Query: tea)"], "no action sets"),
        (["R1 = Search(" + "green tea " * 10_000 + ")"], "Search's argument is too long (99999 characters, limit"),
        ([PLAN[0], "R2 = Checkout(now)"], "unknown shop action"),
        (["R1 = Search()"], "Search needs a query"),
        ([PLAN[0], PLAN[1], "R3 = Click(buy now)", "R4 = Click(< prev)"], "the episode is over"),
    ],
)
def test_shop_refuses_what_the_page_does_not_offer_and_keeps_going(actions: list[str], error: str) -> None:
    episode = ShopEpisode(CATALOGUE, GOAL)
    records = [r for action in actions for r in episode.act(action).records]
    assert error in records[-1].error and all(r.error is None for r in records[:-1])


def test_shop_reads_lumos_spelling_quirks() -> None:
    episode = ShopEpisode(CATALOGUE, GOAL)
    first = episode.act(f"R1 = Search({ASK}).").records[0]  # Lumos's examplars end some actions with "."
    assert first.error is None and first.value.startswith("b0aaaaaaa2")
    assert episode.act("R2 = Click(B0AAAAAAA2)").records[0].error is None  # WebShop lowercases what it shows
    assert episode.act("R3 = FeatureRetrieve(R2, QUERY: mint)").records[0].value == "mint, lemon, 20 count"


# --------------------------------------------------------------------------- tasks that group actions


def test_task_groups_actions_per_subgoal_and_names_its_tool_list() -> None:
    plain = Task("t", "web", "d", "q", ("a", "b"), ("R1 = x", "R2 = y"), "")
    assert plain.action_groups() == [("R1 = x",), ("R2 = y",)] and plain.tools == "web"
    meta = {"subgoal_actions": [2, 1], "tools": "shop"}
    grouped = Task("t", "web", "d", "q", ("a", "b"), ("R1 = x", "R2 = y", "R3 = z"), "", meta=meta)
    assert grouped.action_groups() == [("R1 = x", "R2 = y"), ("R3 = z",)] and grouped.tools == "shop"
    for counts in ([1, 1], [3, 0], [3]):
        with pytest.raises(ValueError, match="cannot split 3 actions over 2 subgoals"):
            Task(
                "t", "web", "d", "q", ("a", "b"), grouped.actions, "", meta={"subgoal_actions": counts}
            ).action_groups()


def test_web_episodes_step_one_action_and_reset_restarts_the_task() -> None:
    site = SiteEpisode(STEPS, goal="Find a flight")
    first = site.step(GOLD[0])
    assert (first.observation, first.reward, first.done) == ("[button] Search flights", 1 / 3, False)
    assert first.info == {"value": "[button] Search flights", "error": None}
    wrong = site.step("R2 = CLICK(R9, QUERY: anything)")
    assert wrong.observation == wrong.info["error"] == "R9 names no page yet" and wrong.info["value"] is None
    assert site.reset() == "Find a flight" and site.flags == [] and site.score() == 0.0
    shop = ShopEpisode(CATALOGUE, GOAL)
    for action in PLAN:
        shop.step(action)
    assert shop.done and shop.score() == 1.0
    assert shop.reset() == GOAL.instruction and not shop.done and shop.score() == 0.0


def test_each_episode_kind_names_and_scores_its_set() -> None:
    sites = [SiteEpisode(STEPS), SiteEpisode(STEPS)]
    sites[0].act("; ".join(GOLD))
    sites[1].act(GOLD[0])
    assert (SiteEpisode.metric, SiteEpisode.set_score(sites)) == ("step_success_rate", 4 / 6)
    shops = [ShopEpisode(CATALOGUE, GOAL), ShopEpisode(CATALOGUE, GOAL)]
    shops[0].act("; ".join(PLAN))
    assert (ShopEpisode.metric, ShopEpisode.set_score(shops)) == ("reward", 0.5)
