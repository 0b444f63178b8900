"""GRPO with TRL's GRPOTrainer, resumable: the caller hands in the episodes (`rollout_func`), the reward
functions and how long to train; PilotRL's stages (`pilotrl.curriculum`) hand in the AdaPlan runtime's, the
stage's rewards and its epochs.

A stage saves a trainer checkpoint every `save_steps` steps under `<out>/trainer/`; run again after a
kill, it resumes from the last one (weights, optimizer, scheduler, RNG states and the data order), and
the finished model replaces `<out>` in one move.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
from datasets import Dataset
from torch.utils.data import Sampler
from transformers.trainer_utils import get_last_checkpoint
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import RepeatSampler, pad

from coalign.config import GRPOSettings, LoraSettings
from coalign.core.errors import RunError
from coalign.models.load import load_tokenizer
from coalign.models.vllm_engine import (
    INSTALL,
    awake,
    engine,
    on_cpu,
    reload_weights,
    set_cpu_defaults,
    tied_names,
    weights_changed,
)
from coalign.training.common import common_args, train_and_save, training_model, trl_config


class EpochSampler(RepeatSampler):
    """TRL's sampler, each epoch's task order drawn from (seed, epoch). TRL's draws epoch after epoch from one
    generator, which a resumed run builds anew: a stage resumed into its second epoch would replay the first
    epoch's order. The trainer calls `set_epoch` before every epoch, resumed or not."""

    def set_epoch(self, epoch: int) -> None:
        if self.shuffle:
            self.generator.manual_seed((self.seed or 0) * 1_000_003 + epoch)


class StageTrainer(GRPOTrainer):
    """`GRPOTrainer` with `EpochSampler`, so that a stage resumed anywhere is the uninterrupted one. A colocated
    vLLM engine is the process's one (`process_engine`: every stage of a run samples from the engine the first
    started), awake only through each step's rollout phase (`_generate`); on a CPU its weights are synced by
    `vllm_engine.reload_weights`."""

    def __init__(self, *args, **kwargs) -> None:
        self.colocated = kwargs["args"].use_vllm and kwargs["args"].vllm_mode == "colocate"
        if self.colocated:
            own_rendezvous_port()
        with process_engine(kwargs["args"]):
            super().__init__(*args, **kwargs)
        if self.colocated:
            generation, trl_sync = self.vllm_generation, self.vllm_generation.sync_weights
            # TRL's sync calls `load_weights`, which cannot write into a CPU engine's re-packed linear layers; there
            # the same weights, named as TRL names them (a PEFT model's merged), go through vLLM's in-place reload,
            # a tied head's under its own name too
            tied = {
                vllm_name(generation, name): [vllm_name(generation, alias) for alias in aliases]
                for name, aliases in tied_names(generation.model).items()
            }

            def synced() -> None:
                if on_cpu():
                    reload_weights(generation.llm, generation._iter_named_params(), tied)
                else:
                    trl_sync()
                weights_changed()  # the policy's now, no checkpoint's

            generation.sync_weights = synced

    def _generate(self, prompts: list) -> tuple:
        """TRL's rollout phase (weight sync, then the episodes), a colocated engine awake through it and asleep
        while the trainer computes: woken once a generation batch, however many turns the episodes take."""
        with awake() if self.colocated else contextlib.nullcontext():
            return super()._generate(prompts)

    def _get_train_sampler(self, dataset: Dataset | None = None) -> Sampler:
        sampler = super()._get_train_sampler(dataset)
        if type(sampler) is not RepeatSampler:
            raise RunError(
                f"TRL's GRPO sampler is a {type(sampler).__name__}; this stage resumes with its RepeatSampler"
            )
        sampler.__class__ = EpochSampler  # TRL's arguments, our epochs
        return sampler

    def _generate_and_score_completions(self, inputs: list[dict]) -> dict:
        """TRL's generation batch; where the rollout gave `turns` (a bounded context: each turn written in a
        context of its own), every turn a row of its own with its episode's advantage (`turn_rows`)."""
        batch = super()._generate_and_score_completions(inputs)
        turns = [row.get("turns") for row in inputs]
        if all(t is None for t in turns):
            return batch
        computed = sorted({"old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps"} & batch.keys())
        if computed:  # computed on the episodes' rows, which the turns replace
            raise RunError(f"a bounded context trains per turn, which {', '.join(computed)} would not follow: "
                           "keep rl.beta 0 and one generation per optimizer step")  # fmt: skip
        if self.args.mask_truncated_completions:  # a turn cut off before its end of turn trains nothing
            turns = [[(c, t, m if t[-1:] and t[-1] in self.eos_token_ids else [0] * len(m)) for c, t, m in row]
                     for row in turns]  # fmt: skip
        steps = self.args.steps_per_generation if self.model.training else 1
        rows = turn_rows(turns, batch["advantages"], self._tokenizer.pad_token_id, self.eos_token_ids[0], steps)
        trained = rows["completion_mask"] * rows["tool_mask"]
        rows["num_items_in_batch"] = self.accelerator.gather(trained.sum()).sum()
        return {**batch, **rows}


