"""The bundled web suite: deterministic disjoint splits, subgoal styles, and gold plans that score 1."""

from __future__ import annotations

import re
from collections import Counter
from functools import cache

from coalign.envs.shop import Goal, ShopEpisode
from coalign.envs.web import GoldStep, SiteEpisode, parse_web_action, resolve, step_success_rate
from coalign.formats.lumos import TOOL_PREAMBLES
from coalign.tasks import Task
from coalign.tasks.maths_suite import SPLITS, STYLES
from coalign.tasks.shop_world import KINDS, PER_KIND, build_catalogue, bundled_catalogue
from coalign.tasks.web_sites import TEMPLATES
from coalign.tasks.web_suite import VAGUE_SUBGOALS, generate_web_suite

GOLD_CHECKED = 300  # tasks per split whose gold actions are executed


@cache
def _suite(split: str, n: int = GOLD_CHECKED) -> tuple[Task, ...]:
    return tuple(generate_web_suite(split, n))


def _episode(task: Task) -> SiteEpisode | ShopEpisode:
    if task.tools == "shop":
        return ShopEpisode(bundled_catalogue(), Goal.from_json(task.meta["goal"]))
    return SiteEpisode([GoldStep.from_json(step) for step in task.meta["gold_steps"]])


def test_same_split_size_and_seed_give_identical_tasks_and_a_longer_list_extends_a_shorter() -> None:
    for split in SPLITS:
        first = generate_web_suite(split, 40, seed=3)
        assert [t.to_json() for t in first] == [t.to_json() for t in generate_web_suite(split, 40, seed=3)]
        assert [t.question for t in generate_web_suite(split, 40, seed=4)] != [t.question for t in first]
        assert list(_suite(split)[:100]) == generate_web_suite(split, 100)


def test_train_and_heldin_share_no_task_and_every_site_template_is_used() -> None:
    train = {t.question for t in generate_web_suite("train", 1500)}
    heldin = {t.question for t in _suite("heldin")}
    assert len(train) == 1500 and len(heldin) == GOLD_CHECKED and not train & heldin
    for split in ("train", "heldin"):
        assert {t.meta["template"] for t in _suite(split)} == set(TEMPLATES)
    assert {t.meta["template"] for t in _suite("heldout")} == {"shop"}


def test_ids_family_datasets_and_tool_lists_follow_the_split() -> None:
    for split in SPLITS:
        tasks = _suite(split)
        assert [t.id for t in tasks] == [f"web-{split}-{i:05d}" for i in range(len(tasks))]
        assert {t.family for t in tasks} == {"web"}
        assert {t.dataset for t in tasks} == {"web-suite-heldout" if split == "heldout" else "web-suite-heldin"}
        assert {t.tools for t in tasks} == {"shop" if split == "heldout" else "web"}
        assert all(t.tools in TOOL_PREAMBLES for t in tasks)


def test_gold_actions_score_one_on_every_task() -> None:
    """The Must-show check: run turn by turn in the bundled environments, every gold plan reaches step success
    1 on the Mind2Web-like tasks and WebShop reward 1 on the shopping goals, with no action refused."""
    for split in SPLITS:
        outcomes = []
        for task in _suite(split):
            episode = _episode(task)
            for group in task.action_groups():
                assert not any(r.error for r in episode.act(list(group)).records), task.id
            assert episode.done and episode.score() == 1.0, (task.id, episode.score())
            outcomes.append((getattr(episode, "flags", [True]), len(task.action_groups())))
        if split != "heldout":
            assert step_success_rate(outcomes) == 1.0


def test_one_web_action_per_step_each_on_the_page_before() -> None:
    for task in _suite("train")[:100]:
        steps = [GoldStep.from_json(s) for s in task.meta["gold_steps"]]
        assert len(task.subgoals) == len(task.actions) == len(steps) and "subgoal_actions" not in task.meta
        for k, (action, step) in enumerate(zip(task.actions, steps), start=1):
            call = parse_web_action(action)
            assert (call.output, call.page) == (f"R{k}", "Env" if k == 1 else f"R{k - 1}")
            assert (call.op, call.text) == (step.op, step.value)
            assert resolve(step.page, call.query).id in step.positives
            assert len({e.id for e in step.page}) == len(step.page)  # backend ids are unique on a page


