"""What the SFT, DPO and GRPO stages share: trainer arguments from our settings, the model a stage trains (whole,
or LoRA adapters), train, save, log."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import torch
from peft import LoraConfig
from transformers.integrations import deepspeed as hf_deepspeed
from transformers.utils import logging as hf_logging
from trl.distributed import DistributedBackend

from coalign.config import DPOSettings, GRPOSettings, LoraSettings, SFTSettings
from coalign.core import ranks
from coalign.core.machine import LAUNCHER_PRECISION, decide_bf16
from coalign.core.runs import atomic_dir
from coalign.models.load import ADAPTER_CONFIG, is_adapter, load_model


def common_args(settings: SFTSettings | DPOSettings | GRPOSettings, out: Path, seed: int, key: str = "") -> dict:
    """Keyword arguments every TRL trainer config of ours takes (SFT, DPO, GRPO). A config's batch is per
    optimizer step, however many processes share it (`ranks.batch_split`); `key`: the config block `settings`
    came from (`planner_dpo`), which an error names."""
    per_device, accum = stage_batch(settings, key)
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
        # TRL's default is on; a CPU run has the memory (transformers 5's name: the old one warns)
        activation_checkpointing=settings.gradient_checkpointing,
        ddp_timeout=ranks.timeout_s(),  # the run's, where accelerate starts the process group
        ddp_find_unused_parameters=False,  # a causal LM uses every trained weight each step: no graph walk, no warning
        dataloader_num_workers=0,
        dataloader_pin_memory=not cpu,
        # bf16 on a CPU (autocast there) and several processes on CPUs (accelerate's DDP over gloo) need use_cpu:
        # without it transformers refuses bf16 where there is no GPU
        **({"use_cpu": True} if cpu and (bf16 or ranks.world_size() > 1) else {}),
    )


def stage_batch(settings: SFTSettings | DPOSettings | GRPOSettings, key: str = "") -> tuple[int, int]:
    """(per-process batch, accumulation) of a training stage's settings under this launch (`ranks.batch_split`;
    a GRPO step's examples stay whole groups of `num_generations`, and a process runs its share
    `micro_batch_size` episodes a forward, or the largest number below that divides it); `key`: its config block,
    named in errors."""
    grpo = isinstance(settings, GRPOSettings)
    group = settings.num_generations if grpo else 1
    batch, accum = ranks.batch_split(settings.batch_size, settings.grad_accum, key, group)
    if grpo and batch > settings.micro_batch_size:  # the same episodes a step, fewer a forward
        micro = next(b for b in range(settings.micro_batch_size, 0, -1) if batch % b == 0)
        return micro, accum * (batch // micro)
    return batch, accum


def trainer_args(settings: SFTSettings | DPOSettings, out: Path, seed: int, key: str = "") -> dict:
    """Keyword arguments common to TRL's SFTConfig and DPOConfig (`key`: as `common_args`)."""
    grouped = getattr(settings, "group_by_length", False)
    return dict(
        common_args(settings, out, seed, key),
        train_sampling_strategy="group_by_length" if grouped else "random",
        num_train_epochs=settings.epochs,
        weight_decay=settings.weight_decay,
        max_length=settings.max_length,
        save_strategy="no",
    )


TrainerConfig = TypeVar("TrainerConfig")


def trl_config(config_class: type[TrainerConfig], **kwargs) -> TrainerConfig:
    """TRL's `config_class` from our keyword arguments, at their `bf16` whatever the launcher asked for.

    `accelerate launch` exports its config's mixed_precision (LAUNCHER_PRECISION), and transformers' arguments
    take it where `bf16` is off: a stage at `bf16: false` trained in bf16 autocast under a bf16 launcher config
    while precision.json said fp32. The variable holds the stage's decision while the arguments are built; they
    fix the precision the trainer's Accelerator (and a DeepSpeed plugin) is built with."""
    launched = os.environ.get(LAUNCHER_PRECISION)
    os.environ[LAUNCHER_PRECISION] = "bf16" if kwargs.get("bf16") else "no"
    try:
        return config_class(**kwargs)
    finally:
        if launched is None:
            del os.environ[LAUNCHER_PRECISION]
        else:
            os.environ[LAUNCHER_PRECISION] = launched


