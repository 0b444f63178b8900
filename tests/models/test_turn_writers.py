"""The prefix-cached turn writer under a trainer's mixed precision: GRPO with LoRA at bf16 on the CPU
(`pilotrl.rl.bf16`, `lora`), where accelerate's `prepare` runs the PEFT model's forward under autocast but the
PEFT model's `generate` runs its base model's, outside it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from coalign.config import TinySpec
from coalign.models.load import load_model, load_tokenizer, make_tiny_model
from coalign.models.turn_writers import PrefixCachedWriter, generate_turns


def _tiny_model(path: Path):
    spec = TinySpec(vocab_size=300, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=64,
                    max_positions=512)  # fmt: skip
    texts = ["Thought: go to the shelf and take the mug 1\nAction: take mug 1 from shelf 1"] * 20
    out = make_tiny_model(texts, path / "m", spec, seed=0)
    return load_model(out, dtype="float32"), load_tokenizer(out)


def _as_trained_in_bf16(model):
    """`model`'s forward wrapped in bf16 autocast, as accelerate's `prepare` does under mixed precision bf16
    (without its process-wide state, which would outlive the test)."""
    model.forward = torch.autocast("cpu", dtype=torch.bfloat16)(model.forward)
    return model


@pytest.mark.parametrize("lora", [True, False])
def test_the_kept_cache_takes_the_dtype_of_the_generating_forward(tmp_path, lora):
    """Over turns of several rows (a static cache on the CPU), the writer's prefill and its `generate` store
    keys and values of one dtype, and write, greedily, what re-reading every context does."""
    from peft import LoraConfig, get_peft_model

    model, tokenizer = _tiny_model(tmp_path)
    if lora:  # adapters that change the outputs, so that a prefill past them would write other turns
        torch.manual_seed(0)
        model = get_peft_model(model, LoraConfig(r=16, target_modules="all-linear", init_lora_weights=False))
    model = _as_trained_in_bf16(model)
    rng = random.Random(0)
    batch = [[rng.randrange(4, len(tokenizer)) for _ in range(n)] for n in (30, 12, 21)]
    writer = PrefixCachedWriter(model, tokenizer)
    for _ in range(2):  # the second turn starts from the first one's kept entries
        written = writer(batch, 6, 0.0, 1.0)
        assert written == generate_turns(model, tokenizer, batch, 6, 0.0, 1.0)
        batch = [ids + row + [rng.randrange(4, len(tokenizer))] for ids, row in zip(batch, written, strict=True)]
    assert writer.reused > 0
    dtypes = {(k.dtype, v.dtype) for entry in writer.entries.values() for k, v in entry.layers}
    assert len(dtypes) == 1