def test_a_button_and_the_text_span_inside_it_are_both_right() -> None:
    """As Mind2Web often marks both: choosing the span counts as choosing its button."""
    doubled = 0
    for task in _suite("train"):
        for step in (GoldStep.from_json(s) for s in task.meta["gold_steps"]):
            right = [e for e in step.page if e.id in step.positives]
            if len(right) == 2:
                doubled += 1
                assert [e.tag for e in right] == ["button", "span"] and right[0].text == right[1].text
                assert resolve(step.page, f"Click the span {right[1].text}").id in step.positives
            else:
                assert len(right) == 1
    assert doubled > 100


def test_wrong_values_and_elements_lower_the_step_success() -> None:
    """The environment is not a rubber stamp: a changed value or a query for another element fails its step."""
    task = next(t for t in _suite("train") if any("TEXT:" in a for a in t.actions))
    at = next(i for i, a in enumerate(task.actions) if "TEXT:" in a)
    episode = _episode(task)
    for i, action in enumerate(task.actions):
        episode.act(re.sub(r"TEXT: .*\)$", "TEXT: something else)", action) if i == at else action)
    assert episode.score() == (len(task.actions) - 1) / len(task.actions)
    episode = _episode(task)
    episode.act([re.sub(r"QUERY: .*?(, TEXT|\)$)", r"QUERY: Click the link Help center\1", a) for a in task.actions])
    assert episode.score() == 0.0


def test_subgoal_styles_say_more_or_less_about_the_step() -> None:
    for split in SPLITS:
        styles = Counter(t.subgoal_styles[0] for t in _suite(split))
        assert set(styles) == set(STYLES) and styles["explicit"] > styles["vague"]
    for task in _suite("train"):
        style = task.subgoal_styles[0]
        assert task.subgoal_styles == (style,) * len(task.subgoals)
        steps = [GoldStep.from_json(s) for s in task.meta["gold_steps"]]
        for subgoal, step in zip(task.subgoals, steps):
            named = resolve(step.page, subgoal)
            if style == "explicit":  # names the element and the value: the grounder only copies
                assert named is not None and named.id in step.positives and step.value in subgoal
            elif style == "vague":
                assert subgoal in VAGUE_SUBGOALS
    shop = [t for t in _suite("heldout") if t.subgoal_styles[0] == "explicit"]
    for task in shop:
        goal = Goal.from_json(task.meta["goal"])
        assert task.subgoals[-1].endswith(f"relevant features: {', '.join(goal.options)}.")
        assert re.fullmatch(r"Select the most relevant features of item b0[a-z0-9]{8}\.", task.subgoals[1])


def test_shop_tasks_follow_lumos_plan_and_webshop_goals() -> None:
    for task in _suite("heldout"):
        goal = Goal.from_json(task.meta["goal"])
        groups = task.action_groups()
        assert task.meta["subgoal_actions"] == [1, 2, 3, 1, 3 + len(goal.options)]
        assert [re.match(r"R\d+ = (\w+)", a)[1] for a in groups[3] + groups[0]] == ["Pick", "Search"]
        assert groups[-1][-1].endswith("Click(buy now)") and task.question == goal.instruction
        limit = re.search(r"price lower than ([0-9.]+) dollars$", goal.instruction)
        assert float(limit[1]) == goal.price_upper and goal.price_upper % 10 == 0
        product = bundled_catalogue().by_asin[goal.asin]
        assert product.price < goal.price_upper <= product.price + 40
        assert set(goal.attributes) <= set(product.attributes) and set(goal.options) <= set(product.option_values())


def test_the_shop_catalogue_is_seeded() -> None:
    catalogue = bundled_catalogue()
    assert len(catalogue.products) == len(KINDS) * PER_KIND
    assert [p.to_json() for p in build_catalogue(0).products] == [p.to_json() for p in catalogue.products]
    assert [p.asin for p in build_catalogue(1).products] != [p.asin for p in catalogue.products]
    assert all(re.fullmatch(r"b0[a-z0-9]{8}", p.asin) for p in catalogue.products)


def test_tasks_round_trip_through_json_with_their_meta() -> None:
    for split in SPLITS:
        for task in _suite(split)[:20]:
            again = Task.from_json(task.to_json())
            assert again == task and again.meta == task.meta and again.action_groups() == task.action_groups()
