"""The Agent Lumos recipe end to end on a tiny budget: artifacts, metrics, resume."""

import json

import pytest
from rich.console import Console

from coalign.config import load_config
from coalign.moat.baseline import run_lumos

pytestmark = pytest.mark.slow  # every test here trains, launches processes or runs a cluster

TINY = {
    "name": "pipeline-test",
    "data": {
        "train": [{"kind": "suite", "split": "train", "n": 24}],
        "heldin": [{"kind": "suite", "split": "heldin", "n": 6}],
        "heldout": [{"kind": "suite", "split": "heldout", "n": 6}],
    },
    "models": {
        "planner": "scratch",  # the bundled configs start from the shipped base; these tests, from a smaller model
        "grounder": "scratch",
        "tiny": {
            "vocab_size": 400,
            "hidden_size": 32,
            "num_layers": 1,
            "num_heads": 2,
            "num_kv_heads": 2,
            "intermediate_size": 64,
        },
    },
    "planner_sft": {"learning_rate": 1e-3, "epochs": 1, "batch_size": 8, "grad_accum": 1, "max_length": 1024},
    "grounder_sft": {"learning_rate": 1e-3, "epochs": 1, "batch_size": 8, "grad_accum": 1, "max_length": 1024},
    "eval": {"batch_size": 6, "max_new_tokens_plan": 16, "max_new_tokens_ground": 16},
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    config = load_config("tiny", TINY)
    results = run_lumos(config, run_dir, Console(quiet=True))
    return config, run_dir, results


def test_run_folder_holds_config_checkpoints_predictions_and_metrics(finished):
    _, run_dir, results = finished
    assert (run_dir / "config.yaml").exists()
    for stage in ("init", "planner_sft", "grounder_sft", "eval"):
        assert json.loads((run_dir / "stages" / f"{stage}.json").read_text())["stage"] == stage
    for agent in ("planner_sft", "grounder_sft"):
        assert (run_dir / "checkpoints" / agent / "model.safetensors").exists()
    rows = [json.loads(line) for line in (run_dir / "eval" / "heldout-suite-heldout.predictions.jsonl").open()]
    assert len(rows) == 6 and {"plan", "actions", "pred", "correct", "gold_subgoal_correct"} <= rows[0].keys()
    assert json.loads((run_dir / "eval" / "metrics.json").read_text()) == results


def test_metrics_cover_both_splits_with_the_diagnostics(finished):
    _, _, results = finished
    for split in ("heldin", "heldout"):
        metrics = results[split]["sets"][f"suite-{split}"]
        for key in ("accuracy", "lumos_exact", "grounder_acc_gold_subgoals", "grounder_acc_blank_subgoals"):
            assert 0.0 <= metrics[key] <= 1.0
        assert metrics["capability_gap"] == pytest.approx(metrics["grounder_acc_gold_subgoals"] - metrics["accuracy"])
        assert sum(metrics["style_counts"].values()) == 6
        assert results[split]["average"]["accuracy"] == metrics["accuracy"]


def test_rerun_resumes_without_redoing_finished_stages(finished):
    config, run_dir, results = finished
    weights = run_dir / "checkpoints" / "grounder_sft" / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert run_lumos(config, run_dir, Console(quiet=True)) == results
    assert weights.stat().st_mtime_ns == before


def test_resume_with_a_different_config_is_refused(finished):
    _, run_dir, _ = finished
    changed = load_config("tiny", {**TINY, "seed": 7})
    with pytest.raises(SystemExit, match="different config"):
        run_lumos(changed, run_dir, Console(quiet=True))


def test_a_forced_resume_retrains_the_agents_whose_training_changed(finished, tmp_path, caplog):
    """--force keeps finished stages, but not a checkpoint trained under other settings or other examples:
    a result must never be reported for a training it did not have."""
    import shutil

    config, run_dir, _ = finished
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)

    def mtimes() -> dict[str, int]:
        return {
            a: (copy / "checkpoints" / a / "model.safetensors").stat().st_mtime_ns
            for a in ("planner_sft", "grounder_sft")
        }

    before = mtimes()
    faster = {**TINY, "planner_sft": {**TINY["planner_sft"], "learning_rate": 5e-4}}
    with caplog.at_level("WARNING"):
        run_lumos(load_config("tiny", faster), copy, Console(quiet=True), force=True)
    assert "stage planner_sft is redone: setting training.learning_rate: 0.001 -> 0.0005" in caplog.text
    after = mtimes()
    assert after["planner_sft"] != before["planner_sft"] and after["grounder_sft"] == before["grounder_sft"]
    record = json.loads((copy / "stages" / "planner_sft.json").read_text())
    assert record["settings"]["training"]["learning_rate"] == 5e-4 and record["settings"]["seed"] == 0

    more = {**faster, "data": {**TINY["data"], "train": [{"kind": "suite", "split": "train", "n": 30}]}}
    run_lumos(load_config("tiny", more), copy, Console(quiet=True), force=True)
    assert all(t != s for t, s in zip(mtimes().values(), after.values()))  # other examples: both retrained


