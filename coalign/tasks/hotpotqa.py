"""HotpotQA as shipped with Agent Lumos's evaluation (`test.json`: a JSON list of {question, answer, type}).

Lumos's copy is the HotpotQA dev set (7,405 questions) without its paragraphs: the question,
the gold answer text and the question type ("bridge" or "comparison"). No decomposition ships with
it, so tasks have no gold subgoals or actions; they serve evaluation (SQuAD exact match).
"""

from __future__ import annotations

from pathlib import Path

from coalign.errors import DataError
from coalign.tasks import Task
from coalign.tasks.jsonl import read_json, require, type_name

TYPES = ("bridge", "comparison")


def load_hotpotqa(path: str | Path) -> list[Task]:
    """Tasks with family "qa" and the gold answer text (scored by `metrics.squad_exact_match`).

    Errors name the file, the 1-based record index as the line, and the field.
    """
    path = Path(path)
    records = read_json(path)
    if not isinstance(records, list):
        raise DataError(path, None, None, f"expected a JSON list of HotpotQA records, got {type_name(records)}")
    return [_task(record, path, index) for index, record in enumerate(records, start=1)]


def _task(record: object, path: Path, index: int) -> Task:
    if not isinstance(record, dict):
        raise DataError(path, index, None, f"expected a JSON object, got {type_name(record)}")
    question = require(record, "question", str, path, index)
    answer = require(record, "answer", str, path, index)
    kind = require(record, "type", str, path, index)
    for field, text in (("question", question), ("answer", answer)):
        if not text.strip():
            raise DataError(path, index, field, "empty")
    if kind not in TYPES:
        raise DataError(path, index, "type", f"expected one of {', '.join(TYPES)}, got {kind!r}")
    return Task(
        id=f"hotpotqa-{index}",
        family="qa",
        dataset="hotpotqa",
        question=question.strip(),
        subgoals=(),
        actions=(),
        answer=answer.strip(),
        meta={"source": path.name, "type": kind},
    )
