"""One entry point from a config's data source to task records."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from coalign.config import DataSource
from coalign.tasks import Task
from coalign.tasks.gsm8k import load_gsm8k
from coalign.tasks.hotpotqa import load_hotpotqa
from coalign.tasks.lumos import load_lumos_rows, tasks_from_rows
from coalign.tasks.qa_suite import generate_qa_suite
from coalign.tasks.strategyqa import load_strategyqa
from coalign.tasks.suite import generate_suite
from coalign.tasks.svamp import load_svamp


FILE_LOADERS: dict[str, Callable[[Path], list[Task]]] = {
    "gsm8k": load_gsm8k,
    "svamp": load_svamp,
    "strategyqa": load_strategyqa,
    "hotpotqa": load_hotpotqa,
}


def load_source(source: DataSource) -> list[Task]:
    """Tasks of one source, the first `n` when `n` is set."""
    if source.kind == "suite":
        return generate_suite(source.split, source.n, source.seed)
    if source.kind == "qa_suite":
        return generate_qa_suite(source.split, source.n, source.seed)
    if source.kind in FILE_LOADERS:
        tasks = FILE_LOADERS[source.kind](source.path)
    else:
        tasks = tasks_from_rows(load_lumos_rows(source.path), load_lumos_rows(source.grounder_path))
    return tasks[: source.n] if source.n else tasks


def source_name(source: DataSource) -> str:
    """A short label for tables: the suite split or the loader's kind."""
    if source.kind in ("suite", "qa_suite"):
        return f"{source.kind.replace('_', '-')}-{source.split}"
    return source.kind


def load_sources(sources: list[DataSource]) -> list[Task]:
    return [task for source in sources for task in load_source(source)]
