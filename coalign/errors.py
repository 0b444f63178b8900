"""Errors that point the user at the exact place in their input."""

from __future__ import annotations

from pathlib import Path


class DataError(ValueError):
    """A bad row in a data file: names the file, the 1-based line (or record) and the field."""

    def __init__(self, path: str | Path, line: int | None, field: str | None, problem: str):
        self.path, self.line, self.field, self.problem = str(path), line, field, problem
        where = self.path + (f", line {line}" if line is not None else "")
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{problem}")
