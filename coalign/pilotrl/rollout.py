"""PilotRL's GRPO rollouts: the AdaPlan runtime behind TRL's `rollout_func` contract.

TRL's `GRPOTrainer` hands `rollout_func(prompts, trainer)` this process's prompts, each already repeated
once per generation of its group, and trains on what comes back: per row the prompt's ids, the
completion's ids (here the whole episode after the task: the model's turns and, between them, the
observations), the sampling log-probs (None: the policy's own are recomputed by the trainer) and any
extra field, passed on to the reward functions (here `episode`, the episode's record). `env_mask` is 1
on the tokens a stage trains and 0 elsewhere: observations and given text always, and by stage the
plan or the action tokens too (`TRAINS`).

The ids are the runtime's own, built by appending turns, so the trainer scores exactly the tokens that
were sampled. An episode's budget is the runtime's `max_context` (the trainer cuts nothing it gets
from a rollout function). An episode that stops after an observation (out of context) ends with the
model's last turn instead: the observation after it has nothing to train, and a completion ending on
it would look truncated to `mask_truncated_completions`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coalign.core import ranks
from coalign.core.errors import RunError
from coalign.envs import make_env
from coalign.formats.adaplan import first_message
from coalign.models.turn_writers import TurnWriter, cut_after_eos
from coalign.pilotrl.runtime import Episode, expert_guide, run_episodes

TRAINS = ("all", "plan", "action")  # which generated tokens a stage trains


@dataclass(frozen=True)
class RolloutSpec:
    """How a stage's episodes run: the format, the plan-update interval, whether the expert writes the
    plan blocks (stage 1), which generated tokens train, and the runtime's budgets."""

    mode: str = "adaplan"
    every: int = 1
    guided: bool = False
    train: str = "all"
    max_new_tokens: int = 160
    max_context: int = 2048
    batch_size: int = 32

    def __post_init__(self) -> None:
        if self.train not in TRAINS:
            raise ValueError(f"train must be one of {', '.join(TRAINS)}, got {self.train!r}")
        if self.guided and self.mode != "adaplan":
            raise ValueError("only an AdaPlan episode can be guided by the expert's plan")


def prompt_rows(tasks: Sequence[tuple[str, int]], mode: str) -> list[dict]:
    """GRPO's dataset: per task the first user turn as a conversational prompt, with its environment and
    seed. The trainer hands the rollout the prompts alone, and two tasks may open alike (every Wordle game
    does), so the prompt's message also carries `task` ("name/seed"): the rollout reads it, the model
    never sees it (only `content` is rendered)."""
    rows = []
    for name, seed in tasks:
        env = make_env(name)
        text = first_message(env.instructions, env.reset(seed), mode)
        rows.append({"prompt": [{"role": "user", "content": text, "task": f"{name}/{seed}"}], "env": name,
                     "seed": seed})  # fmt: skip
    return rows


def trained_mask(episode: Episode, train: str) -> list[int]:
    """1 on the tokens a stage trains: all generated ones, or only those of plan blocks, or only the rest."""
    if train == "all":
        return list(episode.mask)
    if train == "plan":
        return list(episode.plan_mask)
    return [m - p for m, p in zip(episode.mask, episode.plan_mask, strict=True)]


def rollout_rows(episodes: Sequence[Episode], train: str, eos_id: int) -> dict:
    """TRL's rollout output for finished episodes: prompt, the rest as the completion, the trained mask.
    An episode that generated nothing (its prompt left no room) gets one untrained end-of-sequence token,
    as the trainer reads every completion's last token."""
    prompt_ids, completion_ids, env_mask = [], [], []
    for episode in episodes:
        # through the last turn taken, an executor's rest included (so that the row ends on its end of turn),
        # never a trailing observation or a guide's opening that left no room
        n, end = episode.prompt_length, episode.turn_end
        prompt_ids.append(episode.ids[:n])
        completion_ids.append(episode.ids[n:end] if end > n else [eos_id])
        env_mask.append(trained_mask(episode, train)[n:end] if end > n else [0])
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": completion_ids,
        "logprobs": None,
        "env_mask": env_mask,
        "episode": [e.to_json() for e in episodes],
    }


def make_rollout_func(rows: Sequence[dict], spec: RolloutSpec, executor=None) -> Callable[[list, object], dict]:
    """A `rollout_func` for `GRPOTrainer` over the tasks of `prompt_rows`: each prompt's episode is run by
    the trainer's current policy, sampled at the trainer's temperature and top-p (with `executor`, a fixed
    second model, the policy writes the plan blocks and the executor the rest of each turn)."""
    tasks = {row["prompt"][-1]["task"]: (row["env"], row["seed"]) for row in rows}

    def rollout(prompts: list, trainer) -> dict:
        try:
            chosen = [tasks[prompt[-1]["task"]] for prompt in prompts]
        except (KeyError, TypeError, IndexError):
            raise ValueError("rollout_func got a prompt that is not one of its tasks' prompts") from None
        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = trainer.processing_class
        writer = vllm_turns(trainer) if getattr(trainer, "use_vllm", False) else None
        with ranks.alone():  # the trainer gave each process its own prompts
            episodes = run_episodes(
                model, tokenizer, chosen, spec.mode, spec.every, spec.max_new_tokens, spec.max_context,
                spec.batch_size, temperature=trainer.args.temperature, top_p=trainer.args.top_p,
                progress=False, guide=expert_guide if spec.guided else None, executor=executor, writer=writer,
            )  # fmt: skip
        return rollout_rows(episodes, spec.train, tokenizer.eos_token_id)

    return rollout


def vllm_turns(trainer) -> TurnWriter:
    """The policy's turns sampled by the trainer's vLLM engine (`rl.generation: vllm_colocate` or
    `vllm_server`), whose weights TRL syncs before each rollout. Its sampling settings are the trainer's
    (temperature, top-p, and `max_completion_length`, set to the turn budget), one completion per context.

    One process only: vLLM's generate is a collective call in every process, and episodes of different
    lengths would call it different numbers of times."""
    if trainer.accelerator.num_processes > 1:
        raise RunError("vLLM rollouts run in one process for now; use rl.generation: hf under accelerate launch")
    eos = trainer.processing_class.eos_token_id

    def write(batch, max_new_tokens, temperature, top_p) -> list[list[int]]:
        _, completions, _, _ = trainer.vllm_generation.generate(prompts=list(batch), images=None, num_generations=1)
        return cut_after_eos(completions, eos)

    return write
