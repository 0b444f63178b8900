"""The ground-truth SFT examples of tasks: what the Agent Lumos cold start trains on, and what the
baseline's matched rounds and MOAT's stage 2 mix in.

An example is (prompt, completion); a onetime task gives one per agent, an iterative (web) task one per
turn of its gold conversation.
"""

from __future__ import annotations

from coalign.config import RunConfig
from coalign.formats.lumos import lumos_chat, lumos_generation_prompt
from coalign.formats.lumos_iterative import turn_examples
from coalign.models.agents import grounder_example, planner_example
from coalign.tasks import Task
from coalign.tasks.episodes import grounder_conversation, planner_conversation
from coalign.tasks.maths_suite import COMPOSED, generate_suite
from coalign.tasks.plan_following import plan_compositions, plan_following


def planner_pair(task: Task) -> tuple[str, str]:
    """A onetime task's planner example: (user turn, the whole plan)."""
    return planner_example(task.question, task.subgoals)


def grounder_pair(task: Task) -> tuple[str, str]:
    """A onetime task's grounder example: (user turn with the whole plan, all actions)."""
    return grounder_example(task.question, task.subgoals, task.actions, task.family)


# An SFT example: (prompt, completion); the prompt is one user turn (onetime) or the conversation so far
# (iterative), rendered by `models.load.render_prompt` alike at training and generation time.
Example = tuple[str | tuple[dict[str, str], ...], str]


def planner_examples(task: Task) -> list[Example]:
    """The planner's SFT examples of a task, by its formulation: one (onetime) or one per planner turn
    (iterative: `formats.lumos_iterative.turn_examples`, Lumos's whole-conversation loss as per-turn rows)."""
    return turn_examples(planner_conversation(task)) if task.iterative else [planner_pair(task)]


def grounder_examples(task: Task) -> list[Example]:
    """The grounder's SFT examples of a task, by its formulation: one, or one per grounder turn."""
    return turn_examples(grounder_conversation(task)) if task.iterative else [grounder_pair(task)]


def tokenizer_texts(task: Task) -> list[str]:
    """The text a tiny tokenizer learns from for a task: each agent's example (onetime), or each agent's
    whole gold conversation once (iterative), serialised Lumos's way."""
    if task.iterative:
        return [lumos_chat(planner_conversation(task)), lumos_chat(grounder_conversation(task))]
    return [lumos_generation_prompt(u) + c for u, c in (planner_pair(task), grounder_pair(task))]


def planner_data(config: RunConfig, train: list[Task]) -> list[Example]:
    """The planner's ground-truth SFT data: every training task's examples, then composed stories if set."""
    stories = (
        generate_suite(COMPOSED, config.data.composed_stories, config.seed) if config.data.composed_stories else []
    )
    return [example for t in train + stories for example in planner_examples(t)]


def grounder_data(config: RunConfig, train: list[Task]) -> list[Example]:
    """The grounder's ground-truth SFT data: every training task, plus its plan-following copies and composed
    plans if set (onetime families only: neither has a rule for the web family)."""
    data = config.data
    tasks = (
        train
        + plan_following(train, data.plan_following, config.seed)
        + plan_compositions(train, data.plan_compositions, config.seed)
    )
    return [example for t in tasks for example in grounder_examples(t)]
