"""benchmarks/gpu_smoke.py's logic on a CPU: `--tiny` runs every step (coalign's GRPO and DPO stages, MOAT scoring)
at toy shapes, each in a process of its own, and records each as one JSON line; an out-of-memory in a step is a
record and the next step runs; a step past its budget is killed with what it started; the wheel folder is
refused when it holds other wheels or would not travel."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gpu_smoke  # noqa: E402

# the toy GRPO model keeps Llama-3.1's vocabulary: its embeddings and its untied head alone hold this many
REAL_VOCABULARY_PARAMETERS = 2 * 128256 * gpu_smoke.TOY["hidden_size"]


def _smoke(tmp_path: Path, *options: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """A `--tiny` run with `options`: the process, and its JSON lines (stdout's, which its --out file repeats)."""
    out = tmp_path / "out" / "gpu_smoke.jsonl"
    command = [sys.executable, str(Path(gpu_smoke.__file__)), "--tiny", "--out", str(out), *options]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [json.loads(line) for line in out.read_text().splitlines()] == lines
    assert all(len(line) <= 80 for line in done.stdout.splitlines() if not line.startswith("{"))
    return done, lines


@pytest.mark.slow
def test_tiny_runs_every_step_each_with_its_seconds_and_peak_memory(tmp_path):
    done, lines = _smoke(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line["step"] for line in lines] == ["setup", *gpu_smoke.STEPS]
    steps = {line["step"]: line for line in lines}
    assert steps["setup"]["device"] == "cpu (--tiny)" and "transformers" in steps["setup"]["versions"]
    for step in gpu_smoke.STEPS:
        line = steps[step]
        assert line["status"] == "ok", line
        assert line["seconds"] > 0 and line["peak_mib"] > 0 and line["memory"] == "peak RSS"
    grpo, dpo = steps["grpo"], steps["dpo"]
    # the paper's group of 16 episodes, `micro_batch_size` 4 a forward, on the model `random_weights` built (the
    # tokenizer folder's own model has a hidden size of 8), in the dtype coalign's stage asked for
    assert (grpo["episodes"], grpo["micro_batch"], grpo["forwards"]) == (16, 4, 4)
    assert grpo["parameters"] > REAL_VOCABULARY_PARAMETERS and grpo["dtype"] == "float32"
    assert grpo["lora_r"] == 16 and grpo["checkpointing"] and grpo["lr"] == 1e-6
    assert (dpo["batch"], dpo["grad_accum"], dpo["paper_grad_accum"], dpo["lora_r"]) == (4, 2, 8, 16)
    assert steps["scoring"]["rows"] == gpu_smoke.SCORED_TASKS[1] * 15 and steps["scoring"]["batch"] == 64


@pytest.mark.slow
def test_an_out_of_memory_is_recorded_not_raised_and_the_next_step_runs(tmp_path):
    done, lines = _smoke(tmp_path, "--steps", "dpo,scoring", "--oom", "dpo")
    assert done.returncode == 0, done.stdout + done.stderr
    steps = {line["step"]: line for line in lines}
    assert steps["dpo"]["status"] == "oom", steps["dpo"]
    assert "out of memory" in steps["dpo"]["error"] and steps["dpo"]["peak_mib"] > 0
    assert steps["scoring"]["status"] == "ok"


def test_a_step_past_its_budget_is_killed_with_what_it_started_and_a_failed_one_keeps_its_last_lines(tmp_path):
    sleeper = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print(p.pid, flush=True)\ntime.sleep(120)"
    )
    log, result = tmp_path / "step.log", tmp_path / "step.json"
    # 10 s: a machine under load may take seconds to start both
    record = gpu_smoke.run_child([sys.executable, "-c", sleeper], log, result, 10, {})
    assert record["status"] == "timeout" and record["process_s"] < 60
    grandchild = Path(f"/proc/{int(record['tail'][-1])}/status")
    for _ in range(100):  # killed: gone, or a zombie its new parent has yet to reap
        if not grandchild.exists() or "State:\tZ" in grandchild.read_text():
            break
        time.sleep(0.1)
    else:
        pytest.fail("the grandchild outlived the budget")
    failing = "import sys\nfor i in range(40): print(i)\nsys.exit(3)"
    record = gpu_smoke.run_child([sys.executable, "-c", failing], log, result, 60, {})
    assert (record["status"], record["error"]) == ("error", "exit 3")
    assert record["tail"] == [str(i) for i in range(40 - gpu_smoke.TAIL, 40)]


def test_oom_needs_tiny_and_an_unknown_step_is_refused(monkeypatch):
    monkeypatch.setenv("OUT", "/somewhere")
    assert gpu_smoke.arguments(["--tiny"]).out == Path("/somewhere/gpu_smoke.jsonl")
    assert gpu_smoke.arguments(["--tiny", "--steps", "dpo, grpo"]).steps == ("dpo", "grpo")
    with pytest.raises(SystemExit):
        gpu_smoke.arguments(["--oom", "dpo"])
    with pytest.raises(SystemExit):
        gpu_smoke.arguments(["--tiny", "--steps", "grpo,sft"])


def test_a_wheel_folder_with_other_wheels_or_too_large_to_travel_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_smoke.subprocess, "run", lambda *args, **kwargs: None)  # pip finds them all there
    for name in gpu_smoke.CARRIED:
        version = gpu_smoke.importlib.metadata.version(name)
        (tmp_path / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"0" * 1000)
    monkeypatch.setattr(gpu_smoke, "tree_bytes", lambda exclude: 2**20)
    assert gpu_smoke.fetch_wheels(tmp_path) == 1000 * len(gpu_smoke.CARRIED)
    monkeypatch.setattr(gpu_smoke, "tree_bytes", lambda exclude: gpu_smoke.TREE_LIMIT)
    with pytest.raises(SystemExit, match="too large"):
        gpu_smoke.fetch_wheels(tmp_path)
    monkeypatch.setattr(gpu_smoke, "tree_bytes", lambda exclude: 2**20)
    (tmp_path / "trl-0.1.0-py3-none-any.whl").write_bytes(b"")
    with pytest.raises(SystemExit, match="trl-0.1.0"):
        gpu_smoke.fetch_wheels(tmp_path)
