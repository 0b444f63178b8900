"""The bench's report: mean ± std over seeds, as markdown tables and PNG plots, from results.json alone.

Pure functions from the results dict to tables; matplotlib only at the edge (`write_report`).
Accuracies are percentages, perplexities raw. Accuracy columns follow the paper's Table 2: each
evaluation set, then the split's mean over its sets whatever their task family; perplexities are
averaged only within a family, since a PPL is only comparable on the same kind of action text.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from coalign.core.machine import machine_summary
from coalign.core.runs import atomic_write_text
from coalign.moat.plan_value import with_plan_value
from coalign.reports.stats import fmt, mean_std, paired_diff, paired_t, seeds_of, t_bars
from coalign.reports.tables import SPLITS, pipe_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAMES = {
    "lumos": "Lumos (matched)",
    "moat": "MOAT",
    "moat_no_stage1": "MOAT w/o stage 1",
    "moat_no_stage2": "MOAT w/o stage 2",
    "moat_no_critic": "MOAT w/o critic",
    "moat_corrected": "MOAT (corrected)",
}
COLD = "Lumos (cold start)"
PLOT_NAMES = {"lumos": "Lumos (matched budget)"}  # the plots have room for the long name
# The tables fit an 80-column terminal (rich's rendering of the markdown, as `coalign bench` prints it): short
# row labels and headers, explained in a legend under the table, and the widest tables one per split.
LEGEND = (
    "Lumos (cold start): the models every recipe starts from (round 0); Lumos (matched): the Lumos baseline "
    "trained on MOAT's budget (matched budget)."
)


def name(recipe: str) -> str:
    return NAMES.get(recipe, f"MOAT K={recipe[6:]}" if recipe.startswith("moat_k") else recipe)


def recipe_seeds(results: dict, recipe: str) -> list[str]:
    """The bench's seeds a recipe ran on: a merged bench may run its ablations on fewer seeds than its main pair."""
    runs = results["runs"].get(recipe, {})
    return [s for s in seeds_of(results) if s in runs]


def row_label(results: dict, recipe: str) -> str:
    """The recipe's name, and its seeds when they are not all the bench's (its row then averages fewer)."""
    seeds = recipe_seeds(results, recipe)
    if len(seeds) == len(seeds_of(results)):
        return name(recipe)
    return f"{name(recipe)} (seed{'s' if len(seeds) != 1 else ''} {', '.join(seeds)})"


def rounds_of(results: dict) -> list[str]:
    return [f"round{r}" for r in range(results["config"]["moat"]["rounds"] + 1)]


def _metrics_of(block: dict, dataset: str | None, family: str | None) -> dict:
    """A split's metrics for one evaluation set, one family's average, or (neither given) the split's average;
    with plan value derived where results written before it was recorded hold its two terms."""
    if dataset:
        return with_plan_value(block.get("sets", {}).get(dataset, {}))
    if family:
        return with_plan_value(block.get("family_average", {}).get(family, {}))
    return with_plan_value(block.get("average", {}))


def values(
    results: dict,
    recipe: str,
    round_: str,
    split: str,
    metric: str,
    dataset: str | None = None,
    family: str | None = None,
) -> list:
    """One metric over the seeds: one evaluation set's value, one family's average, or the split's average."""
    out = []
    for run in results["runs"].get(recipe, {}).values():
        m = _metrics_of(run["rounds"].get(round_, {}).get(split, {}), dataset, family)
        if metric in m:
            out.append(m[metric])
    return out


def _round0_block(results: dict, split: str) -> dict:
    for recipe in results["runs"].values():
        for run in recipe.values():
            return run["rounds"]["round0"][split]
    return {}


def datasets(results: dict, split: str) -> list[str]:
    return list(_round0_block(results, split).get("sets", {}))


def families(results: dict, split: str) -> list[str]:
    """The task families of a split's sets; none in results written before families were recorded."""
    return list(_round0_block(results, split).get("family_average", {}))


def _columns(results: dict) -> list[tuple[str, str | None]]:
    """(split, dataset or None for the split's average), as the paper's Table 2 orders them."""
    cols: list[tuple[str, str | None]] = []
    for split in ("heldin", "heldout"):
        cols += [(split, d) for d in datasets(results, split)] + [(split, None)]
    return cols


