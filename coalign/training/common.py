"""What the SFT, DPO and GRPO stages share: trainer arguments from our settings, the model a stage trains (whole,
or LoRA adapters), train, save, log."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from peft import LoraConfig
from transformers.utils import logging as hf_logging

from coalign.config import DPOSettings, GRPOSettings, LoraSettings, SFTSettings
from coalign.core import ranks
from coalign.core.machine import decide_bf16
from coalign.core.runs import atomic_dir
from coalign.models.load import ADAPTER_CONFIG, is_adapter, load_model


def common_args(settings: SFTSettings | DPOSettings | GRPOSettings, out: Path, seed: int) -> dict:
    """Keyword arguments every TRL trainer config of ours takes (SFT, DPO, GRPO). A config's batch is per
    optimizer step, however many processes share it (`ranks.batch_split`)."""
    per_device, accum = ranks.batch_split(settings.batch_size, settings.grad_accum, type(settings).__name__)
    bf16 = decide_bf16(settings.bf16, f"{type(settings).__name__}.bf16")
    cpu = not torch.cuda.is_available()
    return dict(
        output_dir=str(out / "trainer"),
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accum,
        warmup_steps=settings.warmup_ratio,  # a float below 1 is a ratio in transformers 5
        lr_scheduler_type=settings.lr_scheduler,
        logging_steps=settings.logging_steps,
        report_to=[],
        seed=seed,
        data_seed=seed,
        bf16=bf16,
        gradient_checkpointing=settings.gradient_checkpointing,  # TRL's default is on; a CPU run has the memory
        dataloader_num_workers=0,
        dataloader_pin_memory=not cpu,
        # bf16 on a CPU (autocast there) and several processes on CPUs (accelerate's DDP over gloo) need use_cpu:
        # without it transformers refuses bf16 where there is no GPU
        **({"use_cpu": True} if cpu and (bf16 or ranks.world_size() > 1) else {}),
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


def training_model(init: str | Path, trust_remote_code: bool, lora: LoraSettings | None):
    """The model a stage trains and the `peft_config` its TRL trainer gets (None: train the model as given).

    Without `lora`, every weight. With it, a fresh adapter over `init`, except that under `merge: false` an
    adapter folder's own adapter trains on (TRL refuses a PEFT model with a new `peft_config`), so a run's
    stages build one adapter over one base."""
    if lora is None:
        return load_model(init, trust_remote_code, dtype="float32"), None
    if not lora.merge and is_adapter(init):
        return load_model(init, trust_remote_code, "float32", quantize=lora.qlora, trainable_adapter=True), None
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        bias=lora.bias,
        task_type="CAUSAL_LM",
    )
    return load_model(init, trust_remote_code, "float32", quantize=lora.qlora), config


def save_adapter(model, folder: Path) -> None:
    """The trained adapter alone (TRL's DPO and GRPO may hold a frozen `ref` copy beside it), its local base
    recorded relative to `folder` and its target modules sorted, so the folder loads and is the same bytes
    wherever the run folder is; PEFT's model card, which names the absolute base, is left out."""
    model.save_pretrained(str(folder), selected_adapters=["default"])
    (folder / "README.md").unlink(missing_ok=True)
    path = folder / ADAPTER_CONFIG
    config = json.loads(path.read_text())
    base = Path(model.get_base_model().name_or_path)
    if base.is_dir():
        config["base_model_name_or_path"] = os.path.relpath(base.resolve(), folder.resolve())
    if isinstance(config["target_modules"], list):
        config["target_modules"] = sorted(config["target_modules"])
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def save_weights(
    model, folder: Path, lora: LoraSettings | None, trust_remote_code: bool, state_dict: dict | None = None
) -> None:
    """The trained model's safetensors weights: a LoRA model's adapter alone under `merge: false`, else merged
    into its base. A 4-bit base is loaded again at its own precision to merge into: merged into 4-bit weights
    the update would be rounded, and the checkpoint would load only where bitsandbytes runs. `state_dict`:
    the whole model's weights gathered from every process (FSDP and ZeRO-3 hold a shard each)."""
    if lora is None:
        model.save_pretrained(str(folder), state_dict=state_dict)
    elif not lora.merge:
        save_adapter(model, folder)
    elif lora.qlora:
        save_adapter(model, folder / "adapter")
        load_model(folder / "adapter", trust_remote_code).save_pretrained(str(folder))
        shutil.rmtree(folder / "adapter")
    else:
        model.merge_and_unload().save_pretrained(str(folder))


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' own log at errors only while a trainer is built and trains (its notes on every config
    would bury our progress lines); the previous level after."""
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(previous)


def train_and_save(
    make_trainer,
    tokenizer,
    out: Path,
    resume: str | None = None,
    lora: LoraSettings | None = None,
    trust_remote_code: bool = False,
    **log,
) -> Path:
    """Build the trainer quietly, train (from the checkpoint `resume` when given), save the weights
    (`save_weights`: the whole model, or under `lora` merged or the adapter alone), the tokenizer (padded left
    again) and train_log.json into a temporary folder that then replaces `out`, so `out` never holds half a
    checkpoint. The folder is the same bytes wherever it is saved: the Trainer's pickled arguments, which
    hold the folder's path, are not written. A GRPO run's log rows (rewards per step) are kept whole."""
    with quiet_transformers():
        trainer = make_trainer()
        result = trainer.train(resume_from_checkpoint=resume)
    tokenizer.padding_side = "left"
    rows = [row for row in trainer.state.log_history if "loss" in row]
    record = {"train_loss": result.training_loss, "losses": [row["loss"] for row in rows], "steps": result.global_step}
    if any("rewards/accuracies" in row for row in rows):
        record["reward_accuracies"] = [row["rewards/accuracies"] for row in rows if "rewards/accuracies" in row]
    if any("reward" in row for row in rows):
        record["history"] = [row for row in rows if "reward" in row]
    gathered = None
    if lora is None and ranks.world_size() > 1:  # collective: every rank takes part, the main one saves
        gathered = trainer.accelerator.get_state_dict(trainer.model)
    with atomic_dir(out) as tmp:
        save_weights(trainer.accelerator.unwrap_model(trainer.model), tmp, lora, trust_remote_code, gathered)
        tokenizer.save_pretrained(str(tmp))
        (tmp / "train_log.json").write_text(json.dumps({**record, **log}))
    return out
