"""Launching on several processes and nodes: a failed run's error printed once, last under `coalign launch`; the
run folder every rank must see; the shipped accelerate configs by name; the SLURM script; the other ranks quiet."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
from typer.testing import CliRunner

from coalign import cli
from coalign.cli import app
from coalign.core import launch, ranks
from coalign.core.console import ERROR_FILE, LAUNCHED
from coalign.core.errors import RunError
from coalign.core.runs import Run
from tests.core.test_ranks import as_rank, free_port

ROOT = Path(__file__).parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]  # 2 gloo processes here


def run(command: list[str], **env: str) -> subprocess.CompletedProcess:
    """`command` in the repository, as a user starts it: no launcher's variables inherited from the tests."""
    clean = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", ERROR_FILE, LAUNCHED)}
    return subprocess.run(
        command, cwd=ROOT, env={**clean, "OMP_NUM_THREADS": "1", **env}, capture_output=True, text=True, timeout=600
    )


def missing_model(tmp_path: Path) -> tuple[list[str], str]:
    """An eval every rank refuses at its start (a planner folder that is not there), and the error it prints."""
    folder = tmp_path / "no-such-checkpoint"
    return ["eval", "tiny", "--planner", str(folder)], f"error: --planner: no such model folder: {folder};"


def test_the_main_rank_alone_prints_an_error_and_each_failing_rank_records_it(tmp_path):
    """Under torchrun every rank meets the same input error: one prints it, and each writes it where torchrun's
    summary reads it (`ProcessFailure`), so the summary's root cause is the message, not '<N/A>'."""
    command, error = missing_model(tmp_path)
    recorded = tmp_path / "error.json"
    for rank, launched, prints in ((1, "", False), (0, "", True), (0, "1", False)):
        recorded.unlink(missing_ok=True)
        env = {"WORLD_SIZE": "2", "RANK": str(rank), ERROR_FILE: str(recorded), LAUNCHED: launched}
        result = CliRunner().invoke(app, command, env=env)
        assert result.exit_code == 2
        assert (error in result.output) is prints, (rank, launched, result.output)
        failure = ProcessFailure(local_rank=rank, pid=1, exitcode=2, error_file=str(recorded))
        assert f"traceback : {error}" in str(ChildFailedError("coalign.cli", {rank: failure}))
    alone = CliRunner().invoke(app, command, env={LAUNCHED: "1", ERROR_FILE: ""})  # accelerate's one process
    assert alone.exit_code == 2 and error in alone.output


def test_a_launch_names_what_its_accelerate_config_needs(tmp_path, monkeypatch):
    import accelerate.commands.launch

    monkeypatch.setattr(accelerate.commands.launch, "is_deepspeed_available", lambda: False)  # as without the extra
    command, _ = missing_model(tmp_path)
    refused = CliRunner().invoke(app, ["launch", "--nproc-per-node", "2", "--config", "zero2", "--", *command])
    assert refused.exit_code == 2
    assert f"error: {launch.accelerate_config('zero2')}: DeepSpeed is not installed" in refused.output


def test_a_failed_launch_ends_with_the_lowest_failing_ranks_error(tmp_path):
    """The ranks fail alike, but the launcher may stop the main one before it records its error: the launch
    prints the lowest recorded one; without any, the lowest rank that exited by itself; else the signal."""

    def failed(code: int, error: str | None = None, rank: int = 0) -> ProcessFailure:
        path = tmp_path / f"error{len(list(tmp_path.iterdir()))}.json"
        if error:
            path.write_text(json.dumps({"message": {"message": error, "extraInfo": {"timestamp": "1"}}}))
        return ProcessFailure(local_rank=rank, pid=100 + rank, exitcode=code, error_file=str(path))

    stopped = -signal.SIGTERM
    recorded = {0: failed(stopped), 1: failed(stopped, "error: one", 1), 2: failed(2, "error: two", 2)}
    assert launch.failure(ChildFailedError("coalign.cli", recorded)) == ("error: one", 2)
    crashed = {0: failed(stopped), 1: failed(1, rank=1)}
    assert launch.failure(ChildFailedError("coalign.cli", crashed)) == (
        "error: rank 1 exited with code 1; its output above says why",
        1,
    )
    killed = {0: failed(-signal.SIGKILL)}
    assert launch.failure(ChildFailedError("coalign.cli", killed)) == (
        "error: rank 0 was stopped by signal 9 (SIGKILL)",
        137,
    )


@pytest.mark.slow
def test_a_launch_prints_a_failed_runs_error_once_and_last(tmp_path):
    command, error = missing_model(tmp_path)
    done = run([sys.executable, "-m", "coalign.cli", "launch", "--nproc-per-node", "2", "--", *command])
    printed = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(printed) == 1, done.stdout + done.stderr
    assert printed[0].startswith(error) and done.stderr.splitlines()[-1] == printed[0]


