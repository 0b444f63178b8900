"""`coalign bench`: recipes share a seed's cold start, the baseline matches MOAT's budget, the report adds up."""

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from coalign.config import load_config
from coalign.core import parallel
from coalign.core.console import make_console
from coalign.core.parallel import Job, latest_line, run_jobs
from coalign.moat.bench import BENCHED, recipe_config, run_bench
from coalign.moat.report import (
    accuracy_table,
    comparisons,
    dpo_table,
    paired_columns_table,
    paired_table,
    premise_table,
    report_markdown,
)
from coalign.pilotrl.bench import variant_weight
from coalign.reports.stats import fmt, t_bars, t_critical, t_two_sided_p
from tests.jobs import (
    boom,
    boom_once_started,
    devices_beside_another,
    echo,
    killed_once_started,
    sleep_after_writing_pid,
    timed,
)
from tests.moat.test_moat import MOAT

BENCH = {**MOAT, "name": "bench-test"}
RECIPES = ["lumos", "moat", "moat_no_critic", "moat_k2"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    results = run_bench(load_config("tiny", BENCH), root, [0, 1], RECIPES, workers=1, console=Console(quiet=True))
    return root, results


@pytest.mark.slow
def test_every_recipe_and_seed_has_every_round(bench):
    root, results = bench
    assert json.loads((root / "results.json").read_text()) == results
    for recipe in RECIPES:
        assert set(results["runs"][recipe]) == {"0", "1"}
        for run in results["runs"][recipe].values():
            assert set(run["rounds"]) == {"round0", "round1"}
    assert results["k"] == {"lumos": 3, "moat": 3, "moat_no_critic": 3, "moat_k2": 2}


@pytest.mark.slow
def test_recipes_of_a_seed_start_from_one_cold_start(bench):
    root, results = bench
    for seed in ("0", "1"):
        round0 = {json.dumps(results["runs"][r][seed]["rounds"]["round0"], sort_keys=True) for r in RECIPES}
        assert len(round0) == 1
    assert not (root / "seed0" / "moat" / "checkpoints" / "planner_sft").exists()
    assert (root / "seed0" / "cold_start" / "checkpoints" / "planner_sft" / "model.safetensors").exists()
    seed0 = results["runs"]["moat"]["0"]["rounds"]["round0"]
    seed1 = results["runs"]["moat"]["1"]["rounds"]["round0"]
    assert seed0 != seed1  # seeds differ from the cold start on


@pytest.mark.slow
def test_recipes_run_what_they_name(bench):
    root, _ = bench
    stages = {p.stem for p in (root / "seed0" / "lumos" / "stages").glob("*.json")}
    assert stages == {"round1_planner_sft", "round1_grounder_sft", "round1_eval"}
    verdicts = [json.loads(line) for line in (root / "seed0" / "moat_no_critic" / "round1" / "verdicts.jsonl").open()]
    assert all(v["actions"] == v["generated"] for v in verdicts)  # no critic: raw groundings
    candidates = [json.loads(line) for line in (root / "seed0" / "moat_k2" / "round1" / "candidates.jsonl").open()]
    assert all(len(row["candidates"]) == 2 for row in candidates)


@pytest.mark.slow
def test_baseline_trains_as_many_grounder_examples_as_moat(bench):
    root, _ = bench
    lumos = json.loads((root / "seed0" / "lumos" / "stages" / "round1_grounder_sft.json").read_text())
    moat = json.loads((root / "seed0" / "moat" / "stages" / "round1_grounder_sft.json").read_text())
    assert lumos["examples"] == moat["examples"] == 6 * 3 * 2  # tasks x K critic-built, mixed 1:1 with initial


@pytest.mark.slow
def test_report_and_plots_are_written(bench):
    root, results = bench
    report = (root / "report.md").read_text()
    for heading in (
        "Table 2 analogue",
        "subgoals matter",
        "Table 3 analogue",
        "Table 4 analogue",
        "The premise",
        "K sweep",
    ):
        assert heading in report
    for label in ("Lumos (cold start)", "Lumos (matched)", "MOAT w/o critic", "MOAT K=2"):
        assert label in report
    for png in ("rounds.png", "k_sweep.png"):
        assert (root / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report == report_markdown(results) + "\n"
    machine = results["machine"]  # what the numbers ran on: they repeat on one machine and move on another
    assert machine["cores"] >= 1 and machine["torch"] and f"Ran on {machine['cpu']}" in report


@pytest.mark.slow
def test_rerun_resumes_without_redoing_work(bench):
    root, results = bench
    marker = root / "seed1" / "moat" / "stages" / "round1_grounder_sft.json"
    before = marker.stat().st_mtime_ns
    again = run_bench(load_config("tiny", BENCH), root, [0, 1], RECIPES, workers=1, console=Console(quiet=True))
    assert again["runs"] == results["runs"]
    assert marker.stat().st_mtime_ns == before


@pytest.mark.slow
def test_a_changed_config_is_refused_before_any_work(bench):
    root, _ = bench
    results = (root / "results.json").stat().st_mtime_ns
    changed = load_config("tiny", {**BENCH, "moat": {**BENCH["moat"], "k": 4}})
    with pytest.raises(SystemExit, match=r"seed0/lumos/config.yaml holds a different config:\n  moat.k: 3 -> 4"):
        run_bench(changed, root, [0, 1], RECIPES, workers=1, console=Console(quiet=True))
    assert (root / "results.json").stat().st_mtime_ns == results


def _part(results: dict, seed: str, wall: float) -> dict:
    """The results one seed's invocation of the same bench would have written."""
    runs = {recipe: {seed: by_seed[seed]} for recipe, by_seed in results["runs"].items()}
    return {**results, "seeds": [int(seed)], "runs": runs, "wall_seconds": wall}


@pytest.mark.slow
def test_invocations_of_one_bench_merge_into_its_report(bench, tmp_path):
    """Seeds run one per invocation (`--name`) give, merged by `coalign report`, the report of all seeds."""
    from typer.testing import CliRunner

    from coalign.cli import app
    from coalign.reports.merge import merge_results

    _, results = bench
    parts = [("s1.json", _part(results, "1", 30.0)), ("s0.json", _part(results, "0", 12.5))]
    merged = merge_results(parts)
    assert merged["seeds"] == [0, 1] and merged["runs"] == results["runs"] and merged["wall_seconds"] == 42.5
    assert merged["merged_from"] == ["s1.json", "s0.json"]
    whole, joined = report_markdown(results).splitlines(), report_markdown(merged).splitlines()
    assert whole[3:] == joined[3:] and "Merged from 2 invocations (s1.json, s0.json)" in joined[2]
    for label, part in parts:
        (tmp_path / label).write_text(json.dumps(part))
    args = ["report", str(tmp_path / "s0.json"), str(tmp_path / "s1.json"), "--out", str(tmp_path / "all")]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert json.loads((tmp_path / "all" / "results.json").read_text())["runs"] == results["runs"]
    assert (tmp_path / "all" / "rounds.png").exists() and "seeds 0, 1" in done.output
    assert CliRunner().invoke(app, args).exit_code == 0  # the same merge again replaces its own files
    over = CliRunner().invoke(app, ["report", str(tmp_path / "s0.json"), "--out", str(tmp_path / "all")])
    assert over.exit_code == 2 and "results.json exists and is not a merge of these files" in over.output

    elsewhere = {**parts[1][1], "machine": {**results["machine"], "cpu": "Another CPU"}}
    two = merge_results([parts[0], ("elsewhere.json", elsewhere)])
    assert list(two["machines"]) == ["s1.json", "elsewhere.json"] and "machine" not in two
    assert "Ran on 2 machines: " in report_markdown(two) and "Another CPU" in report_markdown(two)
    assert "Ran on 2 machines" not in joined[2] and "Ran on " in joined[2]

    other = _part(results, "1", 1.0)
    other["config"] = {**other["config"], "moat": {**other["config"]["moat"], "k": 9}}
    with pytest.raises(ValueError, match=r"other.json is not the same bench as s0.json: config.moat.k differ"):
        merge_results([parts[1], ("other.json", other)])
    changed = _part(results, "0", 1.0)
    changed["runs"]["moat"]["0"] = {**changed["runs"]["moat"]["0"], "rounds": {}}
    with pytest.raises(ValueError, match="again.json: moat seed 0 differs from the same run in an earlier part"):
        merge_results([parts[1], ("again.json", changed)])
    with pytest.raises(ValueError, match="odd.json: not a bench's results"):
        merge_results([parts[0], ("odd.json", {**parts[0][1], "runs": {"moat": [1, 2]}})])
    (tmp_path / "odd.json").write_text(json.dumps({**parts[0][1], "runs": {"moat": {"0": {"rounds": 7}}}}))
    odd = CliRunner().invoke(app, ["report", str(tmp_path / "odd.json"), "--out", str(tmp_path / "y")])
    assert odd.exit_code == 2 and "coalign report: " in odd.output and not (tmp_path / "y").exists()
    (tmp_path / "bad.json").write_text("{not json")
    refused = CliRunner().invoke(app, ["report", str(tmp_path / "bad.json"), "--out", str(tmp_path / "x")])
    assert refused.exit_code == 2 and "bad.json, line 1: not a readable results.json" in refused.output
    assert not (tmp_path / "x").exists()


def test_recipe_configs():
    base = load_config("tiny", BENCH)
    assert recipe_config(base, "moat_no_stage1", 3).moat.stage1 is False
    assert recipe_config(base, "moat_no_stage2", 3).moat.stage2 is False
    assert recipe_config(base, "moat_no_critic", 3).moat.critic == "none"
    assert recipe_config(base, "moat_corrected", 3).moat.critic_subgoals == "corrected"
    assert recipe_config(base, "moat", 3).moat.critic_subgoals == "original"
    critic = {"critic": "llm", "critic_options": {"base_url": "http://x", "model": "m"}}
    llm = load_config("tiny", {**BENCH, "moat": {**BENCH["moat"], **critic}})
    assert recipe_config(llm, "moat_no_critic", 3).moat.critic_options == {}  # llm options do not fit "none"
    assert recipe_config(base, "moat_k7", 3).moat.k == 7
    lumos = recipe_config(base, "lumos", 3)
    assert (lumos.recipe, lumos.seed, lumos.moat.k) == ("lumos", 3, base.moat.k)
    with pytest.raises(ValueError, match="unknown moat bench variant 'moat_fast'"):
        recipe_config(base, "moat_fast", 0)


def test_a_variant_with_round_settings_changed_sweeps_them_from_the_shared_cold_start():
    base = load_config("tiny", BENCH)
    swept = recipe_config(base, "moat_no_critic+planner_dpo.learning_rate=5e-5+moat.pairs_per_task=1", 2)
    assert (swept.planner_dpo.learning_rate, swept.moat.pairs_per_task, swept.moat.critic) == (5e-5, 1, "none")
    assert recipe_config(base, "moat_no_critic", 2).planner_dpo == base.planner_dpo  # its variant left as it was
    assert recipe_config(base, "moat_k2+planner_dpo.loss_type=ipo", 0).planner_dpo.loss_type == "ipo"
    with pytest.raises(ValueError, match="planner_sft is not a setting of moat's rounds"):
        recipe_config(base, "moat+planner_sft.epochs=2", 0)  # the cold start's, shared by every variant
    with pytest.raises(ValueError, match="'beta=0.1' is not section.key=value"):
        recipe_config(base, "moat+beta=0.1", 0)
    with pytest.raises(ValueError, match="loss_type"):
        recipe_config(base, "moat+planner_dpo.loss_type=exo_pair", 0)


def test_the_report_shows_what_dpo_learnt_on_the_held_aside_pairs_per_round():
    results = _results({"lumos": [0.1, 0.1], "moat": [0.2, 0.3]})
    for seed, (loss, accuracy) in enumerate([(0.45, 0.75), (0.55, 0.5)]):
        held = {"loss": loss, "margin": 0.2 + seed / 10, "accuracy": accuracy}
        dpo = {"pairs": 48, "train_loss": 0.6, "held_aside_pairs": 15 + seed, "eval": held}
        results["runs"]["moat"][str(seed)]["stages"]["round1"]["dpo"] = dpo
    table = dpo_table(results, ["moat"])
    assert "| MOAT | 1 | 48/16 | 0.600 ± 0.000 | 0.500 ± 0.071 | 0.250 ± 0.071 | 62.5 ± 17.7 |" in table
    report = report_markdown(
        results
        | {"config": {"name": "t", "moat": {"rounds": 1, "tasks": 8, "k": 4, "critic": "none"}}, "wall_seconds": 1}
    )
    assert table in report and "ln 2 = 0.693" in report
    assert dpo_table(_results({"moat": [0.2]}), ["moat"]) == ""  # no DPO ran


def _results(acc: dict[str, list[float]]) -> dict:
    """A hand-made results dict: per recipe, one held-in accuracy per seed."""
    runs = {}
    for recipe, values in acc.items():
        runs[recipe] = {}
        for seed, v in enumerate(values):
            block = {"sets": {"suite-heldin": {"accuracy": v}}, "average": {"accuracy": v}}
            empty = {"sets": {}, "average": {}}
            rounds = {"round0": {"heldin": block, "heldout": empty}, "round1": {"heldin": block, "heldout": empty}}
            stages = {"round1": {"premise": {"nll_success_auc": 0.5 + seed / 10, "grounding_success_rate": v}}}
            runs[recipe][str(seed)] = {"rounds": rounds, "stages": stages}
    seeds = list(range(max(len(v) for v in acc.values())))
    return {"config": {"moat": {"rounds": 1}}, "runs": runs, "recipes": list(acc), "k": {}, "seeds": seeds}


def test_report_tables_are_mean_and_sample_std_over_seeds():
    assert fmt([0.10, 0.15]) == "12.5 ± 3.5"
    assert fmt([0.2]) == "20.0"
    assert fmt([0.025, 0.0, -0.025]) == "0.0 ± 2.5"  # not "-0.0" from float error
    assert fmt([1.5, 2.5], percent=False) == "2.000 ± 0.707"
    table = accuracy_table(_results({"lumos": [0.1, 0.15], "moat": [0.2, 0.3]}), ["lumos", "moat"], with_cold=False)
    assert "| Lumos (matched) | 12.5 ± 3.5 | 12.5 ± 3.5 |" in table
    assert "| MOAT | 25.0 ± 7.1 | 25.0 ± 7.1 |" in table
    paired = paired_table(_results({"lumos": [0.1, 0.15], "moat": [0.2, 0.3]}), [("moat", "lumos")])
    assert "| MOAT − Lumos (matched) | held-in | +10.0 / +15.0 | 12.5 ± 3.5 | 5.00 |" in paired  # paired t
    once = paired_table(
        _results({"lumos": [0.1, 0.15], "moat": [0.2, 0.3]}) | {"seeds": [0, 1, 1]}, [("moat", "lumos")]
    )
    assert "| +10.0 / +15.0 | 12.5 ± 3.5 | 5.00 |" in once  # a seed listed twice is one pair
    premise = premise_table(_results({"moat": [0.2, 0.3]}), ["moat"])
    assert "| MOAT | 1 | 0.550 ± 0.071 |" in premise


def test_ablations_on_fewer_seeds_are_labelled_and_paired_on_the_seeds_they_share():
    """A merged bench: the main pair on seeds 0-2, an ablation on seed 1 only (run in another invocation)."""
    results = _results({"lumos": [0.1, 0.15, 0.2], "moat": [0.2, 0.3, 0.3]})
    ablation = _results({"moat_no_critic": [0.0, 0.4]})["runs"]["moat_no_critic"]["1"]
    results["runs"]["moat_no_critic"] = {"1": ablation}
    results["recipes"].append("moat_no_critic")
    results |= {
        "config": {"name": "t", "moat": {"rounds": 1, "tasks": 10, "k": 4, "critic": "none"}},
        "wall_seconds": 1,
    }
    assert comparisons(results, results["recipes"]) == [
        ("moat", "lumos"),
        ("moat_no_critic", "lumos"),
        ("moat_no_critic", "moat"),
    ]
    columns = paired_columns_table(results, comparisons(results, results["recipes"]))
    heldin, heldout = columns.split("\n\n")  # one table per split
    assert "| MOAT − Lumos (matched) | 0, 1, 2 | 11.7 ± 2.9 (t 7.00) | 11.7 ± 2.9 (t 7.00) |" in heldin
    assert "| MOAT w/o critic − Lumos (matched) | 1 | 25.0 | 25.0 |" in heldin  # seed 1: 0.4 - 0.15
    assert "| MOAT w/o critic − MOAT | 1 | 10.0 | 10.0 |" in heldin  # no t from one pair
    assert "| MOAT w/o critic − MOAT | 1 | - |" in heldout  # no held-out sets
    report = report_markdown(results)
    assert "| MOAT w/o critic (seed 1) | 40.0 | 40.0 | - |" in report  # its row averages one seed, and says so
    assert "| MOAT | 26.7 ± 5.8 | 26.7 ± 5.8 | - |" in report
    assert "Each ablation minus the full MOAT" in report
    assert "| MOAT w/o critic − MOAT | held-in | +10.0 | 10.0 | - |" in report
    # the t values above come from three seeds (one pair gives none): the report names the bar for three only
    assert "p < 0.05 (two-sided) needs |t| above 4.30 from 3 seeds." in report


def test_a_bench_of_moat_alone_has_no_empty_paired_tables():
    results = _results({"moat": [0.2, 0.3]}) | {
        "config": {"name": "t", "moat": {"rounds": 1, "tasks": 10, "k": 4, "critic": "none"}},
        "wall_seconds": 1,
    }
    report = report_markdown(results)
    assert "| MOAT | 25.0 ± 7.1 |" in report and "Paired by seed" not in report and "|t|" not in report
    assert "Paired by seed" in report_markdown(
        _results({"lumos": [0.1], "moat": [0.2]}) | {"config": results["config"], "wall_seconds": 1}
    )


def test_t_bars_match_the_students_t_table():
    """Two-sided 5% critical values from a printed t table, 1-8 and 30 degrees of freedom."""
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 30: 2.042}
    assert {dof: round(t_critical(dof), 3) for dof in table} == table
    assert round(t_critical(4, p=0.01), 3) == 4.604
    assert t_two_sided_p(0.0, 3) == 1.0 and t_two_sided_p(-2.776, 4) == pytest.approx(0.05, abs=1e-4)
    assert t_two_sided_p(1.0, 1) == pytest.approx(0.5)  # Cauchy: P(|T| >= 1) = 1/2
    assert t_bars([5, 2, 5]) == (
        "A paired t from n seeds has n − 1 degrees of freedom; p < 0.05 (two-sided) needs |t| above "
        "12.71 from 2 seeds, 2.78 from 5 seeds."
    )
    assert t_bars([1, 0]) == ""  # no t is printed from one seed


@pytest.mark.slow
def test_parallel_jobs_return_in_order_and_log_their_output(tmp_path):
    jobs = [Job(f"j{i}", echo, (f"x{i}",), tmp_path / f"j{i}.log") for i in range(3)]
    assert run_jobs(jobs, workers=2, desc="test") == ["X0", "X1", "X2"]
    assert (tmp_path / "j1.log").read_text().strip().endswith("job says x1")
    with pytest.raises(RuntimeError, match=r"job bad failed: bad job \(log: .*bad.log\)"):
        run_jobs([Job("bad", boom, (), tmp_path / "bad.log"), *jobs[:1]], workers=2, desc="test")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("second", "message"),
    [
        (boom_once_started, r"^job second failed: bad job \(log: .*second\.log\)$"),
        # the out-of-memory killer's SIGKILL: a pool of workers (Python 3.11's) saw no death of a worker it had
        # just spawned until another job ended, and the bench hung that long
        (killed_once_started, r"^job second failed: its process was killed by SIGKILL \(what the kernel's out-of"),
    ],
)
def test_a_failed_or_killed_job_stops_the_bench_and_the_job_beside_it(tmp_path, second, message):
    """At once, as a Ray bench does, not when the other job ends (here in 300 s)."""
    pid_file = tmp_path / "sleeper.pid"
    jobs = [
        Job("sleeper", sleep_after_writing_pid, (pid_file,), tmp_path / "sleeper.log"),
        Job("second", second, (pid_file,), tmp_path / "second.log"),
    ]
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=message):
        run_jobs(jobs, workers=2, desc="failing")
    assert time.monotonic() - start < 120
    assert not _running(int(pid_file.read_text()))