def weights_dtype(lora: LoraSettings | None, bf16: bool) -> str:
    """The dtype a stage holds its model's weights in and saves its checkpoint in (`bf16`: the stage's
    decision). LoRA under bf16 holds its frozen base in bf16, half of fp32's memory (each product is computed
    in bf16 under autocast either way), while TRL's PEFT wrapping keeps the adapter in fp32 (PEFT's
    `autocast_adapter_dtype`), where the optimizer's small updates are not rounded away. Weights that train
    stay fp32: every one without LoRA, and the base's biases under `lora.bias` other than none, whose
    updates bf16 would round away."""
    return "bfloat16" if lora is not None and bf16 and lora.bias == "none" else "float32"


def training_model(init: str | Path, trust_remote_code: bool, lora: LoraSettings | None, bf16: bool):
    """The model a stage trains and the `peft_config` its TRL trainer gets (None: train the model as given),
    its weights in `weights_dtype` (`bf16`: the stage's decision, its TRL config's `bf16`).

    Without `lora`, every weight. With it, a fresh adapter over `init`, except that under `merge: false` an
    adapter folder's own adapter trains on (TRL refuses a PEFT model with a new `peft_config`), so a run's
    stages build one adapter over one base.

    Call it once the stage's TRL config exists: under accelerate's DeepSpeed ZeRO-3 launch (`zero3_init_flag`)
    the config's arguments make `from_pretrained` load each process's shard alone (`deepspeed.zero.Init`), and
    without them every process loads all the weights first."""
    dtype = weights_dtype(lora, bf16)
    if lora is None:
        return load_model(init, trust_remote_code, dtype), None
    if not lora.merge and is_adapter(init):
        return load_model(init, trust_remote_code, dtype, quantize=lora.qlora, trainable_adapter=True), None
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        bias=lora.bias,
        task_type="CAUSAL_LM",
    )
    return load_model(init, trust_remote_code, dtype, quantize=lora.qlora), config


def save_adapter(model, folder: Path, state_dict: dict | None = None) -> None:
    """The trained adapter alone (TRL's DPO and GRPO may hold a frozen `ref` copy beside it), its local base
    recorded relative to `folder` and its target modules sorted, so the folder loads and is the same bytes
    wherever the run folder is; PEFT's model card, which names the absolute base, is left out. `state_dict`:
    the whole PEFT model's weights gathered from every process, where `model` holds a shard of them."""
    model.save_pretrained(str(folder), selected_adapters=["default"], state_dict=state_dict)
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
    model,
    folder: Path,
    lora: LoraSettings | None,
    trust_remote_code: bool,
    state_dict: dict | None = None,
    *,
    bf16: bool,
) -> None:
    """The trained model's safetensors weights: a LoRA model's adapter alone under `merge: false` (in the
    dtype it trained in), else merged into its base, in the dtype the stage held the base in (`weights_dtype`;
    `bf16`: the stage's decision), so a bf16 run's checkpoint is half an fp32 one. A 4-bit base is loaded
    again at that dtype to merge into: merged into 4-bit weights the update would be rounded, and the
    checkpoint would load only where bitsandbytes runs. `state_dict`: the whole model's weights gathered
    from every process (FSDP and ZeRO-3 hold a shard each, so `model`'s own are a shard): a LoRA model's
    adapter is taken from them and merged into a fresh load of its base, as one process merges it (merging
    in place would merge shards)."""
    if lora is None:
        model.save_pretrained(str(folder), state_dict=None if state_dict is None else tied_again(model, state_dict))
    elif not lora.merge:
        save_adapter(model, folder, state_dict)
    elif lora.qlora or state_dict is not None:
        save_adapter(model, folder / "adapter", state_dict)
        with as_one_process():
            merged = load_model(folder / "adapter", trust_remote_code, weights_dtype(lora, bf16))
        merged.save_pretrained(str(folder))
        shutil.rmtree(folder / "adapter")
    else:
        model.merge_and_unload().save_pretrained(str(folder))