def set_metric(results: dict, split: str, dataset: str) -> str | None:
    """The benchmark metric a set's accuracy column holds when it is not accuracy (web sets: Mind2Web's
    `step_success_rate`, WebShop's `reward`), else None."""
    return _round0_block(results, split).get("sets", {}).get(dataset, {}).get("metric")


def _headers(cols) -> list[str]:
    """Each set's name (its split is the average's column after it), and each split's average."""
    return [d or f"{SPLITS[s]} avg" for s, d in cols]


def _metric_note(results: dict) -> list[str]:
    """The note naming the metric of the sets whose accuracy column holds another (web sets), when there are any."""
    held = [(d, m) for s, d in _columns(results) if d and (m := set_metric(results, s, d))]
    if not held:
        return []
    sets = ", ".join(f"{d} the {m.replace('_', ' ')}" for d, m in held)
    return [f"The columns of web sets hold their benchmark's metric, not accuracy: {sets}.", ""]


def ppl_key(results: dict, split: str, dataset: str | None = None, family: str | None = None) -> str:
    """The grounding PPL a column shows: `grounding_ppl` (gold actions given the planner's subgoals), or for
    web sets and the web family `grounding_ppl_gold_subgoals` (given the gold subgoals, turn by turn: the
    planner's turns need not align with the gold action groups; see `evaluate.gold_grounding_ppl`)."""
    m = _metrics_of(_round0_block(results, split), dataset, family)
    return (
        "grounding_ppl_gold_subgoals"
        if "grounding_ppl" not in m and "grounding_ppl_gold_subgoals" in m
        else "grounding_ppl"
    )


def _ppl_suffix(key: str) -> str:
    return " [gold sg]" if key == "grounding_ppl_gold_subgoals" else ""


WIDE = 4  # data columns past which a table goes one per split, to fit an 80-column terminal


def accuracy_table(results: dict, recipes: list[str], with_cold: bool, metric: str = "accuracy", row=None) -> str:
    """Final-round metric per evaluation set and per split average (Tables 2 and 3): one table, or one per split
    (its name in the corner) where the sets would not fit 80 columns side by side."""
    row = row or (lambda recipe: row_label(results, recipe))
    final, every = rounds_of(results)[-1], _columns(results)
    groups = (
        [("method", every)] if len(every) <= WIDE else [(n, [c for c in every if c[0] == s]) for s, n in SPLITS.items()]
    )
    first = next((r for r in recipes if r in results["runs"]), None)
    tables = []
    for corner, cols in groups:
        rows = []
        if with_cold and first:
            rows.append([COLD] + [fmt(values(results, first, "round0", s, metric, d)) for s, d in cols])
        for recipe in recipes:
            if recipe in results["runs"]:
                rows.append([row(recipe)] + [fmt(values(results, recipe, final, s, metric, d)) for s, d in cols])
        tables.append(pipe_table([corner] + _headers(cols), rows))
    return "\n\n".join(tables)


def _ppl_columns(results: dict) -> list[tuple[str, str | None, str | None]]:
    """(split, dataset, family): each evaluation set, then each family's average (the split's average in
    results without families)."""
    cols: list[tuple[str, str | None, str | None]] = []
    for split in ("heldin", "heldout"):
        cols += [(split, d, None) for d in datasets(results, split)]
        cols += [(split, None, f) for f in families(results, split)] or [(split, None, None)]
    return cols


def ppl_table(results: dict, recipes: list[str]) -> str:
    """Grounding PPL of the gold actions given the planner's subgoals, before and after the rounds (Table 4),
    per evaluation set and per task family; web columns (marked "[gold sg]") hold it given the gold subgoals.
    One table per split, its name in the corner."""
    final, tables = rounds_of(results)[-1], []
    for split, split_name in SPLITS.items():
        cols = [col for col in _ppl_columns(results) if col[0] == split]
        keys = [ppl_key(results, s, d, f) for s, d, f in cols]
        rows = []
        for recipe in recipes:
            if recipe in results["runs"]:
                for when, round_ in (("round 0", "round0"), (final.replace("round", "round "), final)):
                    row = [f"{row_label(results, recipe)}, {when}"]
                    row += [
                        fmt(values(results, recipe, round_, s, key, d, f), percent=False)
                        for (s, d, f), key in zip(cols, keys)
                    ]
                    rows.append(row)
        headers = [(d or (f"{f} avg" if f else "avg")) + _ppl_suffix(key) for (s, d, f), key in zip(cols, keys)]
        tables.append(pipe_table([split_name] + headers, rows))
    return "\n\n".join(tables)


