"""The run folder's manifests: a stage is done only while what it wrote and read is as recorded."""

import hashlib
import json
import logging

import pytest

from coalign.core import runs
from coalign.core.runs import Run, atomic_dir, atomic_write_text, file_digest, write_jsonl


@pytest.fixture
def run(tmp_path):
    run = Run(tmp_path / "run")
    write_jsonl(run.path("a.jsonl"), [{"i": 1}, {"i": 2}])
    run.mark_done("a", [run.path("a.jsonl")])
    return run


def test_a_finished_stage_records_size_checksum_and_rows(run):
    record = run.stage_info("a")
    data = run.path("a.jsonl").read_bytes()
    assert record["artifacts"]["a.jsonl"] == {"size": 18, "sha256": hashlib.sha256(data).hexdigest(), "rows": 2}
    assert record["config_sha256"] is None and record["inputs"] == {}
    assert run.is_done("a")


@pytest.mark.parametrize(
    "damage, expected",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-4]), "a.jsonl: size 18 -> 14"),
        (lambda p: p.write_bytes(p.read_bytes().replace(b"2", b"3")), "a.jsonl: sha256"),
        (lambda p: p.unlink(), "a.jsonl: missing"),
    ],
)
def test_a_damaged_artifact_is_reported_and_its_stage_undone(run, caplog, damage, expected):
    damage(run.path("a.jsonl"))
    with caplog.at_level(logging.WARNING):
        assert not run.is_done("a")
    assert f"stage a is redone: {expected}" in caplog.text
    assert not run.path("stages", "a.json").exists()


def test_a_stage_is_undone_when_an_input_it_read_changed(run):
    write_jsonl(run.path("b.jsonl"), [{"from": "a"}])
    run.mark_done("b", [run.path("b.jsonl")], inputs=[run.path("a.jsonl")])
    assert run.is_done("b")
    write_jsonl(run.path("a.jsonl"), [{"i": 1}])  # `a` redone with a different result
    run.mark_done("a", [run.path("a.jsonl")])
    assert run.is_done("a") and not run.is_done("b")


def test_an_unreadable_or_manifestless_record_is_not_done(run, caplog):
    run.path("stages", "a.json").write_text('{"stage": "a", "finished_at": "2024-01-01T00:00:00"}\n')
    assert not run.is_done("a")
    run.mark_done("a", [run.path("a.jsonl")])
    run.path("stages", "a.json").write_text(run.path("stages", "a.json").read_text()[:40])
    with caplog.at_level(logging.WARNING):
        assert not run.is_done("a")
    assert "a.json is not a readable manifest" in caplog.text


def test_folders_are_listed_file_by_file_relative_to_the_run(run, tmp_path):
    checkpoint = run.path("checkpoints", "x")
    with atomic_dir(checkpoint) as tmp:
        (tmp / "model.safetensors").write_bytes(b"\0" * 10)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "config.json").write_text("{}")
    outside = tmp_path / "base.bin"
    outside.write_bytes(b"base")
    run.mark_done("x", [checkpoint], inputs=[outside, "org/hub-model-id"])
    record = run.stage_info("x")
    assert list(record["artifacts"]) == ["checkpoints/x/model.safetensors", "checkpoints/x/sub/config.json"]
    assert list(record["inputs"]) == [str(outside)]
    (checkpoint / "sub" / "config.json").write_text("{ }")
    assert not run.is_done("x")


def test_large_files_are_hashed_by_sampled_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(runs, "WHOLE_HASH_LIMIT", 64)
    monkeypatch.setattr(runs, "SAMPLE_BLOCK", 4)
    path = tmp_path / "weights.bin"
    data = bytearray(range(256)) * 2  # 512 bytes: 16 blocks of 4 at offsets 0, 33, 67, ..., 508
    path.write_bytes(data)
    before = file_digest(path)
    assert set(before) == {"size", "sha256_sampled"}
    data[34] ^= 1  # inside the second sampled block
    path.write_bytes(data)
    assert file_digest(path)["sha256_sampled"] != before["sha256_sampled"]
    data[34] ^= 1
    data[40] ^= 1  # between sampled blocks: not read, by design
    path.write_bytes(data)
    assert file_digest(path) == before


def test_data_files_are_hashed_whole_whatever_their_size(tmp_path, monkeypatch):
    monkeypatch.setattr(runs, "WHOLE_HASH_LIMIT", 4)
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n' * 3)
    assert set(file_digest(path)) == {"size", "sha256", "rows"}


def test_an_interrupted_folder_save_leaves_the_old_folder(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_dir(target) as tmp:
        (tmp / "w").write_text("old")
    with pytest.raises(RuntimeError), atomic_dir(target) as tmp:
        (tmp / "w").write_text("half")
        raise RuntimeError("killed")
    assert (target / "w").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_write_interrupted_before_its_rename_leaves_nothing_once_redone(tmp_path):
    target = tmp_path / "x.json"
    (tmp_path / ".x.json.tmp").write_text('{"half')  # what a kill between write and rename leaves
    atomic_write_text(target, json.dumps({"whole": True}))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]


