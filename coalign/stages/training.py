"""What the SFT and DPO stages share: trainer arguments from our settings, train, save, log."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers.trainer import TRAINING_ARGS_NAME
from transformers.utils import logging as hf_logging

from coalign.config import DPOSettings, GRPOSettings, SFTSettings
from coalign.runs import atomic_dir


def common_args(settings: SFTSettings | DPOSettings | GRPOSettings, out: Path, seed: int) -> dict:
    """Keyword arguments every TRL trainer config of ours takes (SFT, DPO, GRPO)."""
    return dict(
        output_dir=str(out / "trainer"),
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        warmup_steps=settings.warmup_ratio,  # a float below 1 is a ratio in transformers 5
        lr_scheduler_type=settings.lr_scheduler,
        logging_steps=settings.logging_steps,
        report_to=[],
        seed=seed,
        data_seed=seed,
        bf16=settings.bf16,
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
    )


def trainer_args(settings: SFTSettings | DPOSettings, out: Path, seed: int) -> dict:
    """Keyword arguments common to TRL's SFTConfig and DPOConfig."""
    grouped = getattr(settings, "group_by_length", False)
    return dict(
        common_args(settings, out, seed),
        train_sampling_strategy="group_by_length" if grouped else "random",
        num_train_epochs=settings.epochs,
        weight_decay=settings.weight_decay,
        max_length=settings.max_length,
        save_strategy="no",
    )


def train_and_save(make_trainer, tokenizer, out: Path, resume: str | None = None, **log) -> Path:
    """Build the trainer quietly, train (from the checkpoint `resume` when given), save model and tokenizer
    (padded left again) and train_log.json into a temporary folder that then replaces `out`, so `out`
    never holds half a checkpoint. The folder is the same bytes wherever it is saved: the Trainer's
    pickled arguments are left out. A GRPO run's log rows (rewards per step) are kept whole."""
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        trainer = make_trainer()
        result = trainer.train(resume_from_checkpoint=resume)
    finally:
        hf_logging.set_verbosity(previous)
    tokenizer.padding_side = "left"
    rows = [row for row in trainer.state.log_history if "loss" in row]
    record = {"train_loss": result.training_loss, "losses": [row["loss"] for row in rows], "steps": result.global_step}
    if any("rewards/accuracies" in row for row in rows):
        record["reward_accuracies"] = [row["rewards/accuracies"] for row in rows if "rewards/accuracies" in row]
    if any("reward" in row for row in rows):
        record["history"] = [row for row in rows if "reward" in row]
    with atomic_dir(out) as tmp:
        trainer.save_model(str(tmp))
        # the Trainer's pickled arguments hold the folder's path: nothing loads them, and once a run folder
        # is moved they would make identical weights look changed to the stages that read them
        (tmp / TRAINING_ARGS_NAME).unlink()
        tokenizer.save_pretrained(str(tmp))
        (tmp / "train_log.json").write_text(json.dumps({**record, **log}))
    return out
