"""Jobs as Ray tasks (`coalign bench --executor ray`, the default when RAY_ADDRESS is set), on a Ray cluster or on
a Ray instance started on this machine.

Each job is one task that asks for its cores, its GPUs and its memory (`Job.memory_bytes`). Ray starts it when a
node has all of them free, so a job that does not fit beside the running ones waits for them instead of being
killed for memory halfway, and Ray pins the task's GPUs (CUDA_VISIBLE_DEVICES). The task runs its job as a local
worker process does (`parallel._run_logged`: its output into the job's log, as k processes under `launches(k)`), so
it writes the same run folder; the parent shows the jobs from their logs (`JobBoard`). On several nodes the bench
folder must be on a file system that every node mounts at the same path: jobs write their run folders and logs
there, and the parent reads them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

from rich.console import Console

from coalign.core.errors import RunError
from coalign.core.parallel import REFRESH_S, Job, JobBoard, _run_logged, executed_by, visible_gpus


def default_executor() -> str:
    """ray when RAY_ADDRESS names a cluster (Ray's own convention for where a program's tasks go), else local."""
    return "ray" if os.environ.get("RAY_ADDRESS") else "local"


@contextlib.contextmanager
def executing(name: str) -> Iterator[None]:
    """Inside, `run_jobs` runs its jobs with the executor `name`: local (this machine's processes, as it does) or
    ray (`run_on_ray`)."""
    if name not in ("local", "ray"):
        raise RunError(f"the executor (--executor) is local or ray, got {name!r}")
    with executed_by(run_on_ray) if name == "ray" else contextlib.nullcontext():
        yield


# Ray runs its tasks at nice 15 (its `worker_niceness`) so that they leave the CPU to its own processes. A job is
# the work itself: on a machine shared with other work (a test suite, a second bench) nice 15 left it a few percent
# of a core, and a bench of seconds took minutes. The instance started here runs them as the local executor does;
# a cluster's setting is its operator's (RAY_worker_niceness=0 in the environment of `ray start`).
AT_NORMAL_PRIORITY = {"worker_niceness": 0}
REACH_S = 10  # seconds a cluster's address has to accept a connection


def connect() -> ModuleType:
    """Ray, connected once a process: to the cluster at RAY_ADDRESS, else to a new instance on this machine with the
    GPUs the local executor would use (`visible_gpus`), running its tasks at normal priority. Ray's logging to the
    terminal is off: the jobs' output is in their logs, and Ray's own would break up the live table."""
    try:
        import ray
    except ImportError:
        raise RunError("the Ray executor needs Ray: pip install -e '.[ray]'") from None
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        quiet = {"log_to_driver": False, "include_dashboard": False, "logging_level": logging.ERROR}
        try:
            if address:
                _check_reachable(address)
                ray.init(address=address, **quiet)
            else:  # "local": not a cluster that `ray start` left on this machine, which ray.init() would join
                ray.init(address="local", num_gpus=len(visible_gpus()), _system_config=AT_NORMAL_PRIORITY, **quiet)
        except ConnectionError as err:
            raise RunError(f"cannot reach the Ray cluster at RAY_ADDRESS={address}: {err}") from None
    return ray


def _check_reachable(address: str) -> None:
    """A RAY_ADDRESS of host:port must accept a connection: Ray itself retries one that does not for minutes,
    printing warnings, before it gives up. ("auto", and ray:// clients, are left to Ray.)"""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "://" in address:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_S).close()  # [::1]:6379 too
    except OSError as err:
        raise RunError(f"cannot reach the Ray cluster at RAY_ADDRESS={address}: {err}") from None


def cluster_workers(procs: int) -> int:
    """Jobs side by side on the cluster by default, as on one machine: one per `procs` GPUs where it has GPUs, else
    one per `procs` CPU cores."""
    resources = connect().cluster_resources()
    return max(1, int(resources.get("GPU", 0) or resources.get("CPU", 1)) // procs)


def _job_task(job: Job, threads: int, procs: int) -> Iterator[Any]:
    """One job as a Ray task: a generator whose first item tells the parent the job has started (Ray may hold a
    task back until its resources are free), and whose second is the job's result."""
    import ray

    yield None
    gpus = [str(gpu) for gpu in ray.get_gpu_ids()]
    seen = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if gpus and seen.split(",") != gpus:  # e.g. RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES: it would share GPU 0
        raise RunError(f"Ray gave this job GPUs {','.join(gpus)}, but it sees CUDA_VISIBLE_DEVICES={seen!r}")
    yield _run_logged(job, threads, procs)


@functools.cache
def _remote_job() -> Any:
    """`_job_task` as a Ray remote function, each job in a fresh worker process (`max_calls=1`, Ray's own default
    for GPU tasks), as each local job runs in one (`parallel.run_jobs`): a process that ran a job keeps what its
    allocator held and, on GPUs, its CUDA context and torch's cached memory, which the next job would start beside.
    Importing torch and the trainers again takes seconds; a job, minutes."""
    import ray

    return ray.remote(max_calls=1)(_job_task)


def run_on_ray(jobs: Sequence[Job], workers: int, procs: int, desc: str, console: Console) -> list[Any]:
    """Results of `jobs` in order, each run as a Ray task (`_job_task`) with the cluster's cores split among
    `workers`, `procs` GPUs where the cluster has GPUs, and its `memory_bytes`; submitted heaviest first (Ray
    starts the tasks it holds back of one shape in the order they came). A failing job cancels the others, and
    raises naming its log. A job no node could ever hold raises before any starts, rather than wait forever."""
    ray = connect()
    nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
    cores = int(ray.cluster_resources().get("CPU", 1))
    threads = max(1, min(cores // workers, max(int(node.get("CPU", 0)) for node in nodes)))
    gpus = procs if any(node.get("GPU") for node in nodes) else 0
    order = sorted(range(len(jobs)), key=lambda i: -jobs[i].weight)  # stable: ties in order
    for i in order:
        need = {"CPU": threads, "GPU": gpus, "memory": jobs[i].memory_bytes or 0}
        if not any(all(node.get(key, 0) >= amount for key, amount in need.items()) for node in nodes):
            raise RunError(
                f"job {jobs[i].name} needs {threads} CPUs, {gpus} GPUs and {need['memory'] / 2**30:.1f} GiB of "
                "memory on one node; no node of the Ray cluster has that much"
            )
    tasks = {}
    for i in order:
        options = {"num_cpus": threads, "num_gpus": gpus}
        if jobs[i].memory_bytes:
            options["memory"] = jobs[i].memory_bytes
        tasks[_remote_job().options(**options).remote(jobs[i], threads, procs)] = i
    results: list[Any] = [None] * len(jobs)
    with JobBoard(jobs, f"{desc} (Ray)", console) as board:
        while tasks:
            ready, _ = ray.wait(list(tasks), num_returns=1, timeout=REFRESH_S, fetch_local=False)
            for task in ready:
                i = tasks[task]
                try:
                    value = ray.get(next(task))
                except Exception as err:
                    for other in tasks:  # force: a job inside a long torch op would not see a KeyboardInterrupt
                        if other is not task:
                            ray.cancel(other, force=True)
                    if i not in board.started:
                        board.start(i)
                    board.finish(i, failed=True)
                    where = f" (log: {jobs[i].log})" if jobs[i].log else ""
                    cause = getattr(err, "cause", None) or err  # a task's exception, not Ray's wrapping of it
                    raise RuntimeError(f"job {jobs[i].name} failed: {cause}{where}") from err
                if i in board.started:
                    results[i] = value
                    board.finish(i)
                    del tasks[task]
                else:
                    board.start(i)
            board.refresh()
    return results
