"""The MOAT recipe end to end on a tiny budget: every stage's artifact, the ablations, resume, degenerate rounds."""

import io
import json
import logging
from dataclasses import replace

import pytest
from rich.console import Console

from coalign.config import load_config
from coalign.core.runs import Run
from coalign.moat.pairs import held_aside
from coalign.moat.recipe import dpo_stage, moat_rounds, pair_stage, run_moat, score_stage
from coalign.tasks.maths_suite import generate_suite
from coalign.tasks.sources import load_sources
from coalign.training.setup import prepare_run
from tests.fault_server import KEY, Reply
from tests.moat.test_baseline import TINY

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


@pytest.mark.slow
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


@pytest.mark.slow
def test_pairs_are_lowest_vs_highest_nll(moat_run):
    run_dir, _ = moat_run
    scores = {row["id"]: [s["mean"] for s in row["scores"]] for row in _lines(run_dir / "round1" / "scores.jsonl")}
    candidates = {row["id"]: row["candidates"] for row in _lines(run_dir / "round1" / "candidates.jsonl")}
    for pair in _lines(run_dir / "round1" / "pairs.jsonl"):
        s, c = scores[pair["id"]], candidates[pair["id"]]
        assert pair["chosen"] == c[s.index(min(s))] and pair["rejected"] == c[len(s) - 1 - s[::-1].index(max(s))]


@pytest.mark.slow
def test_rerun_resumes_without_redoing_any_stage(moat_run):
    run_dir, history = moat_run
    marker = run_dir / "stages" / "round1_grounder_sft.json"
    before = marker.stat().st_mtime_ns
    assert run_moat(load_config("tiny", MOAT), run_dir, Console(quiet=True)) == history
    assert marker.stat().st_mtime_ns == before


@pytest.mark.slow
def test_a_forced_resume_redoes_the_stages_a_changed_setting_feeds(moat_run, tmp_path):
    """Stage 2's sampling temperature changed: stage 1 is kept, its grounding is redone under the new setting."""
    import shutil

    run_dir, _ = moat_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    stages = ("round1_sample", "round1_score", "round1_pairs", "round1_dpo", "round1_ground")
    before = {s: (copy / "stages" / f"{s}.json").stat().st_mtime_ns for s in stages}
    hotter = {**MOAT, "moat": {**MOAT["moat"], "ground_temperature": 0.7}}
    run_moat(load_config("tiny", hotter), copy, Console(quiet=True), force=True)
    after = {s: (copy / "stages" / f"{s}.json").stat().st_mtime_ns for s in stages}
    assert [s for s in stages if after[s] != before[s]] == ["round1_ground"]
    assert Run(copy).stage_info("round1_ground")["settings"]["ground_temperature"] == 0.7


@pytest.mark.slow
def test_ablation_without_stage1_keeps_the_planner(tmp_path):
    config = load_config("tiny", {**MOAT, "moat": {**MOAT["moat"], "stage1": False, "critic": "none"}})
    run_moat(config, tmp_path, Console(quiet=True))
    assert not (tmp_path / "stages" / "round1_dpo.json").exists()
    verdicts = _lines(tmp_path / "round1" / "verdicts.jsonl")
    generated = _lines(tmp_path / "round1" / "groundings.jsonl")
    assert [v["actions"] for v in verdicts] == [a for row in generated for a in row["actions"]]


def test_round_without_pairs_skips_dpo_and_says_why(tmp_path):
    config = load_config("tiny", {**MOAT, "moat": {**MOAT["moat"], "pair_threshold": 0.5}})
    tasks = generate_suite("train", 3, 0)
    candidates = [["Subgoal 1: a", "Subgoal 1: b", "Subgoal 1: c"]] * 3
    scores = [[{"mean": m} for m in means] for means in ([1.0, 1.0, 1.0], [1.0, 1.2, 1.1], [2.0, 2.0, 2.0])]
    run, out = Run(tmp_path), io.StringIO()
    assert pair_stage(run, 1, config, tasks, candidates, scores) == []
    record = run.stage_info("round1_pairs")
    assert (record["pairs"], record["equal_scores"], record["below_threshold"], record["unscored"]) == (0, 2, 1, 0)
    assert dpo_stage(run, 1, config, "the-planner", [], Console(file=out, width=300)) == "the-planner"
    skipped = run.stage_info("round1_dpo")["skipped"]
    assert "2 tasks scored all K candidates the same" in skipped and "moat.pair_threshold=0.5" in skipped
    assert "DPO skipped, planner unchanged" in out.getvalue()


