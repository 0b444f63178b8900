"""Maths and QA in one run on a tiny budget: cold start, per-set evaluation for both families, one MOAT round."""

import json

import pytest
from rich.console import Console

from coalign.config import load_config
from coalign.formats.lumos import EOS, TOOL_PREAMBLES, lumos_generation_prompt
from coalign.moat.recipe import run_moat
from coalign.moat.sft_data import grounder_pair, planner_pair
from coalign.models.load import load_tokenizer, train_tokenizer
from coalign.tasks.maths_suite import generate_suite
from coalign.tasks.qa_suite import generate_qa_suite
from coalign.tasks.sources import load_sources
from tests.moat.test_moat import MOAT

pytestmark = pytest.mark.slow  # every test here trains, launches processes or runs a cluster

MIXED = {
    **MOAT,
    "name": "mixed-test",
    "data": {
        "train": [{"kind": "suite", "split": "train", "n": 24}, {"kind": "qa_suite", "split": "train", "n": 12}],
        "heldin": [{"kind": "suite", "split": "heldin", "n": 4}, {"kind": "qa_suite", "split": "heldin", "n": 4}],
        "heldout": [{"kind": "suite", "split": "heldout", "n": 4}, {"kind": "qa_suite", "split": "heldout", "n": 4}],
    },
    "eval": {"batch_size": 8, "max_new_tokens_plan": 16, "max_new_tokens_ground": 16},
}
SETS = {"heldin": ("suite-heldin", "qa-suite-heldin"), "heldout": ("suite-heldout", "qa-suite-heldout")}


def _lines(path):
    return [json.loads(line) for line in path.open()]


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("mixed")
    return run_dir, run_moat(load_config("tiny", MIXED), run_dir, Console(quiet=True))


def test_the_tokenizer_learns_qa_text_from_the_qa_training_tasks(mixed_run):
    run_dir, _ = mixed_run
    mixed = load_tokenizer(run_dir / "models" / "tiny-init")
    maths = generate_suite("train", 24)
    texts = [lumos_generation_prompt(u) + c for t in maths for u, c in (planner_pair(t), grounder_pair(t))]
    maths_only = train_tokenizer(texts, 400)
    preamble = TOOL_PREAMBLES["qa"]
    assert len(mixed(preamble)["input_ids"]) < 0.9 * len(maths_only(preamble)["input_ids"])  # 246 vs 285 tokens


def test_every_set_of_both_families_is_evaluated_by_its_own_rule(mixed_run):
    run_dir, history = mixed_run
    for round_ in ("round0", "round1"):
        for split, (maths_set, qa_set) in SETS.items():
            block = history[round_][split]
            assert list(block["sets"]) == [maths_set, qa_set]
            assert block["families"] == {maths_set: "maths", qa_set: "qa"}
            maths, qa = block["sets"][maths_set], block["sets"][qa_set]
            for metrics in (maths, qa):
                assert metrics["n"] == 4 and 0 <= metrics["accuracy"] <= 1 and metrics["grounding_ppl"] > 1
                assert {"grounder_acc_gold_subgoals", "grounder_acc_blank_subgoals", "capability_gap"} <= set(metrics)
            assert "lumos_exact" in maths and "lumos_exact" not in qa
            assert block["average"]["accuracy"] == pytest.approx((maths["accuracy"] + qa["accuracy"]) / 2)
            assert "grounding_ppl" not in block["average"]
            assert block["family_average"]["qa"]["grounding_ppl"] == qa["grounding_ppl"]
    rows = _lines(run_dir / "round1_eval" / "heldout-qa-suite-heldout.predictions.jsonl")
    tasks = {t.id: t for t in generate_qa_suite("heldout", 4)}
    assert [r["id"] for r in rows] == list(tasks) and all(r["lumos_exact"] is None for r in rows)
    assert all(r["gold_answer"] == tasks[r["id"]].answer for r in rows)


