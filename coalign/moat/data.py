"""The task data of a lumos or moat run: its splits, loaded and recorded in the run folder, and the training
tasks a MOAT round works on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from coalign.config import RunConfig
from coalign.core.runs import Run, read_json, write_json
from coalign.tasks import Task
from coalign.tasks.sources import load_data, report_skipped
from coalign.training.setup import check_run, open_run


def start_run(
    config: RunConfig,
    run_dir: str | Path,
    console: Console,
    force: bool = False,
    refuse: Callable[[list[Task]], None] | None = None,
) -> tuple[Run, list[Task]]:
    """A lumos or moat run's start, and its training tasks: every check (`check_run`, the rows of the evaluation
    files among them), the training rows read and checked, the recipe's own checks of the tasks (`refuse`), and
    only then the run folder, with the tasks' record in data.json. So a start that fails leaves no folder behind,
    and a bad row anywhere stops it before any stage trains."""
    decided = check_run(config)
    train, record = load_data(config.data.train, config.data.skip_bad_rows)
    if refuse is not None:
        refuse(train)
    run = open_run(config, run_dir, console, force, True, decided)
    report_skipped("train", record, console)
    record_split(run, "train", record)
    return run, train


def load_split(run: Run, config: RunConfig, sources: list, label: str, console: Console) -> list[Task]:
    """Tasks of `sources`; rows skipped under `data.skip_bad_rows` are reported and recorded in data.json."""
    tasks, record = load_data(sources, config.data.skip_bad_rows)
    report_skipped(label, record, console)
    record_split(run, label, record)
    return tasks


def record_split(run: Run, label: str, record: dict) -> None:
    """A split's load record (sources, rows skipped) in the run's data.json."""
    path = run.path("data.json")
    saved = read_json(path) if path.exists() else {}
    if saved.get(label) != record:  # a resumed run rewrites nothing it already holds
        write_json(path, {**saved, label: record})


def round_tasks(config: RunConfig, train: list[Task]) -> list[Task]:
    """The training tasks a round works on: the first `moat.tasks` (all when unset), in train order.

    With several task families, each family's first tasks in proportion to its share of train (the
    remainder to the families first seen), so a mixed run's rounds are not all of the family listed first.
    """
    n = config.moat.tasks
    if not n or n >= len(train):
        return train
    counts = Counter(t.family for t in train)  # in order of first appearance
    quota = {family: n * c // len(train) for family, c in counts.items()}
    for family in list(counts)[: n - sum(quota.values())]:
        quota[family] += 1
    taken: Counter[str] = Counter()
    out = []
    for task in train:
        if taken[task.family] < quota[task.family]:
            taken[task.family] += 1
            out.append(task)
    return out
