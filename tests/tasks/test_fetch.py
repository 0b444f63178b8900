"""`coalign data fetch lumos` on local fixtures (never the network): the files the paper configs read, their record
in fetch.json, and failures that name the dataset or the bad row while keeping what was written."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from datasets import Dataset, load_from_disk
from typer.testing import CliRunner

from coalign.cli import app
from coalign.config import load_config
from coalign.core.errors import DataError
from coalign.tasks import fetch as data_fetch
from coalign.tasks.fetch import LUMOS_SETS, ROLES, FetchError, fetch_lumos
from coalign.tasks.lumos import task_to_iterative_rows, task_to_rows
from coalign.tasks.maths_suite import generate_suite
from coalign.tasks.qa_suite import generate_qa_suite
from coalign.tasks.sources import load_sources
from coalign.tasks.web_suite import generate_web_suite

ROOT = Path(__file__).resolve().parents[2]
COUNTS = {"maths": 3, "qa": 3, "web": 2}


def lumos_rows(family: str) -> dict[str, list[dict]]:
    """Planner and grounder rows of a few bundled tasks, in the hub's format (web: the iterative formulation)."""
    generate = {"maths": generate_suite, "qa": generate_qa_suite, "web": generate_web_suite}[family]
    to_rows = task_to_iterative_rows if family == "web" else task_to_rows
    pairs = [to_rows(task) for task in generate("train", COUNTS[family], 0)]
    return {"plan": [p.to_json() for p, _ in pairs], "ground": [g.to_json() for _, g in pairs]}


class LocalHub:
    """Stands in for `datasets.load_dataset`: each set read from a folder saved under its hub id; `down` sets fail
    as an unreachable hub does."""

    def __init__(self, root: Path, down: tuple[str, ...] = ()):
        self.root, self.down, self.calls = root, down, []

    def __call__(self, source: str, split: str, revision: str) -> Dataset:
        self.calls.append((source, split, revision))
        if source in self.down:
            raise ConnectionError(f"Couldn't reach '{source}' on the Hub (LocalEntryNotFoundError)")
        return load_from_disk(self.root / source)


def save_hub(root: Path, rows: dict[str, dict[str, list[dict]]]) -> Path:
    for family, by_role in rows.items():
        for role in ROLES:
            Dataset.from_list(by_role[role]).save_to_disk(root / LUMOS_SETS[family].source(role))
    return root


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[str, list[dict]]]:
    return {family: lumos_rows(family) for family in LUMOS_SETS}


@pytest.fixture(scope="module")
def hub(tmp_path_factory, rows) -> Path:
    return save_hub(tmp_path_factory.mktemp("hub"), rows)


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_fetch_writes_the_rows_as_the_files_the_paper_config_reads(tmp_path, monkeypatch, hub, rows):
    monkeypatch.chdir(tmp_path)
    load = LocalHub(hub)
    fetch_lumos("data", load=load)
    assert load.calls == [(LUMOS_SETS[f].source(role), "train", "main") for f in LUMOS_SETS for role in ROLES]
    for family, lumos in LUMOS_SETS.items():
        for role in ROLES:
            assert read_rows(Path("data", lumos.file(role))) == rows[family][role]
    tasks = load_sources(load_config("paper-moat-llama2-7b").data.train)
    assert [t.family for t in tasks] == ["maths"] * 3 + ["qa"] * 3 + ["web"] * 2
    assert [t.id for t in tasks] == [row["id"] for family in LUMOS_SETS for row in rows[family]["plan"]]


