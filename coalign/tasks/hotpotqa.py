"""HotpotQA as shipped with Agent Lumos's evaluation (`test.json`: a JSON list of {question, answer, type}).

Lumos's copy is the HotpotQA dev set (7,405 questions) without its paragraphs: the question,
the gold answer text and the question type ("bridge" or "comparison"). No decomposition ships with
it, so tasks have no gold subgoals or actions; they serve evaluation (SQuAD exact match).
"""

from __future__ import annotations

from pathlib import Path

from coalign.core.errors import DataError, SkippedRows
from coalign.core.jsonl import convert_json_list, require, require_text, type_name
from coalign.tasks import Task

TYPES = ("bridge", "comparison")


def load_hotpotqa(path: str | Path, skipped: SkippedRows | None = None) -> list[Task]:
    """Tasks with family "qa" and the gold answer text (scored by `formats.answers.squad_exact_match`).

    Errors name the file, the 1-based record index as the line, and the field; a bad record raises
    DataError, or is recorded in `skipped` and left out. A file that is not a JSON list always raises.
    """
    return convert_json_list(path, "HotpotQA records", _task, skipped)


def _task(path: Path, index: int, record: object) -> Task:
    if not isinstance(record, dict):
        raise DataError(path, index, None, f"expected a JSON object, got {type_name(record)}", "not an object")
    question = require_text(record, "question", path, index)
    answer = require_text(record, "answer", path, index)
    kind = require(record, "type", str, path, index)
    if kind not in TYPES:
        raise DataError(path, index, "type", f"expected one of {', '.join(TYPES)}, got {kind!r}", "unknown type")
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
