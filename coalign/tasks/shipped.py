"""The benchmark files shipped inside the package (coalign/data), so a fresh clone evaluates with no download.

Each is byte for byte the public original, with its licence beside it (coalign/data/README.md), and is read only
after its sha256 is checked: an altered copy would otherwise give quietly different scores. A config names one as
`path: shipped:gsm8k/train.jsonl`.
"""

from __future__ import annotations

from pathlib import Path

from coalign.core.errors import DataError
from coalign.core.runs import known_sha256
from coalign.tasks.eval_sets import EVAL_SETS

PREFIX = "shipped:"
DATA = Path(__file__).resolve().parents[1] / "data"

# name -> sha256 of the public original: the evaluation files `coalign data fetch eval` pins, and GSM8K's train.
SHIPPED: dict[str, str] = {
    **{item.path: item.sha256 for items in EVAL_SETS.values() for item in items},
    "gsm8k/train.jsonl": "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",  # openai/grade-school-math
}


def shipped_file(name: str) -> Path:
    """The path of the shipped file `name` (`gsm8k/train.jsonl`), after checking its sha256 (`known_sha256`: once
    per process while the file stays). DataError naming the file when the name is unknown or the file is missing
    or altered."""
    if name not in SHIPPED:
        known = ", ".join(sorted(SHIPPED))
        raise DataError(f"{PREFIX}{name}", None, None, f"no such shipped file (coalign ships {known})", "unknown file")
    path = DATA / name
    try:
        got = known_sha256(path)
    except OSError:
        raise DataError(path, None, None, "missing from this install; reinstall coalign", "missing") from None
    if got != SHIPPED[name]:
        problem = f"sha256 {got}, not the original's {SHIPPED[name]}; reinstall coalign"
        raise DataError(path, None, None, problem, "altered")
    return path