def tied_again(model, state_dict: dict) -> dict:
    """`state_dict` with each set of weights that `model` ties (an LM head that is the input embeddings) one tensor
    again: gathered from FSDP's shards they are copies, and `save_pretrained`, which drops an alias only where
    tensors share storage, would save both."""
    tied = dict(state_dict)
    first: dict[int, str] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        source = first.setdefault(id(tensor), name)
        if source != name and source in tied and name in tied:
            tied[name] = tied[source]
    return tied


@contextmanager
def as_one_process() -> Iterator[None]:
    """transformers inside acts as in one process, though a ZeRO-3 trainer config lives (its `TrainingArguments`
    under accelerate's DeepSpeed launch): `from_pretrained` loads whole rather than partitioned over every process
    (`deepspeed.zero.Init`), and `generate` decodes alone rather than step by step with every process
    (`synced_gpus`). Both are collective calls, which a rank at work by itself (the main one loading a base to
    merge into, each rank's own rollouts) would wait in for ever. transformers keeps the live config in a
    module-level weak reference."""
    live = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = live


def shards_weights(accelerator) -> bool:
    """Whether each process holds only a shard of the trained weights (FSDP, DeepSpeed ZeRO-3), as TRL tells."""
    backend = DistributedBackend(accelerator)
    return backend.is_zero3 or backend.is_fsdp


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
    evaluated: Mapping[str, str] | None = None,
    **log,
) -> Path:
    """Build the trainer quietly, train (from the checkpoint `resume` when given), save the weights
    (`save_weights`: the whole model, or under `lora` merged or the adapter alone), the tokenizer (padded left
    again) and train_log.json into a temporary folder that then replaces `out`, so `out` never holds half a
    checkpoint. The folder is the same bytes wherever it is saved: the Trainer's pickled arguments, which
    hold the folder's path, are not written. A GRPO run's log rows (rewards per step) are kept whole.

    `evaluated` (our name -> the trainer's eval metric): a trainer given an eval set is evaluated on it once
    trained, and those metrics are logged (`eval`), so a stage records what it learnt on data it never saw."""
    with quiet_transformers():
        trainer = make_trainer()
        result = trainer.train(resume_from_checkpoint=resume)
        metrics = trainer.evaluate() if evaluated and trainer.eval_dataset is not None else None
    tokenizer.padding_side = "left"
    rows = [row for row in trainer.state.log_history if "loss" in row]
    record = {"train_loss": result.training_loss, "losses": [row["loss"] for row in rows], "steps": result.global_step}
    for key, name in (("reward_accuracies", "rewards/accuracies"), ("reward_margins", "rewards/margins")):
        if any(name in row for row in rows):
            record[key] = [row[name] for row in rows if name in row]
    if metrics is not None:
        record["eval"] = {ours: metrics[theirs] for ours, theirs in evaluated.items()}
    if any("reward" in row for row in rows):
        record["history"] = [row for row in rows if "reward" in row]
    gathered = None
    if ranks.world_size() > 1 and (lora is None or shards_weights(trainer.accelerator)):
        # collective: every rank takes part, the main one saves; from the wrapped model, which under DeepSpeed
        # is the engine that gathers (`trainer.model` is the module inside it)
        gathered = trainer.accelerator.get_state_dict(trainer.model_wrapped)
    with atomic_dir(out) as tmp:
        if ranks.is_main():  # the others hold an empty gathered state under ZeRO-3 and FSDP
            model = trainer.accelerator.unwrap_model(trainer.model)
            save_weights(model, tmp, lora, trust_remote_code, gathered, bf16=trainer.args.bf16)
            tokenizer.save_pretrained(str(tmp))
            (tmp / "train_log.json").write_text(json.dumps({**record, **log}))
    return out
