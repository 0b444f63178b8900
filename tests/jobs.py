"""Job functions for the parallel-jobs tests, in a module that imports nothing heavy: each spawned job
process imports the module of its function, and a test module's imports (the trainers) take seconds."""

import os
import signal
import time
from pathlib import Path


def echo(text: str) -> str:
    print(f"job says {text}")
    return text.upper()


def timed(seconds: float) -> tuple[float, float]:
    start = time.time()
    time.sleep(seconds)
    return start, time.time()


def boom() -> None:
    raise ValueError("bad job")


def _await(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def boom_once_started(pid_file: Path) -> None:
    """Fail once the other job is running, so its cancellation stops a running job."""
    _await(pid_file)
    raise ValueError("bad job")


def killed_once_started(pid_file: Path) -> None:
    """Die by SIGKILL, as the out-of-memory killer ends a process, once the other job is running."""
    _await(pid_file)
    os.kill(os.getpid(), signal.SIGKILL)


def sleep_after_writing_pid(path: Path) -> None:
    """A long job that says which process runs it."""
    path.write_text(str(os.getpid()))
    time.sleep(300)


def devices_beside_another(folder: Path, name: str) -> str:
    """This process's CUDA_VISIBLE_DEVICES, returned once a second job has started beside this one (each writes
    its name into `folder`), so two such jobs surely ran in two processes at once."""
    devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    (folder / name).write_text(devices)
    deadline = time.monotonic() + 120
    while len(list(folder.iterdir())) < 2:
        if time.monotonic() > deadline:
            raise TimeoutError("no second job ran beside this one")
        time.sleep(0.05)
    return devices


def rank_and_size(folder: Path) -> tuple[str, str]:
    """(RANK, WORLD_SIZE) of the process that runs this job, each such process leaving its rank in `folder`."""
    rank, size = os.environ.get("RANK", "none"), os.environ.get("WORLD_SIZE", "none")
    (folder / f"rank{rank}-of-{size}").write_text(str(os.getpid()))
    return rank, size
