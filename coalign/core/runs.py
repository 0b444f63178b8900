"""The run folder: one place per run for its config, artifacts, checkpoints and metrics.

Files are written atomically (temp file + rename; checkpoint folders are built under a temporary
name and renamed), and a stage counts as finished only once its record `stages/<name>.json`
exists: a manifest of what the stage wrote and read (size, sha256, jsonl rows). A record whose
files no longer match it is removed and its stage redone, so a killed run resumes at the first
unfinished stage and a damaged artifact is never read as if it were whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from coalign.core import ranks
from coalign.core.errors import RunError
from coalign.core.memory import release_memory

log = logging.getLogger(__name__)

WHOLE_HASH_LIMIT = 64 * 2**20
SAMPLE_BLOCK = 2**20
SAMPLE_BLOCKS = 16
DATA_SUFFIXES = (".json", ".jsonl")
# a stage shorter than this loaded no model worth handing back, and a full collection costs 0.1-0.2 s in a
# process that has imported torch and transformers (`core.memory`)
RELEASE_AFTER_S = 5.0
SHARED_WAIT_S = 10.0  # a filesystem that caches lookups may show another node a new file a moment late


def temp_sibling(path: Path) -> Path:
    """One fixed temporary name per target, so a write interrupted by a kill leaves nothing behind once
    the same file is written again (each file of a run folder has one writer)."""
    return path.with_name(f".{path.name}.tmp")


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) as `atomic_write_bytes` does."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` so that readers see the old file or the new one, never half of it. In a multi-process
    run only the main rank writes (`ranks`): the others computed the same bytes."""
    path = Path(path)
    if not ranks.is_main():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    try:
        with tmp.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """A folder filled under a temporary name and moved to `path` (replacing it) only when complete,
    so a kill mid-save leaves no half-written checkpoint at `path`. In a multi-process run every rank calls it
    (what fills it may be collective): the others fill a private folder that is then deleted, and all wait
    for the main rank's folder to be in place, so each may read it next."""
    path = Path(path)
    if not ranks.is_main():
        with tempfile.TemporaryDirectory(prefix=f"rank{ranks.rank()}-") as scratch:
            yield Path(scratch)
        ranks.barrier()
        return
    tmp = temp_sibling(path)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)
    ranks.barrier()


