"""Agent Lumos's training sets from the Hugging Face hub, saved as the JSONL files the paper configs read.

Each family has a planner and a grounder set, `ai2lumos/lumos_{maths,complex_qa}_{plan,ground}_onetime` and
`ai2lumos/lumos_web_agent_{plan,ground}_iterative` (web: the formulation coalign's web family runs, and the
only one the hub has). Each set is written to `OUT/<set name>.jsonl` atomically and recorded in
`OUT/fetch.json` (source id, revision, datasets' fingerprint, rows, size, sha256) as soon as it is written,
so a download that fails later keeps everything written before it. Then each family's two files are read
back with coalign's own Lumos loader, the one a run uses: a row the run would refuse is reported now, with
its file, line and field, not hours later. The download is a parameter (`load`, `load_from_hub` by
default), so tests fetch from local fixtures and never from the network.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset, load_dataset
from rich.console import Console

from coalign.core.errors import SkippedRows
from coalign.core.runs import file_digest, write_json, write_jsonl
from coalign.tasks.lumos import load_lumos_tasks

Loader = Callable[..., Dataset]  # called as load(dataset_id, split="train", revision=revision), as load_dataset
RECORD = "fetch.json"
LOOKUP_TIMEOUT_S = 10.0  # the one look-up before a download (`load_from_hub`)
ROLES = ("plan", "ground")  # the planner's set, then the grounder's


@dataclass(frozen=True)
class LumosSet:
    """One family's sets on the hub: `ai2lumos/lumos_{name}_{role}_{formulation}` for role plan and ground."""

    name: str
    formulation: str

    def file(self, role: str) -> str:
        """The JSONL file name, the one the paper configs' `data.train` give."""
        return f"lumos_{self.name}_{role}_{self.formulation}.jsonl"

    def source(self, role: str) -> str:
        return f"ai2lumos/{self.file(role).removesuffix('.jsonl')}"


LUMOS_SETS = {
    "maths": LumosSet("maths", "onetime"),
    "qa": LumosSet("complex_qa", "onetime"),
    "web": LumosSet("web_agent", "iterative"),
}


class FetchError(RuntimeError):
    """A dataset that could not be downloaded; the message names it and says how to use a local copy instead."""


def load_from_hub(source: str, split: str = "train", revision: str = "main") -> Dataset:
    """`load_dataset` after one look-up of the set on the hub, which fails at once offline (and names a set or
    revision the hub lacks): `load_dataset` itself retried for about 25 s, printing 11 lines, before it failed.
    Under HF_HUB_OFFLINE there is no look-up: `load_dataset` reads the local cache."""
    from huggingface_hub import HfApi, constants

    if not constants.HF_HUB_OFFLINE:
        HfApi().dataset_info(source, revision=revision, timeout=LOOKUP_TIMEOUT_S)
    return load_dataset(source, split=split, revision=revision)


def fetch_lumos(
    out: str | Path,
    families: Sequence[str] = tuple(LUMOS_SETS),
    load: Loader = load_from_hub,
    revision: str = "main",
    skip_bad_rows: bool = False,
    console: Console | None = None,
) -> dict:
    """Download, write, record and check the Lumos sets of `families` (keys of LUMOS_SETS) into `out`.

    Returns the record, also in `out/fetch.json`, whose entries from earlier fetches are kept. A download
    that fails raises FetchError. A row the Lumos loader refuses raises DataError (file, line, field) once
    its family's files are written; with `skip_bad_rows` such rows are counted in the family's record
    instead, and a run reading the files then needs its own `skip_bad_rows`.
    """
    out, console = Path(out), console or Console(quiet=True)
    record = read_record(out / RECORD)
    for family in families:
        lumos = LUMOS_SETS[family]
        record["families"].pop(family, None)  # its files are about to change: no stale task count
        planner, grounder = (_fetch_set(lumos, role, out, load, revision, record, console) for role in ROLES)
        skipped = SkippedRows() if skip_bad_rows else None
        tasks = load_lumos_tasks(planner, grounder, skipped)
        record["families"][family] = {
            "planner": planner.name,
            "grounder": grounder.name,
            "tasks": len(tasks),
            **(skipped.summary() if skipped else {}),
        }
        write_json(out / RECORD, record)
        dropped = f", {len(skipped.errors)} bad rows left out" if skipped and skipped.errors else ""
        console.print(f"{family}: {len(tasks):,} tasks read back by coalign's Lumos loader{dropped}", markup=False)
    return record


def _fetch_set(
    lumos: LumosSet, role: str, out: Path, load: Loader, revision: str, record: dict, console: Console
) -> Path:
    """One set downloaded, written to its file and recorded; FetchError if the download fails."""
    source, path = lumos.source(role), out / lumos.file(role)
    try:
        dataset = load(source, split="train", revision=revision)
    except Exception as exc:  # whatever the downloader raises (offline, no such set, a refused token) ends here
        raise FetchError(_unreachable(source, path, exc)) from exc
    write_jsonl(path, dataset)
    record["files"][path.name] = {
        "source": source,
        "split": "train",
        "revision": revision,
        "fingerprint": dataset._fingerprint,  # datasets' hash of what it loaded: another revision, another value
        **file_digest(path),
        "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    write_json(out / RECORD, record)
    console.print(f"{source}: {record['files'][path.name]['rows']:,} rows -> {path}", markup=False)
    return path


def _unreachable(source: str, path: Path, exc: Exception) -> str:
    """One line: the set that failed, why, and how to train from a local copy instead."""
    lines = str(exc).strip().splitlines()
    reason = lines[0] if lines else "no message"
    return (
        f"could not fetch {source} from the Hugging Face hub ({type(exc).__name__}: {reason}); files fetched "
        f"before it are kept. Without the hub, download {path.name} from https://huggingface.co/datasets/{source} "
        f"to {path}, or point the config's data.train `path` (planner rows) / `grounder_path` (grounder rows) at "
        "your copy"
    )


def read_record(path: Path) -> dict:
    """The record of earlier fetches into this folder, so fetching one family keeps the others' entries."""
    if not path.exists():
        return {"files": {}, "families": {}}
    try:
        record = json.loads(path.read_text())
    except ValueError:
        record = None
    if not isinstance(record, dict):
        raise FetchError(f"{path}: not a fetch record (a JSON object); move it away to fetch again")
    return {"files": record.get("files", {}), "families": record.get("families", {})}
