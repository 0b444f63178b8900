"""A MOAT run killed with SIGKILL mid-stage resumes and ends with the same artifacts as an uninterrupted run."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_moat import MOAT

RUNNER = """
import json, sys
from rich.console import Console
from coalign.config import load_config
from coalign.recipes.moat import run_moat
run_moat(load_config("tiny", json.loads(sys.argv[1])), sys.argv[2], Console(quiet=True))
"""


def _run(run_dir: Path, kill_when: str | None = None) -> None:
    """Run MOAT in a child process; with `kill_when`, SIGKILL it as soon as that path exists."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen([sys.executable, "-c", RUNNER, json.dumps(MOAT), str(run_dir)], env=env)
    if kill_when is None:
        assert child.wait(timeout=600) == 0
        return
    deadline = time.time() + 600
    while not (run_dir / kill_when).exists():
        assert child.poll() is None, f"run ended before {kill_when} appeared"
        assert time.time() < deadline
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()


ARTIFACTS = [
    "rounds.json",
    "round1/candidates.jsonl",
    "round1/scores.jsonl",
    "round1/pairs.jsonl",
    "round1/groundings.jsonl",
    "round1/verdicts.jsonl",
    "checkpoints/round1_planner/model.safetensors",
    "checkpoints/round1_grounder_sft/model.safetensors",
]


def _artifacts(run_dir: Path) -> dict[str, bytes]:
    return {name: (run_dir / name).read_bytes() for name in ARTIFACTS}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("whole")
    _run(run_dir)
    return _artifacts(run_dir)


@pytest.mark.slow
@pytest.mark.parametrize(
    "kill_when",
    [
        "stages/round1_sample.json",  # stage 1: candidates written, scoring and DPO not yet done
        "stages/round1_ground.json",  # stage 2: groundings written, critic and grounder SFT not yet done
    ],
)
def test_killed_run_resumes_to_the_same_metrics(uninterrupted, tmp_path, kill_when):
    _run(tmp_path, kill_when=kill_when)
    assert not (tmp_path / "rounds.json").exists()
    _run(tmp_path)
    resumed = _artifacts(tmp_path)
    for name in ARTIFACTS:
        assert resumed[name] == uninterrupted[name], f"{name} differs after resume"
