"""The AdaPlan runtime: one model plans, acts, and rewrites its plan's remaining steps after observations.

Episodes run side by side, batched per turn over those still running (as the Lumos loop does): the
model writes a turn, the runtime reads it (`formats_adaplan.parse_turn`), keeps the executed steps of
the plan verbatim and takes only the remaining ones from the model (Eq. 1), sends the action to the
environment and appends the observation. Token ids are built by appending turns (`token_turns`), with a
mask that is 1 on the tokens the model generated (and `plan_mask`, 1 on those of its plan blocks): the
same record a GRPO rollout trains on. A `guide` may write the start of a turn for the model (PilotRL's
stage 1 gives the expert's plan block; the model writes the thought and action): those tokens are
context, mask 0. ReAct is the same loop with no plan. An episode ends on the environment's done
(success, failure, its step limit), or when its context would not fit another turn (`max_context`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from coalign.agents import _NoBar, decoding, progress_bar
from coalign.envs import TextEnv, make_env
from coalign.formats_adaplan import (
    PLAN_CLOSE,
    PLAN_OPEN,
    first_message,
    format_plan,
    observation_message,
    parse_turn,
    plan_due,
    update_plan,
)
from coalign.token_turns import encode_segment, segments


@dataclass
class Episode:
    """One task's episode and everything needed to score or train on it."""

    env_name: str
    seed: int
    env: TextEnv
    mode: str
    messages: list[dict[str, str]]
    ids: list[int]
    mask: list[int]  # 1 on generated tokens
    plan_mask: list[int]  # 1 on generated tokens of plan blocks
    prompt_length: int = 0  # ids[:prompt_length] are the task's first user turn
    plan: list[str] = field(default_factory=list)
    turns: list[dict] = field(default_factory=list)
    generated_tokens: int = 0
    stop: str | None = None

    @property
    def running(self) -> bool:
        return self.stop is None

    def to_json(self) -> dict:
        return {
            "env": self.env_name,
            "seed": self.seed,
            "mode": self.mode,
            "success": self.env.success,
            "reward": self.env.reward(),
            "steps": self.env.steps_taken,
            "optimal_steps": self.env.optimal_steps,
            "tokens": self.generated_tokens,
            "stop": self.stop,
            "plan": self.plan,
            "turns": self.turns,
        }


def start_episode(tokenizer, name: str, seed: int, mode: str) -> Episode:
    env = make_env(name)
    observation = env.reset(seed)
    messages = [{"role": "user", "content": first_message(env.instructions, observation, mode)}]
    (segment,) = segments(tokenizer, messages)
    ids = encode_segment(tokenizer, segment.text, first=True)
    return Episode(name, seed, env, mode, messages, ids, [0] * len(ids), [0] * len(ids), len(ids))


def _append_context(episode: Episode, piece: list[int]) -> None:
    episode.ids += piece
    episode.mask += [0] * len(piece)
    episode.plan_mask += [0] * len(piece)


def _append_observation(tokenizer, episode: Episode, finished: bool, text: str) -> None:
    """Add the user turn `text` after the model's turn. The ids the model generated stay as they are; what
    the serialisation puts after its text (the end of turn, when the model ran out of tokens before writing
    it; a template's closing newline) goes in front of the user turn, unmasked."""
    reply = episode.messages[-1]["content"]
    episode.messages.append({"role": "user", "content": text})
    *_, model_turn, user_turn = segments(tokenizer, episode.messages)
    tail = model_turn.text[len(reply) :] if model_turn.text.startswith(reply) else ""
    eos = tokenizer.eos_token
    if finished and tail.startswith(eos):
        tail = tail[len(eos) :]
    _append_context(episode, encode_segment(tokenizer, tail + user_turn.text, first=False))


def plan_tokens(tokenizer, completion: Sequence[int]) -> int:
    """How many leading tokens of a generated turn belong to its plan block: through the token that
    completes the closing tag; all of them when the block is never closed; none without a block."""
    text = tokenizer.decode(completion, skip_special_tokens=True)
    if PLAN_OPEN not in text:
        return 0
    if PLAN_CLOSE not in text:
        return len(completion)
    lo, hi = 1, len(completion)  # a prefix's text holds the tag from some length on: the first such length
    while lo < hi:
        mid = (lo + hi) // 2
        if PLAN_CLOSE in tokenizer.decode(completion[:mid], skip_special_tokens=True):
            hi = mid
        else:
            lo = mid + 1
    return lo


def expert_guide(tokenizer, episode: Episode, every: int) -> str:
    """PilotRL stage 1's guide: on turns where a plan is due, the expert's remaining plan from the state
    reached, as the plan block the model's turn starts with; nothing on other turns."""
    env = episode.env
    t = env.steps_taken
    if not plan_due(episode.mode, t, every):
        return ""
    return format_plan(env.expert_plan(), first=t + 1) + "\n"


