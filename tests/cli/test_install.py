"""`make install` installs with uv, which reads no pip configuration: scripts/pip_install.py hands it pip's
settings. Checked against pip itself (`pip config list` on a config file and PIP_* variables) and against uv
itself (a dry run that can only resolve through the settings handed over)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pip_install.py"
spec = importlib.util.spec_from_file_location("pip_install", SCRIPT)
pip_install = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pip_install)


def pip_config_list(config: Path, **variables: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"PIP_CONFIG_FILE": str(config), **variables}
    command = [sys.executable, "-m", "pip", "config", "list"]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout


def test_a_variable_outranks_the_install_section_which_outranks_global(tmp_path: Path):
    config = tmp_path / "pip.conf"
    config.write_text(
        "[global]\nindex-url = https://global.example/simple\nfind-links = /from/file\n  /and/another\n"
        "extra-index-url = https://a.example/simple https://b.example/simple\ntrusted-host = a.example\n"
        "[install]\nindex-url = https://install.example/simple\n"
    )
    settings = pip_install.pip_settings(pip_config_list(config, PIP_TRUSTED_HOST="b.example"))
    assert settings["index-url"] == "https://install.example/simple"
    assert settings["trusted-host"] == "b.example"
    args, _ = pip_install.uv_options(settings)
    pairs = list(zip(args[::2], args[1::2]))
    assert ("--index-url", "https://install.example/simple") in pairs
    assert [v for k, v in pairs if k == "--find-links"] == ["/from/file", "/and/another"]  # pip's list, one by one
    assert [v for k, v in pairs if k == "--extra-index-url"] == ["https://a.example/simple", "https://b.example/simple"]
    assert ("--allow-insecure-host", "b.example") in pairs and ("--allow-insecure-host", "a.example") not in pairs
    assert ("--index-strategy", "unsafe-best-match") in pairs  # pip takes the best version over every index


def test_the_certificate_and_no_index_are_handed_over(tmp_path: Path):
    config = tmp_path / "pip.conf"
    config.write_text("[global]\ncert = /etc/my-proxy.pem\nno-index = true\n")
    args, env = pip_install.uv_options(pip_install.pip_settings(pip_config_list(config)))
    assert env == {"SSL_CERT_FILE": "/etc/my-proxy.pem"}
    assert "--no-index" in args


def wheel(folder: Path, name: str, version: str) -> None:
    """A pure-Python wheel holding one empty module, written by hand: a package no index has."""
    dist = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w") as whl:
        whl.writestr(f"{name.replace('-', '_')}/__init__.py", "")
        whl.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        whl.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                     "Tag: py3-none-any\n")  # fmt: skip
        whl.writestr(f"{dist}.dist-info/RECORD", "")


def test_uv_resolves_from_the_wheel_folder_and_no_index_pip_is_told_of(tmp_path: Path):
    """The folder and no-index come from pip's config file and a PIP_* variable only: uv, told nothing else, finds
    the newest of two local versions (a dry run: nothing is installed) and reaches no index."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("1.0", "1.1"):
        wheel(wheels, "coalign-probe-pkg", version)
    config = tmp_path / "pip.conf"
    config.write_text("[install]\nno-index = true\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env |= {"PIP_CONFIG_FILE": str(config), "PIP_FIND_LINKS": str(wheels), "UV_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, str(SCRIPT), "--dry-run", "coalign-probe-pkg"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "coalign-probe-pkg==1.1" in done.stdout + done.stderr
    env.pop("PIP_FIND_LINKS")  # without pip's folder, uv has nowhere to find it
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "not found in the provided package locations" in " ".join(done.stderr.split())  # uv wraps its lines


@pytest.mark.slow
def test_the_vllm_extra_is_in_trls_range_and_resolves_on_linux_with_the_projects_torch(tmp_path: Path):
    """A GPU user's `pip install -e '.[vllm]'` gets a vLLM that TRL supports, and one whose own pins take the torch
    the Makefile installs and coalign's transformers: resolved by uv for Linux x86_64 through pip's settings (the
    package index make install uses), nothing installed."""
    import tomllib
    from importlib.metadata import requires

    from packaging.requirements import Requirement
    from packaging.version import Version
    from uv import find_uv_bin

    root = SCRIPT.parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    (extra,) = [Requirement(r) for r in project["optional-dependencies"]["vllm"]]
    (trls,) = [Requirement(r) for r in requires("trl") if r.startswith("vllm") and 'extra == "vllm"' in r]
    ours = {s.operator: Version(s.version) for s in extra.specifier}
    theirs = {s.operator: Version(s.version) for s in trls.specifier}
    assert ours[">="] >= theirs[">="] and (ours.get("<") or ours["<="]) <= theirs["<="]  # within TRL's range
    torch = re.search(r"echo (torch==[\d.]+)", (root / "Makefile").read_text()).group(1)
    wanted = tmp_path / "requirements.in"
    wanted.write_text("\n".join([*project["dependencies"], str(extra), torch]) + "\n")
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    args, env = pip_install.uv_options(pip_install.pip_settings(listing))
    command = [find_uv_bin(), "pip", "compile", str(wanted), "--python-version", "3.11",
               "--python-platform", "x86_64-manylinux_2_28", "-q", *args]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env}, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    pins = dict(line.split("==", 1) for line in done.stdout.splitlines() if "==" in line and not line.startswith(" "))
    assert pins["vllm"] in extra.specifier and pins["vllm"] in trls.specifier
    assert f"torch=={pins['torch'].split('+')[0]}" == torch  # this machine's index: the CPU build, 2.13.0+cpu
