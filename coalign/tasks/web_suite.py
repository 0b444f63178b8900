"""The bundled web suite: Mind2Web-like tasks held in, WebShop-like shopping held out, with gold Lumos plans.

Held-in ("train", "heldin"; disjoint task texts) is Mind2Web-like: tasks on made-up sites
(`coalign.tasks.web_sites`), one subgoal and one CLICK/TYPE/SELECT action per step, scored by step
success rate against the gold steps kept in `meta["gold_steps"]`. Held-out is WebShop-like:
shopping goals in the bundled shop (`coalign.tasks.shop_world`) with Lumos's WebShop plan (Search,
two looks at features, Pick, buy with the wanted options), scored by the WebShop reward; the goal
is in `meta["goal"]`, the per-subgoal action counts in `meta["subgoal_actions"]` and the tool list
is "shop" (`meta["tools"]`). As in Lumos, the held-out tools are not the held-in ones.

Actions do not depend on the subgoal style; subgoals come in the maths suite's three styles:
explicit ones name the element and value (Lumos's wording for the shop), descriptive ones say
what the step is for, vague ones say nothing.
"""

from __future__ import annotations

import hashlib
import random

from coalign.envs.shop import BUY, NO_PRICE_LIMIT, PREV, Catalogue, Goal, ShopEpisode, price_upper
from coalign.envs.web import START_PAGE, Element, format_web_action
from coalign.tasks import Task
from coalign.tasks.maths_suite import SPLITS, STYLE_WEIGHTS
from coalign.tasks.shop_world import bundled_catalogue, kind_of
from coalign.tasks.web_sites import TEMPLATES, SiteTask

HELDIN_SHARE = 5  # one task in HELDIN_SHARE (by text digest) belongs to "heldin", the rest to "train"
VAGUE_SUBGOALS = ("Do the next step on the page", "Continue with the task", "Go on to the next part")
BLANK_SUBGOAL = VAGUE_SUBGOALS[0]  # what evaluation puts in place of every subgoal to blank a plan

_EXPLICIT_FORMS = {  # the verbs of Lumos's synthetic Mind2Web subgoals (eval/mind2web `translate_action`)
    "CLICK": ("Click the {tag} {text}", "Click on the {tag} {text}", "Choose the {tag} {text}"),
    "TYPE": tuple(f"{verb} {{value}} in the {{tag}} {{text}}" for verb in ("Type", "Input", "Put text")),
    "SELECT": tuple(f"{verb} {{value}} in the {{tag}} {{text}}" for verb in ("Select", "Choose", "Pick up")),
}
_LEADS = ("Find me", "I need", "I am looking for")


def gold_query(op: str, target: Element, value: str) -> str:
    """The QUERY of a gold action: the operation, the value and the element as Mind2Web names it."""
    return _EXPLICIT_FORMS[op][0].format(tag=target.tag, text=target.text, value=value)


def _style(rng: random.Random) -> str:
    return rng.choices(list(STYLE_WEIGHTS), weights=list(STYLE_WEIGHTS.values()))[0]


def _in_heldin(text: str) -> bool:
    """Which held-in split a task belongs to, from its text alone: train and heldin never share one."""
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % HELDIN_SHARE == 0


# --------------------------------------------------------------------------- held-in: sites


def _site_task(rng: random.Random, name: str, drawn: SiteTask, split: str, index: int) -> Task:
    style = _style(rng)
    subgoals, actions = [], []
    for k, step in enumerate(drawn.steps, start=1):
        gold, target = step.gold, step.target
        page = START_PAGE if k == 1 else f"R{k - 1}"
        actions.append(format_web_action(f"R{k}", gold.op, page, gold_query(gold.op, target, gold.value), gold.value))
        if style == "explicit":
            form = rng.choice(_EXPLICIT_FORMS[gold.op])
            subgoals.append(form.format(tag=target.tag, text=target.text, value=gold.value))
        else:
            subgoals.append(step.purpose if style == "descriptive" else rng.choice(VAGUE_SUBGOALS))
    return Task(
        id=f"web-{split}-{index:05d}",
        family="web",
        dataset="web-suite-heldin",
        question=drawn.task,
        subgoals=tuple(subgoals),
        actions=tuple(actions),
        answer="",
        subgoal_styles=(style,) * len(subgoals),
        meta={"template": name, "website": drawn.website, "gold_steps": [s.gold.to_json() for s in drawn.steps]},
    )


# --------------------------------------------------------------------------- held-out: the shop