def test_a_moat_round_scores_pairs_and_judges_qa_tasks(mixed_run):
    run_dir, _ = mixed_run
    train = load_sources(load_config("tiny", MIXED).data.train)
    qa_ids = {t.id for t in train if t.family == "qa"}
    scores = _lines(run_dir / "round1" / "scores.jsonl")
    assert [r["id"] for r in scores] == [t.id for t in train[:4] + train[24:26]]  # 6 tasks: each family's share
    assert all(s["mean"] > 0 and s["content"] > 0 for r in scores for s in r["scores"])
    pairs = _lines(run_dir / "round1" / "pairs.jsonl")
    assert {p["id"] for p in pairs} & qa_ids
    gold = {t.id: grounder_pair(t)[1] for t in train}
    verdicts = [v for v in _lines(run_dir / "round1" / "verdicts.jsonl") if v["id"] in qa_ids]
    assert len(verdicts) == 2 * 3  # K groundings of each QA task
    for verdict in verdicts:  # the execution critic keeps a grounding or corrects it with the gold plan
        assert verdict["actions"] == (verdict["generated"] if verdict["success"] else gold[verdict["id"]])
    premise = json.loads((run_dir / "round1" / "premise.json").read_text())
    assert premise["candidates"] == 18
    assert {f: p["candidates"] for f, p in premise["by_family"].items()} == {"maths": 12, "qa": 6}


def test_bundled_mixed_config_generates_and_trains_on_the_longest_gold_text():
    """tiny-mixed's limits hold the longest gold plan and actions, tokenized as a tiny run would (on fewer
    training texts than the config's, so with fewer merges and more tokens)."""
    config = load_config("tiny-mixed")
    train = generate_suite("train", 300) + generate_qa_suite("train", 150)
    texts = [lumos_generation_prompt(u) + c for t in train for u, c in (planner_pair(t), grounder_pair(t))]
    tok = train_tokenizer(texts, config.models.tiny.vocab_size)
    evaluated = load_sources(config.data.heldin + config.data.heldout)

    def longest(pair) -> tuple[int, int]:
        """The longest completion (with its EOS) and the longest whole example, in tokens."""
        users, completions = zip(*(pair(t) for t in evaluated))
        ends = [len(tok(c + EOS)["input_ids"]) for c in completions]
        wholes = [len(tok(lumos_generation_prompt(u) + c + EOS)["input_ids"]) for u, c in zip(users, completions)]
        return max(ends), max(wholes)

    (plan_end, plan_all), (ground_end, ground_all) = longest(planner_pair), longest(grounder_pair)
    assert plan_end <= config.eval.max_new_tokens_plan == config.moat.max_new_tokens_plan
    assert ground_end <= config.eval.max_new_tokens_ground == config.moat.max_new_tokens_ground
    assert max(plan_all, ground_all) <= min(config.planner_sft.max_length, config.grounder_sft.max_length)
    assert ground_end > 100  # QA actions: far past tiny's 64-token limit
    assert {s.kind for s in config.data.train} == {"suite", "qa_suite"}


def test_a_forced_resume_with_other_evaluation_sets_evaluates_them(mixed_run, tmp_path):
    """Stages a forced resume keeps stay kept, but an evaluation is redone once its sets change: round 0's
    numbers must be those of the sets the config now names."""
    import shutil

    from coalign.moat.evaluate import evaluate_run
    from coalign.training.setup import prepare_run

    run_dir, _ = mixed_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    fewer = {**MIXED, "data": {**MIXED["data"], "heldin": [{"kind": "suite", "split": "heldin", "n": 3}]}}
    config = load_config("tiny", fewer)
    run = prepare_run(config, copy, Console(quiet=True), force=True, trains=False)
    planner, grounder = (str(copy / "checkpoints" / f"{agent}_sft") for agent in ("planner", "grounder"))
    block = evaluate_run(run, config, planner, grounder, Console(quiet=True), name="round0_eval")["heldin"]
    assert list(block["sets"]) == ["suite-heldin"] and block["sets"]["suite-heldin"]["n"] == 3
    assert run.is_done("planner_sft")  # training stages are kept, as --force promises
