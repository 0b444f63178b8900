"""Tables for the terminal (rich) and for markdown reports, from metrics dicts.

The terminal's tables fit 80 columns: one evaluation table per split, short headers explained in a legend
under them, and a column that no set fills left out.
"""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

COLUMNS = [
    ("accuracy", "acc"),
    ("lumos_exact", "exact"),
    ("grounder_acc_gold_subgoals", "gold"),
    ("grounder_acc_blank_subgoals", "blank"),
    ("capability_gap", "gap"),
    ("plan_well_formed", "plans"),
    ("grounding_ppl_gold_subgoals", "ppl|gold"),
    ("grounding_ppl", "ppl"),
]
# The planner's worth to its team, in a table of its own under each split's (one table would not fit 80 columns).
PLAN_COLUMNS = [("plan_value", "value"), ("subgoal_agreement", "agree")]
NOT_PERCENT = {"grounding_ppl", "grounding_ppl_gold_subgoals"}
SPLITS = {"heldin": "held-in", "heldout": "held-out"}  # how every table names the two splits
LEGEND = (
    "acc: end-to-end accuracy by each benchmark's rule (numeric match for maths, Lumos's yes/no rule for "
    "StrategyQA-style QA, SQuAD exact match for HotpotQA-style QA; for web sets, run turn by turn, Mind2Web's step "
    "success rate on sites and the mean WebShop reward in the shop); exact: Lumos exact string match (maths only); "
    "gold / blank: the same given the gold / blanked subgoals; gap: capability gap = gold - acc; value: plan value "
    "= acc - blank; agree: token F1 of the planner's subgoals with the gold ones; "
    "plans: planner outputs that parse as subgoal sequences (web: every planner turn parsed); ppl: grounder "
    "perplexity of the gold actions given the planner's subgoals (mean over tasks; not a percentage; averaged only "
    "within a task family); ppl|gold: the same given the gold subgoals, turn by turn (web sets, where the "
    "planner's subgoals need not align with the gold actions). A column no set fills is left out."
)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _cell(key: str, value) -> str:
    if key in NOT_PERCENT:
        return "-" if value is None else f"{value:.3f}"
    return _pct(value)


def eval_rows(block: dict, columns: list[tuple[str, str]] = COLUMNS) -> list[list[str]]:
    """One split's rows: one per evaluation set (name, n, a cell per column), then the split's average and,
    where the split mixes task families, one average per family (the only average that shows PPL)."""
    rows = [[name, str(m["n"])] + [_cell(k, m.get(k)) for k, _ in columns] for name, m in block.get("sets", {}).items()]
    if rows:
        rows.append(["average", ""] + [_cell(k, block["average"].get(k)) for k, _ in columns])
        by_family = block.get("family_average", {})
        if len(by_family) > 1:
            rows += [[f"average ({f})", ""] + [_cell(k, m.get(k)) for k, _ in columns] for f, m in by_family.items()]
    return rows


def _metric_note(results: dict) -> str:
    """Which sets' acc column holds another metric than accuracy (web sets), or nothing."""
    held = [
        f"{name} the {m['metric'].replace('_', ' ')}"
        for block in results.values()
        for name, m in block.get("sets", {}).items()
        if m.get("metric")
    ]
    return f" The acc of web sets is their benchmark's metric: {', '.join(held)}." if held else ""


def eval_table(results: dict, title: str = "evaluation (%)") -> Group:
    """The evaluation of both splits for the terminal: per split a table, and one of the planner's worth where
    the metrics hold it, then the legend."""
    tables = []
    for split, split_name in SPLITS.items():
        for columns, what in ((COLUMNS, ""), (PLAN_COLUMNS, ": the planner's worth")):
            rows = eval_rows(results.get(split, {}), columns)
            filled = [i for i in range(len(columns)) if any(row[2 + i] != "-" for row in rows)]
            if not filled:
                continue
            name = f"{title}, {split_name}{what}"  # as wide as its title, so a narrow table's does not wrap
            table = Table(title=name, box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False, min_width=len(name))
            table.add_column("set")
            table.add_column("n", justify="right")
            for i in filled:
                table.add_column(columns[i][1], justify="right")
            for row in rows:
                table.add_row(row[0], row[1], *[row[2 + i] for i in filled])
            tables.append(table)
    return Group(*tables, Text(LEGEND + _metric_note(results)))


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


def pipe_table(headers: list[str], rows: list[list[str]]) -> str:
    """A markdown (pipe) table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