def per_round_table(results: dict, recipes: list[str]) -> str:
    """Accuracy, grounding PPL (per task family) and capability gap after every round (Figure 4 in numbers):
    one table per split, its name in the corner."""
    tables = []
    for split, split_name in SPLITS.items():
        fams = families(results, split) or [None]
        rows = []
        for recipe in recipes:
            if recipe not in results["runs"]:
                continue
            for round_ in rounds_of(results):
                row = [row_label(results, recipe), round_.replace("round", "")]
                row += [
                    fmt(values(results, recipe, round_, split, "accuracy")),
                    fmt(values(results, recipe, round_, split, "grounder_acc_gold_subgoals")),
                    fmt(values(results, recipe, round_, split, "capability_gap")),
                ]
                row += [
                    fmt(values(results, recipe, round_, split, ppl_key(results, split, family=f), family=f), False)
                    for f in fams
                ]
                rows.append(row)
        headers = [split_name, "round", "acc", "gold-sg acc", "gap"]
        headers += [(f"{f} PPL" if f else "PPL") + _ppl_suffix(ppl_key(results, split, family=f)) for f in fams]
        tables.append(pipe_table(headers, rows))
    return "\n\n".join(tables)


def paired_diffs(
    results: dict, recipe: str, baseline: str, split: str, dataset: str | None = None, metric: str = "accuracy"
) -> list[float]:
    """recipe − baseline `metric` after the last round, on each seed both ran: a seed's recipes share its cold
    start, so these are paired."""
    final = rounds_of(results)[-1]

    def value(r: str, seed: str):
        block = results["runs"].get(r, {}).get(seed, {}).get("rounds", {}).get(final, {}).get(split, {})
        return _metrics_of(block, dataset, None).get(metric)

    pairs = [(value(recipe, s), value(baseline, s)) for s in seeds_of(results)]
    return [paired_diff(a, b) for a, b in pairs if a is not None and b is not None]


def comparisons(results: dict, recipes: list[str]) -> list[tuple[str, str]]:
    """(recipe, baseline) pairs to difference: every recipe against the matched Lumos baseline, and every
    ablation against the full MOAT (what removing its part costs)."""
    ran = [r for r in recipes if r in results["runs"] and not r.startswith("moat_k")]
    pairs = [(r, "lumos") for r in ran if r != "lumos" and "lumos" in ran]
    return pairs + [(r, "moat") for r in ran if r.startswith("moat_no_") and "moat" in ran]


def paired_table(results: dict, pairs: list[tuple[str, str]], metric: str = "accuracy") -> str:
    """Each pair's split averages of `metric`, seed by seed, with the mean and the paired t: a row per pair and
    split."""
    rows = []
    for recipe, baseline in pairs:
        for split, split_name in SPLITS.items():
            diffs = paired_diffs(results, recipe, baseline, split, metric=metric)
            label = f"{name(recipe)} − {name(baseline)}"
            rows.append([label, split_name, " / ".join(f"{100 * d:+.1f}" for d in diffs), fmt(diffs), paired_t(diffs)])
    return pipe_table(["difference (points)", "split", "per seed", "mean", "t"], rows)


def shared_seeds(results: dict, recipe: str, baseline: str) -> list[str]:
    """The seeds both recipes ran: the pairs their differences are taken over."""
    return [seed for seed in recipe_seeds(results, recipe) if seed in results["runs"].get(baseline, {})]


def paired_columns_table(results: dict, pairs: list[tuple[str, str]]) -> str:
    """Each pair's difference in every column (each evaluation set and split average): mean ± std over the
    seeds both ran (listed), and the paired t in brackets where there are two seeds or more. One table per split,
    its name in the corner."""
    tables = []
    for split, split_name in SPLITS.items():
        cols, rows = [col for col in _columns(results) if col[0] == split], []
        for recipe, baseline in pairs:
            diffs = [paired_diffs(results, recipe, baseline, s, d) for s, d in cols]
            cells = [fmt(d) + (f" (t {t})" if (t := paired_t(d)) != "-" else "") for d in diffs]
            seeds = ", ".join(shared_seeds(results, recipe, baseline))
            rows.append([f"{name(recipe)} − {name(baseline)}", seeds] + cells)
        tables.append(pipe_table([split_name, "seeds"] + [d or "avg" for _, d in cols], rows))
    return "\n\n".join(tables)


