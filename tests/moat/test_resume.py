"""A MOAT run killed with SIGKILL anywhere ends, once resumed, with the same artifacts as an uninterrupted
run; a damaged artifact is detected and its stage redone.

Every run is a process forked from a server that imported torch, transformers and coalign once
(multiprocessing's forkserver), so two dozen kills cost no interpreter start-ups. A run to be killed
SIGKILLs itself at a point drawn (seeded) from those an uninterrupted run passes: the n-th training step
or forward pass of a model in a stage (mid-training, mid-generation, mid-scoring), or the moment before a
file is renamed into the run folder (the temp file written; the artifact, checkpoint or record not yet).
"""

import functools
import json
import multiprocessing
import os
import random
import shutil
import signal
from collections import Counter, defaultdict
from pathlib import Path
from typing import TextIO

import pytest
import torch
from rich.console import Console
from transformers import LlamaForCausalLM, Trainer

from coalign.config import load_config
from coalign.core.runs import Run
from coalign.moat.recipe import run_moat
from tests.moat.test_moat import MOAT

KILLS, SEED, CHAINS = 24, 0, 2
FORKSERVER = multiprocessing.get_context("forkserver")


def _instrument(root: Path, kill_at: list | None, trace: TextIO) -> None:
    """Count forward passes and training steps per stage and renames into `root`; SIGKILL this process at
    `kill_at` ([kind, stage or file, n]); write every point with its stage to `trace`."""
    stage, seen = ["prepare"], Counter()

    def point(*key) -> None:
        seen[key] += 1
        here = [*key, seen[key]]
        trace.write(json.dumps({"stage": stage[0], "point": here}) + "\n")
        if here == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    real_replace, real_is_done = os.replace, Run.is_done
    real_forward, real_step = LlamaForCausalLM.forward, Trainer.training_step

    def replace(src, dst, *args, **kwargs):
        dst = Path(dst).absolute()
        if dst.is_relative_to(root):
            point("replace", dst.relative_to(root).as_posix())
        return real_replace(src, dst, *args, **kwargs)

    @functools.wraps(real_forward)
    def forward(self, *args, **kwargs):
        point("forward", stage[0])
        return real_forward(self, *args, **kwargs)

    @functools.wraps(real_step)
    def training_step(self, *args, **kwargs):
        point("step", stage[0])
        return real_step(self, *args, **kwargs)

    def is_done(self, name: str, depends_on=None, inputs=None) -> bool:
        done = real_is_done(self, name, depends_on, inputs)
        if not done:
            stage[0] = name
        return done

    os.replace, Run.is_done = replace, is_done
    LlamaForCausalLM.forward, Trainer.training_step = forward, training_step


def _child(run_dir: Path, kill_at: list | None) -> None:
    with run_dir.with_suffix(".log").open("a") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    torch.set_num_threads(1)
    with run_dir.with_suffix(".trace.jsonl").open("w", buffering=1) as trace:
        _instrument(run_dir.absolute(), kill_at, trace)
        run_moat(load_config("tiny", MOAT), run_dir, Console(quiet=True))


def _run(run_dir: Path, kill_at: list | None = None) -> int:
    """Exit code of one run of the tiny MOAT in `run_dir`; its output is appended to `<run_dir>.log` and
    the points it passed written to `<run_dir>.trace.jsonl`."""
    child = FORKSERVER.Process(target=_child, args=(run_dir, kill_at))
    child.start()
    child.join(timeout=600)
    return child.exitcode


def _trace(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in run_dir.with_suffix(".trace.jsonl").open()]


def _kill_points(events: list[dict], n: int, seed: int) -> list[list]:
    """`n` points of the uninterrupted run, drawn with `seed`: one of each kind in every stage, then any
    others; in the order the run passed them."""
    rng = random.Random(seed)
    groups = defaultdict(list)
    for i, event in enumerate(events):
        groups[event["stage"], event["point"][0]].append(i)
    chosen = {rng.choice(group) for group in groups.values()}
    chosen |= set(rng.sample(sorted(set(range(len(events))) - chosen), max(0, n - len(chosen))))
    return [events[i]["point"] for i in sorted(chosen)]


def _artifacts(run_dir: Path) -> dict[str, bytes]:
    """Every file in the run folder, by name, with its bytes (stage records only by name: they hold times)."""
    names = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file())
    return {name: b"" if name.startswith("stages/") else (run_dir / name).read_bytes() for name in names}


def _assert_same(run_dir: Path, reference: dict[str, bytes]) -> None:
    """Byte-identical files (so no jsonl row lost or duplicated), no file more or less, every record verified."""
    resumed = _artifacts(run_dir)
    assert sorted(resumed) == sorted(reference)
    assert [n for n in reference if resumed[n] != reference[n]] == []
    assert all(Run(run_dir).is_done(p.stem) for p in (run_dir / "stages").glob("*.json"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[Path, list[dict]]:
    """The reference run and the points it passed."""
    FORKSERVER.set_forkserver_preload([__name__])
    run_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
    assert _run(run_dir) == 0
    return run_dir, _trace(run_dir)


@pytest.mark.slow
def test_a_run_killed_anywhere_resumes_to_the_same_artifacts(uninterrupted, tmp_path):
    reference_dir, events = uninterrupted
    reference = _artifacts(reference_dir)
    points = _kill_points(events, KILLS, SEED)
    assert len(points) == KILLS
    assert {e["stage"] for e in events if e["point"] in points} == {e["stage"] for e in events}  # every stage
    for c in range(CHAINS):  # each chain: kill, resume and kill later, ..., resume to the end
        run_dir = tmp_path / f"chain{c}"
        for point in points[c::CHAINS]:
            assert _run(run_dir, kill_at=point) == -signal.SIGKILL, f"the resumed run never reached {point}"
        assert _run(run_dir) == 0
        _assert_same(run_dir, reference)


@pytest.mark.slow
def test_a_damaged_artifact_is_detected_and_its_stage_redone(uninterrupted, tmp_path):
    reference_dir, _ = uninterrupted
    reference = _artifacts(reference_dir)
    run_dir = tmp_path / "run"
    shutil.copytree(reference_dir, run_dir)
    scores = run_dir / "round1" / "scores.jsonl"
    size = scores.stat().st_size
    scores.write_bytes(scores.read_bytes()[: size // 2])  # truncated
    weights = run_dir / "checkpoints" / "planner_sft" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte
    weights.write_bytes(bytes(data))
    (run_dir / "round1_eval" / "metrics.json").write_text("{}\n")
    record = run_dir / "stages" / "round1_pairs.json"
    record.write_text(record.read_text()[:100])
    assert _run(run_dir) == 0
    log = run_dir.with_suffix(".log").read_text()
    assert f"stage round1_score is redone: round1/scores.jsonl: size {size} -> {size // 2}" in log
    assert "stage planner_sft is redone: checkpoints/planner_sft/model.safetensors: sha256" in log
    assert "stage round1_eval is redone: round1_eval/metrics.json: size" in log
    assert "stage round1_pairs is redone: round1_pairs.json is not a readable manifest" in log
    ran = {event["stage"] for event in _trace(run_dir)}
    assert ran == {"planner_sft", "round1_score", "round1_pairs", "round1_eval"}  # redone identically: no more
    _assert_same(run_dir, reference)
