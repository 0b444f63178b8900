"""Task families side by side: each task's prompts, blanks and answer rule are its family's; PPL is averaged
only within a family; MOAT's rounds and plan-following copies respect families."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from coalign.config import EvalSettings, load_config
from coalign.formats.lumos import TOOL_PREAMBLES, format_actions, format_subgoals, parse_grounder_prompt
from coalign.moat import evaluate
from coalign.moat.critic import CriticInput, ExecutionCritic
from coalign.moat.data import round_tasks
from coalign.moat.evaluate import blank_plan, evaluate_tasks, family_summaries, set_family, split_summary
from coalign.moat.recipe import round_premise
from coalign.moat.report import accuracy_table, per_round_table, ppl_table, premise_table, write_report
from coalign.reports.tables import eval_rows
from coalign.tasks import maths_suite, qa_suite
from coalign.tasks.maths_suite import generate_suite
from coalign.tasks.plan_following import plan_following, readable_from_subgoals
from coalign.tasks.qa_suite import generate_qa_suite
from coalign.tools.executor import execute

MATHS = generate_suite("heldin", 4)
QA_IN = generate_qa_suite("heldin", 4)
QA_OUT = generate_qa_suite("heldout", 4)


@dataclass
class _Score:
    ppl: float


def _fake_agents(monkeypatch, answers: dict[str, str]) -> list[str]:
    """Generation answers a grounder prompt from `answers` (task text -> actions) and a planner prompt with the
    gold plan's first subgoal; returns the grounder prompts seen. PPL is the prompt's length."""
    seen: list[str] = []

    def generate(agent, users, max_new_tokens, batch_size=32, **kwargs):
        out = []
        for user in users:
            if "Subgoals to be grounded" in user:
                seen.append(user)
                out.append([answers.get(parse_grounder_prompt(user)[0], "")])
            else:
                out.append(["Subgoal 1: Look it up"])
        return out

    def score(agent, users, completions, batch_size, desc=""):
        return [_Score(float(len(u))) for u in users]

    monkeypatch.setattr("coalign.models.agents.generate", generate)
    monkeypatch.setattr(evaluate, "score_completions", score)
    return seen


def test_every_grounder_prompt_and_blank_is_the_tasks_familys(monkeypatch):
    tasks = MATHS + QA_IN
    seen = _fake_agents(monkeypatch, {})
    evaluate_tasks(None, None, tasks, EvalSettings(max_new_tokens_plan=8, max_new_tokens_ground=8), "mixed")
    assert len(seen) == 3 * len(tasks)  # planner subgoals, gold subgoals, blanked subgoals
    for task in tasks:
        prompts = [p for p in seen if parse_grounder_prompt(p)[0] == task.question]
        assert len(prompts) == 3 and all(TOOL_PREAMBLES[task.family] in p for p in prompts)
    qa_blank = blank_plan(QA_IN[0])
    assert qa_blank == format_subgoals([qa_suite.BLANK_SUBGOAL] * len(QA_IN[0].subgoals))
    assert qa_suite.BLANK_SUBGOAL in qa_suite.VAGUE_SUBGOALS and maths_suite.BLANK_SUBGOAL not in qa_blank
    assert blank_plan(MATHS[0]) == format_subgoals([maths_suite.BLANK_SUBGOAL] * len(MATHS[0].subgoals))
    with pytest.raises(KeyError, match="no blank subgoal for family 'chess'"):
        blank_plan(type(MATHS[0])("w", "chess", "chess", "q", ("s",), (), "a"))


def test_qa_sets_are_scored_by_their_rule_and_have_no_string_match(monkeypatch):
    right = {t.question: format_actions(list(t.actions)) for t in QA_IN[:3] + QA_OUT[:1] + MATHS[:2]}
    _fake_agents(monkeypatch, right)
    settings = EvalSettings(max_new_tokens_plan=8, max_new_tokens_ground=8)
    held_in, rows = evaluate_tasks(None, None, QA_IN, settings, "qa-in")
    held_out, _ = evaluate_tasks(None, None, QA_OUT, settings, "qa-out")
    maths, _ = evaluate_tasks(None, None, MATHS, settings, "maths")
    assert (held_in["accuracy"], held_out["accuracy"], maths["accuracy"]) == (0.75, 0.25, 0.5)
    assert held_in["grounder_acc_gold_subgoals"] == 0.75  # the fake grounder ignores subgoals
    assert "lumos_exact" not in held_in and "lumos_exact" not in held_out and maths["lumos_exact"] == 0.5
    assert [r["correct"] for r in rows] == [True, True, True, False] and {r["lumos_exact"] for r in rows} == {None}
    assert {r["pred"] for r in rows[:3]} == {t.answer for t in QA_IN[:3]}


def test_ppl_is_averaged_within_a_family_only():
    per_set = {
        "suite-heldin": {"accuracy": 0.5, "lumos_exact": 0.5, "grounding_ppl": 2.0},
        "qa-suite-heldin": {"accuracy": 0.25, "grounding_ppl": 10.0},
    }
    families = {"suite-heldin": "maths", "qa-suite-heldin": "qa"}
    assert split_summary(per_set, families) == {"accuracy": 0.375}  # exact only where every set has it
    assert family_summaries(per_set, families) == {
        "maths": {"accuracy": 0.5, "lumos_exact": 0.5, "grounding_ppl": 2.0},
        "qa": {"accuracy": 0.25, "grounding_ppl": 10.0},
    }
    one = {"a": per_set["suite-heldin"], "b": {**per_set["suite-heldin"], "grounding_ppl": 4.0}}
    assert (
        split_summary(one, {"a": "maths", "b": "maths"})["grounding_ppl"] == 3.0 == split_summary(one)["grounding_ppl"]
    )
    assert set_family(MATHS) == "maths" and set_family(QA_IN + MATHS) == "maths+qa"


def test_a_round_takes_each_familys_share_of_its_tasks():
    train = generate_suite("train", 30) + generate_qa_suite("train", 15)
    config = load_config("tiny", {"moat": {"tasks": 10}})
    tasks = round_tasks(config, train)
    assert [t.family for t in tasks] == ["maths"] * 7 + ["qa"] * 3  # 6.67 and 3.33: the remainder to maths
    assert tasks == train[:7] + train[30:33]
    assert round_tasks(config, train[:30]) == train[:10]  # one family: simply its first n
    assert round_tasks(load_config("tiny", {"moat": {"tasks": None}}), train) == train


def test_qa_plans_follow_when_the_subgoals_name_every_entity_looked_up():
    tasks = generate_qa_suite("train", 200)
    for task in tasks:
        assert readable_from_subgoals(task) == (task.subgoal_styles[0] != "vague"), task.subgoals
    mixed = generate_suite("train", 100) + tasks
    family = {t.question: t.family for t in mixed}
    copies = plan_following(mixed, 1.0, seed=1)
    assert {c.family for c in copies} == {"maths", "qa"}
    assert all(family[c.question] == c.family for c in copies)  # text borrowed within the family
    assert plan_following(generate_suite("train", 100) + tasks[:1], 1.0, seed=1) == plan_following(
        generate_suite("train", 100), 1.0, seed=1
    )  # a family with one task text lends none and takes none


def test_execution_critic_corrects_a_qa_grounding_with_the_whole_gold_plan():
    task = generate_qa_suite("train", 1)[0]
    assert len(task.actions) > len(task.subgoals)  # several actions per subgoal
    candidate = ("Find the needed fact", "Work out the answer")
    right = format_actions(list(task.actions))
    last = task.actions[-1]
    wrong = format_actions([*task.actions[:-1], last.replace(">", "<") if ">" in last else last.replace("<", ">")])
    broken = "R1 = Code(return 1)"  # refused: model text is never run
    kept, corrected, failed = ExecutionCritic().judge([CriticInput(task, candidate, a) for a in (right, wrong, broken)])
    assert kept.success and kept.actions == right
    for verdict in (corrected, failed):
        assert not verdict.success and verdict.actions == right  # gold numbering is already R1, R2, ...
        assert execute(verdict.actions, "qa").answer == task.answer
        assert verdict.corrected_subgoals == task.subgoals  # the whole gold plan, for `critic_subgoals: corrected`
    assert corrected.note == "wrong answer" and failed.note.startswith("execution failed")


def _mixed_block(maths_acc: float, qa_acc: float, maths_ppl: float, qa_ppl: float) -> dict:
    sets = {
        "suite-heldin": {"n": 2, "accuracy": maths_acc, "lumos_exact": maths_acc, "grounding_ppl": maths_ppl},
        "qa-suite-heldin": {"n": 2, "accuracy": qa_acc, "grounding_ppl": qa_ppl},
    }
    families = {"suite-heldin": "maths", "qa-suite-heldin": "qa"}
    return {
        "sets": sets,
        "average": split_summary(sets, families),
        "families": families,
        "family_average": family_summaries(sets, families),
    }


def test_eval_table_gives_each_set_and_family_and_no_cross_family_ppl():
    rows = {row[0]: row for row in eval_rows(_mixed_block(0.5, 0.25, 2.0, 10.0))}
    assert list(rows) == ["suite-heldin", "qa-suite-heldin", "average", "average (maths)", "average (qa)"]
    acc, exact, ppl = 2, 3, -1  # columns after set, n
    assert (rows["average"][acc], rows["average"][exact], rows["average"][ppl]) == ("37.5", "-", "-")
    assert (rows["qa-suite-heldin"][exact], rows["average (qa)"][ppl], rows["average (maths)"][ppl]) == (
        "-",
        "10.000",
        "2.000",
    )
    maths_only = {"sets": {"suite-heldin": {"n": 2, "accuracy": 0.5}}, "average": {"accuracy": 0.5}}
    assert [row[0] for row in eval_rows(maths_only)] == ["suite-heldin", "average"]
    assert eval_rows({}) == [] and eval_rows({"sets": {}, "average": {}}) == []


def test_bench_tables_put_every_set_in_a_column_and_ppl_per_family():
    rounds = {"round0": {"heldin": _mixed_block(0.5, 0.25, 2.0, 10.0), "heldout": {"sets": {}, "average": {}}}}
    rounds["round1"] = {"heldin": _mixed_block(0.6, 0.35, 1.5, 8.0), "heldout": {"sets": {}, "average": {}}}
    results = {
        "config": {"moat": {"rounds": 1}},
        "recipes": ["moat"],
        "runs": {"moat": {"0": {"rounds": rounds, "stages": {}}}},
    }
    accuracy = accuracy_table(results, ["moat"], with_cold=True).splitlines()
    assert accuracy[0] == "| method | suite-heldin | qa-suite-heldin | held-in avg | held-out avg |"
    assert accuracy[2:] == ["| Lumos (cold start) | 50.0 | 25.0 | 37.5 | - |", "| MOAT | 60.0 | 35.0 | 47.5 | - |"]
    ppl = ppl_table(results, ["moat"]).splitlines()  # one table per split
    assert ppl[0] == "| held-in | suite-heldin | qa-suite-heldin | maths avg | qa avg |"
    assert ppl[3] == "| MOAT, round 1 | 1.500 | 8.000 | 1.500 | 8.000 |"
    assert ppl[5:] == ["| held-out | avg |", "|---|---|", "| MOAT, round 0 | - |", "| MOAT, round 1 | - |"]
    per_round = per_round_table(results, ["moat"]).splitlines()
    assert per_round[0] == "| held-in | round | acc | gold-sg acc | gap | maths PPL | qa PPL |"
    assert per_round[3] == "| MOAT | 1 | 47.5 | - | - | 1.500 | 8.000 |"
    assert per_round[8] == "| MOAT | 1 | - | - | - | - |"  # held-out: no sets


def test_the_premise_is_also_measured_within_each_family():
    maths, qa = generate_suite("train", 2), generate_qa_suite("train", 2)
    gold = [format_actions(list(t.actions)) for t in maths + qa]
    # maths: the gold grounding has the lower NLL; QA: the higher, on a different scale
    scores = [[{"mean": 0.1}, {"mean": 0.9}]] * 2 + [[{"mean": 5.0}, {"mean": 3.0}]] * 2
    groundings = [[g, "R1 = Code(x)"] for g in gold]
    premise = round_premise(maths + qa, scores, groundings, "mean")
    assert premise["by_family"]["maths"]["nll_success_auc"] == 1.0
    assert premise["by_family"]["qa"]["nll_success_auc"] == 0.0
    assert premise["nll_success_auc"] == 0.5 and premise["candidates"] == 8  # pooled, the two hide each other
    assert "by_family" not in round_premise(maths, scores[:2], groundings[:2], "mean")
    stages = {"round1": {"premise": premise}}
    results = {"config": {"moat": {"rounds": 1}}, "runs": {"moat": {"0": {"stages": stages}}}}
    rows = premise_table(results, ["moat"]).splitlines()[2:]
    assert rows == [
        "| MOAT | 1 | 0.500 | 0.157 | 50.0 | - | - |",
        "| MOAT, maths only | 1 | 1.000 | -1.000 | 50.0 |  |  |",
        "| MOAT, qa only | 1 | 0.000 | 1.000 | 50.0 |  |  |",
    ]


def test_a_mixed_bench_report_and_plot_are_written(tmp_path):
    rounds = {
        r: {"heldin": _mixed_block(0.5, 0.25, 2.0, 10.0), "heldout": {"sets": {}, "average": {}}}
        for r in ("round0", "round1")
    }
    moat = {"rounds": 1, "tasks": 6, "k": 3, "critic": "execution"}
    results = {
        "config": {"name": "mixed", "moat": moat},
        "recipes": ["lumos", "moat"],
        "seeds": [0],
        "k": {"lumos": 3, "moat": 3},
        "wall_seconds": 1.0,
        "runs": {r: {"0": {"rounds": rounds, "stages": {}}} for r in ("lumos", "moat")},
    }
    for block in (b for r in rounds.values() for b in r.values()):
        for i, metrics in enumerate(block["sets"].values()):
            metrics.update(grounder_acc_gold_subgoals=0.8 - i / 10, grounder_acc_blank_subgoals=0.1)
    write_report(results, tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "| held-in | suite-heldin | qa-suite-heldin | maths avg | qa avg |" in report
    gold = report[report.index("given the gold subgoals (%)") :].splitlines()
    assert gold[4] == "| Lumos (cold start) | 80.0 | 70.0 | - | - |"  # per set; the splits' averages were not given
    assert "given the blanked subgoals (%)" in report
    assert (tmp_path / "rounds.png").read_bytes()[:4] == b"\x89PNG"
