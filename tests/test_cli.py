"""The `coalign` command: exec prints a trace; bad configs fail with a located message."""

import json

from typer.testing import CliRunner

from coalign.cli import app

runner = CliRunner()


def test_exec_prints_trace_as_json():
    result = runner.invoke(
        app, ["exec", "--domain", "maths"], input="R1 = Calculator(28 * 1/7); R2 = Calculator(28 - R1)"
    )
    assert result.exit_code == 0
    trace = json.loads(result.stdout)
    assert trace["answer"] == "24" and trace["error"] is None and len(trace["steps"]) == 2


def test_exec_records_hostile_input_as_error_without_running_it():
    result = runner.invoke(app, ["exec"], input="R1 = Calculator(__import__('os').system('echo pwned'))")
    assert result.exit_code == 0
    trace = json.loads(result.stdout)
    assert trace["answer"] is None and trace["error"]
    assert "pwned" not in result.stdout.replace("echo pwned", "")


def test_train_with_misspelt_key_exits_with_file_line_and_key(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("name: x\ndata:\n  train:\n    - {kind: suite, split: train, n: 10}\ngrounder_sft:\n  epoch: 3\n")
    result = runner.invoke(app, ["train", str(config), "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "line 6" in result.output and "grounder_sft.epoch" in result.output
    assert not (tmp_path / "run").exists()


def test_check_gold_reports_a_malformed_line(tmp_path):
    bad = tmp_path / "gsm8k.jsonl"
    bad.write_text('{"question": "q", "answer": "#### 3"}\n{"question": 5, "answer": "#### 3"}\n')
    result = runner.invoke(app, ["data", "check-gold", "gsm8k", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}, line 2: field 'question'" in result.output