def subgoals_matter_table(results: dict, recipes: list[str]) -> str:
    """Grounder accuracy given gold vs blanked subgoals: the gap says how much the plan matters at all."""
    final = rounds_of(results)[-1]
    first = next((r for r in recipes if r in results["runs"]), None)
    rows = []
    for method, recipe, round_ in [(COLD, first, "round0")] + [(None, r, final) for r in recipes]:
        if recipe in results["runs"]:
            row = [method or row_label(results, recipe)]
            for split in ("heldin", "heldout"):
                row += [
                    fmt(values(results, recipe, round_, split, k))
                    for k in ("grounder_acc_gold_subgoals", "grounder_acc_blank_subgoals")
                ]
            rows.append(row)
    return pipe_table(["method", "held-in gold", "held-in blank", "held-out gold", "held-out blank"], rows)


PLAN_KEYS = {  # metric: (header, what it is)
    "plan_value": (
        "plan value",
        "end-to-end accuracy − the same grounder's given blanked subgoals (above 0, the planner's subgoals "
        "help the grounder)",
    ),
    "subgoal_agreement": ("agreement", "token F1 of the planner's subgoals with the gold ones (moat.plan_value)"),
}


def plan_keys(results: dict, recipes: list[str]) -> list[str]:
    """The plan metrics `recipes` recorded in any round: none without the diagnostics, and no agreement in
    results written before it was recorded (their plan value comes from accuracy and the blanked numbers)."""
    rounds = rounds_of(results)
    return [k for k in PLAN_KEYS if any(values(results, r, n, s, k) for r in recipes for n in rounds for s in SPLITS)]


def plan_table(results: dict, recipes: list[str], keys: list[str]) -> str:
    """Plan value and subgoal agreement (`keys` of them) after every round: one table per split, its name in
    the corner, and the legend of its columns."""
    tables = []
    for split, split_name in SPLITS.items():
        rows = [
            [row_label(results, recipe), round_.replace("round", "")]
            + [fmt(values(results, recipe, round_, split, key)) for key in keys]
            for recipe in recipes
            if recipe in results["runs"]
            for round_ in rounds_of(results)
        ]
        tables.append(pipe_table([split_name, "round", *(PLAN_KEYS[k][0] for k in keys)], rows))
    legend = "; ".join(f"{PLAN_KEYS[k][0]}: {PLAN_KEYS[k][1]}" for k in keys)
    return "\n\n".join(tables) + f"\n\n{legend[0].upper()}{legend[1:]}."


def paired_plan_lines(results: dict, pairs: list[tuple[str, str]]) -> list[str]:
    """Each pair's difference in plan value and in subgoal agreement, paired by seed, after the last round;
    a metric no pair has on a shared seed is left out."""
    lines = []
    for key, (label, _) in PLAN_KEYS.items():
        if any(paired_diffs(results, r, b, s, metric=key) for r, b in pairs for s in SPLITS):
            lines += [f"Paired by seed, the difference in {label} after the last round (points):", ""]
            lines += [paired_table(results, pairs, key), ""]
    return lines


def _premise_cells(premise: list[dict]) -> list[str]:
    """AUC, point-biserial r and success rate over the seeds' premise records."""
    return [
        fmt([p["nll_success_auc"] for p in premise if p.get("nll_success_auc") is not None], False),
        fmt(
            [p["nll_success_point_biserial"] for p in premise if p.get("nll_success_point_biserial") is not None], False
        ),
        fmt([p["grounding_success_rate"] for p in premise]),
    ]


