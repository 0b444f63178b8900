"""The PilotRL bench's tables from hand-written results, and the expert's AdaPlan/ReAct episodes on every
bundled environment."""

from __future__ import annotations

import pytest

from coalign.envs import HELDIN, HELDOUT
from coalign.formats.adaplan import parse_turn
from coalign.pilotrl.expert import expert_conversation
from coalign.pilotrl.report import (
    grpo_table,
    paired_table,
    report_markdown,
    success_table,
    time_table,
    update_table,
)


def block(success: float, k: str = "k1") -> dict:
    env = {"success": success, "reward": success / 100, "steps": 5.0, "tokens": 80.0}
    return {k: {"envs": {"a": env, "b": env}, "heldin": {"success": success}, "heldout": {"success": success / 2}}}


RESULTS = {
    "seeds": [0, 1],
    "heldin": ["a"],
    "heldout": ["b"],
    "runs": {
        "adaplan": {"0": {**block(40.0), **block(30.0, "k2")}, "1": {**block(50.0), **block(20.0, "k2")}},
        "react": {"0": block(30.0), "1": block(36.0)},
    },
}


def test_success_table_gives_mean_and_std_over_seeds():
    heldin, heldout = success_table(RESULTS).split("\n\n")  # one table per split
    assert heldin.startswith("| success (%) | a | held-in avg |") and heldout.startswith("| success (%) | b | held-out")
    assert "| SFT (AdaPlan) | 45.0 ± 7.1 | 45.0 ± 7.1 |" in heldin
    assert "| SFT (AdaPlan) | 45.0 ± 7.1 | 22.5 ± 3.5 |" in heldout


def test_paired_differences_and_t():
    table = paired_table(RESULTS)
    assert "| heldin | +10.0 / +14.0 | 12.0 ± 2.8 | 6.00 |" in table
    assert "| heldin | - | - | - |" in paired_table(RESULTS, measure="well_formed")  # runs without the measure
    one_seed = {**RESULTS, "seeds": RESULTS["seeds"][:1]}
    assert "| heldin | +10.0 | 10.0 | - |" in paired_table(one_seed)  # no t from one seed


def test_update_table_lists_every_interval():
    table = update_table(RESULTS)
    assert "every 1 step(s)" in table and "every 2 step(s)" in table and "25.0 ± 7.1 / 5.0 ± 0.0" in table


def test_grpo_stages_are_tabled_over_the_seeds_that_ran_them():
    """A stage's steps, reward and groups without reward variance (%), mean ± std over seeds; a stage a seed has
    not reached counts the others; a run that logged no variance shows "-"."""
    stage = {"stage": "executor", "label": "1", "steps": 2}
    runs = {
        "0": {**block(10.0), "grpo": [{**stage, "reward": 0.2, "frac_reward_zero_std": 1.0},
                                     {"stage": "planner", "label": "2", "steps": 1, "reward": 0.5}]},
        "1": {**block(20.0), "grpo": [{**stage, "reward": 0.4, "frac_reward_zero_std": 0.5}]},
    }  # fmt: skip
    results = {**RESULTS, "runs": {**RESULTS["runs"], "pilotrl": runs}}
    table = grpo_table(results)
    assert "| PilotRL 1->2->3: 1 (executor) | 2 ± 0 | 0.30 ± 0.14 | 75.0 ± 35.4 |" in table
    assert "| PilotRL 1->2->3: 2 (planner) | 1 | 0.50 | - |" in table
    assert "no gradient" in report_markdown(results) and grpo_table(RESULTS) == ""
    assert "no gradient" not in report_markdown(RESULTS)


def test_time_table_splits_each_runs_minutes_into_training_and_evaluation():
    """Evaluation stages (`eval_k*`, `expert_k*`) apart from the rest (`expert_episodes` trains); mean ± std over
    the seeds that recorded times; a variant without any is left out, and without any run there is no table."""
    first = {"expert_episodes": 60.0, "sft": 540.0, "eval_k1": 300.0, "expert_k1": 180.0}
    second = {"expert_episodes": 60.0, "sft": 660.0, "eval_k1": 420.0, "expert_k1": 180.0}
    timed = {"0": {**block(1.0), "seconds": first}, "1": {**block(1.0), "seconds": second}}
    runs = {**RESULTS["runs"], "adaplan": timed}
    table = time_table({**RESULTS, "runs": runs})
    assert table.splitlines()[0] == "| minutes | training | evaluation | in all |"
    assert "| SFT (AdaPlan) | 11 ± 1 | 9 ± 1 | 20 ± 3 |" in table and "ReAct" not in table
    assert time_table(RESULTS) == "" and "What each run cost" in report_markdown({**RESULTS, "runs": runs})