def write_json(path: str | Path, obj) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> Path:
    return atomic_write_text(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def read_json(path: str | Path):
    return json.loads(Path(path).read_text())


def _blocks(handle, size: int, whole: bool) -> Iterator[bytes]:
    if whole:
        while block := handle.read(SAMPLE_BLOCK):
            yield block
        return
    for i in range(SAMPLE_BLOCKS):
        handle.seek(i * (size - SAMPLE_BLOCK) // (SAMPLE_BLOCKS - 1))
        yield handle.read(SAMPLE_BLOCK)


def file_digest(path: Path) -> dict:
    """Size and sha256 of a file, plus the row count of a .jsonl.

    Data files (.json, .jsonl) and any file up to 64 MiB are hashed whole. Larger files (model
    weights: a 7B checkpoint is ~15 GB) are hashed over 16 evenly spaced 1 MiB blocks, first and
    last included (`sha256_sampled`), so checking a checkpoint reads 16 MiB per shard: a truncated
    or extended file is always caught by its size, damage inside only where it hits a sampled block.
    """
    size = path.stat().st_size
    whole = size <= WHOLE_HASH_LIMIT or path.suffix in DATA_SUFFIXES
    sha, rows = hashlib.sha256(), 0
    with path.open("rb") as handle:
        for block in _blocks(handle, size, whole):
            sha.update(block)
            rows += block.count(b"\n")
    digest = {"size": size, "sha256" if whole else "sha256_sampled": sha.hexdigest()}
    if path.suffix == ".jsonl":
        digest["rows"] = rows
    return digest


def _files(paths: Iterable[str | Path]) -> list[Path]:
    """Every file under the given files and folders; paths that do not exist (hub model ids) are skipped."""
    out: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            out += sorted(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            out.append(path)
    return out


def _show(key: str, value) -> str:
    return f"{value[:12]}..." if key.startswith("sha256") and isinstance(value, str) else str(value)


def digest_changes(want: dict, got: dict) -> str:
    """`size 2030 -> 1500, sha256 1a2b... -> 9f8e...`: the fields of a file's digest that differ."""
    keys = [k for k in {**want, **got} if want.get(k) != got.get(k)]
    return ", ".join(f"{k} {_show(k, want.get(k))} -> {_show(k, got.get(k))}" for k in keys)


def value_digest(value) -> str:
    """sha256 of a JSON value written canonically (keys sorted, tuples as lists): a stage's generated inputs
    (examples, prompts) recorded among its dependencies, so a resume notices when they change."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _plain(values: Mapping) -> dict:
    """`values` as JSON would read them back (tuples as lists, keys as strings), so a record compares equal
    to the values it was written from."""
    return json.loads(json.dumps(values, sort_keys=True))


def _dependency_changes(recorded: dict, now: dict) -> list[str]:
    """One line per dependency that differs between a stage's record and now: `setting eval_tasks: 5 -> 10`,
    `setting training.learning_rate: 0.001 -> 0.0005` (the record's key is `settings`, as run folders hold it)."""
    return [f"setting {key}: {old} -> {new}" for key, old, new in value_changes(recorded, now)]


class Run:
    """A run folder. Stage `name` is done when `stages/name.json` exists and its manifest still holds."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def _marker(self, stage: str) -> Path:
        return self.path("stages", f"{stage}.json")

    def _name(self, path: Path) -> str:
        """Files in the folder are named relative to it, so a moved run folder still verifies."""
        path = path.absolute()
        root = self.root.absolute()
        return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)

    def manifest(self, paths: Iterable[str | Path]) -> dict[str, dict]:
        """Digest of every file under `paths`, by name."""
        return {self._name(p): file_digest(p) for p in _files(paths)}

    def problems(self, manifest: dict[str, dict]) -> list[str]:
        """One line per listed file that is missing or no longer matches its digest."""
        out = []
        for name, want in manifest.items():
            path = self.root / name
            if not path.is_file():
                out.append(f"{name}: missing")
            elif changes := digest_changes(want, file_digest(path)):
                out.append(f"{name}: {changes}")
        return out

    def _config_sha(self) -> str | None:
        config = self.path("config.yaml")
        return hashlib.sha256(config.read_bytes()).hexdigest() if config.exists() else None

    def _input_names(self, inputs: Iterable[str | Path]) -> list[str]:
        """The inputs as named in a record: files and folders by `_name`, anything else (a hub id) as given."""
        return [self._name(Path(p)) if Path(p).exists() else str(p) for p in inputs]

    def _input_changes(self, record: dict, inputs: Iterable[str | Path]) -> list[str]:
        """`inputs are other paths now: [...] -> [...]` when a stage is asked to read other inputs than it read
        (a record without `input_paths` is compared by the files it lists, so a run folder whose records predate
        them resumes)."""
        if "input_paths" in record:
            paths = self._input_names(inputs)
            if record["input_paths"] == paths:
                return []
            return [f"inputs are other paths now: {record['input_paths']} -> {paths}"]
        files, read = {self._name(f) for f in _files(inputs)}, set(record["inputs"])
        gone, new = sorted(read - files), sorted(files - read)
        if not (gone or new):
            return []
        return [f"inputs are other files now ({len(gone)} read then, not now, {gone[:1]}; {len(new)} new, {new[:1]})"]

    def is_done(
        self, stage: str, depends_on: Mapping | None = None, inputs: Iterable[str | Path] | None = None
    ) -> bool:
        """Finished, with every artifact it wrote and every input it read as recorded, reading the same
        `inputs` (another starting model is another stage, even when the old one's files are intact), and
        with the same `depends_on` values when the stage has them. Otherwise the record is removed (the stage
        must be redone) and what differs is logged."""
        marker = self._marker(stage)
        if not marker.exists():
            return False
        try:
            record = read_json(marker)
            problems = self.problems(record["artifacts"]) + [f"input {p}" for p in self.problems(record["inputs"])]
            if inputs is not None:
                problems += self._input_changes(record, inputs)
            if depends_on is not None and "settings" in record:
                problems += _dependency_changes(record["settings"], _plain(depends_on))
            elif depends_on is not None and record["config_sha256"] != self._config_sha():
                problems.append("its settings were not recorded and the config has changed since it ran")
        except (ValueError, KeyError, TypeError) as err:
            problems = [f"{marker.name} is not a readable manifest ({type(err).__name__}: {err})"]
        if not problems:
            return True
        log.warning("%s: stage %s is redone: %s", self.root, stage, "; ".join(problems))
        marker.unlink()
        return False

    def mark_done(
        self,
        stage: str,
        artifacts: Iterable[str | Path],
        info: dict | None = None,
        started: float | None = None,
        inputs: Iterable[str | Path] = (),
        depends_on: Mapping | None = None,
    ) -> None:
        """Record `stage` as finished: the files it wrote (`artifacts`, files or folders) and read (`inputs`)
        with their digests, the values that define its result (`depends_on`, kept under the record's `settings`
        key and checked on resume), and the sha256 of the config it ran under (stages kept by a forced resume
        after a config change keep the old one)."""
        record = {
            "stage": stage,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **(info or {}),
            "config_sha256": self._config_sha(),
            "artifacts": self.manifest(artifacts),
            "inputs": self.manifest(inputs),
            "input_paths": self._input_names(inputs),
        }
        if depends_on is not None:
            record["settings"] = _plain(depends_on)
        if started is not None:
            record["seconds"] = round(time.time() - started, 2)
        write_json(self._marker(stage), record)

    def stage(
        self,
        name: str,
        work: Callable[[], dict | None],
        artifacts: Iterable[str | Path],
        inputs: Iterable[str | Path] = (),
        depends_on: Mapping | None = None,
    ) -> None:
        """Run stage `name` unless it is done: `work()` writes `artifacts` from `inputs` and returns the
        record's info; then the stage is marked done. A stage body is only its work, and one that raises
        is not marked, so a rerun redoes it. `depends_on` (JSON values) is what the stage's result depends on
        beyond its input files, an evaluation's task sets and budgets: a stage finished under others is
        redone, even by a forced resume that keeps finished stages, so a result is never reported for
        values it was not measured under. In a multi-process run every rank runs the work (its loops share
        it, `ranks.share`), the main rank decides whether the stage is done and marks it, and all wait for
        that before reading what it wrote."""
        inputs = list(inputs)
        if ranks.decided(lambda: self.is_done(name, depends_on, inputs)):
            return
        started = time.time()
        info = work()
        if time.time() - started >= RELEASE_AFTER_S:
            release_memory()  # what the work freed, for the next stage and the jobs beside this one
        if ranks.is_main():
            self.mark_done(name, artifacts, info, started, inputs=inputs, depends_on=depends_on)
        ranks.barrier()

    def stage_info(self, stage: str) -> dict:
        return read_json(self._marker(stage))

    def stage_seconds(self) -> dict[str, float]:
        """What each finished stage took (seconds, from its record), in the order the stages finished: what the
        run cost. A stage resumed in a later invocation counts the invocation that finished it."""
        timed = []
        for marker in self.path("stages").glob("*.json"):
            try:
                record = read_json(marker)
            except (OSError, ValueError):
                continue  # `is_done` reports and redoes such a stage; it has no time to give
            seconds = record.get("seconds") if isinstance(record, dict) else None
            if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
                timed.append((str(record.get("finished_at", "")), marker.stem, float(seconds)))
        return {stage: seconds for _, stage, seconds in sorted(timed)}

    def check_shared(self) -> None:
        """Every rank sees this folder as the main rank does, or every rank stops with the same RunError.

        The main rank alone writes the run folder and the others read what it wrote (`ranks`), so a rank on a
        node that does not mount the same filesystem would read a folder of its own: files missing, or stale ones
        of another run. The main rank writes a file holding a fresh token, each rank reads it, and all learn which
        could not: a rank that cannot see it does not stop alone, leaving the others waiting for it."""
        if ranks.world_size() == 1:
            return
        token = ranks.decided(self._write_token)
        marker = self.path(f".shared-{token}")
        seen = ranks.gather([(socket.gethostname(), str(self.root.absolute()), _holds(marker, token))])
        if ranks.is_main():
            marker.unlink(missing_ok=True)
        if not all(sees for _, _, sees in seen):
            raise RunError(_not_shared(seen, marker.name))

    def _write_token(self) -> str:
        token = secrets.token_hex(8)
        atomic_write_text(self.path(f".shared-{token}"), token)
        return token


def _holds(path: Path, token: str) -> bool:
    """Whether `path` holds `token`, now or within `SHARED_WAIT_S`."""
    deadline = time.monotonic() + SHARED_WAIT_S
    while True:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if path.read_text(encoding="utf-8") == token:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def _not_shared(seen: list[tuple[str, str, bool]], marker: str) -> str:
    """The error of a run folder some ranks do not see: its path, the main rank's host, and per host (and folder,
    where a rank's differs, e.g. a relative --run-dir from another working folder) the ranks that cannot see it."""
    host, folder, _ = seen[0]
    blind: dict[tuple[str, str], list[int]] = {}
    for rank, (where, theirs, sees) in enumerate(seen):
        if not sees:
            blind.setdefault((where, theirs), []).append(rank)
    who = "; ".join(
        f"{'ranks' if len(r) > 1 else 'rank'} {', '.join(map(str, r))} on {where}"
        + (f" (in {theirs})" if theirs != folder else "")
        for (where, theirs), r in blind.items()
    )
    return (
        f"{folder}: the run folder is not shared by every rank: rank 0 on {host} wrote {marker} in it, and {who} "
        "cannot read it. Rank 0 writes the run folder and the others read it: give --run-dir a folder every node "
        "mounts (NFS, Lustre), at the same path on each"
    )


UNSET = "<unset>"


def value_changes(old, new, key: str = "") -> list[tuple[str, object, object]]:
    """Where two JSON-like values differ: `(dotted.key, old, new)` per changed value, list items by index
    (`data.heldin[0].n`), `<unset>` for a key only one side has."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = [*old, *(k for k in new if k not in old)]
        return [
            c for k in keys for c in value_changes(old.get(k, UNSET), new.get(k, UNSET), f"{key}.{k}" if key else k)
        ]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [c for i, (a, b) in enumerate(zip(old, new)) for c in value_changes(a, b, f"{key}[{i}]")]
    return [] if old == new else [(key or "(top level)", old, new)]


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_HASHED: dict[Path, tuple[tuple[int, int, int], str]] = {}  # path -> (its size, mtime, inode; its sha256)


def known_sha256(path: str | Path) -> str:
    """`file_sha256`, taken once per process while the file's size, mtime and inode stay: for files checked on every
    use (a shipped data file, a converted model's weights), so a later use costs a stat, and a replaced or
    rewritten file is hashed again. OSError when the file is missing."""
    path = Path(path).resolve()
    stat = path.stat()
    state = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
    known = _HASHED.get(path)
    if known is None or known[0] != state:
        known = _HASHED[path] = (state, file_sha256(path))
    return known[1]
