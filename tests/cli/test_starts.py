"""A start's checks: every data file a run reads is read before any stage trains, sets that must not be trained on
are refused, and a start that fails leaves no folder behind (issue 74, items 2, 4 and 6).

Each start here must stop before training: `no_training` fails a test whose start reaches it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coalign.cli import app
from coalign.moat import baseline, bench, recipe

runner = CliRunner()
GOOD = json.dumps({"question": "Tom has 2 apples and gets 3. How many?", "answer": "2+3=<<2+3=5>>5\n#### 5"})


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cold start, where every lumos and moat run (and bench) begins training, fails the test."""

    def cold_starts(*args, **kwargs):
        raise AssertionError("a start that should have stopped reached training")

    for module in (baseline, recipe, bench):
        monkeypatch.setattr(module, "cold_starts", cold_starts)


def _gsm8k(path: Path, bad_line: int | None = None) -> Path:
    """A GSM8K file of three problems; `bad_line`'s question is a number."""
    rows = [json.dumps({"question": 5, "answer": "#### 5"}) if i == bad_line else GOOD for i in (1, 2, 3)]
    path.write_text("\n".join(rows) + "\n")
    return path


def _start(command: str, run_dir: Path, *sets: str, config: str = "tiny") -> list[str]:
    args = [command, config, "--run-dir", str(run_dir)]
    if command == "bench":
        args += ["--seeds", "0", "--variants", "lumos,moat"]
    for pair in sets:
        args += ["--set", pair]
    return args


@pytest.mark.parametrize("command", ["train", "bench"])
@pytest.mark.parametrize("split", ["heldin", "heldout", "train"])
def test_a_bad_row_in_any_data_file_stops_the_start_before_anything_is_made(tmp_path, no_training, command, split):
    """A GSM8K held-in file whose line 3 has `"question": 5` was read only once training had finished."""
    bad = _gsm8k(tmp_path / "test.jsonl", bad_line=3)
    result = runner.invoke(app, _start(command, tmp_path / "run", f"data.{split}=[{{kind: gsm8k, path: {bad}}}]"))
    assert result.exit_code == 2, result.output
    assert f"error: {bad}, line 3: field 'question': expected str, got int" in result.output
    assert not (tmp_path / "run").exists()


def test_a_refused_llm_critic_leaves_no_run_folder(tmp_path, no_training):
    """Refused once the training tasks show web turns: before the folder is made, not after "run folder ..."."""
    sets = (
        "moat.critic=llm",
        "moat.critic_options={base_url: 'http://127.0.0.1:9/v1', model: critic}",
        "data.train=[{kind: web_suite, split: train, n: 4}]",
    )
    result = runner.invoke(app, _start("train", tmp_path / "run", *sets, config="tiny-web-moat"))
    assert result.exit_code == 2 and "error: moat.critic llm cannot judge web turns" in result.output
    assert "run folder" not in result.output and not (tmp_path / "run").exists()


@pytest.mark.parametrize("kind", ["strategyqa", "hotpotqa"])
def test_an_evaluation_only_set_is_refused_for_training(tmp_path, no_training, kind):
    """data.md labels them "(evaluation only)": their test questions have no gold plans to fine-tune on."""
    source = f'{{kind: {kind}, path: "shipped:{kind}/test.json"}}'
    result = runner.invoke(app, _start("train", tmp_path / "run", f"data.train=[{source}]"))
    assert result.exit_code == 2, result.output
    assert "field 'data.train.0': " in result.output and f"kind '{kind}' is evaluation only" in result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("train", "evaluated", "same"),
    [
        ("{kind: gsm8k, path: FILE}", "data.heldout=[{kind: gsm8k, path: FILE, n: 1}]", "(FILE)"),
        ("{kind: gsm8k, path: FILE}", "data.heldin=[{kind: gsm8k, path: ABS}]", "(ABS)"),
        ("{kind: suite, split: heldin, n: 8}", "data.heldin=[{kind: suite, split: heldin, n: 4}]", "(suite split"),
    ],
)
def test_a_training_set_is_refused_as_an_evaluation_set(tmp_path, monkeypatch, no_training, train, evaluated, same):
    """The same file (however its path is written) or the same generated split, trained on and scored."""
    monkeypatch.chdir(tmp_path)
    _gsm8k(tmp_path / "train.jsonl")

    def spelt(text: str) -> str:
        return text.replace("FILE", "train.jsonl").replace("ABS", str(tmp_path / "train.jsonl"))

    sets = [spelt(f"data.train=[{train}]"), spelt(evaluated)]
    result = runner.invoke(app, _start("train", tmp_path / "run", *sets))
    assert result.exit_code == 2, result.output
    split = evaluated.split("=")[0]
    assert f"field '{split}.0': " in result.output
    assert f"data.train[0] trains on the same set {spelt(same)}" in result.output
    assert not (tmp_path / "run").exists()