def turn_rows(
    turns: Sequence[Sequence[tuple[Sequence[int], Sequence[int], Sequence[int]]]],
    advantages: torch.Tensor,
    pad_id: int,
    eos_id: int,
    multiple: int = 1,
) -> dict[str, torch.Tensor]:
    """Each row's turns (context ids, turn ids, trained mask) as rows of their own, in TRL's generation-batch
    tensors, each with its row's advantage. Under TRL's token-level loss (`dapo`, its default: the batch's loss
    is the sum over its trained tokens divided by their count) this is the objective of the episodes trained
    whole, every token scored in the context it was sampled in. Padded with untrained one-token rows to a
    multiple of `multiple` rows: TRL splits a generation batch into that many equal steps and drops the rest."""
    rows = [(c, t, m, a) for row, a in zip(turns, advantages.tolist(), strict=True) for c, t, m in row]
    rows += [([eos_id], [eos_id], [0], 0.0)] * (-len(rows) % multiple or (0 if rows else multiple))
    device = advantages.device

    def stacked(values: list[Sequence[int]], side: str, fill: int) -> torch.Tensor:
        return pad([torch.tensor(list(v), dtype=torch.long) for v in values], fill, side).to(device)

    return {
        "prompt_ids": stacked([c for c, *_ in rows], "left", pad_id),
        "prompt_mask": stacked([[1] * len(c) for c, *_ in rows], "left", 0),
        "completion_ids": stacked([t for _, t, *_ in rows], "right", pad_id),
        "completion_mask": stacked([[1] * len(t) for _, t, *_ in rows], "right", 0),
        "tool_mask": stacked([m for *_, m, _ in rows], "right", 0),
        "advantages": torch.tensor([a for *_, a in rows], dtype=advantages.dtype, device=device),
    }


def vllm_name(generation, name: str) -> str:
    """A parameter's name as TRL's weight sync (`generation`'s) gives it to vLLM: without the parts a PEFT, FSDP
    or activation-checkpointing wrapper adds."""
    name = name.removeprefix("base_model.model.").replace(".base_layer", "")
    return generation._fix_param_name_to_vllm(name, ["_fsdp_wrapped_module.", "modules_to_save.default."])


def own_rendezvous_port() -> None:
    """Give a one-process run's colocated vLLM engine a port of its own to rendezvous on (`MASTER_PORT`).

    Unset, TRL takes the first of 29500, 23456, ... that it can bind at that moment, then lets it go; two runs
    that start their engines together on one machine (a bench's jobs side by side) both take 29500, and the
    second fails to listen on it (EADDRINUSE). The system's pick of a free ephemeral port differs between them.
    A launched run's port is the launcher's, left as it is."""
    if os.environ.get("MASTER_PORT") or os.environ.get("WORLD_SIZE", "1") != "1":
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(probe.getsockname()[1])


@contextlib.contextmanager
def process_engine(args: GRPOConfig) -> Iterator[None]:
    """While TRL starts a colocated vLLM engine: the process's one in its place (`vllm_engine.engine`), which the
    first stage starts with TRL's options and each later stage gets with its starting checkpoint reloaded; in the
    policy's precision (`vllm_engine.engine_options`: TRL's call names none, and vLLM would sample an fp32 policy's
    rollouts in 16 bits), on a CPU eager and with vLLM's CPU settings (`vllm_engine.set_cpu_defaults`)."""
    if not (args.use_vllm and args.vllm_mode == "colocate"):
        yield
        return
    set_cpu_defaults()
    from trl.generation import vllm_generation

    started = vllm_generation.LLM

    def llm(model: str, trust_remote_code: bool = False, **options):
        return engine(model, trust_remote_code, args.bf16, **options)

    vllm_generation.LLM = llm
    try:
        yield
    finally:
        vllm_generation.LLM = started


