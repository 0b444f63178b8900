"""The pretraining corpus: real text that is no evaluation set, and generated documents, from one seed.

The same settings and seed give the same documents, in the same order, byte for byte: the base model's
recipe records both and the corpus's hash, so `coalign pretrain` can make the shipped base again.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from pathlib import Path

from pydantic import Field, field_validator

from coalign.config import Settings
from coalign.core.errors import DataError
from coalign.core.runs import file_sha256
from coalign.pretraining.generators import KINDS

DEFAULT_MIX = {
    "story": 3.0,
    "program": 3.0,
    "copy": 2.0,
    "lookup": 1.5,
    "relations": 1.0,
    "plan": 0.5,
    "page": 0.5,
    "dialogue": 1.5,
    "lumos": 1.0,
}


class CorpusSettings(Settings):
    """What goes into the corpus. `gsm8k_train`: GSM8K's *train* split (jsonl with question/answer), whose
    worked solutions and calculator annotations are real arithmetic language; never its test split."""

    documents: int = Field(200_000, ge=1, description="generated documents")
    mix: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_MIX))
    gsm8k_train: str | None = None
    gsm8k_repeats: int = Field(1, ge=0, description="times each GSM8K train document appears")

    @field_validator("mix")
    @classmethod
    def _known_kinds(cls, mix: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(mix) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown document kinds {unknown}; known: {sorted(KINDS)}")
        if any(w < 0 for w in mix.values()) or not any(mix.values()):
            raise ValueError("weights are >= 0 and at least one is > 0")
        return mix


def gsm8k_documents(path: str | Path) -> list[str]:
    """Question and worked solution of each GSM8K train row; a bad row is an error naming file and line."""
    docs = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                question, answer = row["question"], row["answer"]
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise DataError(
                    path, number, None, f"expected a JSON object with 'question' and 'answer' ({err})"
                ) from None
            for key, value in (("question", question), ("answer", answer)):
                if not isinstance(value, str):
                    raise DataError(path, number, key, f"expected text, got {type(value).__name__}", "wrong type")
            docs.append(f"Question: {question.strip()}\nAnswer: {answer.strip()}\n")
    return docs


def generated_documents(settings: CorpusSettings, seed: int) -> tuple[list[str], list[str]]:
    """The generated documents and the kind of each; document i depends only on (seed, i)."""
    kinds = [k for k, w in settings.mix.items() if w > 0]
    weights = [settings.mix[k] for k in kinds]
    picker = random.Random(f"corpus-kinds-{seed}")
    chosen = picker.choices(kinds, weights=weights, k=settings.documents)
    docs = [KINDS[kind](random.Random(f"corpus-{seed}-{i}")) for i, kind in enumerate(chosen)]
    return docs, chosen


def build_corpus(settings: CorpusSettings, seed: int) -> tuple[list[str], dict]:
    """All documents, shuffled with the seed, and a record of where they came from."""
    docs, kinds = generated_documents(settings, seed)
    counts = Counter(kinds)
    sources: dict[str, str] = {}
    if settings.gsm8k_train and settings.gsm8k_repeats:
        path = Path(settings.gsm8k_train)
        if not path.is_file():
            raise DataError(path, None, "corpus.gsm8k_train", "not a file", "missing file")
        real = gsm8k_documents(path)
        docs += real * settings.gsm8k_repeats
        counts["gsm8k_train"] = len(real) * settings.gsm8k_repeats
        sources["gsm8k_train"] = file_sha256(path)
    random.Random(f"corpus-order-{seed}").shuffle(docs)
    record = {
        "seed": seed,
        "documents": len(docs),
        "characters": sum(map(len, docs)),
        "kinds": dict(sorted(counts.items())),
        "source_sha256": sources,
        "corpus_sha256": text_sha256(docs),
    }
    return docs, record


def text_sha256(docs: list[str]) -> str:
    digest = hashlib.sha256()
    for doc in docs:
        digest.update(doc.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()