def premise_table(results: dict, recipes: list[str]) -> str:
    """Per round: does a candidate's grounder NLL predict its grounding's success? And what stage 1 kept.
    A run of several task families adds a row per family under the pooled one (NLLs compare within one)."""
    rows = []
    for recipe in recipes:
        method = row_label(results, recipe)
        for round_ in rounds_of(results)[1:]:
            stages = [run["stages"].get(round_, {}) for run in results["runs"].get(recipe, {}).values()]
            premise = [s["premise"] for s in stages if s.get("premise")]
            pairs = [s["pairs"] for s in stages if "pairs" in s]
            dpo = [s["dpo"] for s in stages if s.get("dpo", {}).get("reward_accuracies")]
            if not (premise or pairs):
                continue
            number = round_.replace("round", "")
            rows.append(
                [method, number, *_premise_cells(premise)]
                + [fmt([p["kept_fraction"] for p in pairs]), fmt([d["reward_accuracies"][-1] for d in dpo])]
            )
            for family in sorted({f for p in premise for f in p.get("by_family", {})}):
                of_family = [p["by_family"][family] for p in premise if family in p.get("by_family", {})]
                rows.append([f"{method}, {family} only", number, *_premise_cells(of_family), "", ""])
    return pipe_table(["method", "round", "AUC", "r", "grounded (%)", "kept (%)", "DPO acc (%)"], rows)


PREMISE_LEGEND = (
    "r: the point-biserial correlation of NLL and success; grounded: the candidates grounded right; kept: the "
    "pairs kept (tasks whose candidates made a DPO pair); DPO acc: the DPO reward accuracy at its last log."
)


def dpo_table(results: dict, recipes: list[str]) -> str:
    """Per round: stage 1's DPO loss in training and, on the pairs of the tasks it held aside
    (`moat.dpo_held_aside`), its loss, reward margin and accuracy once trained; "" when no DPO ran."""
    rows = []
    for recipe in recipes:
        for round_ in rounds_of(results)[1:]:
            stages = [run["stages"].get(round_, {}) for run in results["runs"].get(recipe, {}).values()]
            dpo = [s["dpo"] for s in stages if "train_loss" in s.get("dpo", {})]
            if not dpo:
                continue
            held = [d["eval"] for d in dpo if "eval" in d]
            counts = [d["pairs"] for d in dpo], [d.get("held_aside_pairs", 0) for d in dpo]
            rows.append(
                [row_label(results, recipe), round_.replace("round", "")]
                + ["/".join(f"{mean_std(c)[0]:.0f}" for c in counts), fmt([d["train_loss"] for d in dpo], False)]
                + [fmt([h[key] for h in held], key == "accuracy") for key in ("loss", "margin", "accuracy")]
            )
    headers = ["method", "round", "pairs", "train loss", "held loss", "margin", "acc (%)"]
    return pipe_table(headers, rows) if rows else ""


DPO_LEGEND = (
    "pairs: trained / held aside; train loss: the DPO loss over the stage; held loss, margin, acc: on the pairs of "
    "the tasks held aside, once trained: the DPO loss (sigmoid: ln 2 = 0.693 before any step, where the planner is "
    "its reference), the implicit reward margin beta x (chosen − rejected log-ratio), and the pairs whose chosen "
    "plan has the higher reward."
)


def _ppl_note(table: str) -> list[str]:
    """The PPL table's note on web columns, when it has any."""
    if "[gold sg]" not in table:
        return []
    return [
        "Columns marked [gold sg] (web sets) hold the grounder's PPL of the gold actions given the gold subgoals, "
        "turn by turn: a web planner's turns need not align with the gold action groups.",
        "",
    ]


def _ran_on(results: dict) -> str:
    """Where the numbers came from: one machine, or each distinct machine of a merged bench's parts."""
    recorded = [results["machine"]] if "machine" in results else list(results.get("machines", {}).values())
    machines = list(dict.fromkeys(map(machine_summary, recorded)))
    if len(machines) > 1:
        return f" Ran on {len(machines)} machines: {'; '.join(machines)}."
    return f" Ran on {machines[0]}." if machines else ""


def _wall_time(results: dict) -> str:
    merged = results.get("merged_from")
    if not merged:
        return f"Wall time of this invocation: {results['wall_seconds']:.0f} s.{_ran_on(results)}"
    total = f"; their wall time in all: {results['wall_seconds']:.0f} s" if "wall_seconds" in results else ""
    return f"Merged from {len(merged)} invocations ({', '.join(merged)}){total}.{_ran_on(results)}"