def grpo_config(
    settings: GRPOSettings,
    epochs: float,
    out: Path,
    seed: int,
    reward_weights: list[float],
    turn_tokens: int,
    context_tokens: int | None = None,
) -> GRPOConfig:
    """TRL's arguments for one stage of `epochs` from our settings. `turn_tokens`: the rollouts' budget per turn,
    which is what vLLM generates at most per call (the trainer cuts nothing that a rollout function returns).
    `context_tokens`: an episode's whole budget (`pilotrl.max_context`: a turn is written only where its context
    and its tokens fit in it), so the longest sequence vLLM holds; unset, vLLM takes the model's own limit
    (131,072 tokens for Llama-3.1), whose KV cache a colocated engine's share of the GPU cannot hold."""
    vllm = settings.generation != "hf"
    if vllm and importlib.util.find_spec("vllm") is None:
        raise RunError(f"rl.generation: {settings.generation} needs vLLM: {INSTALL}")
    return trl_config(
        GRPOConfig,
        **common_args(settings, out, seed, "pilotrl.rl"),
        reward_weights=reward_weights,
        num_train_epochs=epochs,
        num_generations=settings.num_generations,
        temperature=settings.temperature,
        top_p=settings.top_p,
        beta=settings.beta,
        epsilon=settings.epsilon,
        mask_truncated_completions=settings.mask_truncated_completions,
        save_strategy="steps",
        save_steps=settings.save_steps,
        log_completions=False,
        max_completion_length=turn_tokens,
        use_vllm=vllm,
        **(
            {
                "vllm_mode": settings.generation.removeprefix("vllm_"),
                "vllm_gpu_memory_utilization": settings.vllm_gpu_memory_utilization,
                "vllm_max_model_length": context_tokens,
                "vllm_enable_sleep_mode": False,
                # the rollout returns no sampling log-probs (logprobs None): TRL's correction would subtract None
                "vllm_importance_sampling_correction": False,
                **({"vllm_server_base_url": settings.vllm_server_url} if settings.vllm_server_url else {}),
            }
            if vllm
            else {}
        ),
    )


def train_grpo(
    init: str | Path,
    out: str | Path,
    rows: list[dict],
    settings: GRPOSettings,
    reward_funcs: list[Callable[..., list[float]]],
    reward_weights: list[float],
    rollout_func: Callable[[list, object], dict],
    turn_tokens: int,
    *,
    name: str,
    epochs: float,
    seed: int = 0,
    trust_remote_code: bool = False,
    lora: LoraSettings | None = None,
    context_tokens: int | None = None,
) -> Path:
    """Train the model at `init` (LoRA adapters under `lora`) by GRPO on the prompts of `rows`, each one's
    completions from `rollout_func` (at most `turn_tokens` per generation call, `context_tokens` per episode),
    scored by `reward_funcs` weighted by `reward_weights`, for `epochs`; save it to `out`, its train_log.json
    naming the stage (`name`)."""
    out = Path(out)
    if not rows:
        raise ValueError(f"no training tasks for {out}: the dataset is empty")
    tokenizer = load_tokenizer(init, trust_remote_code)
    config = grpo_config(settings, epochs, out, seed, reward_weights, turn_tokens, context_tokens)
    model, peft_config = training_model(init, trust_remote_code, lora, config.bf16)  # after its config

    def trainer() -> GRPOTrainer:
        return StageTrainer(
            model=model,
            reward_funcs=reward_funcs,
            args=config,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            rollout_func=rollout_func,
            peft_config=peft_config,
        )

    checkpoints = out / "trainer"
    resume = get_last_checkpoint(str(checkpoints)) if checkpoints.is_dir() else None
    return train_and_save(
        trainer, tokenizer, out, resume=resume, lora=lora, trust_remote_code=trust_remote_code, stage=name
    )