def test_undefined_content_scores_give_no_pair_instead_of_a_crash(tmp_path):
    config = load_config("tiny", {**MOAT, "moat": {**MOAT["moat"], "score_reduction": "content"}})
    tasks = generate_suite("train", 2, 0)
    scores = [[{"content": None}, {"content": None}, {"content": None}], [{"content": v} for v in (0.5, 2.0, 1.0)]]
    pairs = pair_stage(Run(tmp_path), 1, config, tasks, [["Subgoal 1: a", "Subgoal 1: b", "Subgoal 1: c"]] * 2, scores)
    assert [p["id"] for p in pairs] == [tasks[1].id]
    assert Run(tmp_path).stage_info("round1_pairs")["unscored"] == 1


@pytest.mark.slow
def test_llm_critic_run_survives_faults_and_never_writes_the_key(moat_run, server, tmp_path, caplog):
    """A whole MOAT round against a faulty critic server: fault counts recorded, the key in no file or log."""
    caplog.set_level(logging.DEBUG)
    server.script = [
        Reply(delay_s=0.6),
        Reply(status=429, headers={"Retry-After": "0"}),
        Reply(status=503),
        Reply(None, raw=b'{"choices": [{"message": {"content": "Final ans'),
        Reply("no idea"),
        Reply(status=401, echo_auth=True),
    ]
    server.default = Reply("Corrected Subgoals: Subgoal 1: Add them\nCorrected Actions: R1 = Calculator(1 + 1)")
    options = {"base_url": server.url, "model": "critic", "api_key_env": "COALIGN_TEST_KEY", "timeout_s": 0.3,
               "max_retries": 4, "backoff_s": 0.01, "max_concurrency": 2}  # fmt: skip
    config = load_config("tiny", {**MOAT, "moat": {**MOAT["moat"], "critic": "llm", "critic_options": options}})
    cold_dir, history = moat_run
    out = io.StringIO()
    console = Console(file=out, width=300)
    planner, grounder = (str(cold_dir / "checkpoints" / f"{a}_sft") for a in ("planner", "grounder"))
    moat_rounds(prepare_run(config, tmp_path, console), config, load_sources(config.data.train), planner, grounder,
                history["round0"], console)  # fmt: skip
    record = json.loads((tmp_path / "stages" / "round1_critic.json").read_text())
    assert record["failures"] == {"timeout": 1, "connection": 0, "http_429": 1, "http_5xx": 1, "http_other": 1,
                                  "bad_response": 1, "unparseable": 1}  # fmt: skip
    assert (record["judged"], record["successes"], record["dropped"]) == (18, 0, 2)
    assert "the critic accepted no grounding; training on corrections only" in out.getvalue()
    assert (tmp_path / "checkpoints" / "round1_grounder_sft" / "model.safetensors").exists()
    assert "COALIGN_TEST_KEY" in (tmp_path / "config.yaml").read_text()  # the variable's name, not its value
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) > 20 and not any(KEY.encode() in p.read_bytes() for p in files)
    assert KEY not in out.getvalue() and KEY not in caplog.text


@pytest.mark.slow
def test_task_without_gold_actions_is_scored_without_a_content_value(moat_run, tmp_path):
    cold_dir, _ = moat_run
    task = replace(generate_suite("train", 1, 0)[0], actions=())
    config = load_config("tiny", MOAT)
    rows = score_stage(Run(tmp_path), 1, config, str(cold_dir / "checkpoints" / "grounder_sft"), [task],
                       [["Subgoal 1: a", "Subgoal 1: b", "Subgoal 1: c"]])  # fmt: skip
    assert [s["content"] for s in rows[0]] == [None] * 3 and all(s["mean"] > 0 for s in rows[0])


