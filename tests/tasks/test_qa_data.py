"""StrategyQA and HotpotQA loaders (Agent Lumos's evaluation copies) and their data source kinds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coalign.config import ConfigError, load_config
from coalign.core.errors import DataError, SkippedRows
from coalign.formats.answers import squad_exact_match, strategyqa_match
from coalign.tasks.hotpotqa import load_hotpotqa
from coalign.tasks.sources import load_sources, source_name
from coalign.tasks.strategyqa import load_strategyqa

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
needs_data = pytest.mark.skipif(
    not DATA.is_dir(), reason=f"real QA files not found under {DATA} (../shared/data beside the checkout)"
)

STRATEGY = {"question": " Would a pear sink in water? ", "answer": False}
HOTPOT = {"question": "Who is older, Annie Morton or Terry Richardson?", "answer": "Terry Richardson", "type": "bridge"}


def _write(tmp_path: Path, records: object) -> Path:
    path = tmp_path / "test.json"
    path.write_text(json.dumps(records))
    return path


def test_strategyqa_record_to_task(tmp_path: Path) -> None:
    (no, yes) = load_strategyqa(_write(tmp_path, [STRATEGY, {**STRATEGY, "answer": True}]))
    assert (no.id, no.family, no.dataset, no.question) == (
        "strategyqa-1",
        "qa",
        "strategyqa",
        STRATEGY["question"].strip(),
    )
    assert (no.answer, yes.answer) == ("no", "yes") and yes.id == "strategyqa-2"
    assert no.subgoals == no.actions == () and no.meta == {"source": "test.json"}
    assert strategyqa_match("No, it floats.", no.answer == "yes") and strategyqa_match("Yes.", yes.answer == "yes")


def test_hotpotqa_record_to_task(tmp_path: Path) -> None:
    (task,) = load_hotpotqa(_write(tmp_path, [HOTPOT]))
    assert (task.id, task.family, task.dataset, task.answer) == ("hotpotqa-1", "qa", "hotpotqa", "Terry Richardson")
    assert task.subgoals == task.actions == () and task.meta == {"source": "test.json", "type": "bridge"}
    assert squad_exact_match("terry richardson.", task.answer)


@pytest.mark.parametrize(
    ("loader", "good", "change", "field", "problem"),
    [
        (load_strategyqa, STRATEGY, {"answer": "true"}, "answer", "expected bool, got str"),
        (load_strategyqa, STRATEGY, {"answer": 1}, "answer", "expected bool, got int"),
        (load_strategyqa, STRATEGY, {"question": None}, "question", "expected str, got null"),
        (load_strategyqa, STRATEGY, {"question": "  "}, "question", "empty text"),
        (load_hotpotqa, HOTPOT, {"answer": 3677}, "answer", "expected str, got int"),
        (load_hotpotqa, HOTPOT, {"answer": ""}, "answer", "empty text"),
        (load_hotpotqa, HOTPOT, {"type": "compare"}, "type", "expected one of bridge, comparison, got 'compare'"),
    ],
)
def test_a_malformed_record_names_file_record_and_field(tmp_path, loader, good, change, field, problem) -> None:
    path = _write(tmp_path, [good, {**good, **change}])
    with pytest.raises(DataError) as info:
        loader(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 2, field)
    assert f"{path}, line 2: field '{field}': {problem}" == str(info.value)


@pytest.mark.parametrize(("loader", "good"), [(load_strategyqa, STRATEGY), (load_hotpotqa, HOTPOT)])
def test_bad_records_are_skipped_and_counted_when_asked(tmp_path, loader, good) -> None:
    path = _write(tmp_path, [good, {**good, "answer": None}, "not a record", {**good, "question": " "}, good])
    skipped = SkippedRows()
    tasks = loader(path, skipped)
    assert [t.id.rsplit("-", 1)[1] for t in tasks] == ["1", "5"]
    assert [(e.line, e.reason) for e in skipped.errors] == [
        (2, "wrong type 'answer'"),
        (3, "not an object"),
        (4, "empty 'question'"),
    ]


@pytest.mark.parametrize("loader", [load_strategyqa, load_hotpotqa])
def test_missing_fields_wrong_shapes_and_bad_json(tmp_path: Path, loader) -> None:
    path = _write(tmp_path, [{"answer": True, "type": "bridge"}])
    with pytest.raises(DataError, match=r"line 1: field 'question': missing"):
        loader(path)
    path = _write(tmp_path, {"question": "q"})
    with pytest.raises(DataError, match="expected a JSON list of .* records, got dict"):
        loader(path)
    path = _write(tmp_path, ["not a record"])
    with pytest.raises(DataError, match="line 1: expected a JSON object, got str"):
        loader(path)
    path.write_text('[\n{"question": ')
    with pytest.raises(DataError, match=r"line 2: invalid JSON"):
        loader(path)


@needs_data
def test_real_strategyqa_file() -> None:
    tasks = load_strategyqa(DATA / "strategyqa" / "test.json")
    assert len(tasks) == 2290 and len({t.id for t in tasks}) == 2290
    assert tasks[0].question == "Is it common to see frost during some college commencements?"
    assert tasks[0].answer == "yes" and tasks[2].answer == "no"  # "Would a pear sink in water?"
    assert {t.answer for t in tasks} == {"yes", "no"} and sum(t.answer == "yes" for t in tasks) == 1071


@needs_data
def test_real_hotpotqa_file() -> None:
    tasks = load_hotpotqa(DATA / "hotpotqa" / "test.json")
    assert len(tasks) == 7405
    assert sum(t.meta["type"] == "comparison" for t in tasks) == 1487
    assert (tasks[0].answer, tasks[1].answer) == ("yes", "Chief of Protocol")


@needs_data
def test_qa_kinds_load_through_the_config(tmp_path: Path) -> None:
    config = tmp_path / "qa.yaml"
    config.write_text(
        "name: qa\ndata:\n  train:\n    - {kind: qa_suite, split: train, n: 5}\n  heldout:\n"
        f"    - {{kind: strategyqa, path: {DATA / 'strategyqa' / 'test.json'}, n: 3}}\n"
        f"    - {{kind: hotpotqa, path: {DATA / 'hotpotqa' / 'test.json'}, n: 4}}\n"
    )
    data = load_config(config).data
    assert [source_name(s) for s in [*data.train, *data.heldout]] == ["qa-suite-train", "strategyqa", "hotpotqa"]
    assert [t.id for t in load_sources(data.train)] == [f"qa-train-{i:05d}" for i in range(5)]
    heldout = load_sources(data.heldout)
    assert [t.dataset for t in heldout] == ["strategyqa"] * 3 + ["hotpotqa"] * 4


def test_qa_suite_kind_needs_split_and_n(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ndata:\n  train:\n    - {kind: qa_suite, n: 5}\n")
    with pytest.raises(ConfigError, match="kind 'qa_suite' needs 'split' and 'n'"):
        load_config(path)
    path.write_text("name: x\ndata:\n  train:\n    - {kind: hotpotqa}\n")
    with pytest.raises(ConfigError, match="kind 'hotpotqa' needs 'path'"):
        load_config(path)
