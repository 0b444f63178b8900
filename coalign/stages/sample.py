"""MOAT stage 1, step 1: sample K subgoal sequences per task from the planner.

One `generate` call per batch with `num_return_sequences=K` (the authors' release made K
separate calls); candidates are kept as texts, so malformed ones are scored and judged like
any other: the grounder's perplexity is what ranks them.
"""

from __future__ import annotations

from collections.abc import Sequence

from coalign.agents import Agent, generate
from coalign.formats import planner_prompt
from coalign.tasks import Task


def sample_candidates(
    planner: Agent,
    tasks: Sequence[Task],
    k: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    batch_size: int,
) -> list[list[str]]:
    """K sampled subgoal texts per task, in task order."""
    if k < 1:
        raise ValueError(f"K must be at least 1, got {k}")
    users = [planner_prompt(t.question) for t in tasks]
    per_batch = max(1, batch_size // k)
    return generate(
        planner,
        users,
        max_new_tokens,
        batch_size=per_batch,
        num_return_sequences=k,
        temperature=temperature,
        top_p=top_p,
        desc=f"sampling {k} plans per task",
    )
