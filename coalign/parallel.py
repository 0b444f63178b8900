"""Independent jobs on separate CPU cores, side by side, each with its own log.

A tiny model's training step barely gains from a second torch thread, so two jobs with one
thread each finish at least as soon as the same jobs one after another with two threads
(`benchmarks/training_speed.py`: 1.02x-1.14x, process start included). Each job runs in a
spawned process (no state shared with the parent) and writes
its terminal output to a log file, so progress bars of parallel jobs do not garble each other;
the parent shows one progress bar over the jobs.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coalign.agents import progress_bar


@dataclass(frozen=True)
class Job:
    """A picklable call (a module-level function and its arguments) with a log file for its output."""

    name: str
    fn: Callable[..., Any]
    args: tuple = ()
    log: Path | None = None


def _run_logged(job: Job, threads: int) -> Any:
    import torch

    torch.set_num_threads(threads)
    if job.log is None:
        return job.fn(*job.args)
    job.log.parent.mkdir(parents=True, exist_ok=True)
    with open(job.log, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        fd_out, fd_err = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1)  # library progress bars write to the file descriptors, not sys.stdout
        os.dup2(log.fileno(), 2)
        try:
            return job.fn(*job.args)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(fd_out, 1)
            os.dup2(fd_err, 2)
            os.close(fd_out)
            os.close(fd_err)


def run_jobs(jobs: Sequence[Job], workers: int, desc: str) -> list[Any]:
    """Results of `jobs` in order; with `workers` > 1 they run in that many processes, cores split evenly.

    A failing job raises in the parent with its log's path in the message.
    """
    if not jobs:
        return []
    workers = max(1, min(workers, len(jobs)))
    if workers == 1:  # in this process, its own progress bars on the terminal
        return [job.fn(*job.args) for job in jobs]
    threads = max(1, (os.cpu_count() or 1) // workers)
    results: list[Any] = [None] * len(jobs)
    with progress_bar() as bar:
        task = bar.add_task(f"{desc} ({workers} processes, logs in the run folders)", total=len(jobs))
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            futures = {pool.submit(_run_logged, job, threads): i for i, job in enumerate(jobs)}
            for future in as_completed(futures):
                i = futures[future]
                try:
                    results[i] = future.result()
                except Exception as err:
                    where = f" (log: {jobs[i].log})" if jobs[i].log else ""
                    raise RuntimeError(f"job {jobs[i].name} failed: {err}{where}") from err
                bar.advance(task)
    return results
