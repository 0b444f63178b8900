"""The optional extras resolve with the stack `make install` builds (torch, transformers, TRL as pinned) and
import: deepspeed is installed by `make install` (its ZeRO-3 path is tested in tests/training/test_sharded.py);
bitsandbytes, which only a CUDA GPU runs (lora.qlora), is installed here into a folder of its own and imported
from there."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def extra(name: str) -> Requirement:
    """The one requirement of the pyproject's extra `name`."""
    (spec,) = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"][name]
    return Requirement(spec)


def unmet(requirements: list[str] | None) -> list[str]:
    """Of a distribution's requirements (no extras asked), those this environment's installed versions miss."""
    missing = []
    for text in requirements or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            installed = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(f"{req} (not installed)")
            continue
        if installed not in req.specifier:
            missing.append(f"{req} (installed {installed})")
    return missing


@pytest.mark.slow
def test_the_deepspeed_extra_is_installed_at_its_pin_and_imports_beside_the_stack():
    pin = extra("deepspeed")
    assert importlib.metadata.version("deepspeed") in pin.specifier
    assert unmet(importlib.metadata.requires("deepspeed")) == []
    done = subprocess.run(
        [sys.executable, "-c", "import deepspeed, transformers, trl; from transformers import LlamaConfig"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
def test_the_qlora_extra_resolves_with_the_stack_and_imports(tmp_path):
    pin = extra("qlora")
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
    done = subprocess.run([*install, "--target", str(target), str(pin)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (dist,) = importlib.metadata.distributions(path=[str(target)])
    assert dist.version in pin.specifier
    assert unmet(dist.requires) == []  # its torch, numpy, ... are those of the stack
    code = "import bitsandbytes, transformers; print(bitsandbytes.__version__)"
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and done.stdout.split()[-1] == dist.version, done.stderr[-2000:]
