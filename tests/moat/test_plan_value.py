"""Plan value (team accuracy - the same grounder given blanked subgoals) and subgoal agreement with gold: computed
by the evaluation, averaged per split, shown in the report, the round plot and the bench's paired differences,
and derived for results written before they were recorded."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from coalign.config import EvalSettings
from coalign.formats.lumos import format_actions, format_subgoals, parse_grounder_prompt
from coalign.moat import evaluate
from coalign.moat.evaluate import blank_plan, evaluate_tasks, split_summary
from coalign.moat.plan_value import subgoal_agreement, with_plan_value
from coalign.moat.report import paired_diffs, report_markdown, rounds_figure
from coalign.reports.tables import eval_table
from coalign.tasks.maths_suite import generate_suite
from tests.reports.test_report_width import assert_fits, demo_results

MATHS = generate_suite("heldin", 4)
ROOT = Path(__file__).resolve().parents[2]


def test_plan_value_is_accuracy_minus_the_blanked_grounders_and_kept_when_recorded():
    assert with_plan_value({"accuracy": 0.6, "grounder_acc_blank_subgoals": 0.69})["plan_value"] == pytest.approx(-0.09)
    assert with_plan_value({"accuracy": 0.6, "plan_value": 0.5})["plan_value"] == 0.5
    assert "plan_value" not in with_plan_value({"accuracy": 0.6})  # no diagnostics: no blanked numbers


def test_subgoal_agreement_is_the_token_f1_of_the_plans_words():
    gold = ["Multiply 9 by 4 to find how many dollars Emma saved", "Take 15 away from R1"]
    assert subgoal_agreement(gold, gold) == 1.0
    assert subgoal_agreement(["multiply 9 by 4, to find how many dollars Emma saved!", "Take 15 away from R1."], gold)
    assert subgoal_agreement([], gold) == 0.0 and subgoal_agreement(["Compute the result"], gold) == 0.0
    # the first subgoal alone: every word is gold's (precision 1), 11 of the 16 gold words (recall 11/16)
    assert subgoal_agreement(gold[:1], gold) == pytest.approx(2 * (11 / 16) / (1 + 11 / 16))
    # a paraphrase naming the same operands earns credit that exact match would not give
    assert 0.4 < subgoal_agreement(["Find how many dollars Emma saved by multiplying 9 by 4"], gold[:1]) < 1.0


def _scripted(monkeypatch) -> None:
    """The planner writes the gold plan for tasks 0 and 1, no plan for task 2 and the first gold subgoal for
    task 3; the grounder grounds the gold plan right, and blanked subgoals right for task 2 only."""
    plans = {t.question: format_subgoals(t.subgoals) for t in MATHS[:2]}
    plans[MATHS[2].question] = "I do not know"
    plans[MATHS[3].question] = format_subgoals(MATHS[3].subgoals[:1])
    by_question = {t.question: t for t in MATHS}

    def generate(agent, users, max_new_tokens, batch_size=32, **kwargs):
        out = []
        for user in users:
            if "Subgoals to be grounded" not in user:
                out.append([next(p for q, p in plans.items() if q in user)])
                continue
            question, subgoals = parse_grounder_prompt(user)
            task = by_question[question]
            right = subgoals == format_subgoals(task.subgoals) or (task is MATHS[2] and subgoals == blank_plan(task))
            out.append([format_actions(list(task.actions)) if right else "R1 = Calculator(0 / 0)"])
        return out

    monkeypatch.setattr("coalign.models.agents.generate", generate)
    monkeypatch.setattr(evaluate, "score_completions", lambda agent, users, completions, b, desc="": [])
    monkeypatch.setattr(evaluate, "grounding_ppl", lambda grounder, tasks, plans, b: [1.0] * len(tasks))


def test_an_evaluation_records_plan_value_and_agreement_per_set_and_task(monkeypatch):
    _scripted(monkeypatch)
    metrics, rows = evaluate_tasks(None, None, MATHS, EvalSettings(), "maths")
    assert (metrics["accuracy"], metrics["grounder_acc_blank_subgoals"]) == (0.5, 0.25)
    assert metrics["plan_value"] == 0.25 and metrics["grounder_acc_gold_subgoals"] == 1.0
    partial = subgoal_agreement(MATHS[3].subgoals[:1], MATHS[3].subgoals)
    assert [r["subgoal_agreement"] for r in rows] == [1.0, 1.0, 0.0, partial]
    assert metrics["subgoal_agreement"] == pytest.approx((2 + partial) / 4)
    without, _ = evaluate_tasks(None, None, MATHS, EvalSettings(diagnostics=False), "maths")
    assert "plan_value" not in without and without["subgoal_agreement"] == metrics["subgoal_agreement"]
    summary = split_summary({"a": metrics, "b": {**metrics, "plan_value": -0.25, "subgoal_agreement": 0.0}})
    assert summary["plan_value"] == 0.0
    assert summary["subgoal_agreement"] == pytest.approx(metrics["subgoal_agreement"] / 2)
    shown = Console(width=80, file=io.StringIO(), record=True, color_system=None)
    block = {"sets": {"suite-heldin": metrics}, "average": split_summary({"suite-heldin": metrics})}
    shown.print(eval_table({"heldin": block}))
    lines = shown.export_text().splitlines()
    assert any("held-in: the planner's worth" in line for line in lines) and max(map(len, lines)) <= 80
    worth = [line.split() for line in lines if line.strip().startswith("suite-heldin")][-1]
    assert worth == ["suite-heldin", "4", "25.0", f"{100 * metrics['subgoal_agreement']:.1f}"]


def _with_agreement(results: dict, moat: float, lumos: float) -> dict:
    """`results` with a subgoal agreement in every split average: `moat`'s and `lumos`'s after the last round."""
    for recipe, value in (("moat", moat), ("lumos", lumos)):
        for run in results["runs"][recipe].values():
            for round_, rounds in run["rounds"].items():
                for block in rounds.values():
                    block["average"]["subgoal_agreement"] = value if round_ != "round0" else 0.1
    return results


def test_the_report_gives_plan_value_every_round_and_moat_minus_lumos_paired_over_seeds():
    results = _with_agreement(demo_results(seeds=3), moat=0.5, lumos=0.25)
    report = report_markdown(results)
    section = report.split("## Does the planner help?")[1].split("\n## ")[0]
    # demo numbers, held in: cold start 6 + seed − 14; MOAT 7.5 + seed − 12; Lumos 4 + seed − 9.5
    assert "| MOAT | 0 | -7.0 ± 1.0 | 10.0 ± 0.0 |" in section and "| MOAT | 1 | -3.5 ± 1.0 | 50.0 ± 0.0 |" in section
    assert "| Lumos (matched) | 1 | -4.5 ± 1.0 | 25.0 ± 0.0 |" in section
    # held out, MOAT 0 − 0 and Lumos 0 − (1 + seed): paired over the seeds, +1, +2, +3
    assert paired_diffs(results, "moat", "lumos", "heldout", metric="plan_value") == [0.01, 0.02, 0.03]
    assert "| MOAT − Lumos (matched) | held-out | +1.0 / +2.0 / +3.0 | 2.0 ± 1.0 | 3.46 |" in section
    assert "| MOAT − Lumos (matched) | held-in | +1.0 / +1.0 / +1.0 | 1.0 ± 0.0 | - |" in section
    assert "difference in agreement" in section and "| held-in | +25.0 / +25.0 / +25.0 |" in section
    assert_fits(section)


def test_the_round_plot_draws_plan_value_and_agreement():
    import matplotlib.pyplot as plt

    fig = rounds_figure(_with_agreement(demo_results(seeds=1), moat=0.5, lumos=0.25))
    panels = {ax.get_title(): ax for ax in fig.axes}

    def curves(title: str) -> list[list[float]]:
        return [bars.lines[0].get_ydata().tolist() for bars in panels[title].containers]

    assert curves("held-in plan value (points)") == [pytest.approx([-8.0, -5.5]), pytest.approx([-8.0, -4.5])]
    assert curves("subgoal agreement (%, held out --)") == [[10.0, 25.0], [10.0, 50.0]] * 2  # held in, held out
    plt.close(fig)


@pytest.mark.parametrize("path", ["docs/results/smol-suite/seeds0-2-results.json"])
def test_committed_results_get_plan_value_from_their_blanked_numbers_and_no_agreement(path):
    report = report_markdown(json.loads((ROOT / path).read_text()))
    section = report.split("## Does the planner help?")[1].split("\n## ")[0]
    assert "| MOAT | 1 | -9.7 ± 1.2 |" in section and "agreement" not in section  # 60/54/54 vs 69/65/63
    assert "| MOAT − Lumos (matched) | held-in | -11.0 / -3.0 / +20.0 |" in section
