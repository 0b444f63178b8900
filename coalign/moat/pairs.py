"""Stage 1 preference pairs from grounder scores, and the check of MOAT's premise.

Scores are the grounder's NLL of the gold actions under each of K sampled subgoal sequences
(lower = better, any reduction of coalign.scoring). MOAT's convergence argument assumes that
lower PPL goes with true success; the paper never measures it, `point_biserial` and `auc` do.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np


@dataclass(frozen=True)
class Pair:
    """Indices of the chosen (lowest NLL) and rejected (highest NLL) candidates.

    `chosen_score` and `rejected_score` are the given NLL values; `gap` is on the scale the
    filter used (NLL or PPL).
    """

    chosen: int
    rejected: int
    chosen_score: float
    rejected_score: float
    gap: float


def select_pair(scores: Sequence[float], threshold: float = 0.1, gap_on: Literal["nll", "ppl"] = "nll") -> Pair | None:
    """Best and worst candidate, or None when they are too close to be a stable preference.

    chosen = argmin NLL (first on ties), rejected = argmax NLL (last on ties). The gap is
    max - min of the NLL itself with gap_on="nll" (the authors' release: mean NLL = log-PPL) or
    of PPL = exp(NLL) with gap_on="ppl" (the paper's text, reward r = -PPL). The pair is kept
    when gap >= threshold (Appendix A.1 filter, 0.1 in both); a zero gap is never a pair, since
    it says nothing about which candidate is better. None also when there are fewer than 2.
    """
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    if gap_on not in ("nll", "ppl"):
        raise ValueError(f"gap_on must be 'nll' or 'ppl', got {gap_on!r}")
    values = [float(s) for s in scores]
    if any(math.isnan(v) for v in values):
        raise ValueError("a score is NaN")
    if len(values) < 2:
        return None
    low, high = min(values), max(values)
    chosen = values.index(low)
    rejected = len(values) - 1 - values[::-1].index(high)
    gap = high - low if gap_on == "nll" else _ppl_gap(low, high)
    if gap == 0 or gap < threshold:
        return None
    return Pair(chosen=chosen, rejected=rejected, chosen_score=low, rejected_score=high, gap=gap)


def select_pairs(
    scores: Sequence[float], n: int = 1, threshold: float = 0.1, gap_on: Literal["nll", "ppl"] = "nll"
) -> list[Pair]:
    """Up to `n` pairs, no candidate in two: `select_pair`'s, then `select_pair` of the candidates left, and so
    on, until one falls under the threshold. More pairs from the same K samples, each as wide as it can be."""
    left, pairs = list(range(len(scores))), []
    while len(pairs) < n and (pair := select_pair([scores[i] for i in left], threshold, gap_on)):
        chosen, rejected = left[pair.chosen], left[pair.rejected]
        pairs.append(replace(pair, chosen=chosen, rejected=rejected))
        left = [i for i in left if i not in (chosen, rejected)]
    return pairs


def held_aside(task_ids: Iterable[str], share: float, seed: int) -> frozenset[str]:
    """The tasks whose pairs DPO never trains on, to measure it on (`moat.dpo_held_aside`): `share` of them,
    at least one when above 0 and at most all but one, drawn from `seed` alone, so every round of a run (its
    units are the same each round) and a resumed run hold aside the same tasks."""
    ids = sorted(set(task_ids))
    if share == 0 or len(ids) < 2:
        return frozenset()
    count = min(len(ids) - 1, max(1, round(share * len(ids))))
    return frozenset(random.Random(f"dpo-held-aside-{seed}").sample(ids, count))


def _ppl_gap(low: float, high: float) -> float:
    """exp(high) - exp(low), infinite where exp overflows (a mean NLL past 709 nats) rather than raising."""
    try:
        return math.exp(high) - math.exp(low) if high != low else 0.0
    except OverflowError:
        return math.inf


def _checked(scores: Sequence[float], success: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    if len(scores) != len(success):
        raise ValueError(f"{len(scores)} scores but {len(success)} success flags")
    x = np.asarray(scores, dtype=float)
    if np.isnan(x).any():
        raise ValueError("a score is NaN")
    return x, np.asarray(success, dtype=bool)


def point_biserial(scores: Sequence[float], success: Sequence[bool]) -> float | None:
    """Pearson correlation of score with 0/1 success; the premise predicts a negative value.

    None when the scores or the outcomes are constant (the correlation is undefined).
    """
    x, y = _checked(scores, success)
    if len(x) < 2 or np.ptp(x) == 0 or y.all() or not y.any():
        return None
    xc, yc = x - x.mean(), y - y.mean()
    return float((xc @ yc) / math.sqrt((xc @ xc) * (yc @ yc)))


def auc(scores: Sequence[float], success: Sequence[bool]) -> float | None:
    """P(a random successful candidate has lower NLL than a random failed one), ties count 1/2.

    0.5 is chance, 1.0 means NLL ranks every success above every failure. Computed from
    average ranks (Mann-Whitney U), so pooling many tasks stays O(n log n). None when either
    class is empty.
    """
    x, y = _checked(scores, success)
    n_success, n_failed = int(y.sum()), int((~y).sum())
    if n_success == 0 or n_failed == 0:
        return None
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    group_rank = np.cumsum(counts) - (counts - 1) / 2  # average 1-based rank of each distinct value
    ranks = group_rank[inverse]
    failed_above = ranks[~y].sum() - n_failed * (n_failed + 1) / 2  # pairs with failure NLL > success NLL
    return float(failed_above / (n_success * n_failed))


def unpaired_counts(score_lists: Sequence[Sequence[float | None]], pairs: int) -> dict[str, int]:
    """Why tasks gave no pair: `equal_scores` (every candidate scored the same: nothing to prefer),
    `unscored` (a score is undefined, e.g. the content reduction of a task without tool arguments),
    `below_threshold` (the rest). These go into the stage record, so a round without pairs says why."""
    unscored = sum(1 for scores in score_lists if any(s is None for s in scores))
    equal = sum(1 for scores in score_lists if None not in scores and len(set(scores)) <= 1)
    return {"equal_scores": equal, "unscored": unscored, "below_threshold": len(score_lists) - pairs - equal - unscored}


def no_pair_advice(counts: dict[str, int], threshold: float, gap_on: str) -> str:
    """What to change when stage 1 kept no pair (the round then skips DPO and keeps the planner)."""
    parts = []
    if counts.get("equal_scores"):
        parts.append(
            f"{counts['equal_scores']} tasks scored all K candidates the same (identical candidates? "
            "raise moat.temperature or moat.k)"
        )
    if counts.get("below_threshold"):
        parts.append(f"{counts['below_threshold']} tasks had a {gap_on} gap under moat.pair_threshold={threshold:g}")
    if counts.get("unscored"):
        parts.append(f"{counts['unscored']} tasks had no score under moat.score_reduction")
    return "no preference pair: " + ("; ".join(parts) or "no task to pair")
