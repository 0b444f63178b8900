"""Errors that point the user at the exact place in their input, or at the setting to change."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

_INDEX = re.compile(r"\[\d+\]")


class DataError(ValueError):
    """A bad row in a data file: names the file, the 1-based line (or record) and the field.

    `kind` is a short category ("missing field", "wrong type", "invalid JSON", ...) so that rows
    skipped with `skip_bad_rows` can be counted by reason; `problem` is the full explanation.
    """

    def __init__(
        self, path: str | Path, line: int | None, field: str | None, problem: str, kind: str = "invalid value"
    ):
        self.path, self.line, self.field, self.problem, self.kind = str(path), line, field, problem, kind
        where = self.path + (f", line {line}" if line is not None else "")
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{problem}")

    @property
    def reason(self) -> str:
        """The kind and the field with list indices dropped (`wrong type 'messages[].role'`): few distinct values."""
        return f"{self.kind} '{_INDEX.sub('[]', self.field)}'" if self.field else self.kind


class RunError(RuntimeError):
    """A run that cannot go on as configured (nothing to train on, a critic that judged nothing, an unsafe
    checkpoint); the message says what to change."""


@dataclass
class SkippedRows:
    """Bad rows a loader left out under `skip_bad_rows`, kept so the run can say how many and why."""

    errors: list[DataError] = field(default_factory=list)

    def add(self, error: DataError) -> None:
        self.errors.append(error)

    def by_reason(self) -> dict[str, int]:
        return dict(Counter(error.reason for error in self.errors).most_common())

    def summary(self, examples: int = 5) -> dict:
        """What a run records: the count, the count per reason and the first few full messages."""
        return {
            "skipped_rows": len(self.errors),
            "by_reason": self.by_reason(),
            "examples": [str(error) for error in self.errors[:examples]],
        }


def keep_or_skip(error: DataError, skipped: SkippedRows | None) -> None:
    """Raise `error` when bad rows are not skipped (`skipped` is None), else record it."""
    if skipped is None:
        raise error
    skipped.add(error)
