"""The two agents as models: prompting and batched generation.

The planner maps a task to a subgoal sequence, the grounder maps (task, tools, subgoals) to an
action sequence; both are plain causal LMs prompted in Lumos's formats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from coalign.formats import format_actions, format_subgoals, grounder_prompt, planner_prompt
from coalign.models import load_model, load_tokenizer, render_prompt
from coalign.tasks import Task


@dataclass
class Agent:
    """A loaded model with its tokenizer (padded left for generation)."""

    model: object
    tokenizer: object

    @classmethod
    def load(cls, path: str, trust_remote_code: bool = False) -> "Agent":
        return cls(load_model(path, trust_remote_code=trust_remote_code), load_tokenizer(path, trust_remote_code))


def progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=False
    )


class _NoBar:
    """A progress bar that shows nothing."""

    def __enter__(self) -> "_NoBar":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def add_task(self, *args, **kwargs) -> int:
        return 0

    def advance(self, *args) -> None:
        return None


def decoding(tokenizer, max_new_tokens: int, temperature: float, top_p: float) -> dict:
    """`generate` settings: greedy at temperature 0, else sampling with nucleus `top_p` (no top-k)."""
    sampling = temperature > 0
    return dict(
        max_new_tokens=max_new_tokens,
        do_sample=sampling,
        temperature=temperature if sampling else None,
        top_p=top_p if sampling else None,
        top_k=None,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


@torch.inference_mode()
def generate(
    agent: Agent,
    users: Sequence[str | Sequence[dict[str, str]]],
    max_new_tokens: int,
    batch_size: int = 32,
    num_return_sequences: int = 1,
    temperature: float = 0.0,
    top_p: float = 1.0,
    desc: str = "generating",
    progress: bool = True,
) -> list[list[str]]:
    """Complete each user turn (or conversation so far, ending with a user turn); returns
    `num_return_sequences` texts per prompt, in input order.

    Prompts are sorted by length before batching so little compute goes to padding.
    temperature 0 is greedy decoding. `progress` False shows no bar (a caller with its own).
    """
    tok, model = agent.tokenizer, agent.model
    prompts = [render_prompt(tok, u) for u in users]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[list[str]] = [[] for _ in prompts]
    with progress_bar() if progress else _NoBar() as bar:
        task = bar.add_task(desc, total=len(prompts))
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            enc = tok([prompts[i] for i in idx], return_tensors="pt", padding=True)  # special tokens as TRL trains
            enc = {k: v.to(model.device) for k, v in enc.items()}
            gen = model.generate(
                **enc,
                **decoding(tok, max_new_tokens, temperature, top_p),
                num_return_sequences=num_return_sequences,
            )
            texts = tok.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            for j, i in enumerate(idx):
                out[i] = [t.strip() for t in texts[j * num_return_sequences : (j + 1) * num_return_sequences]]
            bar.advance(task, len(idx))
    return out


def plan(planner: Agent, questions: Sequence[str], max_new_tokens: int, batch_size: int) -> list[str]:
    """Greedy subgoal sequence for each task."""
    users = [planner_prompt(q) for q in questions]
    return [o[0] for o in generate(planner, users, max_new_tokens, batch_size, desc="planner")]


def ground(
    grounder: Agent,
    tasks: Sequence[Task],
    subgoal_texts: Sequence[str],
    max_new_tokens: int,
    batch_size: int,
    desc: str = "grounder",
) -> list[str]:
    """Greedy action sequence for each (task, subgoals) pair, prompted with the task family's tool list."""
    users = [grounder_prompt(t.question, s, t.family) for t, s in zip(tasks, subgoal_texts, strict=True)]
    return [o[0] for o in generate(grounder, users, max_new_tokens, batch_size, desc=desc)]


def planner_example(question: str, subgoals: Sequence[str]) -> tuple[str, str]:
    """(user turn, completion) for planner SFT."""
    return planner_prompt(question), format_subgoals(list(subgoals))


def grounder_example(question: str, subgoals: Sequence[str], actions: Sequence[str], domain: str = "maths"):
    """(user turn, completion) for grounder SFT."""
    return grounder_prompt(question, format_subgoals(list(subgoals)), domain), format_actions(list(actions))
