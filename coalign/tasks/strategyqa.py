"""StrategyQA as shipped with Agent Lumos's evaluation (`test.json`: a JSON list of {question, answer: bool}).

Lumos's copy holds StrategyQA *train* questions (the official test set has no public answers), so
it overlaps the StrategyQA questions in Lumos's QA training data: a model tuned on that data has
seen these questions, and scores on this file overstate held-in accuracy. No decomposition ships
with it, so tasks have no gold subgoals or actions; they serve evaluation, not supervised training.
"""

from __future__ import annotations

from pathlib import Path

from coalign.core.errors import DataError, SkippedRows
from coalign.core.jsonl import convert_json_list, require, require_text, type_name
from coalign.formats.answers import strategyqa_gold_answer
from coalign.tasks import Task


def load_strategyqa(path: str | Path, skipped: SkippedRows | None = None) -> list[Task]:
    """Tasks with family "qa" and answer "yes"/"no" (scored by `formats.answers.strategyqa_match`).

    Errors name the file, the 1-based record index as the line, and the field; a bad record raises
    DataError, or is recorded in `skipped` and left out. A file that is not a JSON list always raises.
    """
    return convert_json_list(path, "StrategyQA records", _task, skipped)


def _task(path: Path, index: int, record: object) -> Task:
    if not isinstance(record, dict):
        raise DataError(path, index, None, f"expected a JSON object, got {type_name(record)}", "not an object")
    question = require_text(record, "question", path, index)
    answer = require(record, "answer", bool, path, index)
    return Task(
        id=f"strategyqa-{index}",
        family="qa",
        dataset="strategyqa",
        question=question.strip(),
        subgoals=(),
        actions=(),
        answer=strategyqa_gold_answer(answer),
        meta={"source": path.name},
    )
