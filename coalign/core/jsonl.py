"""JSON and JSON Lines reading that points at the bad line and field (writing: `coalign.runs`).

Only standard JSON is accepted: `NaN`, `Infinity` and numbers too large for a float are refused,
since a gold answer of NaN would score every prediction wrong without any error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from coalign.core.errors import DataError, SkippedRows, keep_or_skip


def read_jsonl(path: str | Path, skipped: SkippedRows | None = None) -> Iterator[tuple[int, dict]]:
    """Yield (1-based line number, row) for each non-blank line.

    A line that is not UTF-8, not JSON or not an object raises DataError naming it, or, when
    `skipped` is given, is recorded there and left out. An unreadable file always raises.
    """
    for line_no, raw in enumerate(_lines(path), start=1):
        try:
            text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")  # a BOM is not part of the JSON
        except UnicodeDecodeError as exc:
            keep_or_skip(DataError(path, line_no, None, f"not UTF-8 text (byte {exc.start + 1})", "not UTF-8"), skipped)
            continue
        if not text.strip():
            continue
        try:
            row = _loads(text)
        except ValueError as exc:
            keep_or_skip(DataError(path, line_no, None, _json_problem(exc), "invalid JSON"), skipped)
            continue
        if not isinstance(row, dict):
            keep_or_skip(
                DataError(path, line_no, None, f"expected a JSON object, got {type_name(row)}", "not an object"),
                skipped,
            )
            continue
        yield line_no, row


Row = TypeVar("Row")
Record = TypeVar("Record")


def convert_rows(
    rows: Iterable[tuple[int, Row]], convert: Callable[[int, Row], Record], skipped: SkippedRows | None
) -> list[Record]:
    """`convert(line, row)` for every row; a row whose conversion raises DataError is skipped and recorded
    when `skipped` is given, else the error propagates."""
    records = []
    for line, row in rows:
        try:
            records.append(convert(line, row))
        except DataError as error:
            keep_or_skip(error, skipped)
    return records


def convert_json_list(
    path: str | Path, what: str, convert: Callable[[Path, int, object], Record], skipped: SkippedRows | None
) -> list[Record]:
    """`convert(path, index, record)` for each record of a file holding one JSON list (1-based index as the
    line), bad records skipped as in `convert_rows`; a file that is not a list has nothing to skip and raises."""
    path = Path(path)
    records = read_json(path)
    if not isinstance(records, list):
        raise DataError(path, None, None, f"expected a JSON list of {what}, got {type_name(records)}", "not a list")
    return convert_rows(enumerate(records, start=1), lambda index, record: convert(path, index, record), skipped)


def read_json(path: str | Path) -> Any:
    """A whole JSON document; an unreadable file or a syntax error raises DataError with the line it is on."""
    raw = _read_bytes(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DataError(path, line, None, "not UTF-8 text", "not UTF-8") from None
    try:
        return _loads(text)
    except ValueError as exc:
        line = exc.lineno if isinstance(exc, json.JSONDecodeError) else None
        raise DataError(path, line, None, _json_problem(exc), "invalid JSON") from None


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
        raise DataError(path, line, name, "missing", "missing field")
    value = row[field]
    wanted = type_ if isinstance(type_, tuple) else (type_,)
    if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
        expected = " or ".join(t.__name__ for t in wanted)
        raise DataError(path, line, name, f"expected {expected}, got {type_name(value)}", "wrong type")
    return value


def require_text(row: dict, field: str, path: str | Path, line: int | None, *, label: str | None = None) -> str:
    """`require(..., str)` that also refuses blank text: an empty question or completion teaches nothing."""
    value = require(row, field, str, path, line, label=label)
    if not value.strip():
        raise DataError(path, line, label or field, "empty text", "empty")
    return value


class _NotStandardJSON(ValueError):
    pass


def _refuse_constant(name: str) -> float:
    raise _NotStandardJSON(f"{name} is not standard JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotStandardJSON(f"number {text[:20]} is too large")
    return value


def _loads(text: str) -> Any:
    """`json.loads` with the refusals above; nesting past Python's recursion limit (`[[[[...`, a few
    thousand deep) is a ValueError too, so it is reported at its line instead of as a RecursionError."""
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise _NotStandardJSON("nested too deeply") from None


def _json_problem(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON: {exc.msg} (column {exc.colno})"
    return f"invalid JSON: {exc}"


def _read_bytes(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise DataError(path, None, None, f"cannot read the file: {exc.strerror or exc}", "unreadable file") from None


def _lines(path: str | Path) -> Iterator[bytes]:
    """The file's lines as bytes, so that one bad byte costs one line, not the file."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below; opening is the part that may fail
    except OSError as exc:
        raise DataError(path, None, None, f"cannot read the file: {exc.strerror or exc}", "unreadable file") from None
    with handle:
        yield from handle
