"""`coalign data fetch eval` from local copies of the public originals (never the network): the files the paper
configs evaluate on, byte for byte, recorded; a changed or unreachable file names its source and keeps what was
written before it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coalign.cli import app
from coalign.config import BUNDLED, load_config
from coalign.tasks import eval_sets
from coalign.tasks.eval_sets import EVAL_SETS, fetch_eval_sets
from coalign.tasks.fetch import FetchError
from coalign.tasks.sources import load_sources

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
pytestmark = pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"{SHARED_DATA} not found beside the checkout")


class Origins:
    """Stands in for the download: each published file served from ../shared/data (which holds the originals),
    some URLs down or serving other bytes, and every call counted."""

    def __init__(self, down: tuple[str, ...] = (), altered: tuple[str, ...] = ()):
        self.down, self.altered, self.calls = down, altered, []
        self.files = {item.url: _local(item.path) for items in EVAL_SETS.values() for item in items}

    def __call__(self, url: str) -> bytes:
        self.calls.append(url)
        if url in self.down:
            raise OSError("<urlopen error [Errno -3] Temporary failure in name resolution>")
        data = self.files[url].read_bytes()
        return data.replace(b"a", b"b", 1) if url in self.altered else data


def _local(path: str) -> Path:
    name = Path(path)
    return SHARED_DATA / name.name if name.name == "LUMOS_LICENSE" else SHARED_DATA / name


@pytest.mark.slow
def test_fetch_writes_the_originals_and_the_paper_configs_evaluate_on_them(tmp_path, monkeypatch):
    origins = Origins()
    record = fetch_eval_sets(tmp_path / "data" / "eval", get=origins)
    for items in EVAL_SETS.values():
        for item in items:
            assert (tmp_path / "data" / "eval" / item.path).read_bytes() == _local(item.path).read_bytes()
            assert record["files"][item.path]["sha256"] == item.sha256
            assert record["files"][item.path]["source"] == item.url
    assert json.loads((tmp_path / "data" / "eval" / "fetch.json").read_text()) == record
    monkeypatch.chdir(tmp_path)  # the configs' paths are relative to the folder a run starts in
    for name in ("paper", "paper-moat-llama2-7b", "paper-moat-mistral-7b", "paper-moat-qwen2.5-14b"):
        data = load_config(name).data
        fetched = [s for s in data.heldin + data.heldout if s.kind not in ("mind2web", "webshop")]
        assert fetched and all(str(s.path).startswith("data/eval/") for s in fetched)
        assert load_sources([s.model_copy(update={"n": 2}) for s in fetched])
    calls = len(origins.calls)
    fetch_eval_sets(tmp_path / "data" / "eval", get=origins)
    assert len(origins.calls) == calls  # files already the originals are not downloaded again


def test_no_bundled_config_reads_the_shared_folder():
    assert not [p.name for p in BUNDLED.glob("*.yaml") if "shared/data" in p.read_text()]


def test_a_file_that_is_not_the_original_is_refused_and_earlier_files_kept(tmp_path):
    bad = EVAL_SETS["svamp"][0]
    with pytest.raises(FetchError, match=r"SVAMP\.json: sha256 [0-9a-f]{64}, not the original's") as err:
        fetch_eval_sets(tmp_path, ["gsm8k", "svamp"], get=Origins(altered=(bad.url,)))
    assert "point the config's data.heldin/heldout `path` at your copy" in str(err.value)
    assert not (tmp_path / bad.path).exists() and not list(tmp_path.rglob(".*.tmp"))
    record = json.loads((tmp_path / "fetch.json").read_text())
    assert sorted(record["files"]) == sorted(item.path for item in EVAL_SETS["gsm8k"])


def test_an_unreachable_origin_names_the_file_and_how_to_get_it(tmp_path):
    down = EVAL_SETS["hotpotqa"][0]
    with pytest.raises(FetchError, match="could not fetch .*hotpotqa/test.json.*Temporary failure") as err:
        fetch_eval_sets(tmp_path, ["strategyqa", "hotpotqa"], get=Origins(down=(down.url,)))
    assert f"Download it yourself to {tmp_path / down.path}" in str(err.value)
    assert (tmp_path / "strategyqa" / "test.json").is_file()


def test_the_command_fetches_the_chosen_sets_and_refuses_unknown_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(eval_sets, "download", Origins())
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, ["data", "fetch", "eval", "--out", str(out), "--families", "svamp"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (out / "svamp").iterdir()) == ["LICENSE", "SVAMP.json"]
    result = CliRunner().invoke(app, ["data", "fetch", "eval", "--out", str(out), "--families", "mind2web"])
    assert result.exit_code == 2 and "--families" in result.output
