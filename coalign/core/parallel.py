"""Independent jobs on separate CPU cores or GPUs, side by side, each with its own log.

A tiny model's training step barely gains from a second torch thread, so two jobs with one
thread each finish at least as soon as the same jobs one after another with two threads
(`benchmarks/training_speed.py`: 1.02x-1.14x, process start included). Each job runs in a
spawned process (no state shared with the parent) and writes
its terminal output to a log file, so progress bars of parallel jobs do not garble each other;
the parent shows the jobs side by side (`JobBoard`: each job's latest progress line, read from its log).
On a GPU machine each of those processes sees GPUs of its own (`gpu_slots`), so side-by-side jobs do not
all land on the first. Inside `launches(k)`, each job runs as k processes, as `torchrun` launches a run
(`_launch`): one job then trains on k GPUs. Inside `executed_by(executor)`, `executor` runs them instead: Ray
tasks (`core.ray_jobs`), on a Ray cluster or a Ray instance on this machine, each asking for its cores, GPUs and
memory.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from coalign.core import ranks
from coalign.core.console import make_console
from coalign.core.errors import RunError

REFRESH_S = 1.0  # how often the live table rereads the logs
PARENT_CHECK_S = 1.0  # how often a worker checks that the process that started it is still there
EXIT_WAIT_S = 30.0  # how long a job's process may take to leave, once done or told to stop


@dataclass(frozen=True)
class Job:
    """A picklable call (a module-level function and its arguments) with a log file for its output.
    `weight`: its expected length relative to the others; side by side the heaviest waiting job starts first,
    so the last to start is a short one and no long job runs on alone at the end. `memory_bytes`: the memory it
    holds at its peak (`memory_estimate`): a job that does not fit beside the running ones waits for them rather
    than being killed for memory, on this machine (`run_jobs`) as on Ray (its memory request); None asks for none."""

    name: str
    fn: Callable[..., Any]
    args: tuple = ()
    log: Path | None = None
    weight: float = 1.0
    memory_bytes: int | None = None


TRAINING_BYTES_PER_PARAMETER = 16  # full fine-tuning in fp32: weights, gradients and Adam's two moments
PROCESS_BYTES = 1 << 30  # a job's process before its model: torch, transformers, a tokenizer, the data


def memory_estimate(
    parameters: int, bytes_per_parameter: float = TRAINING_BYTES_PER_PARAMETER, overhead: int = PROCESS_BYTES
) -> int:
    """Bytes a job training a model of `parameters` holds at its peak, for `Job.memory_bytes`: its training state
    plus `overhead` for the process and its activations. The parameter term is a floor: a small model's
    activations can outweigh it (a SmolLM2 SFT's logits over a 49,152-token vocabulary), so a caller that has
    measured a job's peak passes more overhead, or that peak itself."""
    return int(parameters * bytes_per_parameter) + overhead


# runs the jobs of `run_jobs` elsewhere than this machine's processes (`executed_by`): the jobs, the workers, the
# processes per job, the board's title and console; the results in job order
Executor = Callable[[Sequence[Job], int, int, str, Console], list[Any]]
_procs_per_job = 1  # the processes `run_jobs` launches each job as (`launches`)
_executor: Executor | None = None


@contextlib.contextmanager
def launches(procs: int) -> Iterator[None]:
    """Inside, `run_jobs` runs each job as `procs` processes launched on this machine (`_launch`), as `torchrun
    --nproc_per_node procs` runs `coalign train`, with `procs` GPUs of its own where there are GPUs: a bench's
    runs (a 7B model's SFT, DPO, evaluation) then take several GPUs each, as launched runs do."""
    global _procs_per_job
    before, _procs_per_job = _procs_per_job, procs
    try:
        yield
    finally:
        _procs_per_job = before


@contextlib.contextmanager
def executed_by(executor: Executor) -> Iterator[None]:
    """Inside, `run_jobs` hands its jobs to `executor` (`ray_jobs.run_on_ray`: each job a Ray task)."""
    global _executor
    before, _executor = _executor, executor
    try:
        yield
    finally:
        _executor = before


def machine_memory() -> int:
    """Bytes of memory this machine gives its jobs: its physical memory, or its container's limit where lower
    (cgroup v2 or v1)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            total = min(total, int(Path(limit).read_text()))  # "max" (no limit) is a ValueError
    return total


def _next_fitting(waiting: list[int], jobs: Sequence[Job], held: int, free: bool, budget: int) -> int | None:
    """The first of `waiting` (heaviest first) whose `memory_bytes` fits in `budget` beside the `held` bytes of the
    jobs running, as Ray's scheduler admits a task by its memory request; where memory does not bind (`free`: none
    running, and a job larger than the budget then has the machine to itself; or jobs on GPUs) the first. None:
    each must wait."""
    for i in waiting:
        if free or held + (jobs[i].memory_bytes or 0) <= budget:
            return i
    return None


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (indices or UUIDs): the variable's list
    where it is set, else every GPU's index; none on a machine without."""
    import torch

    count = torch.cuda.device_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [name.strip() for name in listed.split(",")] if listed is not None else [str(i) for i in range(count)]
    return names[:count]


