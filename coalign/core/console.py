"""The console every command and job prints to, and the progress bars of long steps.

Output that is not a terminal (a pipe, a file, a job's log, a test) is never hard-wrapped at a made-up
width, so a message a user may grep (a path, a line number, a count) stays on one line; on a terminal,
rich wraps at the terminal's width as usual.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from coalign.core import ranks


def make_console(**options) -> Console:
    """A rich Console (`options` as Console's) that soft-wraps when its output is not a terminal; in a
    multi-process run only the main rank's prints (the others run the same steps)."""
    console = Console(**{"quiet": not ranks.is_main(), **options})
    if not console.is_terminal:
        console.soft_wrap = True
    return console


def progress_bar() -> "Progress | NoBar":
    """A bar of the run's progress; in a multi-process run only the main rank shows one, counting its own share
    of the work."""
    if not ranks.is_main():
        return NoBar()
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=False
    )


class NoBar:
    """A progress bar that shows nothing."""

    def __enter__(self) -> "NoBar":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def add_task(self, *args, **kwargs) -> int:
        return 0

    def advance(self, *args) -> None:
        return None
