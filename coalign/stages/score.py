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
import torch.nn.functional as F

from coalign.agents import Agent, progress_bar
from coalign.models import render_prompt

REDUCTIONS = ("mean", "content", "sum")

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
    body = completion[: -len(eos)] if completion.endswith(eos) else completion
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


@torch.inference_mode()
def score_completions(
    agent: Agent,
    users: Sequence[str],
    completions: Sequence[str],
    batch_size: int = 32,
    desc: str = "scoring",
) -> list[ActionScore]:
    """Teacher-forced NLL of each completion after its user turn, in input order.

    Rows are sorted longest first (similar lengths share a batch; an out-of-memory batch size
    fails at once) and right padded, so positions match an unpadded forward pass.
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
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i].ids))
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    # Logits only where a completion token is predicted: the prompt is most of a grounder row.
    trims_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
    out: list[ActionScore | None] = [None] * len(rows)
    with progress_bar() as bar:
        task = bar.add_task(desc, total=len(rows))
        for at in range(0, len(order), batch_size):
            idx = order[at : at + batch_size]
            batch = [rows[i] for i in idx]
            width = max(len(r.ids) for r in batch)
            input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            attention = torch.zeros((len(batch), width), dtype=torch.long)
            scored = torch.zeros((len(batch), width), dtype=torch.bool)
            content = torch.zeros((len(batch), width), dtype=torch.bool)
            for j, r in enumerate(batch):
                n = len(r.ids)
                input_ids[j, :n] = torch.tensor(r.ids)
                attention[j, :n] = 1
                scored[j, max(r.start, 1) : n] = True  # position 0 has nothing to be predicted from
                content[j, :n] = torch.tensor(r.content)
            first = max(min(r.start for r in batch), 1)
            keep = width - first + 1  # logits at positions first-1 .. width-1
            extra = {"logits_to_keep": keep} if trims_logits else {}
            device = model.device
            logits = model(
                input_ids=input_ids.to(device), attention_mask=attention.to(device), use_cache=False, **extra
            ).logits[:, -keep:-1]
            targets = input_ids[:, first:].to(logits.device)
            nll = (
                F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
                .view(len(batch), -1)
                .double()
                .cpu()
            )
            scored, content = scored[:, first:], content[:, first:] & scored[:, first:]
            sums = torch.where(scored, nll, 0.0).sum(1).tolist()
            content_sums = torch.where(content, nll, 0.0).sum(1).tolist()
            counts, content_counts = scored.sum(1).tolist(), content.sum(1).tolist()
            for j, i in enumerate(idx):
                out[i] = ActionScore(sums[j], int(counts[j]), content_sums[j], int(content_counts[j]))
            bar.advance(task, len(idx))
    return out  # type: ignore[return-value]