def report_markdown(results: dict) -> str:
    """The whole report: what ran, then one table per claim."""
    recipes = results["recipes"]
    main = [r for r in ("lumos", "moat") if r in recipes]
    ablations = [r for r in recipes if r == "moat" or r.startswith("moat_no_")]
    sweep = [r for r in recipes if r.startswith("moat_k")]
    per_round = [r for r in recipes if r not in sweep]
    seeds = results["seeds"]
    cfg = results["config"]
    pairs = comparisons(results, recipes)
    against_lumos = [p for p in pairs if p[1] == "lumos"]
    against_moat = [p for p in pairs if p[1] == "moat"]
    lines = [
        f"# coalign bench: {cfg['name']}",
        "",
        f"Seeds {', '.join(map(str, seeds))}; values are mean ± sample std over seeds. "
        f"{cfg['moat']['rounds']} rounds on {cfg['moat']['tasks'] or 'all'} training tasks, K={cfg['moat']['k']}, "
        f"critic `{cfg['moat']['critic']}`. {_wall_time(results)}",
        "",
        "## Main result (Table 2 analogue): end-to-end accuracy (%) after the last round",
        "",
        "Each evaluation set scored by its benchmark's rule; a split's avg is the mean over its sets.",
        "",
        accuracy_table(results, main, with_cold=True),
        "",
        LEGEND,
        "",
        *_metric_note(results),
        *(
            [
                "Paired by seed (each seed's recipes start from the same cold start), accuracy points after the "
                "last round:",
                "",
                paired_table(results, against_lumos),
                "",
                "The same differences in every column (mean ± std over seeds, paired t in brackets):",
                "",
                paired_columns_table(results, against_lumos),
                "",
            ]
            if against_lumos
            else []
        ),
        *([bars, ""] if (bars := t_bars([len(shared_seeds(results, *pair)) for pair in pairs])) else []),
        "## Do the subgoals matter? Grounder accuracy (%) given the gold vs blanked subgoals, after the last round",
        "",
        subgoals_matter_table(results, main),
        "",
    ]
    if any(len(datasets(results, split)) > 1 for split in ("heldin", "heldout")):
        for key, given in (("grounder_acc_gold_subgoals", "gold"), ("grounder_acc_blank_subgoals", "blanked")):
            lines += [f"Per evaluation set, the grounder given the {given} subgoals (%):", ""]
            lines += [accuracy_table(results, main, with_cold=True, metric=key), ""]
    if keys := plan_keys(results, per_round):
        agreement = " and subgoal agreement (%)" if "subgoal_agreement" in keys else ""
        lines += [f"## Does the planner help? Plan value (points){agreement}, every round", ""]
        lines += [plan_table(results, per_round, keys), "", *paired_plan_lines(results, against_lumos)]
    if len(ablations) > 1:
        lines += ["## Ablations (Table 3 analogue): accuracy (%) after the last round", ""]
        lines += [accuracy_table(results, ablations, with_cold=False), ""]
    if against_moat:
        lines += ["Each ablation minus the full MOAT, paired by seed (what removing the part costs), points:", ""]
        lines += [paired_table(results, against_moat), "", paired_columns_table(results, against_moat), ""]
    lines += [
        "## Grounding PPL of the gold actions given the planner's subgoals (Table 4 analogue; lower is better)",
        "",
        *_ppl_note(ppl_table(results, main)),
        ppl_table(results, main),
        "",
        "## Every round (Figure 4 in numbers): accuracy, grounder accuracy on gold subgoals, capability gap "
        "(gold-sg acc − acc), PPL",
        "",
        per_round_table(results, per_round),
        "",
        "## The premise, per round: grounder NLL of the gold actions vs the candidate's grounding success",
        "",
        "AUC: the chance that a successful candidate has a lower NLL than a failed one (0.5 = no signal).",
        "",
        premise_table(results, [r for r in recipes if r != "lumos"]),
        "",
        PREMISE_LEGEND,
        "",
    ]
    if table := dpo_table(results, [r for r in recipes if r != "lumos"]):
        lines += ["## What stage 1's DPO learns, per round, and on pairs it never trained on", "", table, ""]
        lines += [DPO_LEGEND, ""]
    if sweep:
        lines += ["## K sweep (Figure 3 analogue): accuracy (%) after the last round", ""]
        order = sorted(sweep + (["moat"] if "moat" in recipes else []), key=lambda r: results["k"][r])
        lines += [accuracy_table(results, order, with_cold=False, row=lambda r: f"MOAT K={results['k'][r]}"), ""]
    return "\n".join(lines)