@pytest.mark.slow
def test_torchrun_prints_a_failed_runs_error_at_most_once_and_names_it_as_the_root_cause(tmp_path):
    """Plain torchrun ends with its own summary; the main rank prints the error unless torchrun stopped it first,
    and the summary's root cause is the message of whichever rank failed first."""
    command, error = missing_model(tmp_path)
    done = run([*TORCHRUN, "--master-port", str(free_port()), "-m", "coalign.cli", *command])
    printed = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("error:")]
    assert done.returncode != 0 and len(printed) <= 1, done.stdout + done.stderr
    root = done.stderr.split("Root Cause")[1]
    assert f"traceback : {error}" in root, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("nodes", ["shared", "apart"])
def test_every_rank_sees_the_run_folder_or_every_rank_stops(tmp_path, nodes):
    """Two gloo processes check one run folder; where rank 1 plays a node that does not mount it (its own host and
    folder), both stop with the error naming the folder and the hosts, none waiting for the other."""
    folder, out = tmp_path / "run", tmp_path / "out"
    out.mkdir()
    script = [str(ROOT / "tests" / "shared_folder.py"), str(folder), str(out), nodes]
    done = run([*TORCHRUN, "--master-port", str(free_port()), *script])
    assert done.returncode == 0, done.stderr[-3000:]
    found = [(out / f"rank{r}.txt").read_text() for r in (0, 1)]
    assert not list(folder.glob(".shared-*"))
    if nodes == "shared":
        assert found == ["ok", "ok"]
        return
    assert found[0] == found[1]
    assert found[0].startswith(f"error: {folder}: the run folder is not shared by every rank: rank 0 on ")
    assert f"on {socket.gethostname()} wrote .shared-" in found[0]
    assert f"rank 1 on node2 (in {out / 'node2'}) cannot read it" in found[0]


def test_the_ranks_that_cannot_see_the_run_folder_are_named_by_host(monkeypatch, tmp_path):
    """Four ranks, two of them on a node that does not mount the folder: one error, naming that node and its
    ranks, on every rank; one process checks nothing."""
    Run(tmp_path).check_shared()
    assert not list(tmp_path.iterdir())
    folder = str(tmp_path.absolute())

    class Group:  # ranks 1 and 2 on node2 find no file, rank 3 on node3 finds it
        def broadcast_object_list(self, box, src):
            assert src == 0 and box[0]

        def all_gather_object(self, parts, local):
            assert local == [(socket.gethostname(), folder, True)]
            parts[:] = [local, [("node2", folder, False)], [("node2", folder, False)], [("node3", folder, True)]]

    monkeypatch.setattr(ranks, "_group", lambda: Group())
    as_rank(monkeypatch, 0, 4)
    with pytest.raises(RunError, match=r"rank 0 on .* wrote \.shared-\w+ in it, and ranks 1, 2 on node2 cannot read"):
        Run(tmp_path).check_shared()
    assert not list(tmp_path.glob(".shared-*"))


def test_the_shipped_accelerate_configs_are_found_by_name(tmp_path):
    names = ["ddp", "fsdp", "multinode", "zero2", "zero3"]
    listed = CliRunner().invoke(app, ["accelerate-config"])
    assert [line.split()[0] for line in listed.output.splitlines()] == names
    path = CliRunner().invoke(app, ["accelerate-config", "multinode"]).output.strip()
    assert Path(path).is_file() and Path(path) == launch.accelerate_config("multinode")
    unknown = CliRunner().invoke(app, ["accelerate-config", "ddp2"])
    assert unknown.exit_code == 2 and f"they are: {', '.join(names)}" in unknown.output
    refused = CliRunner().invoke(app, ["launch", "--config", "ddp2", "--", "train", "tiny"])
    assert refused.exit_code == 2 and "no shipped accelerate config of that name" in refused.output


def test_the_multinode_config_is_what_accelerate_reads():
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(launch.accelerate_config("multinode")))
    assert config.distributed_type.value == "MULTI_GPU" and config.num_machines == 2 and config.num_processes == 16


