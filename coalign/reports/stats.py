"""Statistics over seeds for every bench report: mean ± sample std, paired differences and their t.

Pure functions; no scipy for a few table lines (`t_two_sided_p` is exact for whole degrees of freedom).
"""

from __future__ import annotations

import math
from statistics import mean, stdev


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    return mean(values), (stdev(values) if len(values) > 1 else 0.0)


def seeds_of(results: dict) -> list[str]:
    """The bench's seeds as run-folder keys, each once: a seed listed twice is one pair, not two."""
    return [str(s) for s in dict.fromkeys(results.get("seeds", []))]


def paired_t(diffs: list[float]) -> str:
    """The paired t statistic of per-seed differences: "-" from one seed or when the differences are all equal."""
    if len(diffs) < 2 or stdev(diffs) == 0:
        return "-"
    return f"{mean(diffs) / (stdev(diffs) / len(diffs) ** 0.5):.2f}"


def t_two_sided_p(t: float, dof: int) -> float:
    """P(|T| >= |t|) for Student's t with `dof` (>= 1) degrees of freedom, exactly, from the closed forms
    for whole degrees of freedom (Abramowitz & Stegun 26.7.3-4): no scipy for one table line."""
    theta = math.atan(abs(t) / math.sqrt(dof))
    cos2, term, total, odd = math.cos(theta) ** 2, 1.0, 1.0, dof % 2
    # the series: odd dof 1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ..., even dof 1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...
    for k in range(1 + odd, dof - 2 + odd, 2):
        term *= cos2 * k / (k + 1)
        total += term
    if odd:  # (2/pi) (theta + sin cos series); dof 1 has no series
        inside = 2 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * total if dof > 1 else 0.0))
    else:  # sin series
        inside = math.sin(theta) * total
    return min(1.0, max(0.0, 1.0 - inside))


def t_critical(dof: int, p: float = 0.05) -> float:
    """The |t| a two-sided test at level p needs with `dof` degrees of freedom (bisection on t_two_sided_p)."""
    low, high = 0.0, 1e6
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if t_two_sided_p(mid, dof) > p else (low, mid)
    return high


def t_bars(seed_counts: list[int]) -> str:
    """One sentence naming, for each number of seeds the paired tables use, the |t| a 5% two-sided test needs:
    a t from two seeds has one degree of freedom and means little however large it is."""
    counts = sorted({n for n in seed_counts if n >= 2})
    if not counts:
        return ""
    bars = ", ".join(f"{t_critical(n - 1):.2f} from {n} seeds" for n in counts)
    return f"A paired t from n seeds has n − 1 degrees of freedom; p < 0.05 (two-sided) needs |t| above {bars}."


def paired_diff(a: float, b: float) -> float:
    """a - b without float noise: equal averages reached by different sums give 0.0 (not ±1e-15, a "-0.0"
    cell, or a t of 1e16 from differences equal but for their last bit)."""
    return round(a - b, 9) + 0.0


def fmt(values: list[float], percent: bool = True) -> str:
    if not values:
        return "-"
    m, s = mean_std([100 * v for v in values] if percent else values)
    digits = 1 if percent else 3
    m = round(m, digits) + 0.0  # no "-0.0" for a mean that is zero up to float error
    return f"{m:.{digits}f} ± {s:.{digits}f}" if len(values) > 1 else f"{m:.{digits}f}"
