"""From a web task to the environment that runs its actions and scores it, and the planner's gold feedback.

The task's tool list (`Task.tools`) names its environment (`EPISODES`): site tasks ("web": the bundled sites
and loaded Mind2Web, gold steps in `meta["gold_steps"]`) run in a `SiteEpisode`, shopping goals ("shop": the
bundled shop and loaded WebShop, the goal in `meta["goal"]`) in a `ShopEpisode` over the catalogue
`meta["catalogue"]` names ("bundled" or a WebShop data folder). Everything else the loop, the evaluation and
the per-turn critic need, the episode answers itself (`envs.episode.Episode`). A new web environment is its
module under `envs/` and one entry here. The gold conversations are what SFT trains on.
"""

from __future__ import annotations

from collections.abc import Callable

from coalign.envs.episode import Episode
from coalign.envs.shop import Catalogue, Goal, ShopEpisode
from coalign.envs.web import GoldStep, SiteEpisode
from coalign.formats.lumos_iterative import Message, grounder_messages, planner_messages
from coalign.tasks import Task
from coalign.tasks.shop_world import bundled_catalogue
from coalign.tasks.webshop import catalogue_at


def catalogue_for(name: str) -> Catalogue:
    """The bundled catalogue for "bundled", else the WebShop data folder of that path."""
    return bundled_catalogue() if name == "bundled" else catalogue_at(name)


def _site(task: Task) -> SiteEpisode:
    if "gold_steps" not in task.meta:
        raise ValueError(f"task {task.id!r} is not a web task (no gold steps, no shopping goal)")
    return SiteEpisode([GoldStep.from_json(step) for step in task.meta["gold_steps"]], task.question)


def _shop(task: Task) -> ShopEpisode:
    if "goal" not in task.meta:
        raise ValueError(f"task {task.id!r} is not a web task (no gold steps, no shopping goal)")
    return ShopEpisode(catalogue_for(task.meta["catalogue"]), Goal.from_json(task.meta["goal"]))


EPISODES: dict[str, Callable[[Task], Episode]] = {"web": _site, "shop": _shop}  # by the task's tool list


def episode_for(task: Task) -> Episode:
    """A fresh episode of a web task; ValueError for a task that holds neither gold steps nor a goal."""
    if task.tools not in EPISODES:
        raise ValueError(f"task {task.id!r} is not a web task (no gold steps, no shopping goal)")
    return EPISODES[task.tools](task)


def gold_feedback(task: Task) -> list[str]:
    """What the planner hears after each gold subgoal, by the task's episode (`Episode.feedback`: Lumos's web
    restatement, or the shop's last result of the subgoal's gold actions). A task read from Lumos's iterative
    rows keeps what its planner row heard (`meta["feedback"]`): that is its gold feedback."""
    if "feedback" in task.meta:
        return list(task.meta["feedback"])
    if not task.subgoals:
        return []
    episode = episode_for(task)
    groups = task.action_groups()
    return [episode.feedback(k, s, episode.act(list(g))) for k, (s, g) in enumerate(zip(task.subgoals, groups), 1)]


def planner_conversation(task: Task) -> list[Message]:
    """A web task's gold planner conversation: its subgoals one per turn, each followed by its gold feedback,
    then the stop turn."""
    return planner_messages(task.question, task.subgoals, gold_feedback(task))


def grounder_conversation(task: Task) -> list[Message]:
    """A web task's gold grounder conversation: each subgoal, then the gold actions grounding it."""
    return grounder_messages(task.question, task.subgoals, task.action_groups(), task.tools)
