"""Every error a user's input can cause is one line, `error: ...`, naming the file, line and field or the option,
with exit status 2: usage errors (click printed a 5-6 line box), config errors (a heading, then one line per
field), YAML that does not parse (four lines at `"<unicode string>"`), a changed config on resume (several lines,
exit 1), and a fetch with the hub unreachable (11 retry lines over about 25 s first)."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coalign.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _error_line(args: list[str]) -> str:
    """The one line `coalign ARGS` prints, which must be an error, exit status 2."""
    result = runner.invoke(app, args, prog_name="coalign")
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["train", "tiny", "--set", "moat.k"], "error: coalign train: --set needs key=value, got 'moat.k'"),
        (["train", "tiny", "--bogus"], "error: coalign train: No such option: --bogus"),
        (["train"], "error: coalign train: Missing argument"),
        (["launch", "--bogus", "--", "train", "tiny"], "error: coalign launch: no such option: --bogus"),
        (["launch", "--nnodes", "x", "--", "train", "tiny"], "error: coalign launch: Invalid value for '--nnodes'"),
        (["launch", "--", "train", "tiny", "--bogus"], "error: coalign train: No such option: --bogus"),
        (["demo", "foo"], "error: coalign demo: the demos are moat, smol and pilotrl, got 'foo'"),
        (["data", "fetch", "foo"], "error: coalign data fetch: the sources are: lumos, eval; got 'foo'"),
        (["bench", "--seeds", "0,a"], "error: coalign bench: --seeds takes comma-separated integers"),
        (["nosuch"], "error: coalign: No such command 'nosuch'"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_command_and_option(args, expected):
    line = _error_line(args)
    assert line.startswith(expected) and line.endswith("--help)")


def test_help_is_printed_as_before():
    for args in ([], ["data"], ["train", "--help"]):
        result = runner.invoke(app, args, prog_name="coalign")
        assert "Usage: coalign" in result.output and "error:" not in result.output


def test_a_config_with_several_bad_fields_is_one_line_naming_each(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nplanner_sft:\n  lernrate: 3\n  epochs: many\n")
    line = _error_line(["train", str(path), "--run-dir", str(tmp_path / "run")])
    assert line.startswith(f"error: {path}, line ") and line.count(f"; {path}, line ") == 1
    assert f"{path}, line 3: field 'planner_sft.lernrate': unknown key (typo?)" in line
    assert f"{path}, line 4: field 'planner_sft.epochs': " in line
    line = _error_line(["train", "tiny", "--set", "moat.k=abc", "--run-dir", str(tmp_path / "run")])
    assert line.startswith("error: --set moat.k=abc: field 'moat.k': ")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        ("name: x\nmoat:\n  k: [4\n", "line 4, column 1", "(while parsing a flow sequence at line 3, column 6)"),
        ("name: x\nplanner_sft: epochs: 3\n", "line 2, column 20", "mapping values are not allowed here"),
    ],
)
def test_a_config_that_is_not_yaml_names_its_own_file_line_and_column(tmp_path, text, where, problem):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    line = _error_line(["train", str(path)])
    assert line.startswith(f"error: {path}, {where}: not valid YAML: ") and line.endswith(problem)


def test_a_changed_config_on_resume_is_one_line_with_the_keys_that_differ(tmp_path, monkeypatch):
    """The refusal `record_config` raises as SystemExit: Python printed it over several lines, exit status 1."""
    from coalign import registry
    from coalign.core.runs import Run
    from coalign.training.setup import record_config

    run = Run(tmp_path / "run")
    record_config(run, registry.load_config("tiny"))
    run.mark_done("planner_sft", [])

    def start(config, run_dir, console, force):  # the run as far as its config: no model, no data
        record_config(Run(run_dir), config, force)

    monkeypatch.setitem(registry.REGISTRY, "lumos", dataclasses.replace(registry.REGISTRY["lumos"], run=start))
    line = _error_line(["train", "tiny", "--run-dir", str(tmp_path / "run"), "--set", "seed=3"])
    assert line.startswith(f"error: {tmp_path / 'run' / 'config.yaml'} holds a different config: seed: 0 -> 3; ")
    assert "--force" in line


def test_check_gold_refuses_a_shipped_file_of_another_kind():
    line = _error_line(["data", "check-gold", "svamp", "shipped:gsm8k/test.jsonl"])
    assert line.startswith("error: coalign data check-gold: shipped:gsm8k/test.jsonl is a gsm8k file, not a svamp")


def test_a_lumos_fetch_with_the_hub_unreachable_fails_once_in_one_line(tmp_path):
    """One look-up that fails at once, not the hub client's five retries of each file, each printed."""
    with socket.socket() as free:  # a port nothing listens on: the connection is refused at once
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and k != "HF_HUB_OFFLINE"}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HOME=str(tmp_path / "hf"), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "coalign.cli", "data", "fetch", "lumos", "--out", "data", "--families", "maths"],
        capture_output=True, text=True, env={**env, "OMP_NUM_THREADS": "1"}, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stdout + done.stderr
    assert lines[0].startswith("error: could not fetch ai2lumos/lumos_maths_plan_onetime from the Hugging Face hub (")
    assert "download lumos_maths_plan_onetime.jsonl from https://huggingface.co/datasets/" in lines[0]
