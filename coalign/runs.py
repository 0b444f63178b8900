"""The run folder: one place per run for its config, artifacts, checkpoints and metrics.

Files are written atomically (temp file + rename), and a stage counts as finished only once
its marker exists, so a killed run resumes at the first unfinished stage.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `text` so that readers see the old file or the new one, never half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | Path, obj) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> Path:
    return atomic_write_text(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def read_json(path: str | Path):
    return json.loads(Path(path).read_text())


class Run:
    """A run folder. Stage `name` is done when `stages/name.json` exists (written last)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def is_done(self, stage: str) -> bool:
        return self.path("stages", f"{stage}.json").exists()

    def mark_done(self, stage: str, info: dict | None = None, started: float | None = None) -> None:
        record = {"stage": stage, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"), **(info or {})}
        if started is not None:
            record["seconds"] = round(time.time() - started, 2)
        write_json(self.path("stages", f"{stage}.json"), record)

    def stage_info(self, stage: str) -> dict:
        return read_json(self.path("stages", f"{stage}.json"))
