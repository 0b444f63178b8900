"""`coalign launch`: a coalign command on several processes, through torch's launcher (torchrun) or, for an
accelerate config, accelerate's (which runs torchrun's), in this process.

Run here rather than as a child, the launcher's failure is an exception to read, not text to parse: when a rank
fails, the launch prints the error the lowest failing rank recorded (`console.report_error`) as its last line,
instead of torchrun's summary of every process, and exits with that rank's code.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from coalign.core.console import ERROR_CODE, LAUNCHED, error_line
from coalign.core.errors import RunError

if TYPE_CHECKING:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

ACCELERATE_CONFIGS = Path(__file__).parents[1] / "accelerate"


def accelerate_configs() -> dict[str, Path]:
    """The shipped accelerate configs by name."""
    return {path.stem: path for path in sorted(ACCELERATE_CONFIGS.glob("*.yaml"))}


def accelerate_config(name: str) -> Path:
    """A shipped accelerate config's path by its name, or a config file's; a RunError naming the shipped ones."""
    shipped = accelerate_configs()
    if name in shipped:
        return shipped[name]
    if Path(name).is_file():
        return Path(name)
    raise RunError(f"{name}: no such file, and no shipped accelerate config of that name ({', '.join(shipped)})")


def launcher_args(
    command: list[str],
    nproc_per_node: int,
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    config: Path | None = None,
) -> list[str]:
    """The launcher's command line: torchrun's, or accelerate's with `config` (which counts processes over all
    nodes). Without `master_port`, one node takes a free port, several 29500 (both launchers' default)."""
    module = ["-m", "coalign.cli", *command]
    port = master_port if master_port is not None or nnodes == 1 else 29500
    if config is None:
        rendezvous = ["--master-addr", master_addr, *(["--master-port", str(port)] if port is not None else [])]
        nodes = ["--nnodes", str(nnodes), "--node-rank", str(node_rank), *rendezvous]
        return ["--nproc-per-node", str(nproc_per_node), *nodes, *module]
    machines = ["--num_machines", str(nnodes), "--machine_rank", str(node_rank), "--main_process_ip", master_addr]
    if nnodes > 1:  # DeepSpeed's default over several nodes is its own launcher (pdsh), not one per node
        machines += ["--deepspeed_multinode_launcher", "standard"]
    processes = ["--num_processes", str(nproc_per_node * nnodes), "--main_process_port", str(port or 0)]
    return ["--config_file", str(config), *processes, *machines, *module]


def run_launcher(args: list[str], config: Path | None = None) -> int:
    """Run the launcher (`launcher_args`: accelerate's with a `config`); its exit code, and on a failure its last
    line on stderr (`failure`). The processes torchrun starts record their errors and do not print them
    (`console.LAUNCHED`). A RunError for what the config needs and is not installed (DeepSpeed)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)  # its per-process exit reports
    os.environ[LAUNCHED] = "1"
    try:
        if config is not None:
            from accelerate.commands.launch import launch_command, launch_command_parser

            try:
                launch_command(launch_command_parser().parse_args(args))
            except ImportError as missing:  # what the config needs: "DeepSpeed is not installed => run ..."
                raise RunError(f"{config}: {missing}") from None
        else:
            from torch.distributed.run import get_args_parser, run

            run(get_args_parser().parse_args(args))
    except ChildFailedError as failed:
        message, code = failure(failed)
        error_line(message)
        return code
    except subprocess.CalledProcessError as failed:  # accelerate's one process (not torchrun's): it printed its error
        return failed.returncode
    except SignalException as stopped:  # the launcher was stopped (Ctrl-C, scancel) and stopped its processes
        return 128 + stopped.sigval
    finally:
        del os.environ[LAUNCHED]
    return 0


def failure(failed: ChildFailedError) -> tuple[str, int]:
    """What a failed launch prints last, and its exit code: the error the lowest failing rank recorded (the ranks
    fail alike; the main one may have been stopped by the launcher before it recorded its own), else the lowest
    rank that exited by itself, else the first stopped by a signal."""
    failures = failed.failures  # rank -> ProcessFailure
    recorded = [r for r, f in failures.items() if f.error_file != "<N/A>"]  # only `report_error` writes one
    if recorded:  # its code, also where the launcher stopped the rank by a signal on its way out
        message = failures[min(recorded)].message
        return (message["message"] if isinstance(message, dict) else message), ERROR_CODE
    exited = [r for r, f in failures.items() if f.exitcode > 0]
    if exited:
        code = failures[min(exited)].exitcode
        return f"error: rank {min(exited)} exited with code {code}; its output above says why", code
    rank, first = failed.get_first_failure()
    return f"error: rank {rank} was stopped by signal {-first.exitcode} ({first.signal_name()})", 128 - first.exitcode
