"""Several processes on one run: the work split by rank and gathered in order, and a 2-process MOAT round
(torchrun, gloo on CPU) that writes what a 1-process one writes."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from safetensors.torch import load_file
from typer.testing import CliRunner

from coalign.cli import app
from coalign.config import config_to_yaml, load_config
from coalign.core import ranks
from coalign.core.errors import RunError
from coalign.core.runs import Run
from coalign.pilotrl.recipe import run_pilotrl
from coalign.training.setup import prepare_run
from tests.moat.test_moat import MOAT

pytestmark = pytest.mark.slow  # every test here trains, launches processes or runs a cluster


def as_rank(monkeypatch, rank: int, size: int) -> None:
    monkeypatch.setenv("WORLD_SIZE", str(size))
    monkeypatch.setenv("RANK", str(rank))


@pytest.mark.parametrize("n,size", [(7, 3), (2, 4), (0, 2), (12, 2)])
def test_spans_cover_the_work_once_in_order(monkeypatch, n, size):
    spans = []
    for r in range(size):
        as_rank(monkeypatch, r, size)
        spans.append(list(ranks.span(n)))
    assert [i for s in spans for i in s] == list(range(n))
    assert max(map(len, spans)) - min(map(len, spans)) <= 1


def test_one_process_is_left_alone():
    assert ranks.world_size() == 1 and ranks.is_main()
    assert ranks.share(lambda x: x * x, [1, 2, 3]) == [1, 4, 9]
    assert ranks.summed({"calls": 2, "failures": {"timeout": 1}, "name": "x"}) == {
        "calls": 2,
        "failures": {"timeout": 1},
        "name": "x",
    }


def test_work_inside_a_share_runs_alone(monkeypatch):
    """A rank's share that itself loops (a local critic model generating) does not wait for the other ranks,
    which are busy with their own shares: only the outer share gathers."""
    as_rank(monkeypatch, 1, 2)
    calls = []

    class Group:  # rank 0 computed [0, 1, 4] (its share) in the same way
        def all_gather_object(self, parts, local):
            calls.append(local)
            parts[:] = [[0, 1, 4], local]

    monkeypatch.setattr(ranks, "_group", lambda: Group())

    def square_all(xs):
        assert list(ranks.span(5)) == [0, 1, 2, 3, 4]  # inside: the whole of what it is given
        return ranks.share(lambda x: x * x, xs)

    assert ranks.share_all(square_all, [0, 1, 2, 3, 4]) == [0, 1, 4, 9, 16]
    assert calls == [[9, 16]]  # one gather: the outer one, of rank 1's share


def test_one_rank_writes_and_all_wait_for_its_folders(monkeypatch, tmp_path):
    from coalign.core.runs import atomic_dir, write_json

    waits = []
    monkeypatch.setattr(ranks, "_group", lambda: type("Group", (), {"barrier": lambda self: waits.append(1)})())
    for r in (1, 0):
        as_rank(monkeypatch, r, 2)
        write_json(tmp_path / f"from{r}.json", {"rank": r})
        with atomic_dir(tmp_path / f"folder{r}") as folder:
            (folder / "weights").write_text("w")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder0", "from0.json"]
    assert (tmp_path / "folder0" / "weights").read_text() == "w"
    assert len(waits) == 2  # after each folder, on either rank: a rank reading it next finds it whole


@pytest.mark.parametrize(
    "size,batch,accum,split",
    [
        (2, 8, 4, (8, 2)),  # the config's batch kept, the accumulation shared
        (2, 8, 1, (4, 1)),
        (32, 4, 8, (1, 1)),  # DPO's paper batch on 32 processes: one example each
        (32, 16, 16, (8, 1)),  # GRPO's paper batch: 256 examples, 8 a process
        (4, 2, 2, (1, 1)),
        (3, 4, 3, (4, 1)),
        (2, 6, 3, (3, 3)),  # 9 a process: the largest batch up to 6 that divides 9
        (1, 3, 1, (3, 1)),
    ],
)
def test_a_batch_is_split_over_processes_and_kept_per_step(monkeypatch, size, batch, accum, split):
    as_rank(monkeypatch, 0, size)
    assert ranks.batch_split(batch, accum, "planner_dpo") == split
    assert split[0] * split[1] * size == batch * accum


def test_a_batch_the_processes_cannot_share_is_refused_naming_its_keys_and_fixes(monkeypatch):
    as_rank(monkeypatch, 0, 2)
    with pytest.raises(RunError) as refused:
        ranks.batch_split(3, 1, "planner_dpo")
    assert str(refused.value) == (
        "planner_dpo.batch_size 3 x planner_dpo.grad_accum 1 = 3 examples per optimizer step cannot be shared by 2 "
        "processes; to keep it, launch 1 or 3 processes (a number that divides 3), or set planner_dpo.batch_size x "
        "planner_dpo.grad_accum to 2 or 4"
    )
    as_rank(monkeypatch, 0, 3)
    with pytest.raises(RunError, match=r"launch 2 or 4 processes .* to 240 or 288$"):  # multiples of 3 and 16
        ranks.batch_split(16, 16, "pilotrl.rl", group=16)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 64), st.integers(1, 64), st.integers(1, 64))
def test_a_split_keeps_the_examples_per_step_with_no_larger_batch(size, batch, accum):
    with mock.patch.dict(os.environ, {"WORLD_SIZE": str(size), "RANK": "0"}):
        if batch * accum % size:
            with pytest.raises(RunError, match=f"cannot be shared by {size} processes"):
                ranks.batch_split(batch, accum, "sft")
            return
        per, steps = ranks.batch_split(batch, accum, "sft")
    assert per * steps * size == batch * accum and 1 <= per <= batch
    assert not any(batch * accum // size % b == 0 for b in range(per + 1, batch + 1))  # the largest such batch


@pytest.mark.parametrize(
    ("recipe", "fields", "size", "refused"),
    [
        ("moat", {"planner_dpo": {"batch_size": 3, "grad_accum": 1}}, 2, "planner_dpo.batch_size 3 x planner_dpo."),
        ("moat", {"grounder_round_sft": {"batch_size": 5, "grad_accum": 5}}, 2, "grounder_round_sft.batch_size 5"),
        ("lumos", {"planner_sft": {"batch_size": 8, "grad_accum": 16}}, 3, "planner_sft.batch_size 8"),
        ("pilotrl", {"pilotrl": {"rl": {"batch_size": 3, "grad_accum": 2, "num_generations": 2}}}, 4,
         "pilotrl.rl.batch_size 3 x pilotrl.rl.grad_accum 2 = 6"),
    ],
)  # fmt: skip
def test_a_batch_a_stage_cannot_split_stops_the_run_first(monkeypatch, tmp_path, recipe, fields, size, refused):
    """Every stage the recipe trains is checked for the launch's processes before any work, not when it starts."""
    as_rank(monkeypatch, 0, size)
    config = load_config("tiny-pilotrl" if recipe == "pilotrl" else "tiny", {"recipe": recipe, **fields})
    with pytest.raises(RunError, match=rf"^{re.escape(refused)}.* cannot be shared by {size} processes"):
        prepare_run(config, tmp_path / "run", Console(quiet=True))
    assert not (tmp_path / "run").exists()


