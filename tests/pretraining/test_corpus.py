"""The pretraining corpus: reproducible from its seed, mixed as configured, strict about GSM8K rows, and
generators that always give text."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from coalign.core.errors import DataError
from coalign.pretraining.corpus import DEFAULT_MIX, CorpusSettings, build_corpus, gsm8k_documents, text_sha256
from coalign.pretraining.generators import KINDS, story


def write_gsm8k(path: Path, rows: list[object]) -> Path:
    path.write_text(
        "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows), encoding="utf-8"
    )
    return path


def test_same_seed_same_corpus_other_seed_other_corpus() -> None:
    settings = CorpusSettings(documents=400)
    docs, record = build_corpus(settings, 7)
    again, record_again = build_corpus(settings, 7)
    assert docs == again and record == record_again
    assert record["corpus_sha256"] == text_sha256(docs)
    other, record_other = build_corpus(settings, 8)
    assert record_other["corpus_sha256"] != record["corpus_sha256"]
    assert set(other) != set(docs)
    assert record["documents"] == 400 and record["characters"] == sum(map(len, docs))


def test_a_longer_corpus_starts_with_the_same_generated_documents() -> None:
    """Document i depends only on (seed, i), so a small corpus is a sample of the large one (the leakage
    test's 20,000 documents are among the 200,000 it was measured on)."""
    small, _ = build_corpus(CorpusSettings(documents=300), 0)
    large, _ = build_corpus(CorpusSettings(documents=3000), 0)
    assert set(small) <= set(large)


def test_mix_weights_are_respected() -> None:
    _, record = build_corpus(CorpusSettings(documents=8000), 0)
    total = sum(DEFAULT_MIX.values())
    assert set(record["kinds"]) == set(DEFAULT_MIX)
    for kind, weight in DEFAULT_MIX.items():
        assert record["kinds"][kind] / 8000 == pytest.approx(weight / total, abs=0.015), kind
    _, record = build_corpus(CorpusSettings(documents=2000, mix={"copy": 3.0, "story": 1.0, "page": 0.0}), 0)
    assert set(record["kinds"]) == {"copy", "story"}
    assert record["kinds"]["copy"] / 2000 == pytest.approx(0.75, abs=0.03)


@pytest.mark.parametrize("mix", [{"poem": 1.0}, {"story": 0.0}, {"story": -1.0, "copy": 1.0}])
def test_bad_mix_is_refused(mix: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        CorpusSettings(mix=mix)


def test_gsm8k_train_documents_join_the_corpus(tmp_path: Path) -> None:
    path = write_gsm8k(tmp_path / "train.jsonl", [
        {"question": " Ann has 3 pens. How many? ", "answer": "3\n#### 3"}, "", {"question": "Q2", "answer": "A2"},
    ])  # fmt: skip
    assert gsm8k_documents(path) == [
        "Question: Ann has 3 pens. How many?\nAnswer: 3\n#### 3\n",
        "Question: Q2\nAnswer: A2\n",
    ]
    docs, record = build_corpus(CorpusSettings(documents=50, gsm8k_train=str(path), gsm8k_repeats=2), 0)
    assert record["documents"] == 54 and record["kinds"]["gsm8k_train"] == 4
    assert docs.count("Question: Q2\nAnswer: A2\n") == 2
    assert set(record["source_sha256"]) == {"gsm8k_train"}


@pytest.mark.parametrize(
    ("row", "field", "kind"),
    [
        ('{"question": "Q"', None, "invalid value"),  # not JSON
        ('["Q", "A"]', None, "invalid value"),  # not an object
        ({"question": "Q"}, None, "invalid value"),  # no answer
        ({"question": "Q", "answer": 12}, "answer", "wrong type"),
        ({"question": None, "answer": "A"}, "question", "wrong type"),
    ],
)
def test_a_bad_gsm8k_row_names_file_and_line(tmp_path: Path, row: object, field: str | None, kind: str) -> None:
    path = write_gsm8k(tmp_path / "train.jsonl", [{"question": "Q", "answer": "A"}, "", row])
    with pytest.raises(DataError) as info:
        build_corpus(CorpusSettings(documents=10, gsm8k_train=str(path)), 0)
    error = info.value
    assert (error.path, error.line, error.field, error.kind) == (str(path), 3, field, kind)
    assert str(error).startswith(f"{path}, line 3: ")


def test_a_missing_gsm8k_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not a file") as info:
        build_corpus(CorpusSettings(documents=10, gsm8k_train=str(tmp_path / "absent.jsonl")), 0)
    assert info.value.kind == "missing file" and info.value.field == "corpus.gsm8k_train"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_generator_gives_text_for_any_seed(kind: str) -> None:
    docs = [KINDS[kind](random.Random(f"{kind}-{seed}")) for seed in range(1000)]
    assert all(isinstance(doc, str) and doc.strip() and doc.endswith("\n") for doc in docs)
    assert len(set(docs)) > 975  # seeded, not constant


def test_story_solutions_are_correct_arithmetic() -> None:
    """Each calculator annotation `<<a op b=c>>` is right, each step starts from the last result, and the
    stated answer is the last result: the corpus teaches arithmetic, so its arithmetic must be right."""
    for seed in range(300):
        doc = story(random.Random(seed))
        steps = re.findall(r"<<(\d+)([-+*/])(\d+)=(\d+)>>", doc)
        assert steps
        value = None
        for a, op, b, c in steps:
            a, b, c = int(a), int(b), int(c)
            assert value in (None, a)
            assert {"+": a + b, "-": a - b, "*": a * b, "/": a / b}[op] == c >= 0
            value = c
        assert doc.endswith(f"The answer is {value}.\n")
