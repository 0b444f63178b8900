"""PilotRL's reward curves over the GRPO stages (the paper's Figure 3), from the stages' train_log.json files.

A run's stages continue one from another, so their TRL log rows go on one global step axis: each stage is
offset by the steps trained before it, and its span (`start`, `end`) marks the stage boundaries. Pure
functions from run folders to curves; matplotlib only at the edge (`plot_curves`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from statistics import mean

from coalign.core.errors import DataError
from coalign.core.runs import temp_sibling
from coalign.pilotrl.curriculum import STAGES

COMPONENTS = ("format", "adherence", "end_to_end", "plan_quality")  # `rewards.reward_functions`' names
# TRL's share of a step's groups whose rollouts all scored alike: such a group has no advantage, so no gradient
ZERO_STD = "frac_reward_zero_std"
PANELS = (
    ("adherence", "executor: adherence reward"),
    ("plan_quality", "planner: plan-quality reward"),
    ("end_to_end", "end-to-end reward"),
    ("format", "format reward (every stage)"),
)


def _number(value, path: Path, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DataError(path, None, field, f"expected a number, got {value!r}", "wrong type")
    return float(value)


def read_stage_log(path: Path) -> tuple[int, list[dict]]:
    """(steps the stage trained, its log rows with a reward); a DataError naming the file and the field
    for anything else, so a damaged log is never plotted as if it were whole."""
    try:
        log = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(path, None, None, f"not valid JSON: {err}", "invalid JSON") from None
    if not isinstance(log, dict):
        raise DataError(path, None, None, f"expected a JSON object, got {type(log).__name__}", "wrong type")
    steps = log.get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise DataError(path, None, "steps", f"expected the stage's step count, got {steps!r}", "missing field")
    rows = log.get("history", [])  # absent when no row was logged
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise DataError(path, None, "history", "expected a list of log rows (objects)", "wrong type")
    for i, row in enumerate(rows):
        for key in ("step", "reward"):
            _number(row.get(key), path, f"history[{i}].{key}")
    return steps, rows


def _stage_logs(run_dir: Path) -> list[tuple[str, Path]]:
    """(stage name, train_log.json) of `checkpoints/grpo{i}-{stage}` for i = 1.. until one has no log yet
    (a stage still training: nothing after it has a place on the step axis)."""
    out = []
    while logs := sorted((run_dir / "checkpoints").glob(f"grpo{len(out) + 1}-*/train_log.json")):
        if len(logs) > 1:
            raise ValueError(f"{run_dir}: several GRPO stages numbered {len(out) + 1} ({', '.join(map(str, logs))})")
        out.append((logs[0].parent.name.partition("-")[2], logs[0]))
    return out


def stage_curves(run_dir: str | Path) -> list[dict]:
    """Per GRPO stage of a run folder, in order: its name and paper label, its span [start, end) on the
    global step axis, and per logged row the global step, the reward and each component the stage used
    ("format", "adherence", "end_to_end", "plan_quality"), and TRL's `frac_reward_zero_std` where every row has
    it. No stages (or no folder): an empty list."""
    curves, offset = [], 0
    for name, path in _stage_logs(Path(run_dir)):
        steps, rows = read_stage_log(path)
        stage = STAGES.get(name)
        curve = {
            "stage": name,
            "label": stage.label if stage else name,
            "start": offset,
            "end": offset + steps,
            "steps": [offset + int(row["step"]) for row in rows],
            "reward": [float(row["reward"]) for row in rows],
        }
        for component in COMPONENTS:
            key = f"rewards/reward_{component}/mean"
            if rows and all(key in row for row in rows):
                curve[component] = [_number(row[key], path, f"history[{i}].{key}") for i, row in enumerate(rows)]
        if rows and all(ZERO_STD in row for row in rows):
            curve[ZERO_STD] = [_number(row[ZERO_STD], path, f"history[{i}].{ZERO_STD}") for i, row in enumerate(rows)]
        curves.append(curve)
        offset += steps
    return curves


def stage_summaries(curves: list[dict]) -> list[dict]:
    """Per stage of one run's `stage_curves`: its name, label, steps trained, its mean reward over the logged
    rows and the mean share of groups without reward variance (when logged), the bench's record of a run's
    GRPO: whether its groups gave a gradient at all."""
    out = []
    for curve in curves:
        summary = {"stage": curve["stage"], "label": curve["label"], "steps": curve["end"] - curve["start"]}
        for key in ("reward", ZERO_STD):
            if curve.get(key):
                summary[key] = mean(curve[key])
        out.append(summary)
    return out


def mean_curves(runs: list[list[dict]], what: str) -> list[dict]:
    """Stage by stage, the mean over `runs` at each global step all of them logged, of the reward and
    of each component all of them have; only the stages every run has reached (none without runs)."""
    out = []
    for stages in zip(*runs):
        names = sorted({s["stage"] for s in stages})
        if len(names) > 1:
            raise ValueError(f"{what}: GRPO stage {len(out) + 1} differs between runs ({', '.join(names)})")
        steps = sorted(set.intersection(*(set(s["steps"]) for s in stages)))
        curve = {
            "stage": names[0],
            "label": stages[0]["label"],
            "start": max(s["start"] for s in stages),
            "end": min(s["end"] for s in stages),
            "steps": steps,
        }
        for key in ("reward", *COMPONENTS):
            if all(key in s for s in stages):
                by_step = [dict(zip(s["steps"], s[key], strict=True)) for s in stages]
                curve[key] = [mean(values[step] for values in by_step) for step in steps]
        out.append(curve)
    return out


def bench_curves(root: str | Path, seeds: list[int], variants: list[str]) -> dict[str, list[dict]]:
    """Per variant of a PilotRL bench (`<root>/seed<s>/<variant>/`), its stage curves averaged over the
    seeds: the mean at each global step where all seeds have a log row, over the stages all seeds have
    reached, so a seed still training (or missing) shortens the curve instead of skewing it."""
    root = Path(root)
    return {
        variant: mean_curves([stage_curves(root / f"seed{seed}" / variant) for seed in seeds], variant)
        for variant in variants
    }


def _series(stages: list[dict], key: str) -> tuple[list[float], list[float]]:
    """A variant's x and y over its stages; NaN (a gap in the line) where a stage did not use `key`."""
    xs, ys = [], []
    for s in stages:
        xs += s["steps"]
        ys += s.get(key, [float("nan")] * len(s["steps"]))
    return xs, ys


def plot_curves(curves: dict[str, list[dict]], path: str | Path) -> Path:
    """Figure 3's three panels (executor adherence, planner plan quality, end-to-end reward) and the format
    reward every stage uses, against the global step, one line per variant, its stage boundaries dotted;
    written atomically as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.3 * len(PANELS), 3.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (variant, stages) in enumerate(curves.items()):
        color = colors[i % len(colors)]
        label = f"{variant} ({'->'.join(s['label'] for s in stages)})" if stages else variant
        for ax, (key, _) in zip(axes, PANELS):
            # markers: a stage of one logged step is a single point, which a line alone does not draw
            ax.plot(*_series(stages, key), color=color, label=label, marker="o", markersize=3)
            for boundary in sorted({s["end"] for s in stages[:-1]}):
                ax.axvline(boundary, color=color, linestyle=":", linewidth=1)
    for ax, (_, title) in zip(axes, PANELS):
        ax.set_title(title)
        ax.set_xlabel("global step")
    axes[0].set_ylabel("mean reward")
    if curves:
        axes[0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    try:
        fig.savefig(tmp, format="png", dpi=120)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
    return path
