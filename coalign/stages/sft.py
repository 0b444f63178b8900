"""Supervised fine-tuning of one agent with TRL's SFTTrainer, loss on the completion only.

Examples are (user turn, assistant completion) pairs. The user turn is rendered with the
model's chat template when it has one, else with Lumos's `<|user|>`/`<|assistant|>` format,
exactly as at generation time, so training and inference see the same context.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from datasets import Dataset
from trl import SFTConfig, SFTTrainer

from coalign.config import SFTSettings
from coalign.models import load_model, load_tokenizer, render_prompt
from coalign.stages.training import train_and_save, trainer_args


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
    trust_remote_code: bool = False,
) -> Path:
    """Fine-tune the model at `init` on `examples`; save model and tokenizer to `out_dir`."""
    if not examples:
        raise ValueError(f"no training examples for {out_dir}: the dataset is empty")
    out = Path(out_dir)
    tokenizer = load_tokenizer(init, trust_remote_code)
    tokenizer.padding_side = "right"
    model = load_model(init, trust_remote_code, dtype="float32")
    config = SFTConfig(completion_only_loss=True, **trainer_args(settings, out, seed))
    data = sft_dataset(tokenizer, examples)
    return train_and_save(
        lambda: SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer), tokenizer, out
    )
