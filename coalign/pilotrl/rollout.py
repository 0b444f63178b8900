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

With a bounded context (`RolloutSpec.history`) each turn was written in a context of its own, so one sequence
cannot hold the episode: the rollout also returns each turn's (context, turn, trained mask), and the trainer
trains every turn in its own context with its episode's advantage (`training.grpo.StageTrainer`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from accelerate.utils import gather_object
from trl.distributed import DistributedBackend
from trl.models import unwrap_model_for_generation

from coalign.core import ranks
from coalign.core.errors import RunError
from coalign.envs import make_env
from coalign.formats.adaplan import first_message
from coalign.models.turn_writers import cut_after_eos
from coalign.pilotrl.runtime import Episode, Segment, expert_guide, run_episodes
from coalign.training.common import as_one_process

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
    history: int | None = None  # a bounded context (`runtime`): each turn trained in the context it was given

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


def trained_mask(episode: Episode | Segment, train: str) -> list[int]:
    """1 on the tokens a stage trains: all generated ones, or only those of plan blocks, or only the rest."""
    if train == "all":
        return list(episode.mask)
    if train == "plan":
        return list(episode.plan_mask)
    return [m - p for m, p in zip(episode.mask, episode.plan_mask, strict=True)]


def rollout_rows(episodes: Sequence[Episode], train: str, eos_id: int) -> dict:
    """TRL's rollout output for finished episodes: prompt, the rest as the completion, the trained mask.
    An episode that generated nothing (its prompt left no room) gets one untrained end-of-sequence token,
    as the trainer reads every completion's last token. Bounded-context episodes also give `turns`: per
    episode, each turn's (context, turn ids, trained mask), which the trainer trains in place of the row
    (`training.grpo.StageTrainer`); the row itself is then the episode's last context and turn."""
    prompt_ids, completion_ids, env_mask = [], [], []
    for episode in episodes:
        # through the last turn taken, an executor's rest included (so that the row ends on its end of turn),
        # never a trailing observation or a guide's opening that left no room
        n, end = episode.prompt_length, episode.turn_end
        prompt_ids.append(episode.ids[:n])
        completion_ids.append(episode.ids[n:end] if end > n else [eos_id])
        env_mask.append(trained_mask(episode, train)[n:end] if end > n else [0])
    rows = {
        "prompt_ids": prompt_ids,
        "completion_ids": completion_ids,
        "logprobs": None,
        "env_mask": env_mask,
        "episode": [e.to_json() for e in episodes],
    }
    if any(e.history is not None for e in episodes):  # each turn in its own context (`training.grpo.turn_rows`)
        rows["turns"] = [[(s.context, s.turn, trained_mask(s, train)) for s in e.segments] for e in episodes]
    return rows


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
        tokenizer = trainer.processing_class
        writer = vllm_turns(trainer) if getattr(trainer, "use_vllm", False) else None
        if writer is None:
            refuse_fsdp_rollouts(trainer.accelerator)
        # the policy whole for the rollout: under ZeRO-3 TRL gathers its weights once and lifts DeepSpeed's
        # per-forward gathering, and transformers decodes without waiting on the other ranks, whose episodes
        # take other numbers of turns (with vLLM writing, the policy's weights go unused: nothing to gather)
        unwrapped = unwrap_model_for_generation(
            trainer.model_wrapped, trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation and writer is None,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        )  # fmt: skip
        with unwrapped as model, as_one_process(), ranks.alone():  # the trainer gave each process its own prompts
            episodes = run_episodes(
                model, tokenizer, chosen, spec.mode, spec.every, spec.max_new_tokens, spec.max_context,
                spec.batch_size, temperature=trainer.args.temperature, top_p=trainer.args.top_p,
                progress=False, guide=expert_guide if spec.guided else None, executor=executor, writer=writer,
                history=spec.history,
            )  # fmt: skip
        if writer is not None:
            writer.finish()  # other ranks' episodes may still call vLLM, which under several processes takes every rank
        return rollout_rows(episodes, spec.train, tokenizer.eos_token_id)

    return rollout


def refuse_fsdp_rollouts(accelerator) -> None:
    """RunError for the policy's own rollouts under FSDP with several processes: FSDP2 keeps every forward an
    all-gather of the other ranks' shards (TRL's `unwrap_model_for_generation` gathers only ZeRO-3's), so ranks
    whose episodes take different numbers of turns would wait on each other for ever."""
    if accelerator.num_processes > 1 and DistributedBackend(accelerator).is_fsdp:
        raise RunError(
            "PilotRL's rollouts under FSDP with several processes would hang (every forward is an all-gather, "
            "and ranks run episodes of different lengths); train GRPO with DeepSpeed ZeRO-3 or DDP "
            "(coalign accelerate-config zero3 | ddp), or generate with pilotrl.rl.generation: vllm_colocate"
        )


def vllm_turns(trainer) -> VLLMTurns:
    """The policy's turns sampled by the trainer's vLLM engine (`rl.generation: vllm_colocate` or
    `vllm_server`), whose weights TRL syncs before each rollout. Its sampling settings are the trainer's
    (temperature, top-p, and `max_completion_length`, set to the turn budget), one completion per context."""
    args = trainer.args
    processes = trainer.accelerator.num_processes
    lockstep = processes > 1 and (args.vllm_mode == "server" or args.vllm_tensor_parallel_size > 1)
    return VLLMTurns(trainer.vllm_generation, trainer.processing_class.eos_token_id, lockstep)


class VLLMTurns:
    """A turn writer over TRL's `vllm_generation.generate`, which under several processes is a collective call
    in server mode (every rank's prompts gathered to the main one, which asks the server, and each rank's slice
    sent back: a slice assumes every rank sent as many) and with tensor parallelism (gathered in each group);
    only colocated engines with tensor parallel 1 generate each rank's prompts alone. Episodes of different
    lengths call the writer a different number of times, so where the call is collective (`lockstep`) each
    call is a round every rank joins: the ranks say how many contexts they bring, all call vLLM with the most
    any brings (padded with one-token prompts, whose completions are dropped), and a rank whose episodes are
    done keeps joining with none (`finish`) until no rank brings any. vLLM never gets an empty call."""

    def __init__(self, engine, eos_id: int, lockstep: bool):
        self.engine, self.eos_id, self.lockstep = engine, eos_id, lockstep

    def __call__(self, batch: Sequence[list[int]], max_new_tokens: int, temperature: float, top_p: float):
        if not self.lockstep:
            return self._generate(list(batch))
        return self._round(list(batch))

    def finish(self) -> None:
        """After this rank's episodes: join the other ranks' calls until none has a context left."""
        if self.lockstep:
            while self._round([]) is not None:
                pass

    def _round(self, batch: list[list[int]]) -> list[list[int]] | None:
        """One call every rank joins, with as many prompts on each; None when no rank brought any."""
        width = max(gather_object([len(batch)]))
        if width == 0:
            return None
        return self._generate(batch + [[self.eos_id]] * (width - len(batch)))[: len(batch)]

    def _generate(self, prompts: list[list[int]]) -> list[list[int]]:
        _, completions, _, _ = self.engine.generate(prompts=prompts, images=None, num_generations=1)
        return cut_after_eos(completions, self.eos_id)