def _round_stats(results: dict, recipe: str, split: str, key: str, family: str | None, scale: float) -> list:
    """(mean, std) over the seeds after every round; NaN where no seed recorded `key` (a gap in the line)."""
    return [
        mean_std([scale * v for v in values(results, recipe, r, split, key, family=family)] or [float("nan")])
        for r in rounds_of(results)
    ]


def rounds_figure(results: dict) -> "Figure":
    """The round plot. Top: accuracy held in and out, held-in grounding PPL; bottom: plan value held in and out
    (0 dotted: the planner's subgoals neither help nor hurt), subgoal agreement of both splits (held out dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recipes = [r for r in results["recipes"] if not r.startswith("moat_k")]
    rounds = rounds_of(results)
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.6))
    panels = [
        ([("heldin", "accuracy")], "held-in accuracy (%)"),
        ([("heldout", "accuracy")], "held-out accuracy (%)"),
        ([("heldin", "grounding_ppl")], "held-in grounding PPL"),
        ([("heldin", "plan_value")], "held-in plan value (points)"),
        ([("heldout", "plan_value")], "held-out plan value (points)"),
        ([("heldin", "subgoal_agreement"), ("heldout", "subgoal_agreement")], "subgoal agreement (%, held out --)"),
    ]
    fams, recorded = families(results, "heldin"), plan_keys(results, recipes)
    for ax, (curves, title) in zip(axes.flat, panels):
        for split, metric in curves:
            scale = 1 if metric == "grounding_ppl" else 100
            lines = [(recipe, None) for recipe in recipes]
            if metric == "grounding_ppl" and fams:  # one line per family: PPLs of families do not average
                lines = [(recipe, f) for recipe in recipes for f in fams]
            for i, (recipe, family) in enumerate(lines):  # a recipe's lines of both splits in one colour
                key = ppl_key(results, split, family=family) if metric == "grounding_ppl" else metric
                stats = _round_stats(results, recipe, split, key, family, scale)
                long = PLOT_NAMES.get(recipe, name(recipe))
                label = f"{long} ({family})" if family and len(fams) > 1 else long
                label += _ppl_suffix(key)
                style = "--" if len(curves) > 1 and split == "heldout" else "-"
                ax.errorbar(
                    range(len(rounds)),
                    [m for m, _ in stats],
                    yerr=[s for _, s in stats],
                    label=label if style == "-" else None,
                    capsize=3,
                    linestyle=style,
                    color=f"C{i}",
                )
        if curves[0][1] == "plan_value":
            ax.axhline(0, color="grey", linestyle=":", linewidth=1)
        if curves[0][1] in PLAN_KEYS and curves[0][1] not in recorded:
            ax.text(0.5, 0.5, "not in these results", transform=ax.transAxes, ha="center", color="grey")
        ax.set_title(title)
        ax.set_xlabel("round")
        ax.set_xticks(range(len(rounds)))
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def _plot_rounds(results: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = rounds_figure(results)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_k_sweep(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recipes = sorted(
        (r for r in results["recipes"] if r.startswith("moat_k") or r == "moat"), key=lambda r: results["k"][r]
    )
    final = rounds_of(results)[-1]
    fig, ax = plt.subplots(figsize=(5, 3.8))
    for split in ("heldin", "heldout"):
        stats = [mean_std([100 * v for v in values(results, r, final, split, "accuracy")]) for r in recipes]
        ks = [results["k"][r] for r in recipes]
        ax.errorbar(ks, [m for m, _ in stats], yerr=[s for _, s in stats], marker="o", capsize=3, label=split)
    ax.set_xlabel("K (subgoal candidates per task)")
    ax.set_ylabel(f"accuracy after {final} (%)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(results: dict, root: Path, prefix: str = "") -> None:
    """report.md, rounds.png and (with a K sweep) k_sweep.png in `root`, each name after `prefix`."""
    atomic_write_text(root / f"{prefix}report.md", report_markdown(results) + "\n")
    _plot_rounds(results, root / f"{prefix}rounds.png")
    if any(r.startswith("moat_k") for r in results["recipes"]):
        _plot_k_sweep(results, root / f"{prefix}k_sweep.png")
