"""The SFT loss coalign computes on a CPU in bf16 (`training.sft.LogitsLossSFTTrainer`) against TRL's own."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from trl import SFTConfig, SFTTrainer

from coalign.models.bases import base_path
from coalign.models.load import load_model, load_tokenizer
from coalign.training.sft import LogitsLossSFTTrainer, sft_dataset

EXAMPLES = [
    ("What is 12 plus 30?", "R1 = Calculator(12 + 30)"),
    ("Natalia sold 48 clips in April and half as many in May. How many in all?", "R1 = Calculator(48/2); R2 = ..."),
    ("How many legs do 3 spiders have?", "R1 = Calculator(3 * 8)"),
    ("Tom has 5 apples and eats 2. How many are left?", "R1 = Calculator(5 - 2)"),
]


def losses(tmp_path, bf16: bool, lora: bool = False) -> tuple[float, float]:
    """One batch's loss from TRL's trainer and from ours, same model, same batch (use_cpu as coalign sets it)."""
    base = str(base_path("coalign-base"))
    tokenizer = load_tokenizer(base)
    tokenizer.padding_side = "right"
    args = SFTConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, bf16=bf16, use_cpu=True, completion_only_loss=True,
        report_to=[], gradient_checkpointing=False, max_length=256,
    )  # fmt: skip
    data = sft_dataset(tokenizer, EXAMPLES)
    out = []
    for cls in (SFTTrainer, LogitsLossSFTTrainer):
        model = load_model(base, dtype="float32")
        if lora:  # adapters on every linear layer but the head, as coalign's `lora` block trains them
            torch.manual_seed(0)
            config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
            model = get_peft_model(model, config)
        trainer = cls(model=model, args=args, train_dataset=data, processing_class=tokenizer)
        batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        masked = (batch["labels"] != -100).sum().item()
        assert 0 < masked < batch["labels"].numel()  # the prompt is masked, the completion is not
        with trainer.compute_loss_context_manager(), torch.no_grad():
            out.append(trainer.compute_loss(trainer.model, batch, num_items_in_batch=torch.tensor(masked - 4)).item())
    return out[0], out[1]


@pytest.mark.parametrize("lora", [False, True])
def test_the_logits_loss_is_trls_loss_in_bf16(tmp_path, lora):
    """Same tokens, same mean over the completion's tokens (num_items_in_batch the shifted count): TRL rounds the
    head's product in fp32 tiles, ours in bf16 autocast, so they agree to bf16's precision. With LoRA adapters
    (non-zero: initialised at random) the backbone's hidden states are the adapted ones."""
    trl_loss, ours = losses(tmp_path, bf16=True, lora=lora)
    assert ours == pytest.approx(trl_loss, rel=2e-2)
    assert ours > 0.5  # a fresh fine-tune of the base: far from zero, so the comparison means something


def test_fp32_takes_trls_own_path(tmp_path):
    trl_loss, ours = losses(tmp_path, bf16=False)
    assert ours == trl_loss
