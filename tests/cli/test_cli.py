"""The `coalign` command: exec prints a trace; bad configs and data fail with a located message or are skipped."""

import json

import pytest
import typer
import yaml
from typer.testing import CliRunner

from coalign.cli import app
from tests.moat.test_baseline import TINY

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


def test_exec_refuses_an_unknown_domain_without_a_traceback():
    result = runner.invoke(app, ["exec", "--domain", "nope"], input="R1 = Calculator(1)")
    assert result.exit_code == 2 and "--domain must be one of maths, qa" in result.output
    assert not isinstance(result.exception, KeyError)


def test_exec_reports_bytes_that_are_not_utf8_as_a_step_error():
    result = runner.invoke(app, ["exec"], input=b"R1 = Calculator(\xff1); R2 = Calculator(2)")
    assert result.exit_code == 0
    trace = json.loads(result.stdout)
    assert trace["error"].startswith("step 1: Calculator: unexpected character") and len(trace["steps"]) == 2


def test_train_with_misspelt_key_exits_with_file_line_and_key(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("name: x\ndata:\n  train:\n    - {kind: suite, split: train, n: 10}\ngrounder_sft:\n  epoch: 3\n")
    result = runner.invoke(app, ["train", str(config), "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "line 6" in result.output and "grounder_sft.epoch" in result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["planner_sft.epochs=[["], "not valid YAML"),
        (["planner_sft..epochs=2"], "dotted key"),
        (["planner_sft=3", "planner_sft.epochs=2"], "given a value by another --set"),
        (["planner_sft.epochs=2", "planner_sft=3"], "its fields are given values by another --set"),
        (["moat.k=4", "moat.k=8"], "--set moat.k is given twice: --set moat.k=4 and --set moat.k=8"),
    ],
)
def test_a_bad_set_is_a_usage_error_naming_it(tmp_path, sets, message):
    args = ["train", "tiny", "--run-dir", str(tmp_path / "run")]
    for pair in sets:
        args += ["--set", pair]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and message in " ".join(result.output.replace("│", " ").split())
    assert not (tmp_path / "run").exists()


def test_an_error_in_a_set_value_names_the_set_and_a_file_value_its_line(tmp_path):
    config = tmp_path / "mini.yaml"
    config.write_text("name: mini\nlora: {r: 4}\ndata:\n  train: [{kind: suite, split: train, n: 4}]\n")
    args = ["train", str(config), "--run-dir", str(tmp_path / "run")]
    result = runner.invoke(app, [*args, "--set", "lora.r=0", "--set", "seed=3"])
    assert result.exit_code == 2 and "--set lora.r=0: field 'lora.r': Input should be greater" in result.output
    assert "mini.yaml, line" not in result.output
    result = runner.invoke(app, [*args, "--set", "lora={r: 0}"])  # a mapping given whole: its fields are the set's
    assert "--set lora={r: 0}: field 'lora.r'" in result.output
    config.write_text(config.read_text().replace("r: 4", "r: 0"))
    result = runner.invoke(app, [*args, "--set", "lora.alpha=8"])  # another field of the block set: the file's r
    assert f"{config}, line 2: field 'lora.r'" in result.output and "--set" not in result.output
    assert not (tmp_path / "run").exists()


def test_a_conflict_between_sets_names_those_that_make_it():
    from coalign.cli import _overrides
    from coalign.config import ConfigError
    from coalign.registry import load_config

    sets = ["seed=3", "generation.backend=vllm", "lora.merge=false"]
    with pytest.raises(ConfigError) as err:
        load_config("tiny", _overrides(sets))
    named = "--set generation.backend=vllm, --set lora.merge=false: field '(top level)': "  # these two, no other
    assert str(err.value).startswith(named) or f"; {named}" in str(err.value)
    with pytest.raises(ConfigError, match=r"--set moat.k=1: field 'moat': .*k must be >= 2"):
        load_config("tiny", _overrides(["moat.k=1"]))


def test_a_start_with_a_missing_data_file_leaves_no_run_folder(tmp_path):
    """Found before anything is written, naming the config key: a retry is a new start, not a changed config."""
    config = tmp_path / "paper.yaml"
    missing = tmp_path / "data" / "plan.jsonl"
    source = f"{{kind: lumos, path: {missing}, grounder_path: {missing}}}"
    config.write_text(f"name: p\ndata:\n  train: [{{kind: suite, split: train, n: 4}}]\n  heldout: [{source}]\n")
    result = runner.invoke(app, ["train", str(config), "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert f"data.heldout[0].path: {missing}: no such file or folder" in result.output.replace("\n", "")
    assert "coalign data fetch lumos" in result.output.replace("\n", "")
    assert not (tmp_path / "run").exists()


def test_check_gold_reports_a_malformed_line(tmp_path):
    bad = tmp_path / "gsm8k.jsonl"
    bad.write_text('{"question": "q", "answer": "#### 3"}\n{"question": 5, "answer": "#### 3"}\n')
    result = runner.invoke(app, ["data", "check-gold", "gsm8k", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}, line 2: field 'question'" in result.output


def _bad_data_config(tmp_path):
    """The pipeline test's tiny config, training on a GSM8K file whose lines 2 and 4 are bad and evaluating on a
    copy of it (a set trained on is refused as an evaluation set)."""
    data, heldin = tmp_path / "test.jsonl", tmp_path / "heldin.jsonl"
    good = json.dumps({"question": "Tom has 2 apples and gets 3. How many?", "answer": "2+3=<<2+3=5>>5\n#### 5"})
    for path in (data, heldin):
        path.write_text("\n".join([good, '{"question": ', good, json.dumps({"answer": "#### 1"})]) + "\n")
    config = {
        **TINY,
        "data": {
            "train": [{"kind": "suite", "split": "train", "n": 24}, {"kind": "gsm8k", "path": str(data)}],
            "heldin": [{"kind": "gsm8k", "path": str(heldin)}],
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, data, heldin


def test_train_stops_at_the_first_bad_row_or_skips_and_records_bad_rows(tmp_path):
    config, data, heldin = _bad_data_config(tmp_path)
    stopped = runner.invoke(app, ["train", str(config), "--run-dir", str(tmp_path / "strict")])
    assert stopped.exit_code == 2 and f"{heldin}, line 2: invalid JSON" in stopped.output  # read before training
    assert not (tmp_path / "strict").exists()

    result = runner.invoke(app, ["train", str(config), "--run-dir", str(tmp_path / "run"), "--skip-bad-rows"])
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "train: skipped 2 bad rows (invalid JSON x1, missing field 'question' x1)" in output
    assert "heldin/gsm8k: skipped 2 bad rows" in output
    record = json.loads((tmp_path / "run" / "data.json").read_text())
    assert record["train"]["tasks"] == 26 and record["heldin/gsm8k"]["tasks"] == 2
    for label, path in (("train", data), ("heldin/gsm8k", heldin)):
        assert record[label]["skipped_rows"] == 2
        assert record[label]["by_reason"] == {"invalid JSON": 1, "missing field 'question'": 1}
        assert record[label]["examples"][1] == f"{path}, line 4: field 'question': missing"
    assert "skip_bad_rows: true" in (tmp_path / "run" / "config.yaml").read_text()


def test_check_gold_can_skip_bad_rows(tmp_path):
    _, data, _ = _bad_data_config(tmp_path)
    result = runner.invoke(app, ["data", "check-gold", "gsm8k", str(data), "--skip-bad-rows"])
    assert result.exit_code == 0
    output = " ".join(result.output.split())  # however the console wraps
    assert "skipped 2 bad rows" in output and "on 2/2 tasks" in output
    assert "skipped 2 bad rows" in result.output  # not hard-wrapped when the output is not a terminal


def test_eval_without_sets_says_so(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"name": "x", "data": {"train": [{"kind": "suite", "split": "train", "n": 4}]}}))
    result = runner.invoke(app, ["eval", str(config), "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2 and "nothing to evaluate" in result.output


def test_eval_of_a_missing_run_folder_is_a_clear_error(tmp_path):
    missing = tmp_path / "nowhere" / "run"
    result = runner.invoke(app, ["eval", "tiny", "--run-dir", str(missing)])
    assert result.exit_code == 2
    assert f"error: {missing}: no such run folder" in result.output and "Traceback" not in result.output
    assert not missing.exists()  # nothing created


def test_eval_of_a_missing_run_folder_names_the_config_as_given(tmp_path):
    """The moat evaluator, looked up in the registry, suggests the train command with the config as it was named."""
    from coalign.config import resolve_config_path

    config, missing = resolve_config_path("tiny"), tmp_path / "run"
    result = runner.invoke(app, ["eval", str(config), "--run-dir", str(missing)])
    assert result.exit_code == 2
    assert f"train first (coalign train {config} --run-dir {missing}) or give --planner" in " ".join(
        result.output.split()
    )


def test_bench_takes_variants_and_recipes_as_a_hidden_alias(tmp_path):
    """`--variants` names what a bench compares; `--recipes`, as the commands in docs/ give it, still works."""
    help_text = runner.invoke(app, ["bench", "--help"]).output
    assert "--variants" in help_text and "--recipes" not in help_text
    for option in ("--variants", "--recipes"):
        result = runner.invoke(app, ["bench", "tiny", "--run-dir", str(tmp_path / "b"), option, "nope", "--seeds", "0"])
        assert result.exit_code == 2 and "unknown moat bench variant 'nope'" in result.output
    assert not (tmp_path / "b").exists()


def test_every_demo_is_a_bench_of_its_config_that_the_demo_help_names():
    """The demos are the registry's (`DEMOS`); the CLI names them in its help without loading the registry."""
    from coalign.cli import _config
    from coalign.registry import DEMOS, recipe

    help_text = " ".join(runner.invoke(app, ["demo", "--help"]).output.split())
    assert f"which demo: {', '.join(list(DEMOS)[:-1])} or {list(DEMOS)[-1]}" in help_text
    for demo in DEMOS.values():
        config = _config(demo.config, list(demo.settings))
        assert set(demo.variants) <= set(recipe(config.recipe).bench_variants)


def test_eval_reads_a_shipped_base_name_as_its_folder_not_a_hub_id(tmp_path):
    from coalign.cli import _checkpoint
    from coalign.models.bases import base_path, shipped_bases

    name = shipped_bases()[0]
    assert _checkpoint(name) == str(base_path(name))
    (tmp_path / "ckpt").mkdir()
    assert _checkpoint(str(tmp_path / "ckpt")) == str(tmp_path / "ckpt") and _checkpoint(None) is None
    missing = runner.invoke(app, ["eval", "tiny", "--run-dir", str(tmp_path / "run"), "--planner", str(tmp_path / "x")])
    assert missing.exit_code == 2 and "no such model folder" in missing.output
    result = runner.invoke(app, ["eval", "tiny", "--run-dir", str(tmp_path / "run"), "--grounder", "scratch"])
    assert result.exit_code == 2 and "scratch: a from-scratch model exists only inside a run" in result.output
    assert not (tmp_path / "run").exists()


def test_data_suite_writes_the_qa_family_as_lumos_rows_that_load_back(tmp_path):
    from coalign.tasks.lumos import load_lumos_tasks
    from coalign.tasks.qa_suite import generate_qa_suite

    result = runner.invoke(app, ["data", "suite", "--out", str(tmp_path), "--n", "3", "--family", "qa"])
    assert result.exit_code == 0, result.output
    loaded = load_lumos_tasks(tmp_path / "heldout.plan_onetime.jsonl", tmp_path / "heldout.ground_onetime.jsonl")
    expected = generate_qa_suite("heldout", 3)
    assert [(t.family, t.question, t.actions) for t in loaded] == [(t.family, t.question, t.actions) for t in expected]
    assert runner.invoke(app, ["data", "suite", "--out", str(tmp_path), "--family", "web"]).exit_code == 2


def test_data_suite_writes_the_maths_composed_stories_and_near_set_beside_the_three_splits(tmp_path):
    result = runner.invoke(app, ["data", "suite", "--out", str(tmp_path), "--n", "3"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.glob("*.tasks.jsonl")) == [
        f"{split}.tasks.jsonl" for split in ("composed", "heldin", "heldout", "near", "train")
    ]
    rows = [json.loads(line) for line in (tmp_path / "composed.tasks.jsonl").read_text().splitlines()]
    assert [row["meta"]["template"] for row in rows] == ["composed"] * 3
    qa = tmp_path / "qa"
    assert runner.invoke(app, ["data", "suite", "--out", str(qa), "--n", "2", "--family", "qa"]).exit_code == 0
    assert not (qa / "composed.tasks.jsonl").exists() and not (qa / "near.tasks.jsonl").exists()


def test_check_gold_runs_a_bundled_suites_gold_plans_through_its_tools():
    result = runner.invoke(app, ["data", "check-gold", "suite", "--family", "qa", "--n", "40"])
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    for split in ("train", "heldin", "heldout"):
        assert f"qa suite, {split}: gold actions reproduce the answer on 40/40 tasks" in output
    assert "QA answer match" in output and "Lumos exact match" not in output
    assert runner.invoke(app, ["data", "check-gold", "gsm8k"]).exit_code == 2  # a file kind needs its path


def test_sets_of_a_mapping_and_its_fields_merge_in_either_order():
    from coalign.cli import _overrides

    one = _overrides(["moat.k=2", "moat={rounds: 3}"])
    assert one == _overrides(["moat={rounds: 3}", "moat.k=2"]) == {"moat": {"k": 2, "rounds": 3}}
    with pytest.raises(typer.BadParameter, match="given twice"):  # one key twice: which was meant is unknown
        _overrides(["moat.k=2", "moat.k=5"])
