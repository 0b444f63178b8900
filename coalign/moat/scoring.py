"""Stage 1 reward: the grounder's negative log-likelihood of the ground-truth actions.

MOAT scores each sampled subgoal sequence by how well the grounder, conditioned on it, predicts
the gold actions: PPL = exp(mean token NLL), lower is better. The tokens scored are exactly those
SFT trains on (TRL: text tokenized with the tokenizer's special tokens, completion + EOS, the
prompt masked up to the common prefix of prompt and prompt + completion), so the score is the
grounder's own training loss on that example.

Format tokens (`R1 = Calculator(`, `)`, `; `, EOS) are near-certain after SFT and dominate the
action text, so the mean NLL over all tokens barely separates candidates. The "content"
reduction averages only over tokens of the tool arguments, where subgoals actually matter.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from trl.trainer.utils import selective_log_softmax

from coalign.core import ranks
from coalign.core.console import progress_bar
from coalign.models.agents import Agent
from coalign.models.load import as_text, render_prompt

REDUCTIONS = ("mean", "content", "sum")
# Causal LMs whose logits are their output head applied to the decoder's last hidden states, nothing after it, so
# scoring runs the head itself on a chunk of tokens at a time (Gemma's soft-cap and Cohere's and Granite's scales
# come after the head: such models, and any other, are scored from their own logits)
PLAIN_HEADS = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"})
# fp32 logits a scoring chunk holds (2**24: 64 MiB, 110 tokens at Qwen's 151,936-token vocabulary), whatever the
# rows and the vocabulary: the full logits of 64 rows of a few hundred tokens would take gigabytes
CHUNK_LOGITS = 2**24

# One call `R1, R2 = Tool(argument)`, up to the `;` before the next call or the end of the text;
# the argument may hold parentheses and `;` (as in formats.split_actions).
_OUTPUTS = r"R\d+(?:\s*,\s*R\d+)*"
_CALL_RE = re.compile(
    rf"(?:\A|;)\s*{_OUTPUTS}\s*=\s*[A-Za-z_]\w*\((?P<argument>.*?)\)\s*(?=;\s*{_OUTPUTS}\s*=|\Z)", re.S
)


@dataclass(frozen=True)
class ActionScore:
    """Summed NLL of one completion, over all its scored tokens and over its content tokens."""

    nll_sum: float
    n_tokens: int
    content_nll_sum: float
    n_content: int

    def value(self, reduction: str) -> float:
        """NLL under a reduction: "mean" (the paper's log-PPL), "content" (arguments only), "sum"."""
        if reduction == "mean":
            return self.nll_sum / self.n_tokens
        if reduction == "content":
            if self.n_content == 0:
                raise ValueError("no content tokens: the completion holds no tool-call argument")
            return self.content_nll_sum / self.n_content
        if reduction == "sum":
            return self.nll_sum
        raise ValueError(f"unknown reduction {reduction!r}; known: {REDUCTIONS}")

    @property
    def ppl(self) -> float:
        """Perplexity over all scored tokens, exp(mean NLL), as the paper reports it."""
        return math.exp(self.nll_sum / self.n_tokens)


def argument_spans(completion: str) -> list[tuple[int, int]]:
    """Character spans of the tool-call arguments in an action sequence, surrounding spaces trimmed."""
    spans = []
    for match in _CALL_RE.finditer(completion):
        start, end = match.span("argument")
        text = match["argument"]
        start += len(text) - len(text.lstrip())
        end -= len(text) - len(text.rstrip())
        if end > start:
            spans.append((start, end))
    return spans


@dataclass(frozen=True)
class EncodedRow:
    """One scored sequence: prompt + completion + EOS as SFT tokenizes it."""

    ids: list[int]
    start: int  # index of the first completion token
    content: list[bool]  # per token: a completion token inside a tool-call argument


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """TRL's rule: the completion starts where prompt and prompt + completion tokenize apart."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def encode_completion(tokenizer, user: str, completion: str) -> EncodedRow:
    """Tokenize as TRL's SFT does for a prompt-completion row (see the module docstring)."""
    prompt = render_prompt(tokenizer, user)
    eos = tokenizer.eos_token
    body = as_text(tokenizer, completion[: -len(eos)] if completion.endswith(eos) else completion)
    text = prompt + body + eos
    prompt_ids = tokenizer(prompt)["input_ids"]
    enc = tokenizer(text, return_offsets_mapping=True)
    ids = enc["input_ids"]
    start = _common_prefix(prompt_ids, ids)
    spans = [(a + len(prompt), b + len(prompt)) for a, b in argument_spans(body)]
    content = [
        i >= start and any(lo < hi_tok and lo_tok < hi for lo, hi in spans)
        for i, (lo_tok, hi_tok) in enumerate(enc["offset_mapping"])
    ]
    return EncodedRow(ids=ids, start=start, content=content)


@dataclass(frozen=True)
class PrefixGroup:
    """Rows (indices into the encoded rows) whose first `shared` tokens are identical: run once for all."""

    rows: tuple[int, ...]
    shared: int


def _prefix_cap(row: EncodedRow) -> int:
    """Most tokens of a row a shared prefix may cover: only the suffix's logits are kept, so the position
    predicting the first scored token, and at least one token, must stay in the suffix."""
    return max(min(max(row.start, 1) - 1, len(row.ids) - 1), 0)


def prefix_groups(rows: Sequence[EncodedRow], max_rows: int) -> list[PrefixGroup]:
    """Partition the rows into groups of at most `max_rows` sharing a token prefix, saving the most tokens.

    Sorted by their tokens, rows with long common prefixes sit side by side; a dynamic program over
    that order picks the runs that maximise the tokens not recomputed, sum of (size - 1) * shared.
    A group's `shared` is its members' common prefix capped by `_prefix_cap`; 0 means it shares nothing.
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    order = sorted(range(len(rows)), key=lambda i: rows[i].ids)
    caps = [_prefix_cap(rows[i]) for i in order]
    links = [_common_prefix(rows[a].ids, rows[b].ids) for a, b in zip(order, order[1:])]
    saved = [0] * (len(order) + 1)  # saved[j]: the best saving over the first j sorted rows
    cut = list(range(-1, len(order)))  # cut[j]: where the last group of that best partition starts
    for end in range(1, len(order) + 1):
        saved[end], shared = saved[end - 1], caps[end - 1]
        for begin in range(end - 2, max(end - max_rows, 0) - 1, -1):
            shared = min(shared, links[begin], caps[begin])
            if shared == 0:
                break
            if saved[begin] + (end - 1 - begin) * shared > saved[end]:
                saved[end], cut[end] = saved[begin] + (end - 1 - begin) * shared, begin
    groups, end = [], len(order)
    while end:
        begin = cut[end]
        groups.append(PrefixGroup(tuple(order[begin:end]), min(caps[begin:end] + links[begin : end - 1])))
        end = begin
    return groups[::-1]


def _units(groups: Sequence[PrefixGroup], rows: Sequence[EncodedRow], batch_size: int) -> list[list[PrefixGroup]]:
    """The scoring work in units: rows sharing nothing, at most `batch_size` a forward pass, longest first (an
    out-of-memory batch size fails at once; similar lengths pad least); and groups sharing a prefix, at most
    `batch_size` a prefix pass, those of similar prefix lengths together (the pass pads them to its longest)."""
    alone = sorted((g for g in groups if not g.shared), key=lambda g: -len(rows[g.rows[0]].ids))
    sharing = sorted((g for g in groups if g.shared), key=lambda g: -g.shared)
    return [alone[i : i + batch_size] for i in range(0, len(alone), batch_size)] + [
        sharing[i : i + batch_size] for i in range(0, len(sharing), batch_size)
    ]


def _padded(
    rows: Sequence[EncodedRow], skips: Sequence[int], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Right-padded tokens of each row from its `skip`-th on (so positions match an unpadded pass), masks
    of the real, scored and content tokens, and the first column scored in any row."""
    width = max(len(r.ids) - s for r, s in zip(rows, skips))
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    scored = torch.zeros((len(rows), width), dtype=torch.bool)
    content = torch.zeros((len(rows), width), dtype=torch.bool)
    for j, (r, s) in enumerate(zip(rows, skips)):
        n = len(r.ids) - s
        input_ids[j, :n] = torch.tensor(r.ids[s:])
        attention[j, :n] = 1
        scored[j, max(r.start, 1) - s : n] = True  # position 0 has nothing to be predicted from
        content[j, :n] = torch.tensor(r.content[s:])
    first = min(max(r.start, 1) - s for r, s in zip(rows, skips))
    return input_ids, attention, scored, content, first


def _accepts(model, name: str) -> bool:
    """Whether the forward takes `name`: remote-code models may lack `logits_to_keep` or a KV cache."""
    return name in inspect.signature(model.forward).parameters


def _plain_head(model) -> bool:
    """Whether `model`'s logits are its output head applied to its decoder's last hidden states (`PLAIN_HEADS`:
    transformers' own classes, not a remote-code model's of the same name)."""
    kind = type(model)
    return kind.__name__ in PLAIN_HEADS and kind.__module__.startswith("transformers.models.")


def _states(model, input_ids: torch.Tensor, keep: int, **inputs) -> tuple[torch.Tensor, torch.nn.Module | None]:
    """One forward pass: the states at the last `keep` positions and the head that maps them to logits. A plain
    head's model (`_plain_head`) runs its decoder alone and gives its hidden states and its head, so no logits
    exist until `_logps` makes them a chunk at a time; any other gives its logits (only those `keep` where its
    forward takes `logits_to_keep`) and no head."""
    input_ids = input_ids.to(model.device)
    if _plain_head(model):
        hidden = model.get_decoder()(input_ids=input_ids, **inputs).last_hidden_state
        return hidden[:, -keep:], model.get_output_embeddings()
    extra = {"logits_to_keep": keep} if _accepts(model, "logits_to_keep") else {}
    return model(input_ids=input_ids, **inputs, **extra).logits[:, -keep:], None


def _logps(states: torch.Tensor, head: torch.nn.Module | None, targets: torch.Tensor) -> torch.Tensor:
    """Each target token's log-probability after its state (one a row; `head`: as `_states` gives it), by TRL's
    `selective_log_softmax` over fp32 logits of at most `CHUNK_LOGITS` entries at a time: the logsumexp of a
    chunk's logits less the target's, never a whole batch's log-softmax."""
    vocab = states.shape[-1] if head is None else head.weight.shape[0]
    step = max(1, CHUNK_LOGITS // vocab)
    chunks = []
    for chunk, index in zip(states.split(step), targets.split(step)):
        logits = (chunk if head is None else head(chunk)).float()
        chunks.append(selective_log_softmax(logits[None], index[None])[0])  # one logsumexp call a chunk
    return torch.cat(chunks)


def _nll(
    model, input_ids: torch.Tensor, scored: torch.Tensor, content: torch.Tensor, first: int, **inputs
) -> list[ActionScore]:
    """One forward pass; each row's NLL summed over its scored tokens and over its content tokens. States only
    where a completion token is predicted (the prompt is most of a grounder row), log-probabilities only of the
    scored tokens (`_logps`), so no batch-by-vocabulary fp32 tensor exists."""
    keep = input_ids.shape[1] - first + 1  # states at columns first-1 .. width-1
    states, head = _states(model, input_ids, keep, **inputs)
    scored, content = scored[:, first:], content[:, first:] & scored[:, first:]
    picked = scored.to(states.device)
    targets = input_ids[:, first:].to(states.device)[picked]
    nll = torch.zeros(scored.shape, dtype=torch.float64)
    nll[scored] = -_logps(states[:, :-1][picked], head, targets).double().cpu()
    sums = nll.sum(1).tolist()
    content_sums = torch.where(content, nll, 0.0).sum(1).tolist()
    counts, content_counts = scored.sum(1).tolist(), content.sum(1).tolist()
    return [ActionScore(*values) for values in zip(sums, map(int, counts), content_sums, map(int, content_counts))]


def _score_plain(model, rows: Sequence[EncodedRow], pad_id: int) -> list[ActionScore]:
    input_ids, attention, scored, content, first = _padded(rows, [0] * len(rows), pad_id)
    return _nll(model, input_ids, scored, content, first, attention_mask=attention.to(model.device), use_cache=False)


def _cache_keyword(model) -> str:
    """The forward's KV-cache argument: transformers 5 renamed `past_key_values` to `cache`."""
    for name in ("cache", "past_key_values"):
        if _accepts(model, name):
            return name
    raise TypeError("prefix sharing needs a forward that takes a KV cache (`cache` or `past_key_values`)")


def _cache_filler(model, keyword: str):
    """A pass that only writes tokens' keys and values into a cache (passed as `keyword`): the decoder alone where
    the head is plain (`_plain_head`), else the model keeping one position's logits where it can."""
    if _plain_head(model):
        decoder = model.get_decoder()
        return lambda cache, **inputs: decoder(use_cache=True, **{keyword: cache}, **inputs)
    keep = {"logits_to_keep": 1} if _accepts(model, "logits_to_keep") else {}
    return lambda cache, **inputs: model(use_cache=True, **{keyword: cache}, **inputs, **keep)


def _rows_cache(cache: DynamicCache, owner: torch.Tensor, config) -> DynamicCache:
    """A new cache holding, for each row, its group's entries of `cache` (which stays as it is for the next rows)."""
    rows = DynamicCache(config=config)
    for index, layer in enumerate(cache.layers):
        rows.update(layer.keys[owner], layer.values[owner], index)
    return rows


def _score_shared(
    model, rows: Sequence[EncodedRow], groups: Sequence[PrefixGroup], pad_id: int, batch_size: int, advance
) -> list[ActionScore]:
    """Scores of the groups' rows, in group order. The groups' prefixes run once: what they all share in one pass
    of one row, the rest of each in one pass (left padded, so all end where the suffixes start); then the rows
    run after them in batches of at most `batch_size`, sorted by suffix length, whatever their group, each with a
    copy of its group's KV cache: rows of one group differ in length as much as rows of different groups, so
    batching them by length is what keeps the padding small."""
    keyword, device = _cache_keyword(model), model.device
    fill = _cache_filler(model, keyword)
    heads = [rows[g.rows[0]].ids[: g.shared] for g in groups]
    root = min([g.shared for g in groups] + [_common_prefix(heads[0], h) for h in heads[1:]])
    root = root if len(groups) > 1 else 0
    cache, width = DynamicCache(config=model.config), max(g.shared for g in groups) - root
    if root:  # the prefix all the groups share (the tool list, the task) runs once, for one row
        fill(cache, input_ids=torch.tensor([heads[0][:root]], device=device))
        cache = _rows_cache(cache, torch.zeros(len(groups), dtype=torch.long, device=device), model.config)
    # The rest of each group's prefix, left padded after the root, so that every one ends where its suffixes start.
    prefix = torch.full((len(groups), width), pad_id, dtype=torch.long)
    prefix_mask = torch.cat([torch.ones((len(groups), root), dtype=torch.long),
                             torch.zeros((len(groups), width), dtype=torch.long)], 1)  # fmt: skip
    for k, (g, head) in enumerate(zip(groups, heads)):
        prefix[k, width - (g.shared - root) :] = torch.tensor(head[root:], dtype=torch.long)
        prefix_mask[k, root + width - (g.shared - root) :] = 1
    if width:
        fill(
            cache,
            input_ids=prefix.to(device),
            attention_mask=prefix_mask.to(device),
            position_ids=(prefix_mask.cumsum(1) - 1).clamp(min=0)[:, root:].to(device),
        )
    members = [(i, k) for k, g in enumerate(groups) for i in g.rows]
    order = sorted(range(len(members)), key=lambda m: groups[members[m][1]].shared - len(rows[members[m][0]].ids))
    out: list[ActionScore | None] = [None] * len(members)
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        owner = torch.tensor([members[m][1] for m in batch])
        skips = [groups[members[m][1]].shared for m in batch]
        input_ids, attention, scored, content, first = _padded([rows[members[m][0]] for m in batch], skips, pad_id)
        # Positions continue each prefix; right padding repeats a row's last one.
        positions = torch.tensor(skips)[:, None] + attention.cumsum(1) - 1
        scores = _nll(
            model,
            input_ids,
            scored,
            content,
            first,
            attention_mask=torch.cat([prefix_mask[owner], attention], 1).to(device),
            position_ids=positions.to(device),
            use_cache=True,
            **{keyword: _rows_cache(cache, owner.to(device), model.config)},
        )
        for m, score in zip(batch, scores):
            out[m] = score
        advance(len(batch))
    return out  # type: ignore[return-value]


@torch.inference_mode()
def score_completions(
    agent: Agent,
    users: Sequence[str],
    completions: Sequence[str],
    batch_size: int = 32,
    desc: str = "scoring",
    share_prefix: bool = False,
) -> list[ActionScore]:
    """Teacher-forced NLL of each completion after its user turn, in input order.

    Rows are sorted longest first (similar lengths share a batch; an out-of-memory batch size
    fails at once) and right padded, so positions match an unpadded forward pass. With
    `share_prefix`, rows sharing a token prefix (MOAT's K candidates of a task share the preamble and
    the task) are grouped and each group's prefix runs once, its KV cache reused by every row.
    """
    if len(users) != len(completions):
        raise ValueError(f"{len(users)} user turns but {len(completions)} completions")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not users:
        return []
    tok, model = agent.tokenizer, agent.model
    if not tok.is_fast:
        raise TypeError("scoring needs a fast tokenizer: the content mask uses its offset mapping")
    rows = [encode_completion(tok, u, c) for u, c in zip(users, completions)]
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    groups = prefix_groups(rows, batch_size) if share_prefix else [PrefixGroup((i,), 0) for i in range(len(rows))]
    units = _units(groups, rows, batch_size)
    out: list[ActionScore | None] = [None] * len(rows)
    with progress_bar() as bar:
        task = bar.add_task(desc, total=len(rows))

        def advance(n: int) -> None:
            bar.advance(task, n)

        def score(unit: list[PrefixGroup]) -> list[ActionScore]:
            if unit[0].shared:
                return _score_shared(model, rows, unit, pad_id, batch_size, advance)
            scores = _score_plain(model, [rows[g.rows[0]] for g in unit], pad_id)
            advance(len(unit))
            return scores

        for unit, scores in zip(units, ranks.share(score, units)):  # each rank scores a run of units
            for i, result in zip((i for g in unit for i in g.rows), scores):
                out[i] = result
    return out  # type: ignore[return-value]