def test_only_the_stages_a_recipe_trains_are_checked(monkeypatch, tmp_path):
    as_rank(monkeypatch, 0, 2)
    monkeypatch.setattr(Run, "check_shared", lambda self: None)  # one process plays rank 0: no group to ask
    odd = {"planner_dpo": {"batch_size": 3, "grad_accum": 1}, "grounder_round_sft": {"batch_size": 1, "grad_accum": 1}}
    prepare_run(load_config("tiny", {"recipe": "lumos", **odd}), tmp_path / "lumos", Console(quiet=True))
    moat = load_config("tiny", {"recipe": "moat", "moat": {"stage1": False, "stage2": False}, **odd})
    prepare_run(moat, tmp_path / "moat", Console(quiet=True))
    evaluation = load_config("tiny", {"recipe": "moat", **odd})
    prepare_run(evaluation, tmp_path / "eval", Console(quiet=True), trains=False)  # evaluating trains nothing


def test_a_stage_names_its_config_key_when_its_batch_cannot_split(monkeypatch, tmp_path):
    from coalign.config import DPOSettings, GRPOSettings
    from coalign.training.common import common_args
    from coalign.training.grpo import grpo_config

    as_rank(monkeypatch, 0, 4)
    with pytest.raises(RunError, match=r"^planner_dpo\.batch_size 3 x planner_dpo\.grad_accum 1 = 3 examples"):
        common_args(DPOSettings(batch_size=3, grad_accum=1), tmp_path, 0, "planner_dpo")
    rl = GRPOSettings(batch_size=3, grad_accum=2, num_generations=2)
    with pytest.raises(RunError, match=r"^pilotrl\.rl\.batch_size 3 .* set .* to 4 or 8$"):  # multiples of 4 and 2
        grpo_config(rl, 1.0, tmp_path, 0, [1.0], 16)


