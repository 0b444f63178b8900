"""The multi-process half of tests/training/test_sharded.py, run by `torch.distributed.run` over gloo on CPUs.

`fsdp2 INIT OUT`: each variant's model (`VARIANTS`) takes one optimizer step sharded by torch's FSDP2
(`fully_shard`), its whole state dict is gathered as accelerate gathers it, and the main rank saves it through
coalign's `save_weights` into OUT/<variant>. `zero3 INIT OUT`: under accelerate's DeepSpeed ZeRO-3 launch,
coalign's LoRA SFT into OUT/zero3 (what each rank's loaded models held written to OUT/loads<rank>.json), then a
PilotRL GRPO stage on the toy environment into OUT/grpo, each rank's rollouts its own episodes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from peft import get_peft_model
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

from coalign import envs
from coalign.config import GRPOSettings, LoraSettings, SFTSettings
from coalign.core import ranks
from coalign.models.load import load_tokenizer
from coalign.pilotrl.curriculum import STAGES, stage_epochs
from coalign.pilotrl.rollout import RolloutSpec, make_rollout_func, prompt_rows
from coalign.training import common
from coalign.training.grpo import train_grpo
from coalign.training.sft import sft

LORA = LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"])  # no dropout: same draws anywhere
VARIANTS = {"full": None, "merged": LORA, "adapter": LORA.model_copy(update={"merge": False})}
TEXT = "Subgoal 1: Add 3 and 4. Subgoal 2: Add 15 and 27."
EXAMPLES = [("Add 3 and 4.", "Subgoal 1: Add 3 and 4")] * 4
SFT = SFTSettings(learning_rate=1e-3, epochs=1, batch_size=2, grad_accum=2, warmup_ratio=0, max_length=64)
GRPO = GRPOSettings(num_generations=2, batch_size=4, grad_accum=2, learning_rate=1e-3, save_steps=100,
                    epochs={"executor": 1, "planner": 1, "joint": 1, "all": 1, "vanilla": 1})  # fmt: skip


def one_step(init: Path, lora: LoraSettings | None, shard: bool) -> torch.nn.Module:
    """The model a stage trains (`training_model`, with TRL's PEFT wrapping under `lora`) after one AdamW step on
    `TEXT`, its decoder layers and the whole model each an FSDP2 unit when `shard` (every rank takes the same
    batch, so the averaged gradient is one process's)."""
    torch.manual_seed(0)
    model, peft_config = common.training_model(init, False, lora, bf16=False)
    if peft_config is not None:
        model = get_peft_model(model, peft_config)
    model.train()
    if shard:
        for module in model.modules():
            if isinstance(module, LlamaDecoderLayer):
                fully_shard(module)
        fully_shard(model)
    ids = load_tokenizer(init)(TEXT, return_tensors="pt")["input_ids"]
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    return model


def fsdp2(init: Path, out: Path) -> None:
    dist.init_process_group("gloo")
    for name, lora in VARIANTS.items():
        model = one_step(init, lora, shard=True)
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)  # accelerate's FSDP2 gathering
        gathered = get_model_state_dict(model, options=options)  # every rank takes part; the main one holds it
        if ranks.is_main():
            common.save_weights(model, out / name, lora, False, gathered, bf16=False)
        dist.barrier()
    dist.destroy_process_group()


def zero3(init: Path, out: Path) -> None:
    # DeepSpeed's CPU backend compiles its shared-memory all-reduce at its first start in each new environment
    # (about 140 CPU-seconds of C++, the suite's largest cost on a fresh clone). Only its inference engine's tensor
    # parallelism calls it; ZeRO-3 training never does. Marked unavailable, DeepSpeed leaves it to gloo
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    loads = []
    load_model = common.load_model

    def recorded(*args, **kwargs):
        from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

        partitioned = is_deepspeed_zero3_enabled()
        model = load_model(*args, **kwargs)
        loads.append({"partitioned": partitioned, "held": sum(p.numel() for p in model.parameters())})
        return model

    common.load_model = recorded
    torch.manual_seed(0)
    sft(init, EXAMPLES, out / "zero3", SFT, lora=LORA)
    (out / f"loads{ranks.rank()}.json").write_text(json.dumps(loads))

    envs.REGISTRY["toy"] = "tests.toy_env:ToyEnv"
    rows, stage = prompt_rows([("toy", seed) for seed in range(4)], "adaplan"), STAGES["joint"]
    spec = RolloutSpec(stage.mode, train=stage.train, max_new_tokens=12, max_context=1024, batch_size=8)
    rollout = make_rollout_func(rows, spec)
    epochs = stage_epochs(GRPO, stage.name)
    train_grpo(
        init, out / "grpo", rows, GRPO, [varied], [1.0], rollout, spec.max_new_tokens, name=stage.name, epochs=epochs
    )


def varied(episode: list, **_) -> list[float]:
    """Rewards that differ within each group, so that every advantage, and the step, is nonzero."""
    return [float(i % 2) for i in range(len(episode))]


if __name__ == "__main__":
    {"fsdp2": fsdp2, "zero3": zero3}[sys.argv[1]](Path(sys.argv[2]), Path(sys.argv[3]))