def gpu_slots(workers: int, per_job: int) -> list[str]:
    """CUDA_VISIBLE_DEVICES for each of `workers` side-by-side processes, `per_job` GPUs each, taken in turn from
    `visible_gpus` (more workers than GPUs share them round the list); empty on a machine without GPUs. A
    RunError when one job would need more GPUs than the machine shows."""
    visible = visible_gpus()
    if not visible:
        return []
    if per_job > len(visible):
        raise RunError(f"{per_job} processes per job need {per_job} GPUs each; this machine shows {len(visible)}")
    return [",".join(visible[(w * per_job + j) % len(visible)] for j in range(per_job)) for w in range(workers)]


def _exit_when(gone: Callable[[], bool], name: str) -> None:
    """Leave this process (a thread checks every PARENT_CHECK_S) once `gone()`, rather than go on training
    unseen beside the next run for as long as its job lasts."""

    def watch() -> None:
        while not gone():
            time.sleep(PARENT_CHECK_S)
        os._exit(1)

    threading.Thread(target=watch, name=name, daemon=True).start()


def _job_process(job: Job, threads: int, procs: int, devices: str | None, parent: int, out: Connection) -> None:
    """A side-by-side job's process of its own (`run_jobs`): it leaves with its parent, sees the GPUs `devices`
    names (set before anything it runs starts CUDA: a spawned process starts with none), and sends back
    (True, its result) or (False, the error it raised)."""
    _exit_when(lambda: os.getppid() != parent, "exit-with-parent")
    if devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = devices
    try:
        outcome = (True, _run_logged(job, threads, procs))
    except Exception as err:
        outcome = (False, err)
    try:
        out.send(outcome)
    except Exception as err:  # pickling fails before anything is written
        ok, value = outcome
        text = f"its result could not be sent back ({err})" if ok else f"{type(value).__name__}: {value}"
        out.send((False, RuntimeError(text)))
    out.close()


def _ended_how(code: int | None) -> str:
    """How a job's process that sent nothing back ended, from its exit code (a signal's, negative)."""
    if code is None or code >= 0:
        return f"exited with code {code} before sending its result"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    oom = " (what the kernel's out-of-memory killer sends: see dmesg)" if -code == signal.SIGKILL else ""
    return f"was killed by {name}{oom}"


def _outcome(process: multiprocessing.process.BaseProcess, reader: Connection) -> tuple[bool, Any]:
    """What a finished job's process sent back, else how it ended; the process joined (killed if it hangs on
    its way out after sending)."""
    try:
        sent = reader.recv() if reader.poll() else None
    except (EOFError, OSError):  # it died in the middle of sending
        sent = None
    _stop([process], EXIT_WAIT_S)
    reader.close()
    return sent if sent is not None else (False, RuntimeError(f"its process {_ended_how(process.exitcode)}"))


def _stop(processes: Iterable[multiprocessing.process.BaseProcess], wait_s: float = 0.0) -> None:
    """Each process ended: waited for up to `wait_s`, then SIGTERM, then SIGKILL where that is not enough (its
    launched ranks, `_launched`, leave with it)."""
    processes = list(processes)
    for process in processes:
        process.join(wait_s)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(EXIT_WAIT_S)
        if process.is_alive():
            process.kill()
            process.join()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:  # no such process (or another user's now holds its number)
        return False
    return True


def _launch(job: Job, procs: int, threads: int) -> Any:
    """`job` run by `procs` processes that `torch.distributed.run` starts on this machine (a free port of its own,
    so launches side by side do not meet; the GPUs this process sees, LOCAL_RANK picking each rank's), each
    calling it as every rank of a launched `coalign train` runs its stages (`ranks`: the work shared, the main
    rank writes); the main rank's result comes back through a file. They print to this process's output (a
    job's log) and leave when this process is gone."""
    with tempfile.TemporaryDirectory(prefix="coalign-job-") as folder:
        call, result = Path(folder, "call.pkl"), Path(folder, "result.pkl")
        call.write_bytes(pickle.dumps((job.fn, job.args)))
        each = max(1, threads // procs)
        env = {**os.environ, "OMP_NUM_THREADS": str(each)}
        print(f"{job.name}: launched as {procs} processes (torch.distributed.run, OMP_NUM_THREADS={each})", flush=True)
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs),
            "-m", "coalign.core.parallel", str(call), str(result), str(os.getpid()),
        ]  # fmt: skip
        sys.stdout.flush()
        sys.stderr.flush()
        done = subprocess.run(command, env=env)
        if done.returncode:
            raise RuntimeError(f"its {procs} processes (torch.distributed.run) exited with code {done.returncode}")
        return pickle.loads(result.read_bytes())


