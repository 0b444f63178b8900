"""The benchmark files shipped in coalign/data: the originals, checked when read, loaded by their loaders; and
GSM8K's deferred subgoals, which leave every result to the grounder. Needs nothing outside the checkout."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from coalign.config import ConfigError, DataSource, config_to_yaml, load_config
from coalign.core.errors import DataError
from coalign.tasks import Task, shipped
from coalign.tasks.gsm8k import _WRITTEN_NUMBER, _value, steps_to_plan
from coalign.tasks.shipped import SHIPPED, shipped_file
from coalign.tasks.sources import load_source, load_sources

COUNTS = {  # tasks per data file, as the loaders give them (no row is bad)
    "gsm8k/train.jsonl": 7473,
    "gsm8k/test.jsonl": 1319,
    "gsm8k/test_socratic.jsonl": 1319,
    "svamp/SVAMP.json": 1000,
    "strategyqa/test.json": 2290,
    "hotpotqa/test.json": 7405,
}


def _load(name: str, **options) -> list[Task]:
    return load_source(DataSource(kind=name.split("/")[0], path=f"shipped:{name}", **options))


@pytest.fixture(scope="module")
def deferred_train() -> list[Task]:
    return _load("gsm8k/train.jsonl", subgoals="deferred")


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_file_is_the_original(name: str) -> None:
    assert shipped_file(name) == shipped.DATA / name


def test_the_readme_lists_every_shipped_file_with_its_sha256() -> None:
    table = dict(re.findall(r"^\| (\S+) \|.*`([0-9a-f]{64})` \|$", (shipped.DATA / "README.md").read_text(), re.M))
    assert table == SHIPPED
    files = {p.relative_to(shipped.DATA).as_posix() for p in shipped.DATA.glob("*/*")}
    assert files == set(SHIPPED) | {"hotpotqa/NOTICE"}


@pytest.mark.parametrize("name", sorted(set(COUNTS) - {"gsm8k/train.jsonl"}))  # train: below
def test_each_data_file_loads_through_its_loader(name: str) -> None:
    tasks = _load(name)
    assert len(tasks) == COUNTS[name] and len({t.id for t in tasks}) == len(tasks)


@pytest.mark.slow
def test_deferred_subgoals_change_no_action(deferred_train: list[Task]) -> None:
    assert len(deferred_train) == COUNTS["gsm8k/train.jsonl"]
    assert deferred_train[0].subgoals == (
        "Natalia sold 48/2 clips in May.",
        "Natalia sold 48+R1 clips altogether in April and May.",
    )
    written, deferred = _load("gsm8k/test.jsonl"), _load("gsm8k/test.jsonl", subgoals="deferred")
    assert [(t.id, t.actions, t.answer) for t in written] == [(t.id, t.actions, t.answer) for t in deferred]
    assert written[0].subgoals[0] == "Janet sells 16 - 3 - 4 = 9 duck eggs a day."
    assert deferred[0].subgoals[0] == "Janet sells 16-3-4 duck eggs a day."


@pytest.mark.slow
def test_no_deferred_train_subgoal_holds_its_own_steps_result(deferred_train: list[Task]) -> None:
    """A result a step computes is in its deferred subgoal only where the question gives that number too, or the
    calculation itself uses it (`1*2`). Written subgoals hold one in nearly every step."""
    rows = [json.loads(line) for line in (shipped.DATA / "gsm8k/train.jsonl").read_text().splitlines()]
    holding = {"written": 0, "deferred": 0}
    for task, row in zip(deferred_train, rows, strict=True):
        steps = [step for step in row["answer"].partition("####")[0].splitlines() if step.strip()]
        for step, subgoal in zip(steps, task.subgoals, strict=True):
            calculations = steps_to_plan([step])[2]
            results = {_value(result) for _, result, _ in calculations} - {None}
            computed = results - _numbers(task.question) - {n for e, _, _ in calculations for n in _numbers(e)}
            holding["deferred"] += bool(_numbers(subgoal) & computed)
            holding["written"] += bool(_numbers(re.sub(r"<<[^<>]*>>", "", step)) & computed)
    assert holding["deferred"] == 0 and holding["written"] > 20_000


def _numbers(text: str) -> set:
    return {_value(number) for number in _WRITTEN_NUMBER.findall(text)}


def _copy(tmp_path: Path, name: str) -> Path:
    copy = tmp_path / name
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shipped.DATA / name, copy)
    return copy


def test_an_altered_copy_is_refused_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "svamp/SVAMP.json"
    copy = _copy(tmp_path, name)
    monkeypatch.setattr(shipped, "DATA", tmp_path)
    assert len(_load(name)) == COUNTS[name]  # an unaltered copy is read, and remembered as checked
    data = bytearray(copy.read_bytes())
    data[100] ^= 1
    copy.write_bytes(bytes(data))
    os.utime(copy, ns=(copy.stat().st_atime_ns, copy.stat().st_mtime_ns + 1_000_000_000))  # an edit moves mtime
    with pytest.raises(DataError) as err:
        _load(name)
    message = str(err.value)
    assert message.startswith(f"{copy}: sha256 ") and f"not the original's {SHIPPED[name]}" in message
    assert "reinstall coalign" in message


def test_a_missing_or_unknown_file_is_refused_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shipped, "DATA", tmp_path)
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'gsm8k/test.jsonl'}: missing from this install")):
        shipped_file("gsm8k/test.jsonl")
    with pytest.raises(DataError, match=r"shipped:nope.json: no such shipped file \(coalign ships gsm8k/LICENSE, "):
        shipped_file("nope.json")


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("{kind: gsm8k, path: 'shipped:nope.json'}", "no shipped file 'nope.json'; coalign ships: shipped:gsm8k/"),
        ("{kind: gsm8k, path: 'shipped:gsm8k/LICENSE'}", "no shipped file 'gsm8k/LICENSE'"),
        ("{kind: svamp, path: 'shipped:gsm8k/test.jsonl'}", "shipped:gsm8k/test.jsonl is a gsm8k file, not one of"),
    ],
)
def test_a_config_naming_no_shipped_data_file_fails_naming_file_line_and_field(
    tmp_path: Path, source: str, problem: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: x\ndata:\n  train:\n    - {{kind: suite, split: train, n: 4}}\n  heldin:\n    - {source}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}, line 6: field 'data.heldin.0.path': Value error, {problem}" in str(err.value)


def test_deferred_subgoals_are_for_gsm8k_only(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ndata:\n  train:\n    - kind: svamp\n      path: x.json\n      subgoals: deferred\n")
    with pytest.raises(ConfigError, match=r"line 6: field 'data.train.0.subgoals': .*for kind gsm8k only"):
        load_config(path)


def test_a_config_reads_shipped_files_and_saves_the_subgoal_style_only_when_deferred(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        "name: x\ndata:\n  train:\n    - {kind: gsm8k, path: 'shipped:gsm8k/test.jsonl', n: 2, subgoals: deferred}\n"
        "  heldin:\n    - {kind: gsm8k, path: 'shipped:gsm8k/test_socratic.jsonl', n: 2}\n"
    )
    config = load_config(path)
    assert load_sources(config.data.train)[0].subgoals[0] == "Janet sells 16-3-4 duck eggs a day."
    assert load_sources(config.data.heldin)[0].subgoals[0] == "How many eggs does Janet sell?"
    saved = config_to_yaml(config)  # configs saved before the option had no `subgoals`: they must still match
    assert "subgoals: deferred" in saved and "subgoals" not in yaml.safe_load(saved)["data"]["heldin"][0]
    (tmp_path / "saved.yaml").write_text(saved)
    assert load_config(tmp_path / "saved.yaml") == config


@pytest.mark.parametrize(
    ("steps", "deferred"),
    [
        (  # the expression written before the annotation becomes the action's; a result used later is its R#
            ["Natalia sold 48/2 = <<48/2=24>>24 clips in May.", "Natalia sold 48+24 = <<48+24=72>>72 clips in all."],
            ("Natalia sold 48/2 clips in May.", "Natalia sold 48+R1 clips in all."),
        ),
        (  # spelled otherwise, or a chain: still the action's expression
            ["She earned 0.2 x $60 = $<<0.2*60=12>>12.", "The truck sold 3 + 2 * 10 = 3 + 20 = <<3+2*10=23>>23 tacos."],
            ("She earned 0.2*60.", "The truck sold 3+2*10 tacos."),
        ),
        (  # no expression written: the action's in place of the result
            ["She pays $<<4*5=20>>20.", "Total = <<20+3=23>>23 dollars, so she has 23 left."],
            ("She pays $4*5.", "Total = R1+3 dollars, so she has R2 left."),
        ),
        (  # written out without an annotation, and a result stated before its calculation
            ["The heels cost 33 * 2 = $<<33*2=66>>66.", "So the boots cost 66 + 5 = $71.", "He has 71 because 71 = 71"],
            ("The heels cost 33*2.", "So the boots cost R1 + 5.", "He has R2 because R2 = R2"),
        ),
        (  # written otherwise than the action (`2 1/2` for 2.5): kept, only the result goes
            ["It takes 2 1/2 x 4 = <<2.5*4=10>>10 cups."],
            ("It takes 2 1/2 x 4 cups.",),
        ),
        (  # values worked out by algebra go
            ["And the sum would be x+2*x=30 games.", "And the value of x=<<10=10>>10 games.", "Carla won 2x=20 games."],
            ("And the sum would be x+2*x=30 games.", "And the value of x games.", "Carla won 2x games."),
        ),
        (  # socratic steps keep their sub-questions
            ["How many in May? ** Natalia sold 48/2 = <<48/2=24>>24 clips in May."],
            ("How many in May?",),
        ),
    ],
)
def test_deferred_subgoals_leave_the_arithmetic_to_the_grounder(steps: list[str], deferred: tuple[str, ...]) -> None:
    subgoals, actions, calculations = steps_to_plan(steps, "deferred")
    assert subgoals == deferred
    assert (actions, calculations) == steps_to_plan(steps)[1:]


def test_numbers_the_question_gives_stay_as_written() -> None:
    steps = ["Four $5 bills are $5 x 4 = $<<5*4=20>>20.", "Three $20 bills are $20 x 3 = $<<20*3=60>>60."]
    subgoals, actions, _ = steps_to_plan(steps, "deferred", question="Gail has four $5 bills and three $20 bills.")
    assert subgoals == ("Four $5 bills are 5*4.", "Three $20 bills are R1*3.")  # as the action: `R1*3`
    assert actions == ("R1 = Calculator(5*4)", "R2 = Calculator(R1*3)")
