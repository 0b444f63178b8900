"""MOAT stage 1, step 3: DPO on the planner with TRL's DPOTrainer.

The reference is the planner at the start of the stage. Its log-probabilities are
precomputed once, so no second model stays in memory during training.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from datasets import Dataset
from transformers.utils import logging as hf_logging
from trl import DPOConfig, DPOTrainer

from coalign.config import DPOSettings
from coalign.models import load_model, load_tokenizer, render_prompt


def dpo(
    init: str | Path,
    triples: Sequence[tuple[str, str, str]],
    out_dir: str | Path,
    settings: DPOSettings,
    seed: int = 0,
) -> Path:
    """Train the model at `init` on (user turn, chosen, rejected) triples; save to `out_dir`."""
    if not triples:
        raise ValueError(f"no preference pairs for {out_dir}: every candidate gap fell below the threshold")
    out = Path(out_dir)
    tokenizer = load_tokenizer(init)
    tokenizer.padding_side = "right"
    model = load_model(init, dtype="float32")
    eos = tokenizer.eos_token
    data = Dataset.from_dict(
        {
            "prompt": [render_prompt(tokenizer, user) for user, _, _ in triples],
            "chosen": [chosen + eos for _, chosen, _ in triples],
            "rejected": [rejected + eos for _, _, rejected in triples],
        }
    )
    config = DPOConfig(
        output_dir=str(out / "trainer"),
        beta=settings.beta,
        loss_type=[settings.loss_type],
        learning_rate=settings.learning_rate,
        num_train_epochs=settings.epochs,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        warmup_steps=settings.warmup_ratio,  # a float below 1 is a ratio in transformers 5
        lr_scheduler_type=settings.lr_scheduler,
        weight_decay=settings.weight_decay,
        max_length=settings.max_length,
        precompute_ref_log_probs=True,
        logging_steps=settings.logging_steps,
        save_strategy="no",
        report_to=[],
        seed=seed,
        data_seed=seed,
        bf16=settings.bf16,
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
    )
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        trainer = DPOTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer)
        result = trainer.train()
    finally:
        hf_logging.set_verbosity(previous)
    tokenizer.padding_side = "left"
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    logs = [row for row in trainer.state.log_history if "loss" in row]
    accuracies = [row["rewards/accuracies"] for row in logs if "rewards/accuracies" in row]
    (out / "train_log.json").write_text(
        json.dumps(
            {
                "train_loss": result.training_loss,
                "losses": [row["loss"] for row in logs],
                "reward_accuracies": accuracies,
                "steps": result.global_step,
                "pairs": len(triples),
            }
        )
    )
    return out
