"""Tables for the terminal (rich) and for README/markdown reports, from metrics dicts."""

from __future__ import annotations

from rich.table import Table

COLUMNS = [
    ("accuracy", "acc"),
    ("lumos_exact", "exact"),
    ("grounder_acc_gold_subgoals", "gold sg"),
    ("grounder_acc_blank_subgoals", "blank sg"),
    ("capability_gap", "gap"),
    ("plan_well_formed", "plans ok"),
    ("grounding_ppl_gold_subgoals", "ppl | gold sg"),
    ("grounding_ppl", "ppl"),
]
NOT_PERCENT = {"grounding_ppl", "grounding_ppl_gold_subgoals"}
LEGEND = (
    "acc: end-to-end accuracy by each benchmark's rule (numeric match for maths, Lumos's yes/no rule for "
    "StrategyQA-style QA, SQuAD exact match for HotpotQA-style QA; for web sets, run turn by turn, Mind2Web's step "
    "success rate on sites and the mean WebShop reward in the shop); exact: Lumos exact string match (maths only); "
    "gold sg / blank sg: the same given the gold / blanked subgoals; gap: capability gap = gold sg - acc; "
    "plans ok: planner outputs that parse as subgoal sequences (web: every planner turn parsed); ppl: grounder "
    "perplexity of the gold actions given the planner's subgoals (mean over tasks; not a percentage; averaged only "
    "within a task family); ppl | gold sg: the same given the gold subgoals, turn by turn (web sets, where the "
    "planner's subgoals need not align with the gold actions)"
)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _cell(key: str, value) -> str:
    if key in NOT_PERCENT:
        return "-" if value is None else f"{value:.3f}"
    return _pct(value)


def eval_rows(results: dict) -> list[list[str]]:
    """One row per evaluation set plus a row per split average (percentages); where a split mixes task
    families, also one average row per family (the only average that shows PPL)."""
    rows = []
    for split in ("heldin", "heldout"):
        block = results.get(split, {})
        for name, m in block.get("sets", {}).items():
            label = f"{name} ({m['metric'].replace('_', ' ')})" if m.get("metric") else name  # web: what acc holds
            rows.append([split, label, str(m["n"])] + [_cell(k, m.get(k)) for k, _ in COLUMNS])
        if block.get("sets"):
            avg = block["average"]
            rows.append([split, "average", ""] + [_cell(k, avg.get(k)) for k, _ in COLUMNS])
            by_family = block.get("family_average", {})
            if len(by_family) > 1:
                for family, fam in by_family.items():
                    rows.append([split, f"average ({family})", ""] + [_cell(k, fam.get(k)) for k, _ in COLUMNS])
    return rows


def eval_table(results: dict, title: str = "evaluation (%)") -> Table:
    table = Table(title=title, caption=LEGEND)
    for header in ["split", "set", "n"] + [h for _, h in COLUMNS]:
        table.add_column(header, justify="right" if header not in ("split", "set") else "left")
    for row in eval_rows(results):
        table.add_row(*row)
    return table


def style_table(results: dict) -> Table:
    """Grounder accuracy given gold subgoals, per annotation style (bundled suite only)."""
    table = Table(title="grounder accuracy given gold subgoals, by subgoal style (%)")
    table.add_column("split / set")
    styles = sorted(
        {
            s
            for b in results.values()
            for m in b.get("sets", {}).values()
            for s in m.get("grounder_acc_gold_by_style", {})
        }
    )
    for style in styles:
        table.add_column(style, justify="right")
    for split, block in results.items():
        for name, m in block.get("sets", {}).items():
            by = m.get("grounder_acc_gold_by_style")
            if by:
                counts = m.get("style_counts", {})
                table.add_row(f"{split}/{name}", *[f"{_pct(by.get(s))} (n={counts.get(s, 0)})" for s in styles])
    return table


def markdown_table(results: dict) -> str:
    headers = ["split", "set", "n"] + [h for _, h in COLUMNS]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in eval_rows(results)]
    return "\n".join(lines) + f"\n\n{LEGEND}"


def pipe_table(headers: list[str], rows: list[list[str]]) -> str:
    """A markdown (pipe) table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
