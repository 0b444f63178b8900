"""What a run ran on: a bench's per-seed numbers repeat byte for byte on one machine, thread count and set of
library versions, and move by a few points on another (docs/log/moat-bench.md, *A team of two bases*), so
results record it."""

from __future__ import annotations

import functools
import os
import platform
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from coalign.core.errors import RunError

LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate")


def cpu_name(cpuinfo: str) -> str:
    """The CPU's model name from /proc/cpuinfo's text (Linux), or platform's guess elsewhere."""
    found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    return found.group(1).strip() if found else platform.processor() or platform.machine()


def describe_machine() -> dict:
    """The CPU and the kernels torch picks for it, cores, GPUs and the versions of the libraries that train."""
    import torch

    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return {
        "cpu": cpu_name(_cpuinfo()),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cores": os.cpu_count(),
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        "python": platform.python_version(),
        **versions,
    }


def machine_summary(machine: dict) -> str:
    """One line of a report: `Intel(R) Xeon(R) Processor (AVX512), 2 cores, torch 2.13.0, transformers ...`."""
    gpus = f", {len(machine['gpus'])} x {machine['gpus'][0]}" if machine.get("gpus") else ""
    return (
        f"{machine.get('cpu')} ({machine.get('cpu_capability')}), {machine.get('cores')} cores{gpus}, "
        f"torch {machine.get('torch')}, transformers {machine.get('transformers')}, trl {machine.get('trl')}"
    )


CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # CPU flags of native bf16 arithmetic (AVX-512 BF16, Intel AMX)


@functools.cache
def _cpuinfo() -> str:
    """/proc/cpuinfo's text (empty on other systems), read once: the CPU does not change under a running process."""
    info = Path("/proc/cpuinfo")
    return info.read_text() if info.exists() else ""


def cpu_bf16_flags(cpuinfo: str | None = None) -> list[str]:
    """The native-bf16 flags this CPU reports in /proc/cpuinfo (none on other systems, or where it has none)."""
    cpuinfo = _cpuinfo() if cpuinfo is None else cpuinfo
    found = re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.M)
    flags = set(found.group(1).split()) if found else set()
    return [flag for flag in CPU_BF16_FLAGS if flag in flags]


def decide_bf16(asked: bool | str, what: str = "bf16") -> bool:
    """Whether to compute in bf16, for a setting that is True, False or "auto".

    On a GPU: as asked, "auto" where the GPU supports bf16. On a CPU, bf16 pays only where the CPU computes it
    natively (avx512_bf16 or AMX: about 2x the fp32 tokens/s); emulated, it is slower than fp32. So "auto" is bf16
    on such a CPU and fp32 elsewhere, and True on a CPU without them is a RunError naming the setting.
    """
    import torch

    if asked is False:
        return False
    if torch.cuda.is_available():
        return True if asked is True else torch.cuda.is_bf16_supported()
    native = bool(cpu_bf16_flags())
    if asked is True and not native:
        raise RunError(
            f"{what}: true, but this machine has no GPU and its CPU has no native bf16 ({' or '.join(CPU_BF16_FLAGS)} "
            "in /proc/cpuinfo); set it to auto (bf16 where native, else fp32) or false"
        )
    return native


# Where `accelerate launch` exports its config's mixed_precision; transformers' trainer arguments would take it
# for a stage whose bf16 is off, so coalign's trainers hold it to the stage's decision (`training.common.trl_config`).
LAUNCHER_PRECISION = "ACCELERATE_MIXED_PRECISION"


def precision_record(decided: dict[str, bool]) -> dict:
    """What the run folder keeps of its precision choices: each setting's decision, and the device and CPU flags
    they were made on (a run resumed on another machine may decide otherwise). Under a launcher that asked for a
    precision, also what it asked and the settings whose decision overrode it: the config decides what runs."""
    import torch

    record = {
        "bf16": decided,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "cpu_bf16_flags": cpu_bf16_flags(),
    }
    asked = os.environ.get(LAUNCHER_PRECISION)
    if asked:
        overridden = [name for name, bf16 in decided.items() if bf16 != (asked == "bf16")]
        record["launcher"] = {LAUNCHER_PRECISION: asked, "overridden": overridden}
    return record
