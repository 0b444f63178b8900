"""Tables of a PilotRL bench from its results (pure): per-environment success, held-in / held-out averages,
paired differences, tokens and steps per task (the paper's Table 9), plan-update frequency (Table 10).

`results` = {"seeds": [...], "heldin": [...], "heldout": [...], "runs": {variant: {seed: metrics}}}, where
a run's metrics hold one block per plan-update interval ("k1", "k2", ...) as `pilotrl.recipe` writes them; a
GRPO run's also hold its stages' summaries ("grpo", `curves.stage_summaries`); a bench's, each stage's seconds
("seconds", `Run.stage_seconds`).
"""

from __future__ import annotations

from pathlib import Path

from coalign.core.runs import atomic_write_text
from coalign.pilotrl.curriculum import order_label
from coalign.reports.stats import mean_std, paired_diff, paired_t, seeds_of, t_bars
from coalign.reports.tables import SPLITS, pipe_table

NAMES = {
    "adaplan": "SFT (AdaPlan)",
    "react": "SFT (ReAct)",
    "vanilla_rl": "Vanilla RL (ReAct, GRPO)",
    "pilotrl": "PilotRL 1->2->3",
    "order_all": "1&2&3 at once",
    "order_23": "2->3",
    "order_13": "1->3",
    "order_12": "1->2",
    "order_213": "2->1->3",
    "isolated": "isolated planner + executor",
}
PLAN_MEASURES = ("plan_correct", "plan_progress")  # measured on AdaPlan runs only: ReAct writes no plan
# (variant, baseline) pairs compared per seed when both ran: the paper's claims, then its ablations
ABLATIONS = ("order_all", "order_23", "order_13", "order_12", "order_213", "isolated")
PAIRS = [("adaplan", "react"), ("pilotrl", "adaplan"), ("vanilla_rl", "react"), ("pilotrl", "vanilla_rl"),
         *((v, "pilotrl") for v in ABLATIONS)]  # fmt: skip


def _fmt(values: list[float], digits: int = 1) -> str:
    if not values:
        return "-"
    m, s = mean_std(values)
    m = round(m, digits) + 0.0  # no "-0.0" for a mean that is zero up to float error
    return f"{m:.{digits}f} ± {s:.{digits}f}" if len(values) > 1 else f"{m:.{digits}f}"


def _runs(results: dict, variant: str, k: str = "k1") -> list[dict]:
    runs = results["runs"].get(variant, {})
    return [runs[s][k] for s in seeds_of(results) if s in runs and k in runs[s]]


def success_table(results: dict, measure: str = "success", k: str = "k1") -> str:
    """A measure (success rate, or the share of turns well formed; %) per environment and split average,
    mean ± std over seeds, of the evaluation `k` (plan updated every step; `expert_k1`: the expert's plans
    given). One table per split, to fit an 80-column terminal."""
    tables = []
    for split, split_name in SPLITS.items():
        rows = []
        for variant in results["runs"]:
            blocks = [b for b in _runs(results, variant, k) if measure in b["heldin"] or measure in b["heldout"]]
            if not blocks and (k != "k1" or measure in PLAN_MEASURES):
                continue
            cells = [_fmt([b["envs"][e][measure] for b in blocks]) for e in results[split]]
            cells += [_fmt([b[split][measure] for b in blocks if b[split]])]
            rows.append([NAMES.get(variant, variant), *cells])
        tables.append(pipe_table([f"{measure} (%)", *results[split], f"{split_name} avg"], rows))
    return "\n\n".join(tables)


def paired_diffs(results: dict, variant: str, baseline: str, measure: str, split: str) -> list[float]:
    """`variant` minus `baseline` on `split`'s average of `measure`, on each seed both ran."""
    diffs = []
    for seed in seeds_of(results):
        a = results["runs"].get(variant, {}).get(seed, {}).get("k1", {}).get(split)
        b = results["runs"].get(baseline, {}).get(seed, {}).get("k1", {}).get(split)
        if a and b and measure in a and measure in b:
            diffs.append(paired_diff(a[measure], b[measure]))
    return diffs


