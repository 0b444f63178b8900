"""Stage-1 scoring's peak tensor memory at a real vocabulary: the full-vocabulary fp32 logits scoring computed
before issue 70 against the selective log-probabilities it computes now (`moat.scoring`), in one run.

Rows are stage 1's (`scoring_speed.stage1_rows`: N suite tasks x K candidates, one batch of `--batch-size`),
scored by a random Llama with a tiny body and a real vocabulary (default Qwen2.5's 151,936 tokens; the
tokenizer is a tiny one, so its tokens are a few of them). The peak is counted op by op (`PeakTensorMemory`):
the bytes of the tensors made during scoring alive at once, the model's own weights not counted.

    .venv/bin/python benchmarks/scoring_memory.py [--vocab 151936] [--tasks 8] [--k 4] [--batch-size 64]

Prints each path's peak in MiB, their ratio, and the largest difference between their scores. The defaults
take about 10 seconds and 3.5 GB (the baseline's): 1,873 against 128 MiB, 14.7x; `--tasks 16` fills a 64-row
batch (5,082 against 128 MiB, 39.7x; 8.4 GB).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from scoring_speed import stage1_rows
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from transformers import LlamaConfig, LlamaForCausalLM

from coalign.config import TinySpec
from coalign.formats.lumos import lumos_generation_prompt
from coalign.moat import scoring
from coalign.moat.scoring import ActionScore, score_completions
from coalign.moat.sft_data import grounder_pair
from coalign.models.agents import Agent
from coalign.models.load import load_tokenizer, make_tiny_model
from coalign.tasks.maths_suite import generate_suite


class PeakTensorMemory(TorchDispatchMode):
    """The most bytes that tensors made inside it held at once (a storage counted once, so views are free), on
    any device. Counted after every op, so the same on every run, where a process's resident set moves with
    the allocator's caching and everything else in the process."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                storage = tensor.untyped_storage()
                self.live.setdefault(storage._cdata, (StorageWeakRef(storage), storage.nbytes()))
        self.live = {key: (ref, size) for key, (ref, size) in self.live.items() if not ref.expired()}
        self.peak = max(self.peak, sum(size for _, size in self.live.values()))
        return out


def full_vocabulary_nll(
    model, input_ids: torch.Tensor, scored: torch.Tensor, content: torch.Tensor, first: int, **inputs
) -> list[ActionScore]:
    """`scoring._nll` as it was before issue 70, the baseline: the model's logits at every kept column of every
    row, cast to fp32 and through a cross-entropy over the whole vocabulary."""
    keep = input_ids.shape[1] - first + 1
    logits = model(input_ids=input_ids.to(model.device), logits_to_keep=keep, **inputs).logits[:, -keep:-1]
    targets = input_ids[:, first:].to(logits.device)
    nll = (
        F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
        .view(len(input_ids), -1)
        .double()
        .cpu()
    )
    scored, content = scored[:, first:], content[:, first:] & scored[:, first:]
    sums = torch.where(scored, nll, 0.0).sum(1).tolist()
    content_sums = torch.where(content, nll, 0.0).sum(1).tolist()
    counts, content_counts = scored.sum(1).tolist(), content.sum(1).tolist()
    return [ActionScore(*values) for values in zip(sums, map(int, counts), content_sums, map(int, content_counts))]


def peak_scoring(
    agent: Agent, users: list[str], completions: list[str], batch_size: int, nll: Callable | None = None
) -> tuple[int, list[ActionScore]]:
    """Peak tensor bytes of scoring the rows (by `nll` in place of `scoring._nll` where given), and the scores."""
    ours = scoring._nll
    scoring._nll = nll or ours
    try:
        with PeakTensorMemory() as peak:
            scores = score_completions(agent, users, completions, batch_size, desc="peak memory")
    finally:
        scoring._nll = ours
    return peak.peak, scores


def wide_grounder(tokenizer, vocab: int, hidden: int) -> Agent:
    """`tokenizer` over a random one-layer Llama of `hidden` size and a `vocab`-token head."""
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    return Agent(LlamaForCausalLM(config).eval(), tokenizer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=int, default=151_936, help="the head's vocabulary (Qwen2.5's)")
    parser.add_argument("--hidden", type=int, default=16, help="the model's hidden size")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--k", type=int, default=4, help="candidates per task")
    parser.add_argument("--batch-size", type=int, default=64, help="rows a forward pass (MOAT's default)")
    args = parser.parse_args()
    users, completions = stage1_rows(generate_suite("train", args.tasks), args.k)
    texts = [lumos_generation_prompt(u) + c for u, c in map(grounder_pair, generate_suite("train", 200))]
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = load_tokenizer(make_tiny_model(texts, Path(tmp), TinySpec(hidden_size=16, num_layers=1)))
        agent = wide_grounder(tokenizer, args.vocab, args.hidden)
        full, before = peak_scoring(agent, users, completions, args.batch_size, full_vocabulary_nll)
        selective, now = peak_scoring(agent, users, completions, args.batch_size)
    gap = max(abs(a.nll_sum - b.nll_sum) / abs(a.nll_sum) for a, b in zip(before, now))
    print(f"rows: {len(users)} ({args.tasks} tasks x {args.k}), {args.batch_size} a batch; vocabulary {args.vocab:,}")
    print(f"full-vocabulary fp32 logits: {full / 2**20:9.1f} MiB peak")
    print(f"selective log-probabilities: {selective / 2**20:9.1f} MiB peak")
    print(f"ratio full/selective: {full / selective:.1f}x; scores differ by {gap:.1e} at most (relative)")


if __name__ == "__main__":
    main()