@pytest.mark.slow
def test_jobs_that_do_not_fit_in_memory_side_by_side_run_one_after_the_other_here_too(tmp_path, monkeypatch):
    """As on Ray: two GRPO jobs of 13 GB each were killed side by side on a 24 GiB machine."""
    monkeypatch.setattr(parallel, "machine_memory", lambda: 1 << 30)
    out = io.StringIO()

    def spans(*sizes: int | None) -> list[tuple[float, float]]:
        jobs = [Job(f"m{i}", timed, (1.0,), tmp_path / f"m{i}.log", memory_bytes=s) for i, s in enumerate(sizes)]
        return run_jobs(jobs, workers=2, desc="memory", console=make_console(file=out, width=200))

    (start0, end0), (start1, end1) = spans(600 << 20, 600 << 20)
    assert end0 <= start1
    assert (
        "memory (2 processes): m1 waits for memory (it needs 0.6 GiB; running jobs hold 0.6 of this " in out.getvalue()
    )
    (tmp_path / "fit").mkdir()  # these fit (None asks for nothing): each returns once the other runs beside it
    jobs = [
        Job(f"f{i}", devices_beside_another, (tmp_path / "fit", f"f{i}"), memory_bytes=m)
        for i, m in enumerate([400 << 20, None])
    ]
    assert len(run_jobs(jobs, workers=2, desc="memory")) == 2
    (start0, end0), (start1, end1) = spans(2 << 30, None)  # larger than the machine: it runs, alone
    assert end0 <= start1


