"""The console every command and job prints to.

Output that is not a terminal (a pipe, a file, a job's log, a test) is never hard-wrapped at a made-up
width, so a message a user may grep (a path, a line number, a count) stays on one line; on a terminal,
rich wraps at the terminal's width as usual.
"""

from __future__ import annotations

from rich.console import Console

from coalign import ranks


def make_console(**options) -> Console:
    """A rich Console (`options` as Console's) that soft-wraps when its output is not a terminal; in a
    multi-process run only the main rank's prints (the others run the same steps)."""
    console = Console(**{"quiet": not ranks.is_main(), **options})
    if not console.is_terminal:
        console.soft_wrap = True
    return console