def _launched(call: str, result: str, watched: str) -> None:
    """One rank of a launched job (`_launch`): it runs the job and, on the main rank, writes its result."""
    _exit_when(lambda: not _alive(int(watched)), "exit-with-launcher")
    fn, args = pickle.loads(Path(call).read_bytes())
    value = fn(*args)
    if ranks.is_main():
        Path(result).write_bytes(pickle.dumps(value))


def _run(job: Job, threads: int, procs: int) -> Any:
    return job.fn(*job.args) if procs == 1 else _launch(job, procs, threads)


def _run_logged(job: Job, threads: int, procs: int) -> Any:
    import torch

    torch.set_num_threads(threads)
    if job.log is None:
        return _run(job, threads, procs)
    job.log.parent.mkdir(parents=True, exist_ok=True)
    with open(job.log, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        fd_out, fd_err = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1)  # library progress bars write to the file descriptors, not sys.stdout
        os.dup2(log.fileno(), 2)
        try:
            return _run(job, threads, procs)
        except BaseException:
            traceback.print_exc()  # into the job's log: the parent learns of the failure only when it is collected
            raise
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(fd_out, 1)
            os.dup2(fd_err, 2)
            os.close(fd_out)
            os.close(fd_err)


class JobBoard:
    """What the jobs are doing, shown while they run: on a terminal one live table (per job its state, time
    and the latest progress line of its log), else one line per job start and finish, so a log or a pipe
    holds no redrawn lines."""

    def __init__(self, jobs: Sequence[Job], desc: str, console: Console) -> None:
        self.jobs, self.desc, self.console = jobs, desc, console
        self.started: dict[int, float] = {}
        self.finished: dict[int, tuple[float, bool]] = {}  # job -> (seconds, failed)
        self.memory_waits: set[int] = set()  # jobs said to wait for memory (`wait_for_memory`)
        self.live = Live(console=console, auto_refresh=False) if console.is_terminal else None

    def __enter__(self) -> JobBoard:
        if self.live:
            self.live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.live:
            self.refresh()
            self.live.stop()

    def start(self, i: int) -> None:
        self.started[i] = time.monotonic()
        if not self.live:
            where = f" (log: {self.jobs[i].log})" if self.jobs[i].log else ""
            self.console.print(f"{self.desc}: {self.jobs[i].name} started{where}", markup=False, highlight=False)

    def wait_for_memory(self, i: int, held: int, budget: int) -> None:
        """Say once that job `i` waits, though a worker is free, for running jobs' memory to come back."""
        if i in self.memory_waits:
            return
        self.memory_waits.add(i)
        gib, need = 1 << 30, self.jobs[i].memory_bytes or 0
        line = (
            f"{self.desc}: {self.jobs[i].name} waits for memory (it needs {need / gib:.1f} GiB; "
            f"running jobs hold {held / gib:.1f} of this machine's {budget / gib:.1f})"
        )
        self.console.print(line, markup=False, highlight=False)

    def finish(self, i: int, failed: bool = False) -> None:
        seconds = time.monotonic() - self.started[i]
        self.finished[i] = (seconds, failed)
        if not self.live:
            line = f"{self.desc}: {self.jobs[i].name} {'failed' if failed else 'finished'} after {seconds:.0f} s"
            self.console.print(line, markup=False, highlight=False)

    def refresh(self) -> None:
        if self.live:
            self.live.update(self.pipe_table(), refresh=True)

    def pipe_table(self) -> Table:
        done = len(self.finished)
        table = Table(title=f"{self.desc}: {done}/{len(self.jobs)} done", title_justify="left", expand=True)
        table.add_column("job", no_wrap=True)
        table.add_column("state", no_wrap=True)
        table.add_column("time", justify="right", no_wrap=True)
        table.add_column("latest", no_wrap=True, overflow="ellipsis", ratio=1)
        now = time.monotonic()
        for i, job in enumerate(self.jobs):
            if i in self.finished:
                seconds, failed = self.finished[i]
                state, latest = ("failed" if failed else "done"), ""
            elif i in self.started:
                seconds, state, latest = now - self.started[i], "running", latest_line(job.log)
            else:
                seconds, state, latest = 0.0, "waiting", ""
            table.add_row(job.name, state, f"{seconds:.0f} s" if i in self.started else "", Text(latest))
        return table


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def latest_line(log: Path | None, tail: int = 4096) -> str:
    """The last non-empty line a job wrote to its log, progress bars' carriage-return redraws included."""
    if log is None or not log.exists():
        return ""
    with open(log, "rb") as handle:
        handle.seek(max(0, log.stat().st_size - tail))
        text = handle.read().decode("utf-8", "replace")
    lines = [_ANSI.sub("", part).strip() for part in re.split(r"[\r\n]", text)]
    return next((line for line in reversed(lines) if line), "")


