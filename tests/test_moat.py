"""The MOAT recipe end to end on a tiny budget: every stage's artifact, the ablations, resume."""

import json

import pytest
from rich.console import Console

from coalign.config import load_config
from coalign.recipes.moat import run_moat
from tests.test_pipeline import TINY

MOAT = {
    **TINY,
    "name": "moat-test",
    "recipe": "moat",
    "moat": {
        "rounds": 1,
        "tasks": 6,
        "k": 3,
        "max_new_tokens_plan": 24,
        "max_new_tokens_ground": 24,
        "batch_size": 12,
        "pair_threshold": 0.0,
    },
    "planner_dpo": {"learning_rate": 1e-4, "epochs": 1, "batch_size": 4, "grad_accum": 1, "max_length": 512},
    "grounder_round_sft": {"learning_rate": 1e-3, "epochs": 1, "batch_size": 8, "grad_accum": 1, "max_length": 1024},
}


def _lines(path):
    return [json.loads(line) for line in path.open()]


@pytest.fixture(scope="module")
def moat_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("moat")
    history = run_moat(load_config("tiny", MOAT), run_dir, Console(quiet=True))
    return run_dir, history


def test_every_stage_leaves_its_artifact(moat_run):
    run_dir, history = moat_run
    assert set(history) == {"round0", "round1"}
    candidates = _lines(run_dir / "round1" / "candidates.jsonl")
    assert len(candidates) == 6 and all(len(row["candidates"]) == 3 for row in candidates)
    scores = _lines(run_dir / "round1" / "scores.jsonl")
    assert all(len(row["scores"]) == 3 and row["scores"][0]["mean"] > 0 for row in scores)
    verdicts = _lines(run_dir / "round1" / "verdicts.jsonl")
    assert len(verdicts) == 18 and all(v["actions"] for v in verdicts)  # execution critic corrects every failure
    premise = json.loads((run_dir / "round1" / "premise.json").read_text())
    assert premise["candidates"] == 18
    for stage in (
        "round1_sample",
        "round1_score",
        "round1_pairs",
        "round1_dpo",
        "round1_ground",
        "round1_critic",
        "round1_grounder_sft",
        "round1_eval",
    ):
        assert (run_dir / "stages" / f"{stage}.json").exists(), stage
    assert (run_dir / "checkpoints" / "round1_grounder_sft" / "model.safetensors").exists()


def test_pairs_are_lowest_vs_highest_nll(moat_run):
    run_dir, _ = moat_run
    scores = {row["id"]: [s["mean"] for s in row["scores"]] for row in _lines(run_dir / "round1" / "scores.jsonl")}
    candidates = {row["id"]: row["candidates"] for row in _lines(run_dir / "round1" / "candidates.jsonl")}
    for pair in _lines(run_dir / "round1" / "pairs.jsonl"):
        s, c = scores[pair["id"]], candidates[pair["id"]]
        assert pair["chosen"] == c[s.index(min(s))] and pair["rejected"] == c[len(s) - 1 - s[::-1].index(max(s))]


def test_rerun_resumes_without_redoing_any_stage(moat_run):
    run_dir, history = moat_run
    marker = run_dir / "stages" / "round1_grounder_sft.json"
    before = marker.stat().st_mtime_ns
    assert run_moat(load_config("tiny", MOAT), run_dir, Console(quiet=True)) == history
    assert marker.stat().st_mtime_ns == before


def test_ablation_without_stage1_keeps_the_planner(tmp_path):
    config = load_config("tiny", {**MOAT, "moat": {**MOAT["moat"], "stage1": False, "critic": "none"}})
    run_moat(config, tmp_path, Console(quiet=True))
    assert not (tmp_path / "stages" / "round1_dpo.json").exists()
    verdicts = _lines(tmp_path / "round1" / "verdicts.jsonl")
    generated = _lines(tmp_path / "round1" / "groundings.jsonl")
    assert [v["actions"] for v in verdicts] == [a for row in generated for a in row["actions"]]
