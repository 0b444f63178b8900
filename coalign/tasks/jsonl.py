"""JSON and JSON Lines reading that points at the bad line and field (writing: `coalign.runs`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from coalign.errors import DataError


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yield (1-based line number, row) for each non-blank line; a bad line raises DataError naming it."""
    with open(path, encoding="utf-8") as handle:
        for line_no, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DataError(path, line_no, None, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
            if not isinstance(row, dict):
                raise DataError(path, line_no, None, f"expected a JSON object, got {type_name(row)}")
            yield line_no, row


def read_json(path: str | Path) -> Any:
    """A whole JSON document; a syntax error raises DataError with the line it is on."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(path, exc.lineno, None, f"invalid JSON: {exc.msg} (column {exc.colno})") from None


def type_name(value: Any) -> str:
    """JSON-ish name of a value's type, for messages users can act on."""
    return "null" if value is None else type(value).__name__


def require(
    row: dict,
    field: str,
    type_: type | tuple[type, ...],
    path: str | Path,
    line: int | None,
    *,
    label: str | None = None,
) -> Any:
    """`row[field]` if present and of `type_`, else DataError naming file, line and field.

    `label` names the field in the message when it sits inside a larger record (`messages[1].role`).
    `bool` is refused where `int`/`float` is asked, since JSON `true` is not a number.
    """
    name = label or field
    if field not in row:
        raise DataError(path, line, name, "missing")
    value = row[field]
    wanted = type_ if isinstance(type_, tuple) else (type_,)
    if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
        expected = " or ".join(t.__name__ for t in wanted)
        raise DataError(path, line, name, f"expected {expected}, got {type_name(value)}")
    return value
