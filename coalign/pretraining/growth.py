"""Depth growth: a pretrained Llama made deeper without changing what it computes.

A bigger base need not start from random weights. LLaMA Pro's block expansion inserts copies of existing
decoder layers whose two output projections (attention `o_proj`, MLP `down_proj`) are zero, so each new
layer adds nothing to the residual stream: the grown model's logits equal its parent's, and continued
pretraining starts from everything the parent learned with more layers to learn in.
"""

from __future__ import annotations

import copy

import torch
from transformers import LlamaForCausalLM

ZEROED = ("self_attn.o_proj.weight", "mlp.down_proj.weight")  # a layer's writes to the residual stream


def grown_layer_sources(parent_layers: int, num_layers: int) -> list[tuple[int, bool]]:
    """For each layer of the grown model, (the parent layer it copies, whether it is a new identity layer):
    every parent layer once, in order, each followed by its copies, spread as evenly as they go (the first
    `extra % parent_layers` parent layers get one more)."""
    if num_layers < parent_layers:
        raise ValueError(f"cannot grow {parent_layers} layers to {num_layers}: growth only adds layers")
    extra = num_layers - parent_layers
    sources: list[tuple[int, bool]] = []
    for layer in range(parent_layers):
        copies = extra // parent_layers + (layer < extra % parent_layers)
        sources += [(layer, False)] + [(layer, True)] * copies
    return sources


def grow_depth(parent: LlamaForCausalLM, num_layers: int) -> LlamaForCausalLM:
    """A `num_layers`-deep copy of `parent` that computes the same function (see the module's docstring)."""
    config = copy.deepcopy(parent.config)
    config.num_hidden_layers = num_layers
    if getattr(config, "layer_types", None):
        config.layer_types = [config.layer_types[0]] * num_layers
    grown = LlamaForCausalLM(config).to(parent.dtype)
    parent_state = parent.state_dict()
    state = {key: value for key, value in parent_state.items() if not key.startswith("model.layers.")}
    for index, (source, new) in enumerate(grown_layer_sources(parent.config.num_hidden_layers, num_layers)):
        prefix = f"model.layers.{source}."
        for key, value in parent_state.items():
            if key.startswith(prefix):
                name = key[len(prefix) :]
                state[f"model.layers.{index}.{name}"] = torch.zeros_like(value) if new and name in ZEROED else value
    grown.load_state_dict(state, strict=not config.tie_word_embeddings)
    grown.tie_weights()
    return grown
