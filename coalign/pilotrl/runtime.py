"""The AdaPlan runtime: one model plans, acts, and rewrites its plan's remaining steps after observations.

Episodes run side by side, batched per turn over those still running (as the Lumos loop does): the
model writes a turn, the runtime reads it (`formats.adaplan.parse_turn`), keeps the executed steps of
the plan verbatim and takes only the remaining ones from the model (Eq. 1), sends the action to the
environment and appends the observation. Token ids are built by appending turns (`models.turns`), with a
mask that is 1 on the tokens the model generated (and `plan_mask`, 1 on those of its plan blocks): the
same record a GRPO rollout trains on. A `guide` may write the start of a turn for the model (PilotRL's
stage 1: the expert's plan block; isolated planner and executor: a planner model's), and with an
`executor` the model writes only its plan blocks and a second model the rest of each turn; what others
write is context, mask 0. ReAct is the same loop with no plan. An episode ends on the environment's done
(success, failure, its step limit), or when its context would not fit another turn (`max_context`).

With a bounded context (`history` k, not None) each turn after the first sees one user message instead of the
episode so far (`formats.adaplan.window_message`: the task, the plan so far, the last k + 1 actions with their
observations): the ids then hold that turn's context alone, and a long episode no longer runs out of context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from coalign.core import ranks
from coalign.core.console import NoBar, progress_bar
from coalign.envs import TextEnv, make_env
from coalign.formats.adaplan import (
    PLAN_CLOSE,
    PLAN_OPEN,
    first_message,
    format_plan,
    observation_message,
    parse_turn,
    plan_due,
    task_text,
    update_plan,
    window_message,
)
from coalign.models.load import as_text
from coalign.models.turn_writers import TurnWriter, generate_turns, hf_turns
from coalign.models.turns import encode_segment, segments


@dataclass(frozen=True)
class Segment:
    """One turn of a bounded-context episode as trained: the context the model was given, the ids the turn added
    after it (a guide's opening, the model's part, an executor's rest), which of those the model generated and
    which belong to its plan block."""

    context: list[int]
    turn: list[int]
    mask: list[int]
    plan_mask: list[int]


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
    turn_end: int = 0  # ids[:turn_end] end on the last turn taken (the model's part and an executor's rest)
    history: int | None = None  # a bounded context: the turns shown before the last one (None: the whole episode)
    task: str = ""  # the task as a bounded context states it
    recent: list[tuple[str, str]] = field(default_factory=list)  # a bounded context's last actions, observations
    segments: list[Segment] = field(default_factory=list)  # a bounded context's turns, each with its own context

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


def start_episode(tokenizer, name: str, seed: int, mode: str, history: int | None = None) -> Episode:
    env = make_env(name)
    observation = env.reset(seed)
    episode = Episode(name, seed, env, mode, [], [], [], [], history=history)
    episode.task = task_text(env.instructions, observation)
    _open_context(tokenizer, episode, first_message(env.instructions, observation, mode))
    return episode


def _open_context(tokenizer, episode: Episode, text: str) -> None:
    """Start the episode's context anew with the user turn `text`: the first turn's, or a bounded context's."""
    episode.messages = [{"role": "user", "content": text}]
    (segment,) = segments(tokenizer, episode.messages)
    ids = encode_segment(tokenizer, segment.text, first=True)
    episode.ids, episode.mask, episode.plan_mask, episode.prompt_length = ids, [0] * len(ids), [0] * len(ids), len(ids)
    episode.turn_end = len(ids)  # no turn taken in this context yet


def _append_context(episode: Episode, piece: list[int]) -> None:
    episode.ids += piece
    episode.mask += [0] * len(piece)
    episode.plan_mask += [0] * len(piece)


def _append_observation(tokenizer, episode: Episode, finished: bool, text: str) -> None:
    """Add the user turn `text` after the model's turn. The ids the model generated stay as they are; what
    the serialisation puts after its text (the end of turn, when the model ran out of tokens before writing
    it; a template's closing newline) goes in front of the user turn, unmasked."""
    reply = as_text(tokenizer, episode.messages[-1]["content"])  # as `segments` writes it
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


Guide = Callable[[object, Sequence[Episode], int], list[str]]  # (tokenizer, episodes, every) -> turn openings


def expert_guide(tokenizer, episodes: Sequence[Episode], every: int) -> list[str]:
    """PilotRL stage 1's guide: on turns where a plan is due, the expert's remaining plan from the state
    reached, as the plan block the model's turn starts with; nothing on other turns."""
    return [
        format_plan(e.env.expert_plan(), first=e.env.steps_taken + 1) + "\n"
        if plan_due(e.mode, e.env.steps_taken, every)
        else ""
        for e in episodes
    ]


def model_planner(planner, max_new_tokens: int, temperature: float = 0.0, top_p: float = 1.0) -> Guide:
    """A guide by a separate planner model (isolated planner and executor): on turns where a plan is due it
    writes the plan block (its turn cut after the block), and the executor writes the rest."""

    def guide(tokenizer, episodes: Sequence[Episode], every: int) -> list[str]:
        due = [i for i, e in enumerate(episodes) if plan_due(e.mode, e.env.steps_taken, every)]
        texts = [""] * len(episodes)
        if due:
            contexts = [episodes[i].ids for i in due]
            turns = generate_turns(planner, tokenizer, contexts, max_new_tokens, temperature, top_p)
            for i, turn in zip(due, turns, strict=True):
                text = tokenizer.decode(turn[: plan_tokens(tokenizer, turn)], skip_special_tokens=True)
                texts[i] = text if not text or text.endswith("\n") else text + "\n"
        return texts

    return guide


def _append_generated(tokenizer, episode: Episode, completion: list[int]) -> None:
    planned = plan_tokens(tokenizer, completion)
    episode.ids += completion
    episode.mask += [1] * len(completion)
    episode.plan_mask += [1] * planned + [0] * (len(completion) - planned)


def take_turn(
    tokenizer, episode: Episode, text: str, begin: int, last: list[int], every: int, max_context: int, room: int
) -> None:
    """Apply one turn whose ids from `begin` are in place and whose text is `text` (`last`: the ids written
    last, which tell whether the turn was ended): read it, update the plan (Eq. 1), act, and append the
    observation."""
    env = episode.env
    text = text.strip()
    episode.generated_tokens += len(episode.ids) - begin
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
    if episode.history is None:
        finished = bool(last) and last[-1] == tokenizer.eos_token_id
        _append_observation(tokenizer, episode, finished, observation_message(step.observation, update))
    else:
        episode.recent = [*episode.recent, (turn.action, step.observation)][-(episode.history + 1) :]
        plan = episode.plan if episode.mode == "adaplan" else None
        _open_context(tokenizer, episode, window_message(episode.task, plan, env.steps_taken, episode.recent, update))
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
    guide: Guide | None = None,
    executor=None,
    writer: TurnWriter | None = None,
    history: int | None = None,
) -> list[Episode]:
    """Run the model as an AdaPlan (mode "adaplan", plan updated every `every` steps) or ReAct agent on
    each (environment, seed) task; episodes are batched per turn, longest contexts apart from shortest.
    `guide` (`expert_guide`, `model_planner`) writes the opening of each turn, as context. `history`: a
    bounded context showing that many turns before the last one (None: the whole episode). With `executor`
    (a second model, isolated planner and executor) the model writes only the plan blocks and the executor
    the rest of each turn, as context. `writer` writes the model's turns in place of its `generate`.

    Greedy episodes (evaluation) under several processes: each turn's batches, the ones one process would
    make, are shared among the ranks (`ranks.share`) and every rank applies every turn, so all ranks hold the
    episodes one process would. Sampled episodes are GRPO rollouts, whose prompts the trainer already split."""
    writer = writer or hf_turns(model, tokenizer)
    episodes = [start_episode(tokenizer, name, seed, mode, history) for name, seed in tasks]
    need = turn_room(max_new_tokens, executor is not None)
    for episode in episodes:
        if len(episode.ids) + need > max_context:
            episode.stop = "context"

    def compose(batch: list[Episode]) -> list[Turn]:
        return compose_turns(
            batch, tokenizer, writer, guide, executor, every, max_new_tokens, max_context, temperature, top_p
        )

    with progress_bar() if progress else NoBar() as bar:
        task = bar.add_task(desc, total=len(episodes))
        bar.advance(task, sum(not e.running for e in episodes))
        while running := sorted((e for e in episodes if e.running), key=lambda e: len(e.ids)):
            batches = [running[start : start + batch_size] for start in range(0, len(running), batch_size)]
            turns = ranks.share(compose, batches) if temperature == 0 else [compose(b) for b in batches]
            for batch, batch_turns in zip(batches, turns, strict=True):
                for episode, turn in zip(batch, batch_turns, strict=True):
                    apply_turn(tokenizer, episode, turn, every, max_new_tokens, max_context)
                    if not episode.running:
                        bar.advance(task)
    return episodes


