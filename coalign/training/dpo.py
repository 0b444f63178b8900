"""MOAT stage 1, step 3: DPO on the planner with TRL's DPOTrainer.

The reference is the planner at the start of the stage. Its log-probabilities are precomputed once
(`precompute_ref_log_probs`), so no second model stays in memory during training. With LoRA there is
none at all: TRL computes them with the adapter disabled (a fresh adapter) or with a frozen copy of
the adapter (one that trains on, `lora.merge: false`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from datasets import Dataset, load_from_disk
from trl import DPOConfig, DPOTrainer

from coalign.config import DPOSettings, LoraSettings
from coalign.core import ranks
from coalign.models.load import as_text, load_tokenizer, render_prompt
from coalign.training.common import train_and_save, trainer_args, training_model, trl_config


def dpo_dataset(tokenizer, triples: Sequence[tuple[str | Sequence[dict[str, str]], str, str]]) -> Dataset:
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
    triples: Sequence[tuple[str | Sequence[dict[str, str]], str, str]],
    out_dir: str | Path,
    settings: DPOSettings,
    seed: int = 0,
    trust_remote_code: bool = False,
    lora: LoraSettings | None = None,
    key: str = "",
) -> Path:
    """Train the model at `init` (LoRA adapters under `lora`) on (prompt, chosen, rejected) triples; save to
    `out_dir`. `key`: the config block of `settings` (`planner_dpo`), named in errors.

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
        **trainer_args(settings, out, seed, key),
    )
    model, peft_config = training_model(init, trust_remote_code, lora)  # after its config: `training_model`
    data = shared_dataset(dpo_dataset(tokenizer, triples), out / "trainer" / "pairs")

    def trainer() -> DPOTrainer:
        return DPOTrainer(
            model=model, args=config, train_dataset=data, processing_class=tokenizer, peft_config=peft_config
        )

    return train_and_save(trainer, tokenizer, out, lora=lora, trust_remote_code=trust_remote_code, pairs=len(triples))
