"""How a batch of contexts gets its next turns from a transformers model.

`generate_turns` runs `generate` over the left-padded batch. `PrefixCachedWriter` (the runtime's default for
a model it supports) keeps each episode's key/value cache from one turn to the next: an episode's context only
grows by appending (its ids are never re-rendered, `models.turns`), so the keys and values computed for one
turn stay valid for the next, and only the tokens added since (the observation, a guide's opening) need a
forward pass. Without it every turn re-reads the whole context, and a left-padded batch of long contexts
reads its padding too (`benchmarks/rollout_throughput.py`, a trained model, 16 episodes a turn: 123 s of
prefill beside 137 s of decoding; with the caches kept, 4 s of prefill and 1.96x the tokens/s).

The prefix-cached writer brings each context up to date alone (no padding), through all but its last token;
the batch's caches are then laid side by side, left-padded to one width, so that every row's uncached part is
its last token and one `generate` call decodes them together. What that call computed is cut back per row
into the episode's entry. Entries are found by prefix, so the writer needs no episode ids, and episodes that
open alike (a GRPO group) share their first prefill."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, StaticCache
from transformers.cache_utils import DynamicLayer, StaticLayer

from coalign.models.backends import decoding, through_eos

# A turn writer: completion ids for each context of a batch. `hf_turns` (the model's `generate`) by default;
# evaluation with generation.backend vllm passes the engine's (`VLLMBackend.turns`), GRPO rollouts with
# rl.generation vllm_* the trainer's (`rollout.vllm_turns`). Same episodes, same ids, either way.
TurnWriter = Callable[[Sequence[list[int]], int, float, float], list[list[int]]]


def hf_turns(model, tokenizer, keep_cache: bool = True) -> TurnWriter:
    """The model's `generate`: with each episode's cache kept across turns where the model allows it
    (`supports`), else over the whole context every turn."""
    if keep_cache and supports(model):
        return PrefixCachedWriter(model, tokenizer)
    return lambda batch, max_new_tokens, temperature, top_p: generate_turns(
        model, tokenizer, batch, max_new_tokens, temperature, top_p
    )


def cut_after_eos(rows: Sequence[Sequence[int]], eos_id: int) -> list[list[int]]:
    """Each completion through its first end-of-sequence token."""
    return [through_eos(row, eos_id) for row in rows]


@torch.inference_mode()
def generate_turns(model, tokenizer, batch: Sequence[list[int]], max_new_tokens: int, temperature: float, top_p: float):
    """Completion ids of each prompt (left-padded batch), cut after the first end-of-sequence token."""
    width = max(map(len, batch))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in batch], device=model.device)
    attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch], device=model.device)
    out = model.generate(
        input_ids=input_ids, attention_mask=attention, **decoding(tokenizer, max_new_tokens, temperature, top_p),
        **turn_cache(model, len(batch), width + max_new_tokens),
    )  # fmt: skip
    return cut_after_eos(out[:, width:].tolist(), tokenizer.eos_token_id)


def turn_cache(model, rows: int, length: int) -> dict:
    """On the CPU, for a batch of several contexts, a key/value cache allocated once for the whole turn
    (`StaticCache`, sized to this call): the default cache grows by concatenation, copying every key and value
    at each new token, which on an episode's long contexts takes much of the decoding time. Measured by
    `benchmarks/rollout_throughput.py --cache`: decoding 1.4x faster on six episodes batched, but slower one
    episode at a time (attention then spans the whole allocated length), so a single context keeps the
    default. Elsewhere too (a GPU, where `generate` would compile for a static cache; a model with no
    transformers config) the default."""
    if rows < 2 or model.device.type != "cpu" or getattr(model, "config", None) is None:
        return {}
    return {"cache": StaticCache(config=model.config, max_cache_len=length)}


@dataclass
class Entry:
    """The keys and values of `ids`, one (keys, values) pair per layer, each [heads, len(ids), head dim]."""

    ids: list[int]
    layers: list[tuple[torch.Tensor, torch.Tensor]]

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.layers)


def supports(model) -> bool:
    """A transformers model whose every cache layer is plain full attention (no sliding window, no linear
    attention), so that a cache can be sliced per row and position."""
    config = getattr(model, "config", None)
    if config is None:
        return False
    try:
        dynamic = DynamicCache(config=config).layers
        static = StaticCache(config=config, max_cache_len=1).layers
    except (TypeError, ValueError, AttributeError, KeyError):
        return False
    return all(type(layer) is DynamicLayer for layer in dynamic) and all(type(la) is StaticLayer for la in static)


def generated_by(model) -> torch.nn.Module:
    """The module whose forward `model.generate` runs: a PEFT model's base model (its adapter layers in place),
    not the PEFT model, whose own forward its `generate` skips. That skipped forward is the one a trainer's mixed
    precision wraps in autocast (accelerate's `prepare`), so a prefill through it computes bf16 values where the
    turn's decoding computes fp32 ones, and the two cannot share one cache (a static cache's one dtype)."""
    base_model = getattr(model, "get_base_model", None)
    return base_model() if callable(base_model) else model


class PrefixCachedWriter:
    """A turn writer (`TurnWriter`) that keeps its episodes' caches, at most `max_bytes` of them (the
    least recently used go first). `prefilled` and `reused` count context tokens computed and served from a
    kept cache."""

    def __init__(self, model, tokenizer, max_bytes: int = 2 << 30):
        self.model, self.tokenizer, self.max_bytes = model, tokenizer, max_bytes
        self.network = generated_by(model)  # the prefill's forward: the one `generate` runs
        self.entries: OrderedDict[int, Entry] = OrderedDict()
        self._next_key, self._bytes = 0, 0
        self.prefilled = 0
        self.reused = 0

    @torch.inference_mode()
    def __call__(self, batch: Sequence[list[int]], max_new_tokens: int, temperature: float, top_p: float):
        if min(map(len, batch)) < 2:  # nothing to keep before the last token
            return generate_turns(self.model, self.tokenizer, batch, max_new_tokens, temperature, top_p)
        used: set[int] = set()
        heads = [self._extend(list(ids[:-1]), used) for ids in batch]
        width = max(map(len, batch))
        cache = self._assemble(heads, width, max_new_tokens)
        pad = self.tokenizer.pad_token_id
        device = self.model.device
        input_ids = torch.tensor([[pad] * (width - len(ids)) + list(ids) for ids in batch], device=device)
        attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch], device=device)
        out = self.model.generate(
            input_ids=input_ids, attention_mask=attention, cache=cache,
            **decoding(self.tokenizer, max_new_tokens, temperature, top_p),
        )  # fmt: skip
        completions = cut_after_eos(out[:, width:].tolist(), self.tokenizer.eos_token_id)
        fed = out.shape[1] - width - 1  # the last token sampled was never fed back: its keys were not computed
        for key in used:
            self._drop(key)
        for row, (ids, written) in enumerate(zip(batch, completions, strict=True)):
            kept = min(len(written), fed)
            start = width - len(ids)
            layers = [
                (layer.keys[row, :, start : width + kept].clone(), layer.values[row, :, start : width + kept].clone())
                for layer in cache.layers
            ]
            self._keep(Entry(list(ids) + written[:kept], layers))
        return completions

    def _extend(self, ids: list[int], used: set[int]) -> Entry:
        """The cache of `ids`, from the longest kept entry that is a prefix of them plus a forward pass over
        the rest (kept as a new entry, so that a context opening alike later starts from it)."""
        best_key, best, rank = None, None, (-1, False)
        for key, entry in self.entries.items():  # the longest; of equals, one no other row took (its episode's)
            n = len(entry.ids)
            if n <= len(ids) and (n, key not in used) > rank and ids[:n] == entry.ids:
                best_key, best, rank = key, entry, (n, key not in used)
        start = len(best.ids) if best else 0
        self.reused += start
        if best_key is not None:
            used.add(best_key)
            self.entries.move_to_end(best_key)
            if start == len(ids):
                return best
        cache = DynamicCache(config=self.model.config)
        for index, (k, v) in enumerate(best.layers if best else []):
            cache.update(k[None], v[None], index)
        rest = torch.tensor([ids[start:]], device=self.model.device)
        positions = torch.arange(start, len(ids), device=self.model.device)[None]
        self.network(input_ids=rest, position_ids=positions, cache=cache, use_cache=True)
        self.prefilled += len(ids) - start
        entry = Entry(ids, [(layer.keys[0], layer.values[0]) for layer in cache.layers])
        used.add(self._keep(entry))  # superseded by the turn's entry once written
        return entry

    def _assemble(self, heads: Sequence[Entry], width: int, max_new_tokens: int):
        """One cache for the batch: row i holds `heads[i]` right-aligned at width - 1, zeros (masked) before.
        A static cache, allocated once for the turn, for several rows on the CPU (`turn_cache`)."""
        rows = len(heads)
        if rows > 1 and self.model.device.type == "cpu":
            cache = StaticCache(config=self.model.config, max_cache_len=width + max_new_tokens)
        else:
            cache = DynamicCache(config=self.model.config)
        for index in range(len(heads[0].layers)):
            k0, v0 = heads[0].layers[index]
            keys = k0.new_zeros((rows, k0.shape[0], width - 1, k0.shape[2]))
            values = v0.new_zeros((rows, v0.shape[0], width - 1, v0.shape[2]))
            for row, head in enumerate(heads):
                k, v = head.layers[index]
                keys[row, :, width - 1 - k.shape[1] :] = k
                values[row, :, width - 1 - v.shape[1] :] = v
            cache.update(keys, values, index)
        return cache

    def _keep(self, entry: Entry) -> int:
        key, self._next_key = self._next_key, self._next_key + 1
        self.entries[key] = entry
        self._bytes += entry.nbytes
        while self._bytes > self.max_bytes and len(self.entries) > 1:
            self._drop(next(iter(self.entries)))
        return key

    def _drop(self, key: int) -> None:
        if key in self.entries:
            self._bytes -= self.entries.pop(key).nbytes
