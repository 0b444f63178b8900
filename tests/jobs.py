"""Job functions for the parallel-jobs tests, in a module that imports nothing heavy: each spawned job
process imports the module of its function, and a test module's imports (the trainers) take seconds."""

import os
import time
from pathlib import Path


def echo(text: str) -> str:
    print(f"job says {text}")
    return text.upper()


def boom() -> None:
    raise ValueError("bad job")


def sleep_after_writing_pid(path: Path) -> None:
    """A long job that says which process runs it."""
    path.write_text(str(os.getpid()))
    time.sleep(300)
