"""StrategyQA as shipped with Agent Lumos's evaluation (`test.json`: a JSON list of {question, answer: bool}).

Lumos's copy holds StrategyQA *train* questions (the official test set has no public answers), so
it overlaps the StrategyQA questions in Lumos's QA training data: a model tuned on that data has
seen these questions, and scores on this file overstate held-in accuracy. No decomposition ships
with it, so tasks have no gold subgoals or actions; they serve evaluation, not supervised training.
"""

from __future__ import annotations

from pathlib import Path

from coalign.errors import DataError
from coalign.metrics import strategyqa_gold_answer
from coalign.tasks import Task
from coalign.tasks.jsonl import read_json, require, type_name


def load_strategyqa(path: str | Path) -> list[Task]:
    """Tasks with family "qa" and answer "yes"/"no" (scored by `metrics.strategyqa_match`).

    Errors name the file, the 1-based record index as the line, and the field.
    """
    path = Path(path)
    records = read_json(path)
    if not isinstance(records, list):
        raise DataError(path, None, None, f"expected a JSON list of StrategyQA records, got {type_name(records)}")
    return [_task(record, path, index) for index, record in enumerate(records, start=1)]


def _task(record: object, path: Path, index: int) -> Task:
    if not isinstance(record, dict):
        raise DataError(path, index, None, f"expected a JSON object, got {type_name(record)}")
    question = require(record, "question", str, path, index)
    answer = require(record, "answer", bool, path, index)
    if not question.strip():
        raise DataError(path, index, "question", "empty")
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
