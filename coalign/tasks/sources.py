"""One entry point from a config's data source to task records."""

from __future__ import annotations

from coalign.config import DataSource
from coalign.tasks import Task
from coalign.tasks.gsm8k import load_gsm8k
from coalign.tasks.lumos import load_lumos_rows, tasks_from_rows
from coalign.tasks.suite import generate_suite
from coalign.tasks.svamp import load_svamp


def load_source(source: DataSource) -> list[Task]:
    """Tasks of one source, the first `n` when `n` is set."""
    if source.kind == "suite":
        return generate_suite(source.split, source.n, source.seed)
    if source.kind == "gsm8k":
        tasks = load_gsm8k(source.path)
    elif source.kind == "svamp":
        tasks = load_svamp(source.path)
    else:
        tasks = tasks_from_rows(load_lumos_rows(source.path), load_lumos_rows(source.grounder_path))
    return tasks[: source.n] if source.n else tasks


def source_name(source: DataSource) -> str:
    """A short label for tables: the suite split or the loader's kind."""
    return f"suite-{source.split}" if source.kind == "suite" else source.kind


def load_sources(sources: list[DataSource]) -> list[Task]:
    return [task for source in sources for task in load_source(source)]