@pytest.mark.slow
def test_parallel_jobs_print_one_line_per_start_and_finish_when_not_a_terminal(tmp_path):
    out = io.StringIO()
    jobs = [Job(f"j{i}", echo, (f"x{i}",), tmp_path / f"j{i}.log") for i in range(3)]
    run_jobs(jobs, workers=2, desc="test", console=make_console(file=out, width=40))
    lines = out.getvalue().splitlines()
    assert len(lines) == 6 and "\x1b" not in out.getvalue()  # no live redraws in a file
    for i in range(3):
        assert f"test (2 processes): j{i} started (log: {tmp_path / f'j{i}.log'})" in lines  # one line, not wrapped
        assert any(line.startswith(f"test (2 processes): j{i} finished after") for line in lines)


@pytest.mark.slow
def test_side_by_side_the_heaviest_waiting_job_starts_first_and_results_keep_their_order(tmp_path):
    out = io.StringIO()
    weights = [1.0, 1.0, 3.0, 2.0]
    jobs = [Job(f"j{i}", echo, (f"x{i}",), tmp_path / f"j{i}.log", w) for i, w in enumerate(weights)]
    assert run_jobs(jobs, workers=2, desc="w", console=make_console(file=out, width=60)) == ["X0", "X1", "X2", "X3"]
    started = [line.split(": ")[1].split()[0] for line in out.getvalue().splitlines() if " started " in line]
    assert started == ["j2", "j3", "j0", "j1"]  # ties keep their order


