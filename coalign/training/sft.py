"""Supervised fine-tuning of one agent with TRL's SFTTrainer, loss on the completion only.

Examples are (user turn, assistant completion) pairs. The user turn is rendered with the
model's chat template when it has one, else with Lumos's `<|user|>`/`<|assistant|>` format,
exactly as at generation time, so training and inference see the same context.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch.nn.functional as F
from datasets import Dataset
from trl import SFTConfig, SFTTrainer

from coalign.config import LoraSettings, SFTSettings
from coalign.models.load import as_text, load_tokenizer, render_prompt
from coalign.models.turns import encode
from coalign.training.common import train_and_save, trainer_args, training_model, trl_config


def sft_dataset(tokenizer, examples: Sequence[tuple[str, str]]) -> Dataset:
    """Prompt-completion rows in TRL's standard (non-conversational) format, the completions as text
    (`models.load.as_text`: a gold action that spells `</s>` does not end its turn there)."""
    return Dataset.from_dict(
        {
            "prompt": [render_prompt(tokenizer, user) for user, _ in examples],
            "completion": [as_text(tokenizer, completion) for _, completion in examples],
        }
    )


def sft(
    init: str | Path,
    examples: Sequence[tuple[str, str]],
    out_dir: str | Path,
    settings: SFTSettings,
    seed: int = 0,
    trust_remote_code: bool = False,
    lora: LoraSettings | None = None,
    key: str = "",
) -> Path:
    """Fine-tune the model at `init` on `examples` (LoRA adapters under `lora`); save model and tokenizer to
    `out_dir`. `key`: the config block of `settings` (`grounder_sft`), named in errors."""
    if not examples:
        raise ValueError(f"no training examples for {out_dir}: the dataset is empty")
    return _fit(
        init, lambda tokenizer: sft_dataset(tokenizer, examples), out_dir, settings, seed, trust_remote_code, lora, key
    )


class LogitsLossSFTTrainer(SFTTrainer):
    """TRL's SFTTrainer whose loss, on a CPU in bf16, is computed from the logits of the completion tokens alone.

    TRL computes the loss with a fused LM head that casts every vocabulary tile and the head's weights to fp32 on
    each call; on a GPU it runs as a triton kernel, but on a CPU it is plain torch, and there the whole step ran
    at 0.75x the speed of this one (SmolLM2-135M, `benchmarks/real_model_speed.py`). Here the backbone's hidden
    states at the positions that predict a completion token go through the head, in bf16 autocast, and their
    cross-entropy is summed and divided as TRL divides it (`num_items_in_batch`). Only those positions: a
    grounder row is ~90% prompt, and the full logits of a batch (49,152 columns) would take gigabytes. The loss is
    TRL's (tests/training/test_sft_loss.py); TRL's entropy and token-accuracy metrics are not logged on this path,
    and a model whose head is more than a linear layer (a logit soft-cap) takes TRL's path.
    """

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        config = getattr(model, "config", None)
        if not (self.args.use_cpu and self.args.bf16) or getattr(config, "final_logit_softcapping", None):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        kept = {k: inputs[k] for k in ("input_ids", "attention_mask", "position_ids") if k in inputs}
        hidden = model.get_decoder()(**kept, use_cache=False).last_hidden_state[:, :-1]
        labels = inputs["labels"][:, 1:].to(hidden.device)
        scored = labels != -100
        logits = model.get_output_embeddings()(hidden[scored]).float()
        loss = F.cross_entropy(logits, labels[scored], reduction="sum")
        loss = loss / (num_items_in_batch if num_items_in_batch is not None else scored.sum().clamp(min=1))
        return (loss, None) if return_outputs else loss


def _fit(
    init,
    make_data,
    out_dir,
    settings: SFTSettings,
    seed: int,
    trust_remote_code: bool,
    lora: LoraSettings | None,
    key: str,
) -> Path:
    """TRL's SFTTrainer with the loss on completions only, over the dataset `make_data(tokenizer)`."""
    out = Path(out_dir)
    tokenizer = load_tokenizer(init, trust_remote_code)
    tokenizer.padding_side = "right"
    config = trl_config(SFTConfig, completion_only_loss=True, **trainer_args(settings, out, seed, key))
    model, peft_config = training_model(init, trust_remote_code, lora, config.bf16)  # after its config
    data = make_data(tokenizer)

    def trainer() -> SFTTrainer:
        return LogitsLossSFTTrainer(
            model=model, args=config, train_dataset=data, processing_class=tokenizer, peft_config=peft_config
        )

    return train_and_save(trainer, tokenizer, out, lora=lora, trust_remote_code=trust_remote_code)


def conversation_dataset(tokenizer, conversations: Sequence[Sequence[dict[str, str]]], max_length: int) -> Dataset:
    """Multi-turn rows tokenized by appending turns (`models.turns.encode`): the loss falls on the model's
    turns only (TRL's `completion_mask`), observations and prompts are context. A row longer than
    `max_length` is refused rather than cut, since a cut row would train on a turn without its end."""
    rows = [encode(tokenizer, messages) for messages in conversations]
    longest = max((len(ids) for ids, _ in rows), default=0)
    if longest > max_length:
        raise ValueError(f"a training conversation has {longest} tokens, more than max_length {max_length}")
    return Dataset.from_dict({"input_ids": [ids for ids, _ in rows], "completion_mask": [m for _, m in rows]})


def sft_conversations(
    init: str | Path,
    conversations: Sequence[Sequence[dict[str, str]]],
    out_dir: str | Path,
    settings: SFTSettings,
    seed: int = 0,
    trust_remote_code: bool = False,
    lora: LoraSettings | None = None,
    key: str = "",
) -> Path:
    """Fine-tune the model at `init` on whole conversations (an agent's episodes: its turns trained,
    observations masked; LoRA adapters under `lora`); save model and tokenizer to `out_dir`. `key`: as `sft`."""
    if not conversations:
        raise ValueError(f"no training conversations for {out_dir}: the dataset is empty")
    return _fit(
        init,
        lambda tokenizer: conversation_dataset(tokenizer, conversations, settings.max_length),
        out_dir,
        settings,
        seed,
        trust_remote_code,
        lora,
        key,
    )
