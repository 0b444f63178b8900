"""Depth growth: the grown model computes its parent's function, then trains like any model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from coalign.config import ConfigError
from coalign.core.console import make_console
from coalign.models.load import load_model
from coalign.pretraining.growth import grow_depth, grown_layer_sources
from coalign.pretraining.pretrain import pretrain
from coalign.pretraining.settings import load_pretrain_config


def small_llama(layers: int = 3) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize(("parent", "grown"), [(3, 3), (3, 4), (3, 6), (3, 8), (4, 6)])
def test_layer_sources_keep_every_parent_layer_in_order(parent: int, grown: int) -> None:
    sources = grown_layer_sources(parent, grown)
    assert len(sources) == grown
    assert [layer for layer, new in sources if not new] == list(range(parent))
    assert all(layer == sources[i - 1][0] for i, (layer, new) in enumerate(sources) if new)
    copies = [sum(1 for layer, new in sources if new and layer == p) for p in range(parent)]
    assert max(copies) - min(copies) <= 1


def test_growth_cannot_remove_layers() -> None:
    with pytest.raises(ValueError, match="only adds layers"):
        grown_layer_sources(4, 3)


@pytest.mark.parametrize("layers", [4, 5, 6])
def test_a_grown_model_computes_its_parents_function(layers: int) -> None:
    parent = small_llama(3)
    grown = grow_depth(parent, layers).eval()
    assert grown.config.num_hidden_layers == layers and parent.config.num_hidden_layers == 3
    ids = torch.randint(0, 97, (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(grown(ids).logits, parent(ids).logits, rtol=1e-5, atol=1e-5)
        # and greedy decoding with the KV cache, which indexes layers by position
        kwargs = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0}
        assert grown.generate(ids[:1], **kwargs).tolist() == parent.generate(ids[:1], **kwargs).tolist()
    assert grown.lm_head.weight.data_ptr() == grown.model.embed_tokens.weight.data_ptr()


def test_the_new_layers_learn() -> None:
    """Zeroed output projections block the gradient to the rest of a new layer only until the first step."""
    grown = grow_depth(small_llama(2), 4).train()
    optimizer = torch.optim.SGD(grown.parameters(), lr=0.1)
    ids = torch.randint(0, 97, (4, 16))
    new_layer = grown.model.layers[1]
    before = new_layer.self_attn.q_proj.weight.detach().clone()
    for _ in range(2):
        grown(ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert new_layer.self_attn.o_proj.weight.abs().sum() > 0
    assert not new_layer.self_attn.q_proj.weight.equal(before)


def test_a_pretraining_run_grows_its_parent(tmp_path: Path) -> None:
    console = make_console()
    parent = tmp_path / "parent"
    pretrain(load_pretrain_config("mini"), parent, console)
    layers = load_model(parent / "base").config.num_hidden_layers
    config = load_pretrain_config(
        "mini",
        {"init_from": str(parent), "model": None, "grow_layers": layers + 2, "seed": 1, "train": {"max_steps": 2}},
    )
    pretrain(config, tmp_path / "grown", console)
    init = load_model(tmp_path / "grown" / "models" / "init")
    assert init.config.num_hidden_layers == layers + 2
    ids = torch.randint(0, init.config.vocab_size, (1, 12))
    with torch.no_grad():
        torch.testing.assert_close(init(ids).logits, load_model(parent / "base")(ids).logits)
    recipe = json.loads((tmp_path / "grown" / "base" / "recipe.json").read_text())
    assert recipe["init_from"]["grown_to_layers"] == layers + 2
    assert load_model(tmp_path / "grown" / "base").config.num_hidden_layers == layers + 2


def test_growth_needs_a_parent(tmp_path: Path) -> None:
    path = tmp_path / "grow.yaml"
    path.write_text("name: x\ngrow_layers: 6\n")
    with pytest.raises(ConfigError, match="grow_layers"):
        load_pretrain_config(path)
