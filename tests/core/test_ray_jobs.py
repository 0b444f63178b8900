"""Bench jobs as Ray tasks (`core.ray_jobs`), really run: on a Ray cluster started here (`ray start --head` on
127.0.0.1, 2 CPUs and 2 logical GPUs), each job on GPUs of its own, a job of 2 GPUs as one task of 2 processes, a
failed job cancelling the rest, memory requests that keep jobs apart. (`coalign bench --executor ray`, on a Ray
instance of its own, its jobs launched as 2 processes each, is tested in test_parallel.py against one process's bench.)
The job functions below run in Ray's workers, which import this module: it imports nothing heavy at the top."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coalign.core.errors import RunError
from coalign.core.parallel import Job, _alive, launches, memory_estimate, run_jobs
from coalign.core.ray_jobs import default_executor, executing
from tests.conftest import RAY_ENV
from tests.jobs import boom_once_started, sleep_after_writing_pid, timed

pytestmark = pytest.mark.slow  # every test here trains, launches processes or runs a cluster

# Everything on 127.0.0.1 (on Linux Ray binds to the machine's address unless told it is not a cluster), no token
# written to ~/.ray (nothing beyond this machine reaches 127.0.0.1), nothing sent to Ray's usage statistics: set by
# conftest.py for the whole session, since vLLM's tests import Ray first in a shared worker.
MEMORY = 1 << 30  # the cluster's memory resource: two jobs asking 600 MiB each cannot run side by side


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def ray_folder() -> Iterator[Path]:
    """A folder for a Ray instance's sessions, removed after: short, since Ray's socket paths are limited, and not
    /tmp/ray, where `ray start` would leave its address for every later `ray.init()` on this machine to find."""
    folder = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The address of a Ray cluster started for this module, which RAY_ADDRESS names meanwhile; this process
    joins it at its first Ray job. Stopped by its own process (`ray start --block`), not by `ray stop`, which
    would stop every Ray instance of the machine."""
    with contextlib.ExitStack() as stack:
        patch = stack.enter_context(pytest.MonkeyPatch.context())
        for key, value in RAY_ENV.items():  # before Ray is imported: it reads them once
            patch.setenv(key, value)
        import ray  # make install installs it: a missing Ray fails here, it is not skipped

        folder = stack.enter_context(ray_folder())
        address = f"127.0.0.1:{_free_port()}"
        with open(folder / "head.log", "w") as out:
            head = subprocess.Popen(
                [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
                 "--port", address.split(":")[1], "--node-ip-address", "127.0.0.1", "--temp-dir", str(folder),
                 "--num-cpus", "2", "--num-gpus", "2", "--memory", str(MEMORY), "--object-store-memory",
                 str(100 << 20), "--include-dashboard", "false"],
                stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "RAY_worker_niceness": "0"},  # as connect()'s own
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while "Ray runtime started" not in (folder / "head.log").read_text():
                assert head.poll() is None and time.monotonic() < deadline, (folder / "head.log").read_text()
                time.sleep(0.2)
            patch.setenv("RAY_ADDRESS", address)
            yield address
        finally:
            ray.shutdown()
            head.terminate()
            head.wait(60)


def gpus_beside_another(folder: Path, name: str) -> tuple[str, list[str]]:
    """This task's CUDA_VISIBLE_DEVICES and Ray's GPU ids for it, once a second such job runs beside it."""
    import ray

    (folder / name).write_text("")
    deadline = time.monotonic() + 60
    while len(list(folder.iterdir())) < 2:
        assert time.monotonic() < deadline, "no second job ran beside this one"
        time.sleep(0.05)
    return os.environ["CUDA_VISIBLE_DEVICES"], [str(gpu) for gpu in ray.get_gpu_ids()]


def rank_and_devices() -> tuple[str, str, str]:
    return os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["CUDA_VISIBLE_DEVICES"]


def where_it_ran(i: int) -> tuple[int, str, str]:
    import ray

    context = ray.get_runtime_context()
    return i, context.gcs_address, context.get_node_id()


