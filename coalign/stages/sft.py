"""Supervised fine-tuning of one agent with TRL's SFTTrainer, loss on the completion only.

Examples are (user turn, assistant completion) pairs. The user turn is rendered with the
model's chat template when it has one, else with Lumos's `<|user|>`/`<|assistant|>` format,
exactly as at generation time, so training and inference see the same context.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from datasets import Dataset
from transformers.utils import logging as hf_logging
from trl import SFTConfig, SFTTrainer

from coalign.config import SFTSettings
from coalign.models import load_model, load_tokenizer, render_prompt


def sft_dataset(tokenizer, examples: Sequence[tuple[str, str]]) -> Dataset:
    """Prompt-completion rows in TRL's standard (non-conversational) format."""
    return Dataset.from_dict(
        {
            "prompt": [render_prompt(tokenizer, user) for user, _ in examples],
            "completion": [completion for _, completion in examples],
        }
    )


def sft(
    init: str | Path,
    examples: Sequence[tuple[str, str]],
    out_dir: str | Path,
    settings: SFTSettings,
    seed: int = 0,
) -> Path:
    """Fine-tune the model at `init` on `examples`; save model and tokenizer to `out_dir`."""
    if not examples:
        raise ValueError(f"no training examples for {out_dir}: the dataset is empty")
    out = Path(out_dir)
    tokenizer = load_tokenizer(init)
    tokenizer.padding_side = "right"
    model = load_model(init, dtype="float32")
    config = SFTConfig(
        output_dir=str(out / "trainer"),
        num_train_epochs=settings.epochs,
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        warmup_steps=settings.warmup_ratio,  # a float below 1 is a ratio in transformers 5
        lr_scheduler_type=settings.lr_scheduler,
        weight_decay=settings.weight_decay,
        max_length=settings.max_length,
        completion_only_loss=True,
        logging_steps=settings.logging_steps,
        save_strategy="no",
        report_to=[],
        seed=seed,
        data_seed=seed,
        bf16=settings.bf16,
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
        dataset_num_proc=None,
        disable_tqdm=False,
    )
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        trainer = SFTTrainer(
            model=model, args=config, train_dataset=sft_dataset(tokenizer, examples), processing_class=tokenizer
        )
        result = trainer.train()
    finally:
        hf_logging.set_verbosity(previous)
    tokenizer.padding_side = "left"
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    (out / "train_log.json").write_text(
        json.dumps({"train_loss": result.training_loss, "losses": losses, "steps": result.global_step})
    )
    return out
