"""What a run ran on: a bench's per-seed numbers repeat byte for byte on one machine, thread count and set of
library versions, and move by a few points on another (docs/log/moat-bench.md, *A team of two bases*), so
results record it."""

from __future__ import annotations

import os
import platform
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate")


def cpu_name(cpuinfo: str) -> str:
    """The CPU's model name from /proc/cpuinfo's text (Linux), or platform's guess elsewhere."""
    found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    return found.group(1).strip() if found else platform.processor() or platform.machine()


def describe_machine() -> dict:
    """The CPU and the kernels torch picks for it, cores, GPUs and the versions of the libraries that train."""
    import torch

    info = Path("/proc/cpuinfo")
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return {
        "cpu": cpu_name(info.read_text() if info.exists() else ""),
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