def paired_table(results: dict, variant: str = "adaplan", baseline: str = "react", measure: str = "success") -> str:
    """`variant` minus `baseline` per seed on each split's average of `measure`, with the paired t statistic."""
    rows = []
    for split in ("heldin", "heldout"):
        diffs = paired_diffs(results, variant, baseline, measure, split)
        rows.append([split, " / ".join(f"{d:+.1f}" for d in diffs) or "-", _fmt(diffs), paired_t(diffs)])
    title = f"{measure}: {NAMES.get(variant, variant)} − {NAMES.get(baseline, baseline)} (points)"
    return pipe_table([title, "per seed", "mean ± std", "t"], rows)


def cost_table(results: dict) -> str:
    """Generated tokens and steps per task, per environment (Table 9), mean over seeds: one table per split,
    its name in the corner."""
    tables = []
    for split, split_name in SPLITS.items():
        rows = []
        for variant in results["runs"]:
            blocks = _runs(results, variant)
            for measure in ("tokens", "steps"):
                digits = 0 if measure == "tokens" else 1
                cells = [_fmt([b["envs"][e][measure] for b in blocks], digits) for e in results[split]]
                rows.append([f"{NAMES.get(variant, variant)}: {measure} / task", *cells])
        tables.append(pipe_table([split_name, *results[split]], rows))
    return "\n\n".join(tables)


def update_table(results: dict, variant: str = "adaplan") -> str:
    """Success (%) / steps per task in each environment, and the split's average success, when the plan is
    rewritten every k steps (Table 10): one table per split, its name in the corner."""
    runs = results["runs"].get(variant, {})
    ks = sorted({k for run in runs.values() for k in run if k[1:].isdigit()}, key=lambda k: int(k[1:]))
    tables = []
    for split, split_name in SPLITS.items():
        rows = []
        for k in ks:
            blocks = _runs(results, variant, k)
            success = [_fmt([b["envs"][e]["success"] for b in blocks]) for e in results[split]]
            steps = [_fmt([b["envs"][e]["steps"] for b in blocks]) for e in results[split]]
            cells = [f"{s} / {n}" for s, n in zip(success, steps)]
            rows.append([f"every {k[1:]} step(s)", *cells, _fmt([b[split]["success"] for b in blocks if b[split]])])
        tables.append(pipe_table([split_name, *results[split], "avg"], rows))
    return "\n\n".join(tables)


def grpo_table(results: dict) -> str:
    """Per GRPO variant and stage, mean ± std over seeds: steps trained, mean reward, and the share of groups
    whose rollouts all scored alike (%, TRL's `frac_reward_zero_std`: such a group gives no gradient); "" when
    no run records its stages."""
    rows = []
    for variant, by_seed in results["runs"].items():
        runs = [by_seed[s]["grpo"] for s in seeds_of(results) if s in by_seed and "grpo" in by_seed[s]]
        for i in range(max(map(len, runs), default=0)):
            stages = [run[i] for run in runs if i < len(run)]
            name = f"{NAMES.get(variant, variant)}: {stages[0]['label']} ({stages[0]['stage']})"
            steps, reward = [st["steps"] for st in stages], [st["reward"] for st in stages if "reward" in st]
            zero = [100 * st["frac_reward_zero_std"] for st in stages if "frac_reward_zero_std" in st]
            rows.append([name, _fmt(steps, 0), _fmt(reward, 2), _fmt(zero)])
    return pipe_table(["GRPO stage", "steps", "reward", "no variance (%)"], rows) if rows else ""


def _is_evaluation(stage: str) -> bool:
    """An evaluation stage of `pilotrl.recipe.evaluate` (`eval_k1`, `expert_k2`); the rest train."""
    head, _, k = stage.partition("_k")
    return head in ("eval", "expert") and k.isdigit()


def time_table(results: dict) -> str:
    """Per variant, mean ± std over seeds: minutes its run's stages took, training and evaluation (a GRPO run's
    SFT is its SFT run's, counted there); "" when no run records them."""
    rows = []
    for variant, by_seed in results["runs"].items():
        timed = [by_seed[s]["seconds"] for s in seeds_of(results) if s in by_seed and "seconds" in by_seed[s]]
        if not timed:
            continue
        evals = [sum(v for stage, v in run.items() if _is_evaluation(stage)) / 60 for run in timed]
        total = [sum(run.values()) / 60 for run in timed]
        rows.append([NAMES.get(variant, variant), _fmt([t - e for t, e in zip(total, evals)], 0), _fmt(evals, 0),
                     _fmt(total, 0)])  # fmt: skip
    return pipe_table(["minutes", "training", "evaluation", "in all"], rows) if rows else ""