def test_the_benches_weigh_the_longer_recipes_heavier():
    """MOAT's round does more than the matched baseline's; an AdaPlan episode is longer than a ReAct one, so
    PilotRL's 4 GRPO epochs weigh more than Vanilla RL's 4, and an AdaPlan SFT run more than a ReAct one; a GRPO
    run more than the SFT run it starts from: the longer start first."""
    assert BENCHED["moat"].weight > BENCHED["lumos"].weight
    assert variant_weight("pilotrl") > variant_weight("vanilla_rl") > variant_weight("react")
    assert variant_weight("pilotrl") > variant_weight("adaplan") > variant_weight("react")
    assert variant_weight("isolated") > variant_weight("order_12")  # its executor stage's own 2 epochs


def test_the_live_table_shows_a_log_s_latest_progress_line(tmp_path):
    log = tmp_path / "job.log"
    assert latest_line(log) == ""
    log.write_text("Tokenizing\n  0%|  | 0/72\r 50%|##| 36/72 \x1b[0m\r\n\n")
    assert latest_line(log) == "50%|##| 36/72"


@pytest.mark.slow
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")
def test_parallel_jobs_use_separate_processes(tmp_path: Path):
    pids = run_jobs([Job(f"p{i}", os.getpid, (), None) for i in range(3)], workers=2, desc="pids")
    assert os.getpid() not in pids and len(set(pids)) == 3  # each job a fresh process: none inherits another's
    # a lone job of a side-by-side run too (a bench's one cold-start evaluation): what it held goes when it ends,
    # instead of staying in this process beside the next jobs; only workers=1 runs jobs here
    (pid,) = run_jobs([Job("lone", os.getpid, (), tmp_path / "lone.log")], workers=2, desc="pids")
    assert pid != os.getpid() and (tmp_path / "lone.log").exists()
    assert run_jobs([Job("here", os.getpid, (), None)], workers=1, desc="pids") == [os.getpid()]


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie, exited and not yet reaped, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_workers_stop_when_the_parent_is_killed(tmp_path: Path):
    """A bench stopped by SIGTERM leaves no worker training on unseen beside the next run."""
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from coalign.core.parallel import Job, run_jobs\n"
        "from tests.jobs import sleep_after_writing_pid\n"
        "if __name__ == '__main__':\n"
        "    d = Path(sys.argv[1])\n"
        "    run_jobs([Job(f'w{i}', sleep_after_writing_pid, (d / f'w{i}.pid',)) for i in range(2)], 2, 'sleep')\n"
    )
    (tmp_path / "bench.py").write_text(script)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, str(tmp_path / "bench.py"), str(tmp_path)], env=env)
    pid_files = [tmp_path / f"w{i}.pid" for i in range(2)]
    deadline = time.monotonic() + 120
    while not all(f.exists() and f.read_text() for f in pid_files):
        assert parent.poll() is None and time.monotonic() < deadline, "the workers never started"
        time.sleep(0.2)
    workers = [int(f.read_text()) for f in pid_files]
    try:
        assert all(_running(pid) for pid in workers)
        parent.send_signal(signal.SIGTERM)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 15
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_running(pid) for pid in workers)
    finally:  # a failing run leaves no sleeper behind
        if parent.poll() is None:
            parent.kill()
        for pid in filter(_running, workers):
            os.kill(pid, signal.SIGKILL)


def test_the_cpu_is_named_from_cpuinfo():
    from coalign.core.machine import cpu_name

    text = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu\n"
    assert cpu_name(text) == "Intel(R) Xeon(R) Processor"
    assert cpu_name("") != ""  # elsewhere, platform's guess