def test_fetch_json_records_source_revision_fingerprint_rows_and_sha256(tmp_path, hub):
    record = fetch_lumos(tmp_path, ["maths"], load=LocalHub(hub), revision="v1")
    assert json.loads((tmp_path / "fetch.json").read_text()) == record
    lumos = LUMOS_SETS["maths"]
    assert sorted(record["files"]) == sorted(lumos.file(role) for role in ROLES)
    for role in ROLES:
        path, entry = tmp_path / lumos.file(role), record["files"][lumos.file(role)]
        assert (entry["source"], entry["split"], entry["revision"]) == (lumos.source(role), "train", "v1")
        assert entry["fingerprint"] == load_from_disk(hub / lumos.source(role))._fingerprint
        assert entry["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert (entry["rows"], entry["size"]) == (3, path.stat().st_size)
    assert record["families"]["maths"] == {"planner": lumos.file("plan"), "grounder": lumos.file("ground"), "tasks": 3}


def test_a_failed_download_names_the_set_and_keeps_every_file_and_record_before_it(tmp_path, hub):
    fetch_lumos(tmp_path, ["maths"], load=LocalHub(hub))
    maths = {path.name: path.read_bytes() for path in tmp_path.glob("lumos_maths_*.jsonl")}
    qa = LUMOS_SETS["qa"]
    earlier = tmp_path / qa.file("ground")
    earlier.write_text("an earlier copy\n")
    with pytest.raises(FetchError) as failed:
        fetch_lumos(tmp_path, ["qa", "web"], load=LocalHub(hub, down=(qa.source("ground"),)))
    message = str(failed.value)
    assert "\n" not in message and message.startswith(f"could not fetch {qa.source('ground')} ")
    assert "ConnectionError" in message and "grounder_path" in message and str(earlier) in message
    assert {path.name: path.read_bytes() for path in tmp_path.glob("lumos_maths_*.jsonl")} == maths
    assert earlier.read_text() == "an earlier copy\n"  # not touched by the failed download
    assert (tmp_path / qa.file("plan")).is_file() and not list(tmp_path.glob("lumos_web_*"))
    record = json.loads((tmp_path / "fetch.json").read_text())
    assert sorted(record["files"]) == sorted([*maths, qa.file("plan")])
    assert list(record["families"]) == ["maths"]


def test_a_bad_row_is_reported_with_file_line_and_field_and_skipping_counts_it(tmp_path, rows):
    bad = json.loads(json.dumps(rows["maths"]))
    bad["plan"][1]["messages"][1]["role"] = "robot"
    hub = save_hub(tmp_path / "hub", {"maths": bad})
    out = tmp_path / "data"
    with pytest.raises(DataError) as refused:
        fetch_lumos(out, ["maths"], load=LocalHub(hub))
    plan = out / LUMOS_SETS["maths"].file("plan")
    assert (refused.value.path, refused.value.line, refused.value.field) == (str(plan), 2, "messages[1].role")
    assert sorted(json.loads((out / "fetch.json").read_text())["files"]) == sorted(
        LUMOS_SETS["maths"].file(role) for role in ROLES
    )  # both files written and recorded: the hub's rows as they are
    family = fetch_lumos(out, ["maths"], load=LocalHub(hub), skip_bad_rows=True)["families"]["maths"]
    assert family["tasks"] == 2  # the bad planner row and the grounder row it leaves unpaired are left out
    assert family["by_reason"] == {"invalid value 'messages[].role'": 1, "unpaired row 'id'": 1}


def test_cli_fetches_from_the_given_hub_and_reports_a_bad_row_with_its_location(tmp_path, monkeypatch, hub, rows):
    """The command as typed, its download pointed at local fixtures (it reads `fetch_lumos` when it runs)."""
    fetch, runner, out = data_fetch.fetch_lumos, CliRunner(), tmp_path / "data"

    def fetch_from(root: Path):
        monkeypatch.setattr(data_fetch, "fetch_lumos", lambda *args, **kw: fetch(*args, load=LocalHub(root), **kw))
        return runner.invoke(app, ["data", "fetch", "lumos", "--out", str(out), "--families", "qa"])

    fetched = fetch_from(hub)
    assert fetched.exit_code == 0 and "qa: 3 tasks read back" in fetched.output
    bad = json.loads(json.dumps(rows["qa"]))
    bad["plan"][1]["messages"][1]["role"] = "robot"
    refused = fetch_from(save_hub(tmp_path / "bad-hub", {"qa": bad}))
    assert refused.exit_code == 2
    assert f"error: {out / LUMOS_SETS['qa'].file('plan')}, line 2: field 'messages[1].role'" in refused.output
    assert "--skip-bad-rows" in refused.output


def test_cli_refuses_an_unknown_family_or_source():
    runner = CliRunner()
    assert runner.invoke(app, ["data", "fetch", "lumos", "--families", "maths,code"]).exit_code == 2
    assert runner.invoke(app, ["data", "fetch", "agentgym"]).exit_code == 2


def test_cli_offline_fails_with_one_line_naming_the_set_and_keeps_earlier_files(tmp_path):
    out = tmp_path / "data"
    out.mkdir()
    earlier = out / LUMOS_SETS["maths"].file("plan")
    earlier.write_text("an earlier copy\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-m", "coalign.cli", "data", "fetch", "lumos", "--out", str(out), "--families", "maths"],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: could not fetch ai2lumos/lumos_maths_plan_onetime ")
    assert "data.train `path`" in errors[0]
    assert earlier.read_text() == "an earlier copy\n"