def test_a_launch_gives_each_launcher_the_nodes_and_the_command():
    from accelerate.commands.launch import launch_command_parser
    from torch.distributed.run import get_args_parser

    command = ["train", "tiny", "--set", "moat.rounds=1"]
    nodes = get_args_parser().parse_args(launch.launcher_args(command, 8, 2, 1, "10.0.0.1"))
    assert (nodes.nproc_per_node, nodes.nnodes, nodes.node_rank) == ("8", "2", 1)
    assert (nodes.master_addr, nodes.master_port) == ("10.0.0.1", 29500)
    assert nodes.module and nodes.training_script == "coalign.cli" and nodes.training_script_args == command
    assert get_args_parser().parse_args(launch.launcher_args(command, 2)).master_port is None  # a free one
    config = launch.accelerate_config("zero2")
    machines = launch_command_parser().parse_args(launch.launcher_args(command, 8, 2, 1, "10.0.0.1", 29400, config))
    assert (machines.config_file, machines.num_processes, machines.num_machines) == (str(config), 16, 2)
    assert (machines.machine_rank, machines.main_process_ip, machines.main_process_port) == (1, "10.0.0.1", 29400)
    assert machines.deepspeed_multinode_launcher == "standard" and machines.training_script_args == command


def test_a_launch_refuses_what_its_processes_would_each_refuse():
    for args, problem in (
        (["--nproc-per-node", "2", "bench", "tiny"], "coalign launch runs train or eval, got 'bench'"),
        (["--nproc_per_node", "2", "train", "tiny"], "no such option: --nproc_per_node"),
        (["--nnodes", "2", "--node-rank", "2", "train", "tiny"], "--node-rank 2 is not below --nnodes 2"),
        (["--", "train", "tiny", "--sett", "x=1"], "No such option: --sett"),
    ):
        refused = CliRunner().invoke(app, ["launch", *args])
        assert refused.exit_code == 2 and problem in refused.output, refused.output


@pytest.mark.slow
def test_the_slurm_script_starts_one_launch_per_node(tmp_path):
    """examples/slurm.sbatch with srun and scontrol stood in for on this machine: two nodes, one process each,
    meet at the first node; each node's launch ends with the run's error, once. srun is handed the job's cores a
    task (since Slurm 22.05 it no longer takes sbatch's --cpus-per-task, and a node's ranks could share one core)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "scontrol").write_text("#!/bin/bash\necho 127.0.0.1\n")
    (bin_ / "srun").write_text(
        "#!/bin/bash\n"  # SLURM's srun on one machine: the command once per node, with that node's SLURM_NODEID
        f'echo "$SRUN_CPUS_PER_TASK" > {tmp_path}/cpus\n'
        "while [[ $1 == --* ]]; do shift; done\n"
        'for node in $(seq 0 $((SLURM_NNODES - 1))); do SLURM_NODEID=$node "$@" & pids+=($!); done\n'
        'code=0; for pid in "${pids[@]}"; do wait "$pid" || code=$?; done; exit $code\n'
    )
    for stub in bin_.iterdir():
        stub.chmod(0o755)
    command, error = missing_model(tmp_path)
    env = {"PATH": f"{bin_}:{os.environ['PATH']}", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "node[1-2]"}
    env |= {"SLURM_CPUS_PER_TASK": "3"}
    env |= {"COALIGN": f"{sys.executable} -m coalign.cli", "GPUS_PER_NODE": "1", "PORT": str(free_port())}
    done = run(["bash", "examples/slurm.sbatch", *command], **env)
    printed = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(printed) == 2, done.stdout + done.stderr  # one a node
    assert all(line.startswith(error) for line in printed) and done.stderr.splitlines()[-1] == printed[1]
    assert (tmp_path / "cpus").read_text() == "3\n"


def test_the_other_ranks_print_no_library_warnings_or_progress_bars():
    """A rank other than the main one runs the same steps: what its libraries print would be a copy."""
    script = (
        "import warnings, coalign.cli, tqdm, huggingface_hub.utils as hub\n"
        "warnings.warn('deprecated', FutureWarning)\n"
        "for _ in tqdm.tqdm(range(2)): pass\n"
        "for _ in hub.tqdm(range(2)): pass\n"
    )
    main, other = (run([sys.executable, "-c", script], WORLD_SIZE="2", RANK=r) for r in ("0", "1"))
    assert "FutureWarning" in main.stderr and main.stderr.count("2/2") == 2
    assert main.returncode == other.returncode == 0 and other.stderr == ""


def test_no_empty_table_of_subgoal_styles(monkeypatch):
    """Without eval.diagnostics (or off the bundled suite) no set has accuracy by subgoal style: no such table."""
    results = {"heldin": {"sets": {"s": {"n": 2, "accuracy": 0.5}}, "average": {"accuracy": 0.5}}}
    for by_style, shown in (({}, False), ({"grounder_acc_gold_by_style": {"vague": 1.0}}, True)):
        results["heldin"]["sets"]["s"].update(by_style)
        out = Console(record=True, width=80)
        monkeypatch.setattr(cli, "console", out)
        cli._show(results)
        assert ("by subgoal style" in out.export_text()) is shown
