"""MOAT stage 1, step 1: sample K subgoal sequences per task from the planner (or, for a web task, K next
planner turns per turn of its gold conversation: `sample_completions` takes conversations as well).

One `generate` call per batch with `num_return_sequences=K` (the authors' release made K
separate calls); candidates are kept as texts, so malformed ones are scored and judged like
any other: the grounder's perplexity is what ranks them.
"""

from __future__ import annotations

from collections.abc import Sequence

from coalign.models.agents import Agent, generate


def sample_completions(
    planner: Agent,
    users: Sequence[str | Sequence[dict[str, str]]],
    k: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    batch_size: int,
) -> list[list[str]]:
    """K sampled continuations per planner prompt (a user turn, or a conversation so far), in input order."""
    if k < 1:
        raise ValueError(f"K must be at least 1, got {k}")
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