def test_a_resume_in_a_new_process_keeps_every_stage(finished, tmp_path):
    """What a stage records (settings, digests of its examples) is the same in any process: a resume with
    another string-hash seed redoes nothing."""
    import os
    import shutil
    import subprocess
    import sys

    from coalign.config import config_to_yaml

    config, run_dir, _ = finished
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (tmp_path / "config.yaml").write_text(config_to_yaml(config))
    markers = {p.name: p.read_bytes() for p in (copy / "stages").glob("*.json")}
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    command = [sys.executable, "-m", "coalign.cli", "train", str(tmp_path / "config.yaml"), "--run-dir", str(copy)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert {p.name: p.read_bytes() for p in (copy / "stages").glob("*.json")} == markers


def test_grounding_ppl_is_the_grounders_perplexity_of_gold_actions_given_the_plans(finished):
    config, run_dir, results = finished
    from coalign.formats.lumos import format_actions, grounder_prompt
    from coalign.moat.scoring import score_completions
    from coalign.models.agents import Agent
    from coalign.tasks.sources import load_source

    rows = [json.loads(line) for line in (run_dir / "eval" / "heldin-suite-heldin.predictions.jsonl").open()]
    tasks = {t.id: t for t in load_source(config.data.heldin[0])}
    grounder = Agent.load(str(run_dir / "checkpoints" / "grounder_sft"))
    users = [grounder_prompt(r["question"], r["plan"], "maths") for r in rows]
    gold = [format_actions(list(tasks[r["id"]].actions)) for r in rows]
    expected = [s.ppl for s in score_completions(grounder, users, gold, batch_size=1)]
    assert [r["grounding_ppl"] for r in rows] == pytest.approx(expected, rel=1e-4)
    metric = results["heldin"]["sets"]["suite-heldin"]["grounding_ppl"]
    assert metric == pytest.approx(sum(expected) / len(expected), rel=1e-4) and metric > 1


def test_cli_names_the_changed_keys_and_resumes_when_forced(finished, tmp_path):
    import shutil

    from typer.testing import CliRunner

    from coalign.cli import app
    from coalign.config import config_to_yaml

    config, run_dir, _ = finished
    run_copy = tmp_path / "run"
    shutil.copytree(run_dir, run_copy)
    config_file = tmp_path / "config.yaml"
    config_file.write_text(config_to_yaml(config))
    marker = run_copy / "stages" / "planner_sft.json"
    before = marker.stat().st_mtime_ns
    args = ["train", str(config_file), "--run-dir", str(run_copy), "--set", "eval.max_new_tokens_plan=20"]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code != 0
    assert "eval.max_new_tokens_plan: 16 -> 20" in refused.output and "--force" in refused.output
    forced = CliRunner().invoke(app, [*args, "--force"])
    assert forced.exit_code == 0, forced.output
    assert "max_new_tokens_plan: 20" in (run_copy / "config.yaml").read_text()
    assert "#   eval.max_new_tokens_plan: 16 -> 20" in (run_copy / "config.history" / "001.yaml").read_text()
    assert marker.stat().st_mtime_ns == before  # finished stages are kept