def test_report_holds_all_tables():
    text = report_markdown(RESULTS)
    assert text.count("|---") >= 4 and "Table 9" in text and "Table 10" in text
    assert "needs |t| above 12.71 from 2 seeds." in text  # the two seeds' t values have one degree of freedom


def test_report_names_the_curves_file_it_is_given():
    """A bench with --name draws `<name>-curves.png`; a merge of results files draws none."""
    assert "curves" not in report_markdown(RESULTS)
    assert "`seed0-curves.png` beside this report" in report_markdown(RESULTS, "seed0-curves.png")


def test_t_bar_counts_the_seeds_each_pair_shares():
    three = {
        **RESULTS,
        "seeds": [0, 1, 2],
        "runs": {**RESULTS["runs"], "react": {**RESULTS["runs"]["react"], "2": block(1.0)}},
    }
    text = report_markdown(three)  # react ran seed 2, adaplan did not: the pair's t still comes from 2 seeds
    assert "12.71 from 2 seeds" in text and "from 3 seeds" not in text


def test_runs_evaluated_with_the_experts_plans_get_their_own_tables():
    results = {**RESULTS, "runs": {**RESULTS["runs"], "adaplan": {
        seed: {**run, **block(80.0 + 10 * int(seed), "expert_k1")} for seed, run in RESULTS["runs"]["adaplan"].items()
    }}}  # fmt: skip
    text = report_markdown(results)
    assert "Given the expert's plans" not in report_markdown(RESULTS) and "Given the expert's plans" in text
    expert = text[text.index("Given the expert's plans") :]
    assert "| SFT (AdaPlan) | 85.0 ± 7.1 | 85.0 ± 7.1 |" in expert  # held-in: a, its average
    assert "| SFT (AdaPlan) | 85.0 ± 7.1 | 42.5 ± 3.5 |" in expert  # held-out: b, its average
    assert "SFT (ReAct)" not in expert  # no such evaluation of it
    assert "every 1 step(s)" in update_table(results) and "expert" not in update_table(results)


def test_first_plan_correctness_gets_a_table_for_adaplan_runs_only():
    assert "First plans" not in report_markdown(RESULTS)  # runs evaluated before the measure
    planned = {
        seed: {"k1": {**run["k1"], "heldin": {**run["k1"]["heldin"], "plan_correct": 20.0 * (1 + int(seed))},
                      "heldout": {**run["k1"]["heldout"], "plan_correct": 0.0},
                      "envs": {e: {**m, "plan_correct": 10.0} for e, m in run["k1"]["envs"].items()}}}
        for seed, run in RESULTS["runs"]["adaplan"].items()
    }  # fmt: skip
    text = report_markdown({**RESULTS, "runs": {**RESULTS["runs"], "adaplan": planned}})
    heldin, heldout = text[text.index("First plans") :].split("\n\n")[1:3]
    assert "| SFT (AdaPlan) | 10.0 ± 0.0 | 30.0 ± 14.1 |" in heldin
    assert "| SFT (AdaPlan) | 10.0 ± 0.0 | 0.0 ± 0.0 |" in heldout
    assert "SFT (ReAct)" not in heldin + heldout


def test_context_stops_get_a_table_where_the_runs_measured_them():
    assert "context was full" not in report_markdown(RESULTS)  # runs evaluated before the measure
    stopped = {
        seed: {"k1": {**run["k1"], "heldin": {**run["k1"]["heldin"], "context_stops": 40.0},
                      "heldout": {**run["k1"]["heldout"], "context_stops": 0.0},
                      "envs": {"a": {**run["k1"]["envs"]["a"], "context_stops": 40.0},
                               "b": {**run["k1"]["envs"]["b"], "context_stops": 0.0}}}}
        for seed, run in RESULTS["runs"]["adaplan"].items()
    }  # fmt: skip
    text = report_markdown({**RESULTS, "runs": {**RESULTS["runs"], "adaplan": stopped}})
    heldin = text[text.index("context was full") :].split("\n\n")[1]
    assert "| SFT (AdaPlan) | 40.0 ± 0.0 | 40.0 ± 0.0 |" in heldin
    assert "| SFT (ReAct) | - | - |" in heldin  # a run evaluated before the measure


@pytest.mark.parametrize("name", [*HELDIN, *HELDOUT])
@pytest.mark.parametrize("mode", ["adaplan", "react"])
def test_expert_episodes_parse_on_every_environment(name, mode):
    for seed in range(3):
        turns = [parse_turn(m["content"], expect_plan=False) for m in expert_conversation(name, seed, mode)[1::2]]
        assert turns and all(t.well_formed and t.action for t in turns)
        assert (turns[0].plan is not None) == (mode == "adaplan")