def test_bench_refuses_to_run_under_a_launcher(monkeypatch):
    result = CliRunner().invoke(app, ["bench", "tiny", "--seeds", "0"], env={"WORLD_SIZE": "2", "RANK": "0"})
    assert result.exit_code == 2 and "launch it as one process" in result.output


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def coalign(args: list[str], processes: int = 1) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    launch = [sys.executable, "-m", "coalign.cli"]
    if processes > 1:
        launch = [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
            "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "-m", "coalign.cli",
        ]  # fmt: skip
    done = subprocess.run([*launch, *args], env=env, capture_output=True, text=True, timeout=600)
    others = [line for line in done.stderr.splitlines() if line.startswith("[rank1]")]  # a crash's own trace
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + "\n".join(others)[-6000:]


ROUND = ["candidates.jsonl", "scores.jsonl", "pairs.jsonl", "groundings.jsonl", "verdicts.jsonl"]


def test_two_processes_write_what_one_writes(tmp_path: Path):
    """A finished 1-process MOAT run, resumed from its cold start under 2 processes: the loops that do not
    train (evaluation, K samples, scoring, grounding, critic) write the same bytes; the trainers (DPO, SFT
    under DDP, the batch split over the two) take the same steps to weights that differ only by float
    rounding, which Adam turns into at most about lr per step."""
    config = tmp_path / "moat.yaml"
    config.write_text(config_to_yaml(load_config("tiny", MOAT)))
    one, two = tmp_path / "one", tmp_path / "two"
    coalign(["train", str(config), "--run-dir", str(one)])
    shutil.copytree(one, two)
    for record in (two / "stages").glob("round*.json"):
        record.unlink()  # the cold start (init, planner and grounder SFT) stays done
    for done in [*two.glob("round*"), *(two / "checkpoints").glob("round*")]:
        shutil.rmtree(done) if done.is_dir() else done.unlink()  # nothing of the rounds left to read early
    coalign(["train", str(config), "--run-dir", str(two)], processes=2)

    for name in ROUND:
        assert (two / "round1" / name).read_bytes() == (one / "round1" / name).read_bytes(), name
    for path in sorted((one / "round0_eval").iterdir()):
        assert (two / "round0_eval" / path.name).read_bytes() == path.read_bytes(), path.name
    assert sorted(p.name for p in (two / "stages").iterdir()) == sorted(p.name for p in (one / "stages").iterdir())
    assert not list(two.rglob(".*.tmp"))  # one writer: no temporary file left behind
    for agent, lr in (("round1_planner", MOAT["planner_dpo"]["learning_rate"]),
                      ("round1_grounder_sft", MOAT["grounder_round_sft"]["learning_rate"])):  # fmt: skip
        logs = [run / "checkpoints" / agent / "train_log.json" for run in (one, two)]
        steps = [json.loads(log.read_text())["steps"] for log in logs]
        assert steps[0] == steps[1] > 0
        a, b = (load_file(run / "checkpoints" / agent / "model.safetensors") for run in (one, two))
        assert max((a[k] - b[k]).abs().max().item() for k in a) <= 2 * lr * steps[0]