def test_more_pairs_per_task_are_disjoint_and_the_papers_one_is_recorded_as_before(tmp_path):
    tasks = generate_suite("train", 2, 0)
    candidates = [[f"Subgoal 1: {c}" for c in "abcd"]] * 2
    scores = [[{"mean": m} for m in means] for means in ([1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0])]
    run = Run(tmp_path)
    one = load_config("tiny", {**MOAT, "moat": {**MOAT["moat"], "k": 4}})
    assert [(p["chosen"][-1], p["rejected"][-1]) for p in pair_stage(run, 1, one, tasks, candidates, scores)] == [
        ("a", "d")
    ]
    settings = run.stage_info("round1_pairs")["settings"]
    assert set(settings) == {"score_reduction", "pair_threshold", "pair_gap_on", "units"}  # old run folders resume
    two = load_config("tiny", {**MOAT, "moat": {**MOAT["moat"], "k": 4, "pairs_per_task": 2}})
    pairs = pair_stage(run, 1, two, tasks, candidates, scores)  # a changed setting: paired again
    assert [(p["id"], p["chosen"][-1], p["rejected"][-1]) for p in pairs] == [
        (tasks[0].id, "a", "d"),
        (tasks[0].id, "b", "c"),
    ]
    record = run.stage_info("round1_pairs")
    assert (record["pairs"], record["kept_fraction"], record["equal_scores"]) == (2, 0.5, 1)


def _fake_dpo(calls: list):
    """`dpo` recording what it was given and logging a held-aside measure, as the real one does."""

    def dpo(init, triples, out, settings, seed, held_aside=(), **kwargs):
        calls.append(([t[0] for t in triples], [t[0] for t in held_aside]))
        out.mkdir(parents=True)
        measure = {"eval": {"loss": 0.5, "margin": 0.4, "accuracy": 0.75}} if held_aside else {}
        (out / "train_log.json").write_text(json.dumps({"train_loss": 0.6, "pairs": len(triples), **measure}))
        return out

    return dpo


def test_dpo_never_trains_on_the_held_aside_tasks_and_records_what_it_measured_on_them(tmp_path, monkeypatch):
    import coalign.moat.recipe as recipe

    calls: list = []
    monkeypatch.setattr(recipe, "dpo", _fake_dpo(calls))
    pairs = [{"id": t, "prompt": f"p{t}{i}", "chosen": "c", "rejected": "r"} for i, t in enumerate("aabc")]
    config, console = (
        load_config("tiny", {**MOAT, "moat": {**MOAT["moat"], "dpo_held_aside": 0.3}}),
        Console(quiet=True),
    )
    run = Run(tmp_path / "measured")
    assert dpo_stage(run, 1, config, "planner", pairs, console, frozenset({"a"})).endswith("round1_planner")
    assert calls == [(["pb2", "pc3"], ["pa0", "pa1"])]
    record = run.stage_info("round1_dpo")
    assert (record["pairs"], record["held_aside_tasks"], record["held_aside_pairs"]) == (2, 1, 2)
    assert record["eval"] == {"loss": 0.5, "margin": 0.4, "accuracy": 0.75} and "held_aside" in record["settings"]
    plain = Run(tmp_path / "plain")
    dpo_stage(plain, 1, load_config("tiny", MOAT), "planner", pairs, console)
    assert calls[-1] == (["pa0", "pa1", "pb2", "pc3"], [])
    assert set(plain.stage_info("round1_dpo")["settings"]) == {"training", "seed", "lora", "data"}  # as before
    everything = Run(tmp_path / "everything")
    assert dpo_stage(everything, 1, config, "planner", pairs[:2], console, frozenset({"a"})) == "planner"
    assert "every pair's task is held aside" in everything.stage_info("round1_dpo")["skipped"]


@pytest.mark.slow
def test_a_round_measures_its_dpo_on_the_same_held_aside_tasks_it_never_trains_on(moat_run, tmp_path):
    cold_dir, history = moat_run
    moat = {**MOAT["moat"], "dpo_held_aside": 0.5, "stage2": False}
    config, console = load_config("tiny", {**MOAT, "moat": moat}), Console(quiet=True)
    train = load_sources(config.data.train)
    planner, grounder = (str(cold_dir / "checkpoints" / f"{a}_sft") for a in ("planner", "grounder"))
    moat_rounds(prepare_run(config, tmp_path, console), config, train, planner, grounder, history["round0"], console)
    aside = held_aside([t.id for t in train[:6]], 0.5, config.seed)
    pairs = _lines(tmp_path / "round1" / "pairs.jsonl")
    held = [p for p in pairs if p["id"] in aside]
    record = Run(tmp_path).stage_info("round1_dpo")
    assert (record["held_aside_tasks"], record["held_aside_pairs"], record["pairs"]) == (
        3,
        len(held),
        len(pairs) - len(held),
    )
    assert held and 0 <= record["eval"]["accuracy"] <= 1 and record["eval"]["loss"] > 0