@torch.inference_mode()
def _generate(model, tokenizer, batch: Sequence[list[int]], max_new_tokens: int, temperature: float, top_p: float):
    """Completion ids of each prompt (left-padded batch), cut after the first end-of-sequence token."""
    width = max(map(len, batch))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in batch], device=model.device)
    attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch], device=model.device)
    out = model.generate(
        input_ids=input_ids, attention_mask=attention, **decoding(tokenizer, max_new_tokens, temperature, top_p)
    )
    completions = []
    for row in out[:, width:].tolist():
        if tokenizer.eos_token_id in row:
            row = row[: row.index(tokenizer.eos_token_id) + 1]
        completions.append(row)
    return completions


def take_turn(
    tokenizer, episode: Episode, completion: list[int], every: int, max_context: int, room: int, given: str = ""
) -> None:
    """Apply one generated turn (after the text `given` for it, already in the ids): read it, update the
    plan (Eq. 1), act, and append the observation."""
    env = episode.env
    text = (given + tokenizer.decode(completion, skip_special_tokens=True)).strip()
    planned = plan_tokens(tokenizer, completion)
    episode.ids += completion
    episode.mask += [1] * len(completion)
    episode.plan_mask += [1] * planned + [0] * (len(completion) - planned)
    episode.generated_tokens += len(completion)
    episode.messages.append({"role": "assistant", "content": text})
    t = env.steps_taken
    due = plan_due(episode.mode, t, every)
    turn = parse_turn(text, expect_plan=due)
    if due and turn.plan is not None:
        episode.plan = update_plan(episode.plan, t, turn.plan)
    step = env.step(turn.action)
    episode.turns.append(
        {
            "plan": list(turn.plan) if turn.plan is not None else None,
            "plan_due": due,
            "step": episode.plan[t] if t < len(episode.plan) else None,
            "thought": turn.thought,
            "action": turn.action,
            "observation": step.observation,
            "errors": list(turn.errors),
        }
    )
    if step.done:
        episode.stop = "success" if env.success else ("step limit" if env.steps_taken >= env.max_steps else "failed")
        return
    update = plan_due(episode.mode, env.steps_taken, every)
    finished = bool(completion) and completion[-1] == tokenizer.eos_token_id
    _append_observation(tokenizer, episode, finished, observation_message(step.observation, update))
    if len(episode.ids) + room > max_context:
        episode.stop = "context"


def run_episodes(
    model,
    tokenizer,
    tasks: Sequence[tuple[str, int]],
    mode: str,
    every: int = 1,
    max_new_tokens: int = 128,
    max_context: int = 2048,
    batch_size: int = 32,
    temperature: float = 0.0,
    top_p: float = 1.0,
    desc: str = "episodes",
    progress: bool = True,
    guide: Callable[[object, Episode, int], str] | None = None,
) -> list[Episode]:
    """Run the model as an AdaPlan (mode "adaplan", plan updated every `every` steps) or ReAct agent on
    each (environment, seed) task; episodes are batched per turn, longest contexts apart from shortest.
    `guide(tokenizer, episode, every)` (e.g. `expert_guide`) writes the start of each turn when given."""
    episodes = [start_episode(tokenizer, name, seed, mode) for name, seed in tasks]
    for episode in episodes:
        if len(episode.ids) + max_new_tokens > max_context:
            episode.stop = "context"
    with progress_bar() if progress else _NoBar() as bar:
        task = bar.add_task(desc, total=len(episodes))
        bar.advance(task, sum(not e.running for e in episodes))
        while running := sorted((e for e in episodes if e.running), key=lambda e: len(e.ids)):
            for start in range(0, len(running), batch_size):
                batch = running[start : start + batch_size]
                given = [guide(tokenizer, e, every) if guide else "" for e in batch]
                for episode, text in zip(batch, given, strict=True):
                    if text:
                        _append_context(episode, encode_segment(tokenizer, text, first=False))
                    if len(episode.ids) + max_new_tokens > max_context:  # a long guide leaves no room
                        episode.stop = "context"
                        bar.advance(task)
                keep = [i for i, e in enumerate(batch) if e.running]
                batch, given = [batch[i] for i in keep], [given[i] for i in keep]
                if not batch:
                    continue
                completions = _generate(model, tokenizer, [e.ids for e in batch], max_new_tokens, temperature, top_p)
                for episode, completion, text in zip(batch, completions, given, strict=True):
                    take_turn(tokenizer, episode, completion, every, max_context, max_new_tokens, text)
                    if not episode.running:
                        bar.advance(task)
    return episodes