PILOTRL = {
    "name": "pilotrl-ranks", "recipe": "pilotrl", "threads": 1,
    "models": {"tiny": {"vocab_size": 400, "hidden_size": 32, "num_layers": 2, "num_heads": 2, "num_kv_heads": 2,
                        "intermediate_size": 64, "max_positions": 4096}},
    "pilotrl": {"model": "scratch", "heldin": ["household", "crafting"], "heldout": ["maze"], "train_tasks": 3,
                "eval_tasks": 4, "eval_update_every": [1], "max_new_tokens": 48, "max_context": 320,
                "batch_size": 4, "sft": {"learning_rate": 3e-3, "epochs": 1, "batch_size": 4, "max_length": 4096}},
}  # fmt: skip


def test_two_processes_evaluate_pilotrl_as_one_does(tmp_path: Path):
    """PilotRL's evaluation episodes under 2 processes: each turn's batches (4 episodes of 12) shared between the
    ranks, the episodes and metrics written are those of one process, byte for byte."""
    config = tmp_path / "pilotrl.yaml"
    config.write_text(json.dumps(PILOTRL))
    one, two = tmp_path / "one", tmp_path / "two"
    run_pilotrl(load_config(str(config)), one, Console(quiet=True))  # one process: this one
    shutil.copytree(one, two)
    for record in (two / "stages").glob("eval_k*.json"):
        record.unlink()
    for done in [*two.glob("eval_k*"), two / "metrics.json"]:
        shutil.rmtree(done) if done.is_dir() else done.unlink()
    coalign(["train", str(config), "--run-dir", str(two)], processes=2)

    written = sorted(p.relative_to(one) for p in one.glob("eval_k*/*"))
    assert len(written) == 2
    for path in [*written, Path("metrics.json")]:
        assert (two / path).read_bytes() == (one / path).read_bytes(), path
    assert sorted(p.name for p in (two / "stages").iterdir()) == sorted(p.name for p in (one / "stages").iterdir())


@pytest.mark.parametrize("name", ["ddp", "fsdp", "zero2", "zero3"])
def test_the_shipped_accelerate_configs_are_what_accelerate_reads(name):
    from accelerate.commands.config.config_args import load_config_from_file

    import coalign

    config = load_config_from_file(str(Path(coalign.__file__).parent / "accelerate" / f"{name}.yaml"))
    kind = {"ddp": "MULTI_GPU", "fsdp": "FSDP", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED"}[name]
    assert config.distributed_type.value == kind and config.num_processes > 1
    if name.startswith("zero"):
        assert config.deepspeed_config["zero_stage"] == int(name[-1])


def test_the_process_group_waits_the_runs_ddp_timeout(monkeypatch, tmp_path):
    """torch's NCCL default is 10 minutes, less than rank 0 may take to save a 14B model while the others wait:
    the group is started with the run's `ddp_timeout` (the Trainer's 1,800 s unless set), and the trainers get it."""
    import torch.distributed as dist
    from rich.console import Console

    from coalign.registry import load_config
    from coalign.training.common import common_args
    from coalign.training.setup import prepare_run

    started = []
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: started.append(kw["timeout"]))
    monkeypatch.setattr(ranks, "_timeout_s", ranks.TIMEOUT_S)
    as_rank(monkeypatch, 0, 1)  # one process: the run folder made without a group
    config = load_config("tiny", {"ddp_timeout": 7200})
    prepare_run(config, tmp_path / "run", Console(quiet=True))
    ranks._group.cache_clear()
    try:
        ranks._group()
    finally:
        ranks._group.cache_clear()
    assert [t.total_seconds() for t in started] == [7200]
    assert common_args(config.planner_sft, tmp_path, 0)["ddp_timeout"] == 7200
    assert load_config("tiny").ddp_timeout == 1800 and "ddp_timeout" not in load_config("tiny").model_dump()