def turn_room(max_new_tokens: int, executor: bool) -> int:
    """The context a turn may add: the model's part, and with an executor its rest of the turn after it."""
    return max_new_tokens * (2 if executor else 1)


@dataclass(frozen=True)
class Turn:
    """What one turn adds to an episode: the opening a guide wrote (context) and, when a turn still fits after
    it, the ids the model wrote (trained) and an executor's rest of the turn (context)."""

    opening: str
    opening_ids: list[int]
    written: list[int] | None  # None: the opening left no room for a turn
    rest: list[int] | None = None  # the executor's part, with an executor


def compose_turns(
    batch: Sequence[Episode], tokenizer, writer: TurnWriter, guide: Guide | None, executor, every: int,
    max_new_tokens: int, max_context: int, temperature: float, top_p: float,
) -> list[Turn]:  # fmt: skip
    """The next turn of each episode of `batch`, generated and not yet applied: it reads the episodes and
    changes none, so any rank can compute it for all ranks to apply."""
    given = guide(tokenizer, batch, every) if guide else [""] * len(batch)
    openings = [encode_segment(tokenizer, text, first=False) if text else [] for text in given]
    contexts = [e.ids + o for e, o in zip(batch, openings, strict=True)]
    need = turn_room(max_new_tokens, executor is not None)
    room = [len(c) + need <= max_context for c in contexts]  # a long opening leaves no room
    fits = [c for c, ok in zip(contexts, room, strict=True) if ok]
    written = iter(writer(fits, max_new_tokens, temperature, top_p) if fits else [])
    turns = [
        Turn(text, opening, next(written) if ok else None)
        for text, opening, ok in zip(given, openings, room, strict=True)
    ]
    if executor is None:
        return turns
    live = [i for i, t in enumerate(turns) if t.written is not None]
    for i in live:  # the model keeps only its plan block, where one is due; the executor writes the rest
        due = plan_due(batch[i].mode, batch[i].env.steps_taken, every)
        written = turns[i].written[: plan_tokens(tokenizer, turns[i].written)] if due else []
        turns[i] = replace(turns[i], written=written)
    contexts = [contexts[i] + turns[i].written for i in live]
    rests = generate_turns(executor, tokenizer, contexts, max_new_tokens, temperature, top_p) if live else []
    for i, rest in zip(live, rests, strict=True):
        turns[i] = replace(turns[i], rest=rest)
    return turns


def apply_turn(tokenizer, episode: Episode, turn: Turn, every: int, max_new_tokens: int, max_context: int) -> None:
    """Append a composed turn to its episode and take it (`take_turn`), or stop the episode when the turn's
    opening left no room for the model's part."""
    begin = len(episode.ids)
    if turn.opening_ids:
        _append_context(episode, turn.opening_ids)
    if turn.written is None:
        episode.stop = "context"
        return
    _append_generated(tokenizer, episode, turn.written)
    text = tokenizer.decode(turn.written, skip_special_tokens=True)
    last = turn.written
    if turn.rest is not None:
        _append_context(episode, turn.rest)
        text += tokenizer.decode(turn.rest, skip_special_tokens=True)
        last = turn.rest
    episode.turn_end = len(episode.ids)
    if episode.history is not None:  # the context is opened anew after the turn: keep what the turn was given
        n = episode.prompt_length
        episode.segments.append(Segment(episode.ids[:n], episode.ids[n:], episode.mask[n:], episode.plan_mask[n:]))
    room = turn_room(max_new_tokens, turn.rest is not None)
    take_turn(tokenizer, episode, turn.opening + text, begin, last, every, max_context, room)
