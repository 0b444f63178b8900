"""Settings of the supervised and preference training stages, and the LoRA adapters every stage may train."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from coalign.config.base import BF16, CHECKPOINTING, Precision, Settings


class SFTSettings(Settings):
    """Supervised fine-tuning. Defaults are the paper's (Lumos/MOAT: lr 2e-5, batch 128, 2 epochs)."""

    new_keys = ("gradient_checkpointing",)

    learning_rate: float = Field(2e-5, gt=0)
    epochs: float = Field(2.0, gt=0)
    batch_size: int = Field(8, ge=1, description="examples per forward pass in one process")
    grad_accum: int = Field(
        16, ge=1, description="batch per optimizer step = batch_size * grad_accum, however many processes share it"
    )
    max_length: int = Field(1024, ge=16)
    warmup_ratio: float = Field(0.03, ge=0, lt=1)
    lr_scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup"] = "linear"
    weight_decay: float = Field(0.0, ge=0)
    bf16: Precision = Field(False, description=BF16)
    gradient_checkpointing: bool = Field(False, description=CHECKPOINTING)
    logging_steps: int = Field(10, ge=1)
    group_by_length: bool = Field(
        False, description="batch examples of similar length: less padding (tiny grounder: 1.29x the steps/s)"
    )


# TRL's DPO losses but the two that need its label_smoothing (exo_pair, and robust, which is sigmoid without it)
DPOLoss = Literal[
    "sigmoid", "hinge", "ipo", "nca_pair", "bco_pair", "sppo_hard", "aot", "aot_unpaired", "apo_zero", "apo_down",
    "discopop", "sft", "sigmoid_norm",
]  # fmt: skip


class DPOSettings(Settings):
    """Planner DPO (MOAT stage 1). Defaults: the paper's (lr 4e-7, batch 4 x 8, cosine, max length 1024)
    and the authors' release (beta 0.2 sigmoid, warmup 0.05, weight decay 1e-4, 1 epoch)."""

    new_keys = ("gradient_checkpointing",)

    learning_rate: float = Field(
        4e-7, gt=0, description="the paper's 4e-7 is for a 7B planner; a small one needs 10-100x that to move"
    )
    beta: float = Field(
        0.2,
        gt=0,
        description="the implicit reward is beta x the log-ratio to the reference: a larger beta makes a change a "
        "larger margin (a lower loss, a larger gradient) and keeps the planner nearer its reference (ipo: its tau)",
    )
    loss_type: DPOLoss = Field(
        "sigmoid",
        description="TRL's DPO loss (DPOConfig.loss_type): sigmoid (DPO; ln 2 at the start), ipo, hinge, "
        "sigmoid_norm, nca_pair, bco_pair, sppo_hard, aot, aot_unpaired, apo_zero, apo_down, discopop, sft",
    )
    epochs: float = Field(
        1.0, gt=0, description="passes over the round's pairs: steps = epochs x pairs / (batch_size x grad_accum)"
    )
    batch_size: int = Field(4, ge=1)
    grad_accum: int = Field(8, ge=1)
    max_length: int = Field(1024, ge=16)
    warmup_ratio: float = Field(0.05, ge=0, lt=1)
    lr_scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup"] = "cosine"
    weight_decay: float = Field(1e-4, ge=0)
    bf16: Precision = Field(False, description=BF16)
    gradient_checkpointing: bool = Field(False, description=CHECKPOINTING)
    logging_steps: int = Field(10, ge=1)


def qlora_missing() -> str | None:
    """What this machine lacks for a 4-bit base (bitsandbytes kernels run on CUDA only), or None."""
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return "a CUDA GPU"
    if importlib.util.find_spec("bitsandbytes") is None:
        return "bitsandbytes (pip install bitsandbytes)"
    return None


class LoraSettings(Settings):
    """Low-rank adapters (PEFT's LoRA) trained instead of every weight, in every SFT, DPO and GRPO stage.

    `merge: true` (default) saves each stage's checkpoint as a plain model (the adapter merged into its
    base), so the next stage, generation and any other tool load it like the base, and each stage trains a
    fresh adapter on the last; `false` saves the adapter alone (MBs, not GBs) beside the tokenizer, its base
    recorded relative to it, and the next stage trains the same adapter on."""

    r: int = Field(16, ge=1, description="rank")
    alpha: int = Field(32, ge=1, description="the update is scaled by alpha / r")
    dropout: float = Field(0.05, ge=0, lt=1)
    target_modules: str | list[str] = Field(
        "all-linear", description="'all-linear' (every linear layer but the output head) or module names"
    )
    bias: Literal["none", "all", "lora_only"] = "none"
    qlora: bool = Field(False, description="the frozen base in 4 bits (NF4, bitsandbytes): CUDA only")
    merge: bool = True

    @field_validator("target_modules", mode="before")
    @classmethod
    def _targets(cls, value):
        """Checked before the type, so a wrong value is one error, not one per member of the union."""
        names = isinstance(value, list) and value and all(isinstance(name, str) and name for name in value)
        if value != "all-linear" and not names:
            raise ValueError(f"'all-linear' or a non-empty list of module names (q_proj, v_proj, ...), got {value!r}")
        return value

    @field_validator("qlora")
    @classmethod
    def _runs_here(cls, on: bool) -> bool:
        """Refused when the config is read, not hours later when the first stage loads its model."""
        if on and (missing := qlora_missing()):
            raise ValueError(
                f"lora.qlora needs {missing}; set lora.qlora: false to train LoRA on a full-precision base"
            )
        return on