def _run_name(block: dict) -> str:
    order, name = block.get("rl_order"), NAMES.get(block["mode"], block["mode"])
    return f"{name} + GRPO {order_label(order)}" if order else name


def run_markdown(metrics: dict) -> str:
    """One run's evaluation (`pilotrl.recipe.run_pilotrl`'s result) as the bench tables of a single seed."""
    first = next(iter(metrics.values()))
    results = {
        "seeds": [0],
        "heldin": first["heldin_envs"],
        "heldout": first["heldout_envs"],
        "runs": {_run_name(first): {"0": metrics}},
    }
    return report_markdown(results)


def report_markdown(results: dict, curves: str = "") -> str:
    seeds = ", ".join(map(str, results["seeds"]))
    parts = [
        f"# PilotRL bench, seeds {seeds}",
        *(
            [f"Merged from {len(results['merged_from'])} invocations ({', '.join(results['merged_from'])})."]
            if results.get("merged_from")
            else []
        ),
        "Success rate (%) over each environment's evaluation tasks, mean ± sample std over seeds.",
        success_table(results),
        "Turns written in the format (%: a plan block when one is due, a thought and an action, nothing"
        " malformed), the GRPO format reward's measure:",
        success_table(results, "well_formed"),
    ]
    if any("context_stops" in b["heldin"] for v in results["runs"] for b in _runs(results, v)):
        parts += ["Episodes stopped because their context was full (%, `pilotrl.max_context`):",
                  success_table(results, "context_stops")]  # fmt: skip
    if any(b["heldin"].get("plan_correct") is not None for v in results["runs"] for b in _runs(results, v)):
        parts += [
            "First plans that solve their task when followed step by step on their own (%, AdaPlan: the plan "
            "quality's correctness; the planner's half of the episode, whatever the executor then did):",
            success_table(results, "plan_correct"),
            "How far first plans get toward their goal followed on their own (%, the plan quality's graded "
            "correctness: 1 + 4 x this share, rounded down):",
            success_table(results, "plan_progress"),
        ]
    pairs = [pair for pair in PAIRS if set(pair) <= set(results["runs"])]
    if pairs:
        parts += ["Paired by seed (the GRPO runs of a seed start from its SFT run):"]
        parts += [paired_table(results, v, b, measure) for v, b in pairs for measure in ("success", "well_formed")]
        counts = [len(paired_diffs(results, v, b, m, split)) for v, b in pairs for m in ("success", "well_formed")
                  for split in ("heldin", "heldout")]  # fmt: skip
        parts += [bars] if (bars := t_bars(counts)) else []
    parts += ["Generated tokens and steps per task (Table 9):", cost_table(results)]
    if table := grpo_table(results):
        parts += ["GRPO stages: steps, mean reward, and the groups whose rollouts all scored alike (no gradient):",
                  table]  # fmt: skip
    if table := time_table(results):
        parts += ["What each run cost: minutes its stages took, mean ± std over seeds (a GRPO run starts from its"
                  " seed's SFT run, whose time is that run's):", table]  # fmt: skip
    if curves:
        parts += ["GRPO reward curves per stage (executor adherence, planner plan quality, end-to-end; Figure 3): "
                  f"`{curves}` beside this report."]  # fmt: skip
    if "adaplan" in results["runs"]:
        parts += [
            "AdaPlan, plan rewritten every k steps (Table 10): success (%) / steps per task in each environment, "
            "the split's average success (%) in avg:",
            update_table(results),
        ]
    if any("expert_k1" in run for runs in results["runs"].values() for run in runs.values()):
        parts += [
            "Given the expert's plans (its remaining plan as each plan block, rewritten every step: the executor "
            "alone, as GRPO stage 1 trains it), success and well-formed turns (%):",
            success_table(results, k="expert_k1"),
            success_table(results, "well_formed", "expert_k1"),
        ]
    return "\n\n".join(parts) + "\n"


def write_report(results: dict, root: str | Path, prefix: str = "", curves: str = "") -> None:
    """`<prefix>report.md` under `root`; `curves` names the plot beside it, which the bench draws from the run
    folders (a merge of results files has none)."""
    atomic_write_text(Path(root) / f"{prefix}report.md", report_markdown(results, curves) + "\n")