def run_jobs(jobs: Sequence[Job], workers: int, desc: str, console: Console | None = None) -> list[Any]:
    """Results of `jobs` in order; with `workers` > 1 they run in that many processes, cores split evenly and
    GPUs too (`gpu_slots`: each process its own), a job starting when one finishes (the heaviest first), shown on
    `console` (`JobBoard`); inside `launches(k)` each job runs as k processes (`_launch`); inside
    `executed_by(executor)`, `executor` runs them (`ray_jobs.run_on_ray`: Ray tasks, `workers` splitting the
    cluster's cores).

    A failing job raises in the parent at once, with its log's path in the message, and stops the jobs running
    beside it (as a Ray bench cancels its others; the stages they finished stay, for a rerun); a job's process
    that dies (the out-of-memory killer's SIGKILL, say) is such a failure, named so. Only `workers` = 1 runs jobs
    in this process: with more, each job, even a lone one (a bench's one cold-start evaluation), runs in a fresh
    process of its own, so the memory it held (models, a vLLM engine, what the allocator keeps) goes back when it
    ends, rather than staying beside the next job. On a CPU machine a job starts only where its `memory_bytes` fit
    beside the running jobs' in `machine_memory` (else it waits, and says so; alone, it runs whatever its size); on
    a GPU machine, where each job trains in GPUs of its own, they do not wait for host memory.
    """
    if not jobs:
        return []
    alone = workers <= 1
    workers, procs = max(1, min(workers, len(jobs))), _procs_per_job
    if _executor is not None:
        return _executor(jobs, workers, procs, desc, console or make_console())
    threads = max(1, (os.cpu_count() or 1) // workers)
    if alone and procs == 1:  # in this process, its own progress bars on the terminal
        return [job.fn(*job.args) for job in jobs]
    slots = gpu_slots(workers, procs)  # a job needing more GPUs than there are stops before any starts
    if alone:  # launched one after another, printing to this terminal
        return [_launch(job, procs, threads) for job in jobs]
    results: list[Any] = [None] * len(jobs)
    waiting = sorted(range(len(jobs)), key=lambda i: -jobs[i].weight)  # stable: ties in order
    running: dict[int, tuple[multiprocessing.process.BaseProcess, Connection, str | None]] = {}
    context, budget, on_gpus = multiprocessing.get_context("spawn"), machine_memory(), bool(slots)
    with JobBoard(jobs, f"{desc} ({workers} processes)", console or make_console()) as board:
        try:
            while waiting or running:
                while waiting and len(running) < workers:
                    held = sum(jobs[j].memory_bytes or 0 for j in running)
                    i = _next_fitting(waiting, jobs, held, not running or on_gpus, budget)
                    if i is None:
                        board.wait_for_memory(waiting[0], held, budget)
                        break
                    waiting.remove(i)
                    devices = slots.pop(0) if slots else None  # a GPU machine: one slot per job running
                    reader, writer = context.Pipe(duplex=False)
                    args = (jobs[i], threads, procs, devices, os.getpid(), writer)
                    process = context.Process(target=_job_process, args=args, name=f"coalign job {jobs[i].name}")
                    process.start()
                    writer.close()  # the child's now: its end closing tells a death from a result still to come
                    running[i] = (process, reader, devices)
                    board.start(i)
                handles = [handle for process, reader, _ in running.values() for handle in (reader, process.sentinel)]
                ready = set(wait(handles, timeout=REFRESH_S))
                for i, (process, reader, devices) in list(running.items()):
                    if reader not in ready and process.sentinel not in ready:
                        continue
                    del running[i]
                    if devices is not None:
                        slots.append(devices)
                    ok, value = _outcome(process, reader)
                    board.finish(i, failed=not ok)
                    if not ok:
                        where = f" (log: {jobs[i].log})" if jobs[i].log else ""
                        raise RuntimeError(f"job {jobs[i].name} failed: {value}{where}") from value
                    results[i] = value
                board.refresh()
        finally:  # a failure, or Ctrl-C: the jobs still running stop now
            _stop(process for process, _, _ in running.values())
    return results


if __name__ == "__main__":  # a rank of a launched job (`_launch`)
    _launched(*sys.argv[1:])
