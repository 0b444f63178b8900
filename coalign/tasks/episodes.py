"""From a web task to the environment that runs its actions and scores it, and the planner's gold feedback.

Mind2Web-like tasks (`meta["gold_steps"]`: the bundled sites and loaded Mind2Web) run in a
`SiteEpisode`, scored by step success rate; shopping goals (`meta["goal"]`: the bundled shop and
loaded WebShop) run in a `ShopEpisode` over the catalogue `meta["catalogue"]` names ("bundled" or a
WebShop data folder), scored by the WebShop reward. Both take a grounder turn with `act` and say
`done` and `score()`: what the iterative loop needs. The gold conversations are what SFT trains on.
"""

from __future__ import annotations

from coalign.formats_iterative import Message, grounder_messages, planner_messages, result_feedback, web_feedback
from coalign.tasks import Task
from coalign.tasks.shop_world import bundled_catalogue
from coalign.tasks.webshop import catalogue_at
from coalign.tools.shop import Catalogue, Goal, ShopEpisode
from coalign.tools.web import GoldStep, SiteEpisode

Episode = SiteEpisode | ShopEpisode


def catalogue_for(name: str) -> Catalogue:
    """The bundled catalogue for "bundled", else the WebShop data folder of that path."""
    return bundled_catalogue() if name == "bundled" else catalogue_at(name)


def episode_for(task: Task) -> Episode:
    """A fresh episode of a web task; ValueError for a task that holds neither gold steps nor a goal."""
    if "gold_steps" in task.meta:
        return SiteEpisode([GoldStep.from_json(step) for step in task.meta["gold_steps"]])
    if "goal" in task.meta:
        return ShopEpisode(catalogue_for(task.meta["catalogue"]), Goal.from_json(task.meta["goal"]))
    raise ValueError(f"task {task.id!r} is not a web task (no gold steps, no shopping goal)")


def gold_feedback(task: Task) -> list[str]:
    """What the planner hears after each gold subgoal: Lumos's web restatement, or for the shop the last
    result of the subgoal's gold actions (so those actions are run). A task read from Lumos's iterative rows
    keeps what its planner row heard (`meta["feedback"]`): that is its gold feedback."""
    if "feedback" in task.meta:
        return list(task.meta["feedback"])
    if task.tools != "shop":
        return [web_feedback(subgoal) for subgoal in task.subgoals]
    episode = episode_for(task)
    return [result_feedback(k, episode.act(list(group)).result) for k, group in enumerate(task.action_groups(), 1)]


def planner_conversation(task: Task) -> list[Message]:
    """A web task's gold planner conversation: its subgoals one per turn, each followed by its gold feedback,
    then the stop turn."""
    return planner_messages(task.question, task.subgoals, gold_feedback(task))


def grounder_conversation(task: Task) -> list[Message]:
    """A web task's gold grounder conversation: each subgoal, then the gold actions grounding it."""
    return grounder_messages(task.question, task.subgoals, task.action_groups(), task.tools)
