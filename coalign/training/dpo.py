"""MOAT stage 1, step 3: DPO on the planner with TRL's DPOTrainer.

The reference is the planner at the start of the stage. Its log-probabilities are precomputed once
(`precompute_ref_log_probs`), so no second model stays in memory during training. With LoRA there is
none at all: TRL computes them with the adapter disabled (a fresh adapter) or with a frozen copy of
the adapter (one that trains on, `lora.merge: false`).

Pairs held aside are TRL's eval set: their reference log-probs are precomputed with the training
pairs', and the trained planner is evaluated on them once, at the end (`HELD_ASIDE`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from datasets import Dataset, load_from_disk
from trl import DPOConfig, DPOTrainer

from coalign.config import DPOSettings, LoraSettings
from coalign.core import ranks
from coalign.models.load import as_text, load_tokenizer, render_prompt
from coalign.training.common import stage_batch, train_and_save, trainer_args, training_model, trl_config

Triple = tuple[str | Sequence[dict[str, str]], str, str]
# What train_log.json's `eval` holds of TRL's metrics on the held-aside pairs: the DPO loss (sigmoid: ln 2 at the
# start, where the planner is its reference), the mean implicit reward margin beta x (chosen - rejected log-ratio),
# the share of pairs whose chosen plan has the higher reward, and each side's mean reward.
HELD_ASIDE = {
    "loss": "eval_loss",
    "margin": "eval_rewards/margins",
    "accuracy": "eval_rewards/accuracies",
    "chosen_reward": "eval_rewards/chosen",
    "rejected_reward": "eval_rewards/rejected",
}


def dpo_dataset(tokenizer, triples: Sequence[Triple]) -> Dataset:
    """Rows in TRL's standard (non-conversational) preference format: the prompt rendered as SFT and generation
    render it (one user turn, or a conversation so far), chosen and rejected as text (`models.load.as_text`) and
    ending with EOS."""
    eos = tokenizer.eos_token
    return Dataset.from_dict(
        {
            "prompt": [render_prompt(tokenizer, user) for user, _, _ in triples],
            "chosen": [as_text(tokenizer, chosen) + eos for _, chosen, _ in triples],
            "rejected": [as_text(tokenizer, rejected) + eos for _, _, rejected in triples],
        }
    )


def shared_dataset(data: Dataset, folder: Path) -> Dataset:
    """In a multi-process run, `data` as files in `folder`, which every rank reads: TRL caches the reference
    log-probs it precomputes beside a dataset's files, where all ranks find them; an in-memory dataset's cache
    would go to each process's own temporary folder, and the other ranks would look for it in theirs."""
    if ranks.world_size() == 1:
        return data
    if ranks.is_main():
        data.save_to_disk(str(folder))
    ranks.barrier()
    return load_from_disk(str(folder))


def dpo(
    init: str | Path,
    triples: Sequence[Triple],
    out_dir: str | Path,
    settings: DPOSettings,
    seed: int = 0,
    trust_remote_code: bool = False,
    lora: LoraSettings | None = None,
    key: str = "",
    held_aside: Sequence[Triple] = (),
) -> Path:
    """Train the model at `init` (LoRA adapters under `lora`) on (prompt, chosen, rejected) triples; save to
    `out_dir`. `key`: the config block of `settings` (`planner_dpo`), named in errors. `held_aside`: triples
    never trained on, on which the trained model is evaluated (train_log.json's `eval`, `HELD_ASIDE`).

    A prompt is one user turn, or a conversation so far ending with a user turn (a web task's planner turn,
    MOAT per turn); `models.load.render_prompt` renders both as SFT and generation do."""
    if not triples:
        raise ValueError(f"no preference pairs for {out_dir}: every candidate gap fell below the threshold")
    out = Path(out_dir)
    tokenizer = load_tokenizer(init, trust_remote_code)
    tokenizer.padding_side = "right"
    config = trl_config(
        DPOConfig,
        beta=settings.beta,
        loss_type=[settings.loss_type],
        precompute_ref_log_probs=True,
        per_device_eval_batch_size=stage_batch(settings, key)[0],  # the memory training takes
        **trainer_args(settings, out, seed, key),
    )
    model, peft_config = training_model(init, trust_remote_code, lora, config.bf16)  # after its config
    data = shared_dataset(dpo_dataset(tokenizer, triples), out / "trainer" / "pairs")
    aside = shared_dataset(dpo_dataset(tokenizer, held_aside), out / "trainer" / "held_aside") if held_aside else None

    def trainer() -> DPOTrainer:
        return DPOTrainer(
            model=model,
            args=config,
            train_dataset=data,
            eval_dataset=aside,
            processing_class=tokenizer,
            peft_config=peft_config,
        )

    held = {"held_aside_pairs": len(held_aside)} if held_aside else {}
    return train_and_save(
        trainer, tokenizer, out, lora=lora, trust_remote_code=trust_remote_code, evaluated=HELD_ASIDE,
        pairs=len(triples), **held,
    )  # fmt: skip
