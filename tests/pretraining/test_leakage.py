"""The contamination check: tokenisations, the n-gram index, planted leaks, and the real corpus against
every bundled suite, PilotRL environment, GSM8K test and SVAMP."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from coalign.pretraining import leakage
from coalign.pretraining.corpus import CorpusSettings, generated_documents
from coalign.pretraining.leakage import (
    SKELETON_N,
    VERBATIM_N,
    corpus_index,
    leakage_report,
    normalize,
    overlap_report,
    probe_overlap,
    skeleton,
)
from coalign.tasks.maths_suite import NAMES, generate_suite

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
GSM8K_TRAIN = DATA / "gsm8k" / "train.jsonl"
REAL_SETS = ("gsm8k-test:question", "svamp:question")
# GSM8K's own train/test near-duplicates, measured with the whole train file in the corpus: test lines 582
# ("The first movie is 1 hour and 30 minutes long while the second..."), 603 ("...miles in 3 hours. At the
# same rate, how many additional hours would it take...") and 633 ("...bought stamps at the post office.
# Some of the stamps had a snowflake design...") share a 13-gram with a train problem. No generated
# document shares one with any GSM8K test or SVAMP question (measured with 200,000 documents).
GSM8K_TRAIN_TEST_OVERLAP = 3


# --------------------------------------------------------------------------- tokenisations


def test_normalize_keeps_lowercase_words_and_numbers() -> None:
    assert normalize("Hello, World! It's 3.5kg; R1 = Calculator(5 * 3)") == [
        "hello", "world", "it", "s", "3", "5", "kg", "r", "1", "calculator", "5", "3",
    ]  # fmt: skip
    assert normalize("  \n--  ") == []


def test_skeleton_replaces_numbers_and_names_but_not_sentence_starts() -> None:
    assert skeleton("On Tuesday, Nina baked 30 muffins. Zoe has 32 muffins.") == [
        "on", "NAME", "NAME", "baked", "#", "muffins", "zoe", "has", "#", "muffins",
    ]  # fmt: skip
    # A colon, a semicolon and a line break start sentences as a full stop does.
    assert skeleton("Subgoal 1: Add 9 to R2; Divide R3 by 4\nWhy?") == [
        "subgoal", "#", "add", "#", "to", "NAME", "#", "divide", "NAME", "#", "by", "#", "why",
    ]  # fmt: skip


def refill(text: str, shift: int) -> str:
    """The same template instance with other names (the suite's, rotated by `shift`) and other numbers."""
    text = re.sub(r"\b(" + "|".join(NAMES) + r")\b", lambda m: NAMES[(NAMES.index(m[0]) + shift) % len(NAMES)], text)
    return re.sub(r"\d+", lambda m: str(int(m[0]) + shift), text)


def test_skeleton_is_the_same_for_other_slot_fillers() -> None:
    for task in generate_suite("heldout", 20, seed=3):
        for shift in (1, 7):
            other = refill(task.question, shift)
            assert normalize(other) != normalize(task.question)
            original, refilled = skeleton(task.question), skeleton(other)
            assert len(original) == len(refilled)
            # Only a name that starts a sentence keeps its identity, and it is one of the suite's names.
            differ = [(a, b) for a, b in zip(original, refilled) if a != b]
            assert all(a.capitalize() in NAMES and b.capitalize() in NAMES for a, b in differ)


# --------------------------------------------------------------------------- the index


def brute_force_leaked(docs: list[str], items: list[str], n: int) -> int:
    grams = {tuple(tokens[i : i + n]) for tokens in map(normalize, docs) for i in range(len(tokens) - n + 1)}
    return sum(
        any(tuple(tokens[i : i + n]) in grams for i in range(len(tokens) - n + 1)) for tokens in map(normalize, items)
    )


def test_index_finds_exactly_the_shared_ngrams(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leakage, "_CHUNK", 7)  # many chunks, each made distinct on its own
    rng = random.Random(0)
    words = "a b c d e f".split()  # few words: many n-grams are shared, many are not
    docs = [" ".join(rng.choices(words, k=rng.randint(0, 12))) for _ in range(40)]
    items = [" ".join(rng.choices(words, k=rng.randint(0, 8))) for _ in range(200)]
    for n in (1, 3, 4, 5):
        report = probe_overlap(corpus_index(docs, n, skeletons=False), items)
        assert report["leaked"] == brute_force_leaked(docs, items, n)
        assert report["checked"] == sum(len(normalize(item)) >= n for item in items)
        assert 0 < report["leaked"] < report["items"]
        assert report["share"] == report["leaked"] / len(items)


def test_no_ngram_spans_two_documents_or_two_pieces() -> None:
    index = corpus_index(["one two three", "four five six"], 2, skeletons=False)
    assert probe_overlap(index, ["three four"])["leaked"] == 0
    assert probe_overlap(index, ["two three four"])["leaked"] == 1
    # A tuple is one item of several pieces: "one two" is inside a piece, "three four" only across two.
    assert probe_overlap(index, [("zero three", "four nine")]) == {
        "items": 1, "checked": 1, "leaked": 0, "share": 0.0, "examples": [],
    }  # fmt: skip
    assert probe_overlap(index, [("nine", "one two")])["examples"] == ["one two"]
    assert probe_overlap(index, [("one",), "two"])["checked"] == 0


# --------------------------------------------------------------------------- planted leaks


@pytest.fixture(scope="module")
def small_corpus() -> list[str]:
    return generated_documents(CorpusSettings(documents=3000), 0)[0]


def test_a_copied_heldout_question_is_caught(small_corpus: list[str]) -> None:
    tasks = generate_suite("heldout", 50, seed=0)
    questions = [task.question for task in tasks]
    planted = small_corpus + [f"Some page about plums.\n{questions[17]}\nThe answer is {tasks[17].answer}."]
    clean, leaky = corpus_index(small_corpus, VERBATIM_N, False), corpus_index(planted, VERBATIM_N, False)
    assert probe_overlap(clean, questions)["leaked"] == 0
    assert probe_overlap(leaky, questions)["leaked"] == 1
    assert probe_overlap(leaky, [questions[17]])["leaked"] == 1
    # The copy is an instance of its template too: the skeleton view finds it, and every other heldout
    # question it finds is of the same template.
    clean, leaky = corpus_index(small_corpus, SKELETON_N, True), corpus_index(planted, SKELETON_N, True)
    assert probe_overlap(clean, questions)["leaked"] == 0
    found = [task.meta["template"] for task in tasks if probe_overlap(leaky, [task.question])["leaked"]]
    assert tasks[17].meta["template"] in found and set(found) == {tasks[17].meta["template"]}


def test_a_template_instance_with_other_names_and_numbers_is_caught_by_its_skeleton(small_corpus: list[str]) -> None:
    task = generate_suite("heldout", 1, seed=0)[0]
    probes = {"heldout": [task.question]}
    planted = small_corpus + [refill(task.question, 5)]
    assert overlap_report(planted, probes, VERBATIM_N, skeletons=False)["sets"]["heldout"]["leaked"] == 0
    found = overlap_report(planted, probes, SKELETON_N, skeletons=True)["sets"]["heldout"]
    assert found["leaked"] == 1
    assert all("NAME" in gram or "#" in gram for gram in found["examples"])


# --------------------------------------------------------------------------- the real corpus


@pytest.fixture(scope="module")
def report() -> dict:
    """20,000 generated documents (with GSM8K train when ../shared has it) against 200 tasks of every suite
    split and 5 tasks of every environment set: ~15 s."""
    settings = CorpusSettings(documents=20_000, gsm8k_train=str(GSM8K_TRAIN) if GSM8K_TRAIN.is_file() else None)
    return leakage_report(settings, 0, DATA if DATA.is_dir() else None, tasks=200, env_tasks=5)


def test_no_bundled_suite_or_environment_leaks_into_the_corpus(report: dict) -> None:
    for view in ("verbatim", "skeleton"):
        sets = {name: s for name, s in report[view]["sets"].items() if name not in REAL_SETS}
        assert len(sets) == 3 * (3 * 3 + 1 + 4 * 2 + 2)  # 3 fields of 3 suites x 3 splits, maths near, 4 x 2 + 2 envs
        leaked = {name: s["examples"] for name, s in sets.items() if s["leaked"]}
        assert leaked == {}, f"{view} n-grams shared with the corpus: {leaked}"
    # The check is not empty: every question set has items long enough to check in the skeleton view.
    assert all(s["checked"] for name, s in report["skeleton"]["sets"].items() if name.endswith(":question"))


def test_gsm8k_test_and_svamp_overlap_is_gsm8ks_own(report: dict) -> None:
    if not all(path.is_file() for path in (GSM8K_TRAIN, DATA / "gsm8k" / "test.jsonl", DATA / "svamp" / "SVAMP.json")):
        pytest.skip(f"real GSM8K and SVAMP files not found under {DATA} (../shared/data beside the checkout)")
    sets = report["verbatim"]["sets"]
    assert sets["gsm8k-test:question"]["items"] == 1319 and sets["svamp:question"]["items"] == 1000
    assert sets["gsm8k-test:question"]["leaked"] <= GSM8K_TRAIN_TEST_OVERLAP
    assert sets["svamp:question"]["leaked"] == 0
    assert not set(REAL_SETS) & set(report["skeleton"]["sets"])  # real text: verbatim only