def _goal(rng: random.Random, catalogue: Catalogue) -> Goal:
    product = rng.choice(catalogue.products)
    attributes = rng.sample(product.attributes, rng.randint(1, min(3, len(product.attributes))))
    chosen = [(name, rng.choice(values)) for name, values in product.options]
    limit = price_upper(rng, product.price)
    options = ", and ".join(f"{name}: {value}" for name, value in chosen)
    priced = f", and price lower than {limit:.2f} dollars" if limit != NO_PRICE_LIMIT else ""
    instruction = f"{rng.choice(_LEADS)} {', '.join(attributes)} {kind_of(product).noun} with {options}{priced}"
    return Goal(
        asin=product.asin,
        instruction=instruction,
        name=product.name,
        query=product.query,
        product_category=product.product_category,
        attributes=tuple(attributes),
        options=tuple(value for _, value in chosen),
        price_upper=limit,
    )


def _shop_plan(goal: Goal, catalogue: Catalogue) -> tuple[list[list[str]], list[str]] | None:
    """Lumos's WebShop plan, grounded by running it: action groups per subgoal and the two items looked at;
    None unless it buys with reward 1 (the search must find two items and Pick must choose well)."""
    episode, asked = ShopEpisode(catalogue, goal), goal.instruction
    first = episode.act(f"R1 = Search({asked})")
    items = episode.values["R1"].items if first.records[0].error is None else ()
    if len(items) < 2:
        return None
    groups = [
        [f"R1 = Search({asked})"],
        [f"R2 = Click({items[0].asin})", f"R3 = FeatureRetrieve(R2, Query: {asked})"],
        [f"R4 = Click({PREV})", f"R5 = Click({items[1].asin})", f"R6 = FeatureRetrieve(R5, Query: {asked})"],
        [f"R7 = Pick(Item_names: R1, Item_features: [R3, R6], Query: {asked})"],
        [f"R8 = Click({PREV})", "R9 = Click(R7)"],
    ]
    groups[-1] += [f"R{10 + i} = Click({value})" for i, value in enumerate(goal.options)]
    groups[-1].append(f"R{10 + len(goal.options)} = Click({BUY})")
    for group in groups[1:]:
        if any(record.error for record in episode.act(group).records):
            return None
    return (groups, [items[0].asin, items[1].asin]) if episode.score() == 1.0 else None


def _shop_task(rng: random.Random, catalogue: Catalogue, index: int, seen: set[str]) -> Task | None:
    goal = _goal(rng, catalogue)
    if goal.instruction in seen:
        return None
    plan = _shop_plan(goal, catalogue)
    if plan is None:
        return None
    seen.add(goal.instruction)
    groups, (first, second) = plan
    style = _style(rng)
    subgoals = {
        "explicit": [
            "Search two relevant items and the product names according to the instruction.",
            f"Select the most relevant features of item {first}.",
            f"Select the most relevant features of item {second}.",
            "Pick up the most related one from the two relevant items according to the product names and their "
            "features.",
            f"Buy this item by selecting its relevant features: {', '.join(goal.options)}.",
        ],
        "descriptive": [
            "Search for the product the instruction describes",
            "Look at the features of the first item found",
            "Look at the features of the second item found",
            "Choose the better of the two items",
            "Buy the chosen item with the wanted options",
        ],
        "vague": [rng.choice(VAGUE_SUBGOALS) for _ in groups],
    }[style]
    return Task(
        id=f"web-heldout-{index:05d}",
        family="web",
        dataset="web-suite-heldout",
        question=goal.instruction,
        subgoals=tuple(subgoals),
        actions=tuple(a for group in groups for a in group),
        answer="",
        subgoal_styles=(style,) * len(subgoals),
        meta={
            "template": "shop",
            "tools": "shop",
            "subgoal_actions": [len(group) for group in groups],
            "goal": goal.to_json(),
            "catalogue": "bundled",
        },
    )


def generate_web_suite(split: str, n: int, seed: int = 0) -> list[Task]:
    """`n` tasks of `split`, the same for the same (split, n, seed); a longer list extends a shorter one."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {SPLITS}")
    rng = random.Random(f"coalign-web-suite/{split}/{seed}")
    tasks: list[Task] = []
    seen: set[str] = set()
    if split == "heldout":
        catalogue = bundled_catalogue()
        while len(tasks) < n:
            task = _shop_task(rng, catalogue, len(tasks), seen)
            if task is not None:
                tasks.append(task)
        return tasks
    while len(tasks) < n:
        name = rng.choice(list(TEMPLATES))
        drawn = TEMPLATES[name](rng)
        if drawn.task in seen or _in_heldin(drawn.task) != (split == "heldin"):
            continue
        seen.add(drawn.task)
        tasks.append(_site_task(rng, name, drawn, split, len(tasks)))
    return tasks
