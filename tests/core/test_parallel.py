"""Jobs side by side on a GPU machine, each process on GPUs of its own, and jobs launched as several processes
(`coalign bench --procs-per-job`) or run as Ray tasks (`--executor ray`), which write what the same jobs write in
one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rich.console import Console

from coalign.cli import _default_workers
from coalign.config import config_to_yaml, load_config
from coalign.core import parallel
from coalign.core.errors import RunError
from coalign.core.parallel import Job, gpu_slots, launches, run_jobs
from coalign.moat.bench import run_bench
from tests.conftest import RAY_ENV
from tests.core.test_ray_jobs import ray_folder
from tests.jobs import boom, devices_beside_another, rank_and_size
from tests.moat.test_moat import MOAT


@pytest.fixture
def gpus(monkeypatch):
    """Pretend this machine has `n` GPUs."""

    def have(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)

    return have


def test_each_side_by_side_process_gets_gpus_of_its_own(gpus, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus(8)
    assert gpu_slots(8, 1) == [str(i) for i in range(8)]
    assert gpu_slots(4, 2) == ["0,1", "2,3", "4,5", "6,7"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,GPU-abc")  # what the machine's owner left visible
    gpus(3)
    assert gpu_slots(2, 1) == ["3", "5"]
    assert gpu_slots(4, 1) == ["3", "5", "GPU-abc", "3"]  # more workers than GPUs: shared in turn
    with pytest.raises(RunError, match="2 processes per job need 2 GPUs each; this machine shows 1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
        gpus(1)
        gpu_slots(1, 2)
    gpus(0)
    assert gpu_slots(4, 1) == []


def test_a_bench_defaults_to_a_job_per_gpu(gpus, monkeypatch):
    """A GPU machine runs one job per GPU (or per `--procs-per-job` GPUs), not one job with the rest idle; a CPU
    machine one per core."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus(7)
    assert (_default_workers(), _default_workers(2), _default_workers(8)) == (7, 3, 1)
    gpus(0)
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert (_default_workers(), _default_workers(2)) == (16, 8)


@pytest.mark.slow
def test_jobs_side_by_side_run_on_different_gpus(gpus, monkeypatch, tmp_path):
    """Each worker process sets its CUDA_VISIBLE_DEVICES before its jobs start CUDA: two jobs running at once see
    different GPUs of those visible (here indices 3 and 5 of the machine's). Each trains in GPUs of its own, so
    host memory they would not fit in side by side on a CPU does not keep them apart."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setattr(parallel, "machine_memory", lambda: 1 << 30)
    gpus(2)
    jobs = [
        Job(f"g{i}", devices_beside_another, (tmp_path, f"g{i}"), tmp_path.parent / f"g{i}.log", memory_bytes=600 << 20)
        for i in range(2)
    ]
    assert sorted(run_jobs(jobs, workers=2, desc="gpus")) == ["3", "5"]


@pytest.mark.slow
def test_a_job_launched_as_two_processes_runs_on_both_and_returns_the_main_one_s_result(tmp_path):
    ran = tmp_path / "ran"
    ran.mkdir()
    with launches(2):
        assert run_jobs([Job("ranks", rank_and_size, (ran,))], workers=1, desc="launched") == [("0", "2")]
        with pytest.raises(RuntimeError, match=r"job bad failed: its 2 processes .* exited with code 1 \(log: "):
            run_jobs([Job("bad", boom, (), tmp_path / "bad.log"), Job("ok", rank_and_size, (ran,))], 2, "launched")
    assert sorted(p.name for p in ran.iterdir()) == ["rank0-of-2", "rank1-of-2"]  # both ranks ran it
    assert "ValueError: bad job" in (tmp_path / "bad.log").read_text()  # the ranks' output: the job's log


def _shape(value):
    """A results tree with its numbers left out: which keys hold what."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items() if k not in ("wall_seconds", "machine")}
    return type(value).__name__


# What a shell a user types `coalign bench` into holds none of: an earlier test in this worker may have left them
# (accelerate sets RANK, WORLD_SIZE and MASTER_PORT=29500 where a process group exists, e.g. a vLLM engine's), and
# jobs side by side that inherit them each start a process group on that one port
LAUNCH_VARIABLES = ("RAY_ADDRESS", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(scope="module")
def one_process_bench(tmp_path_factory) -> tuple[Path, Path]:
    """`coalign bench` of the tiny config's Lumos recipe, one seed, in this process: the config file, and the bench
    folder that a bench launched as several processes, or run through Ray, must write again."""
    root = tmp_path_factory.mktemp("bench")
    config = load_config("tiny", {**MOAT, "name": "launched"})
    path = root / "bench.yaml"
    path.write_text(config_to_yaml(config))
    run_bench(config, root / "one", [0], ["lumos"], workers=1, console=Console(quiet=True))
    return path, root / "one"


@pytest.mark.slow
def test_a_bench_through_ray_of_jobs_launched_as_two_processes_writes_what_one_process_writes(
    tmp_path: Path, one_process_bench
):
    """`coalign bench --executor ray --procs-per-job 2` without RAY_ADDRESS starts Ray on this machine (no GPUs
    here) and runs the cold start's SFTs, its evaluation and the Lumos rounds as Ray tasks, each task launching its
    job as 2 processes (gloo): the run folders, stages and results one process writes, plus each job's log (a lone
    local job prints to the terminal). One bench covers both paths: a Ray task runs its job as a local worker
    process does (`_run_logged`), launch included; a launch alone is tested above."""
    path, one = one_process_bench
    two = tmp_path / "two"
    args = ["bench", str(path), "--run-dir", str(two), "--seeds", "0", "--variants", "lumos", "--workers", "1"]
    with ray_folder() as folder, open(tmp_path / "out.txt", "w") as out:
        env = {key: value for key, value in os.environ.items() if key not in LAUNCH_VARIABLES} | RAY_ENV
        try:
            code = subprocess.run(
                [sys.executable, "-m", "coalign.cli", *args, "--procs-per-job", "2", "--executor", "ray"],
                env={**env, "RAY_TMPDIR": str(folder)}, stdout=out, stderr=out, timeout=420,
            ).returncode  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.fail(f"the bench ran past 7 minutes; what it printed:\n{(tmp_path / 'out.txt').read_text()}")
    output = (tmp_path / "out.txt").read_text()
    assert code == 0, output
    assert "cold start (Ray): seed 0 grounder SFT started" in output  # the jobs' board
    alone, launched = (json.loads((root / "results.json").read_text()) for root in (one, two))
    assert _shape(launched) == _shape(alone)
    written = [{str(p.relative_to(root)) for p in root.rglob("*") if "checkpoints" not in p.parts}
               for root in (one, two)]  # fmt: skip
    logs = {f"seed0/cold_start/{name}.log" for name in ("grounder", "planner", "eval")} | {"seed0/lumos/run.log"}
    assert written[1] == written[0] | logs
    for log in logs:  # each job launched (the ranks of a launch are tested above)
        assert "launched as 2 processes (torch.distributed.run, OMP_NUM_THREADS=1)" in (two / log).read_text(), log