def test_jobs_get_gpus_of_their_own_and_a_job_of_two_gpus_is_one_task_of_two_processes(cluster, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    jobs = [Job(f"g{i}", gpus_beside_another, (marks, f"g{i}"), tmp_path / f"g{i}.log") for i in range(2)]
    with executing("ray"):
        seen = run_jobs(jobs, workers=2, desc="gpus")
        assert sorted(seen) == [("0", ["0"]), ("1", ["1"])]  # Ray pinned one GPU each, a different one
        with launches(2):  # the main rank's result: both ranks of the one task see both of its GPUs
            ranks = run_jobs([Job("pair", rank_and_devices, (), tmp_path / "pair.log")], 1, "pair")
        assert ranks == [("0", "2", "0,1")]


def test_a_bench_joins_the_cluster_at_ray_address(cluster, tmp_path):
    from coalign.cli import _default_workers

    assert default_executor() == "ray"
    assert (_default_workers(1, "ray"), _default_workers(2, "ray")) == (2, 1)  # one job per GPU of the cluster
    jobs = [Job(f"where {i}", where_it_ran, (i,), tmp_path / f"{i}.log", weight=i) for i in range(3)]
    with executing("ray"):
        ran = run_jobs(jobs, 2, "where")  # submitted heaviest (last) first
    assert [i for i, _, _ in ran] == [0, 1, 2]  # the results in job order
    assert {gcs for _, gcs, _ in ran} == {cluster} and len({node for _, _, node in ran}) == 1


def test_a_failed_job_cancels_the_rest_and_names_its_log(cluster, tmp_path):
    pid_file = tmp_path / "sleeper.pid"
    jobs = [
        Job("sleeper", sleep_after_writing_pid, (pid_file,), tmp_path / "sleeper.log"),
        Job("bad", boom_once_started, (pid_file,), tmp_path / "bad.log"),
    ]
    with executing("ray"), pytest.raises(RuntimeError, match=r"^job bad failed: bad job \(log: .*bad\.log\)$"):
        run_jobs(jobs, 2, "failing")
    assert "ValueError: bad job" in (tmp_path / "bad.log").read_text()  # its traceback, as a local job leaves
    deadline = time.monotonic() + 30
    while _alive(int(pid_file.read_text())):  # the sleeper's worker is killed, not left to sleep on
        assert time.monotonic() < deadline, "the other job still runs"
        time.sleep(0.1)


def test_jobs_that_do_not_fit_in_memory_side_by_side_run_one_after_the_other(cluster, tmp_path):
    assert memory_estimate(135_000_000) == 135_000_000 * 16 + (1 << 30)  # SmolLM2-135M: 3.0 GiB, a floor
    half = 600 << 20
    jobs = [Job(f"m{i}", timed, (0.5,), tmp_path / f"m{i}.log", memory_bytes=half) for i in range(2)]
    with executing("ray"):
        (start0, end0), (start1, end1) = run_jobs(jobs, workers=2, desc="memory")  # cores for both at once
        assert end0 <= start1 or end1 <= start0
        with pytest.raises(RunError, match="job huge needs 2 CPUs, 1 GPUs and 2.0 GiB of memory on one node"):
            run_jobs([Job("huge", timed, (0.0,), memory_bytes=2 * MEMORY)], 2, "huge")


def test_the_instance_started_here_runs_jobs_at_the_priority_of_the_bench(tmp_path):
    """Ray runs tasks at nice 15 by default; beside other work (a test suite's other workers) that left a job a few
    percent of a core, and a bench of 25 s ran past 5 minutes. The instance `connect` starts keeps the bench's."""
    script = (
        "import os\n"
        "from coalign.core.parallel import Job, run_jobs\n"
        "from coalign.core.ray_jobs import executing\n"
        "with executing('ray'):\n"
        "    print('niceness', *run_jobs([Job('nice', os.nice, (0,))], 1, 'nice'))\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"} | RAY_ENV
    with ray_folder() as folder:
        done = subprocess.run([sys.executable, "-c", script], env={**env, "RAY_TMPDIR": str(folder)},
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == f"niceness {os.nice(0)}"


def test_a_cluster_address_nothing_listens_on_is_an_error_at_once(monkeypatch):
    """Ray itself retries an unreachable RAY_ADDRESS for minutes; the bench says so before asking it."""
    import ray

    from coalign.core.ray_jobs import connect

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a new process, not this module's cluster's
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_free_port()}")  # free: nothing listens there
    start = time.monotonic()
    with pytest.raises(RunError, match=r"cannot reach the Ray cluster at RAY_ADDRESS=127\.0\.0\.1:\d+: "):
        connect()
    assert time.monotonic() - start < 10


def test_the_ray_executor_without_ray_says_how_to_install_it(monkeypatch):
    from coalign.core.ray_jobs import connect

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(RunError, match=r"pip install -e '\.\[ray\]'"):
        connect()
    with pytest.raises(RunError, match="local or ray, got 'rey'"), executing("rey"):
        pass


def test_a_grpo_job_with_its_engine_is_estimated_above_its_measured_peak(monkeypatch):
    """Two smol-pilotrl GRPO jobs (their vLLM engines in their processes) were killed side by side on a 24 GiB
    machine, and one alone peaked at 19.6 GB; two of its SFT jobs (about 5 GB each) ran there side by side."""
    from coalign.config import load_config
    from coalign.models import vllm_engine
    from coalign.pilotrl import bench
    from coalign.training.setup import job_memory

    monkeypatch.setattr(vllm_engine, "on_cpu", lambda: True)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    config = load_config("smol-pilotrl")
    sft, grpo = (job_memory(bench.variant_config(config, variant, 0)) for variant in ("adaplan", "pilotrl"))
    assert 2 * sft < 24 * 2**30 < 2 * grpo and grpo > 19.6e9
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "6")  # the engine's cache, as the engine will be given it
    assert job_memory(bench.variant_config(config, "pilotrl", 0)) == grpo + 4 * 2**30
    monkeypatch.setattr(vllm_engine, "on_cpu", lambda: False)  # on a GPU the engine holds GPU memory
    assert job_memory(bench.variant_config(config, "pilotrl", 0)) < grpo


def test_a_bench_asks_ray_for_the_memory_its_model_trains_in():
    """Each bench job asks for its run's peak (`training.setup.job_memory`): a SmolLM2 job near the 8.3 GB a smol
    MOAT job was measured at, so that on a 24 GB machine a third waits; a tiny-base job a fraction of that."""
    from coalign.config import load_config
    from coalign.pilotrl import bench
    from coalign.training.setup import job_memory

    smol, tiny = job_memory(load_config("smol")), job_memory(load_config("tiny"))
    assert 7.5e9 < smol < 9.5e9 and 3 * smol > 24e9 and tiny < smol / 4
    assert job_memory(load_config("smol", {"planner_sft": {"batch_size": 8, "grad_accum": 1}})) > smol
    seen = []
    config = load_config("tiny-pilotrl")

    def capture(jobs, workers, desc):
        seen.extend(jobs)
        raise SystemExit  # the jobs are what is checked, not their runs

    with pytest.MonkeyPatch.context() as patch, pytest.raises(SystemExit):
        patch.setattr(bench, "run_jobs", capture)
        bench.run_pilotrl_bench(config, Path(tempfile.mkdtemp()), [0], ["adaplan"], 1, None)
    assert [job.memory_bytes for job in seen] == [job_memory(bench.variant_config(config, "adaplan", 0))]