def test_a_stage_runs_its_work_once_and_not_after_it_fails(tmp_path):
    run, calls = Run(tmp_path), []

    def work() -> dict:
        calls.append(1)
        run.path("out.jsonl").write_text('{"a": 1}\n')
        return {"rows": 1}

    run.stage("s", work, [run.path("out.jsonl")])
    run.stage("s", work, [run.path("out.jsonl")])
    assert len(calls) == 1 and run.stage_info("s")["rows"] == 1 and "out.jsonl" in run.stage_info("s")["artifacts"]

    def fail() -> dict:
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        run.stage("t", fail, [])
    assert not run.is_done("t")


def test_a_stage_is_redone_when_what_it_depends_on_changes(tmp_path, caplog):
    """An evaluation kept by a forced resume must not report its old task set as the new one's."""
    run, calls = Run(tmp_path), []

    def work() -> None:
        calls.append(1)
        run.path("out.jsonl").write_text(f'{{"n": {len(calls)}}}\n')

    run.stage("eval", work, [run.path("out.jsonl")], depends_on={"eval_tasks": 5, "envs": ("a", "b")})
    run.stage("eval", work, [run.path("out.jsonl")], depends_on={"envs": ["a", "b"], "eval_tasks": 5})  # same, as JSON
    assert len(calls) == 1 and run.stage_info("eval")["settings"] == {"envs": ["a", "b"], "eval_tasks": 5}
    with caplog.at_level(logging.WARNING):
        run.stage("eval", work, [run.path("out.jsonl")], depends_on={"eval_tasks": 10, "envs": ["a", "b"]})
    assert len(calls) == 2 and "stage eval is redone: setting eval_tasks: 5 -> 10" in caplog.text
    assert run.stage_info("eval")["settings"]["eval_tasks"] == 10


def test_a_record_without_dependencies_stands_only_while_the_config_is_unchanged(tmp_path, caplog):
    """Stages recorded without their dependencies: the config they ran under tells whether they still hold."""
    run = Run(tmp_path)
    atomic_write_text(run.path("config.yaml"), "eval_tasks: 5\n")
    run.path("out.jsonl").write_text("{}\n")
    run.mark_done("eval", [run.path("out.jsonl")])  # recorded without dependencies
    assert run.is_done("eval", {"eval_tasks": 5})
    atomic_write_text(run.path("config.yaml"), "eval_tasks: 10\n")  # a forced resume with another config
    assert run.is_done("eval")  # a stage without dependencies is kept, as --force promises
    with caplog.at_level(logging.WARNING):
        assert not run.is_done("eval", {"eval_tasks": 10})
    assert "settings were not recorded and the config has changed" in caplog.text


def test_a_stage_asked_to_read_other_inputs_is_redone(tmp_path, caplog):
    """A forced resume with another starting model: the old model's files are intact, but the stage read
    them, not the new one's, so its checkpoint is not the new one's (nor for a hub id that changed)."""
    run, calls = Run(tmp_path / "run"), []
    for name in ("base-a", "base-b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(name.encode())

    def work() -> None:
        calls.append(1)
        run.path("out.txt").write_text(str(len(calls)))

    run.stage("sft", work, [run.path("out.txt")], inputs=[tmp_path / "base-a"])
    run.stage("sft", work, [run.path("out.txt")], inputs=[tmp_path / "base-a"])
    assert len(calls) == 1
    with caplog.at_level(logging.WARNING):
        run.stage("sft", work, [run.path("out.txt")], inputs=[tmp_path / "base-b"])
    assert len(calls) == 2 and "inputs are other paths now" in caplog.text and "base-b" in caplog.text
    run.stage("sft", work, [run.path("out.txt")], inputs=["org/model-1"])
    run.stage("sft", work, [run.path("out.txt")], inputs=["org/model-1"])
    run.stage("sft", work, [run.path("out.txt")], inputs=["org/model-2"])
    assert len(calls) == 4
    record = run.stage_info("sft")  # a record from before input paths were kept: compared by its files
    del record["input_paths"]
    record["inputs"] = run.manifest([tmp_path / "base-a"])
    run.path("stages", "sft.json").write_text(json.dumps(record))
    assert run.is_done("sft", inputs=[tmp_path / "base-a"])
    assert not run.is_done("sft", inputs=[tmp_path / "base-b"])


def test_stage_seconds_lists_each_timed_stage_in_the_order_it_finished(tmp_path):
    """A record without a time (older runs, `mark_done` without `started`) or unreadable is left out."""
    run = Run(tmp_path / "run")
    run.mark_done("sft", [], started=0.0)
    run.mark_done("untimed", [])
    run.path("stages", "broken.json").write_text("{")
    for name, at in (("sft", "2026-12-07T10:00:00"), ("eval_k1", "2026-12-07T09:00:00")):
        record = json.loads(run.path("stages", f"{name}.json").read_text()) if name == "sft" else {}
        run.path("stages", f"{name}.json").write_text(json.dumps({**record, "finished_at": at, "seconds": 12.5}))
    assert list(run.stage_seconds().items()) == [("eval_k1", 12.5), ("sft", 12.5)]
