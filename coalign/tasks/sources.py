"""One entry point from a config's data source to task records."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from coalign.config import GENERATED_KINDS, DataSettings, DataSource
from coalign.core.errors import DataError, RunError, SkippedRows
from coalign.tasks import Task
from coalign.tasks.gsm8k import load_gsm8k
from coalign.tasks.hotpotqa import load_hotpotqa
from coalign.tasks.lumos import load_lumos_tasks
from coalign.tasks.maths_suite import generate_suite
from coalign.tasks.mind2web import load_mind2web
from coalign.tasks.qa_suite import generate_qa_suite
from coalign.tasks.shipped import PREFIX, shipped_file
from coalign.tasks.strategyqa import load_strategyqa
from coalign.tasks.svamp import load_svamp
from coalign.tasks.web_suite import generate_web_suite
from coalign.tasks.webshop import load_webshop

# gsm8k reads a file too; `load_source` gives it the source's subgoal style.
FILE_LOADERS: dict[str, Callable[[Path, SkippedRows | None], list[Task]]] = {
    "svamp": load_svamp,
    "strategyqa": load_strategyqa,
    "hotpotqa": load_hotpotqa,
    "mind2web": load_mind2web,
    "webshop": load_webshop,
}
GENERATORS: dict[str, Callable[[str, int, int], list[Task]]] = {
    "suite": generate_suite,
    "qa_suite": generate_qa_suite,
    "web_suite": generate_web_suite,
}


def load_source(source: DataSource, skipped: SkippedRows | None = None) -> list[Task]:
    """Tasks of one source, the first `n` when `n` is set.

    Bad rows raise DataError, or are recorded in `skipped` and left out when it is given. A file
    with no task left always raises: an empty dataset would otherwise fail far later, inside a trainer.
    A `shipped:` path is the package's copy, read only when its sha256 is the original's.
    """
    if source.kind in GENERATORS:
        return GENERATORS[source.kind](source.split, source.n, source.seed)
    before = len(skipped.errors) if skipped else 0
    path = source.path
    if path is not None and path.as_posix().startswith(PREFIX):
        path = shipped_file(path.as_posix().removeprefix(PREFIX))
    if source.kind == "gsm8k":
        tasks = load_gsm8k(path, skipped, source.subgoals)
    elif source.kind in FILE_LOADERS:
        tasks = FILE_LOADERS[source.kind](path, skipped)
    else:
        tasks = load_lumos_tasks(source.path, source.grounder_path, skipped)
    if not tasks:
        raise DataError(source.path, None, None, _no_tasks(skipped.errors[before:] if skipped else []), "no tasks")
    return tasks[: source.n] if source.n else tasks


FETCHED = {  # the command that writes a kind's files where the paper configs name them
    "lumos": "coalign data fetch lumos",
    **{kind: "coalign data fetch eval" for kind in ("gsm8k", "svamp", "strategyqa", "hotpotqa")},
}


def check_files(data: DataSettings, splits: Sequence[str]) -> None:
    """RunError naming the config key (`data.heldout[0].path`) of the first data file of `splits` that is not
    there, and a shipped file that is not the original (DataError), before a run folder is made: otherwise a
    missing test set is found only when the evaluation after training reads it. Rows are checked when loaded."""
    for split in splits:
        for i, source in enumerate(getattr(data, split)):
            for field in ("path", "grounder_path"):
                path = getattr(source, field)
                if path is None:
                    continue
                if path.as_posix().startswith(PREFIX):
                    shipped_file(path.as_posix().removeprefix(PREFIX))
                elif not path.exists():
                    fetch = f"; `{FETCHED[source.kind]}` downloads its files" if source.kind in FETCHED else ""
                    raise RunError(
                        f"data.{split}[{i}].{field}: {path}: no such file or folder (relative paths are from "
                        f"{Path.cwd()}){fetch}"
                    )


def check_rows(data: DataSettings, splits: Sequence[str]) -> None:
    """Read every row of the data files of `splits`, as the run will read them (`load_source`), so a bad row
    (DataError: file, line and field) or a file left with no task under `skip_bad_rows` stops the run before its
    folder is made, not when the evaluation after training reaches it. The generated sets have no rows to check."""
    for split in splits:
        for source in getattr(data, split):
            if source.kind not in GENERATED_KINDS:
                load_source(source, SkippedRows() if data.skip_bad_rows else None)


def _no_tasks(errors: list[DataError]) -> str:
    if not errors:
        return "no tasks: the file holds no rows; every data source needs at least one task"
    return f"no tasks: all {len(errors)} rows were bad and skipped (the first: {errors[0]})"


def source_name(source: DataSource) -> str:
    """A short label for tables: the suite split or the loader's kind."""
    if source.kind in GENERATED_KINDS:
        return f"{source.kind.replace('_', '-')}-{source.split}"
    return source.kind


def load_sources(sources: list[DataSource], skipped: SkippedRows | None = None) -> list[Task]:
    return [task for source in sources for task in load_source(source, skipped)]


RUN_FAMILIES = ("maths", "qa", "web")  # what training and evaluation run (web: Lumos's iterative formulation)
ROUND_FAMILIES = ("maths", "qa", "web")  # what MOAT rounds and the bench run (web: MOAT per turn)


def load_data(sources: list[DataSource], skip_bad_rows: bool) -> tuple[list[Task], dict]:
    """Tasks of `sources` for a run and the record it keeps of them: task count, rows skipped, per reason.

    Without `skip_bad_rows` the first bad row raises DataError, so the record then shows none skipped.
    Tasks of a family runs cannot handle raise RunError before any work starts.
    """
    skipped = SkippedRows()
    tasks = load_sources(sources, skipped if skip_bad_rows else None)
    families = sorted({t.family for t in tasks} - set(RUN_FAMILIES))
    if families:
        raise RunError(
            f"tasks of family {', '.join(families)} cannot be trained or evaluated (runs take "
            f"{', '.join(RUN_FAMILIES)})"
        )
    return tasks, {"tasks": len(tasks), **skipped.summary()}


def refuse_in_rounds(tasks: list[Task], what: str) -> None:
    """RunError when MOAT rounds (or the bench, which runs them) would get tasks of a family they cannot handle.

    Every family runs now: onetime tasks (maths, QA) as whole plans, web tasks per planner turn
    (`moat.units`); the guard stays for families added to `RUN_FAMILIES` before their rounds are built.
    """
    families = sorted({t.family for t in tasks} - set(ROUND_FAMILIES))
    if families:
        raise RunError(
            f"{what} cannot take tasks of family {', '.join(families)} yet (they take {', '.join(ROUND_FAMILIES)}); "
            "train and evaluate them with recipe lumos (`coalign train CONFIG`, `coalign eval CONFIG`)"
        )


def report_skipped(label: str, record: dict, console: Console) -> None:
    """One console line per loaded set that lost rows: how many, why, and the first bad row's location."""
    if record["skipped_rows"]:
        reasons = ", ".join(f"{reason} x{n}" for reason, n in record["by_reason"].items())
        line = f"{label}: skipped {record['skipped_rows']} bad rows ({reasons}); first: {record['examples'][0]}"
        console.print(f"[yellow]{escape(line)}[/yellow]")
