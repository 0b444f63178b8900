"""The papers' small real evaluation sets (GSM8K test, SVAMP, StrategyQA, HotpotQA dev), fetched from their
public origins into the files the paper configs read, each checked against the sha256 of the public original.

The package also ships the same files, unchanged, with their licences (`coalign/data/`, read as `shipped:` paths
and checked against the same pins, `tasks.shipped`). `coalign data fetch eval` downloads each one with its
licence from its origin into `OUT/<set>/`, refuses a file whose bytes differ from the
pinned original (nothing is written for it, and files fetched before it are kept), and records source, size and
sha256 in `OUT/fetch.json`. The download is a parameter (`get`, `download` by default), so tests fetch from
local copies.
"""

from __future__ import annotations

import hashlib
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from coalign.core.runs import atomic_write_bytes, file_digest, write_json
from coalign.tasks.fetch import RECORD, FetchError, read_record

Getter = Callable[[str], bytes]  # url -> the bytes served there
TIMEOUT_S = 60


@dataclass(frozen=True)
class EvalFile:
    """One file of a set: where it goes under OUT, where it is published, and the sha256 of the original."""

    path: str
    url: str
    sha256: str


_GSM8K = "https://raw.githubusercontent.com/openai/grade-school-math/master"
_SVAMP = "https://raw.githubusercontent.com/arkilpatel/SVAMP/main"
_LUMOS = "https://raw.githubusercontent.com/allenai/lumos/main"  # Agent Lumos's evaluation copies, which MOAT reuses

EVAL_SETS: dict[str, tuple[EvalFile, ...]] = {
    "gsm8k": (  # MIT
        EvalFile("gsm8k/test_socratic.jsonl", f"{_GSM8K}/grade_school_math/data/test_socratic.jsonl",
                 "c96673362fa7a699f4836a9b6474a067448f95fe58064727501ee63ba4c3fdb6"),
        EvalFile("gsm8k/test.jsonl", f"{_GSM8K}/grade_school_math/data/test.jsonl",
                 "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"),
        EvalFile("gsm8k/LICENSE", f"{_GSM8K}/LICENSE",
                 "86bbb73e855821d7c401912fd4bf82e34313e6e3b6fd6f909f2b6cc9e209a53b"),
    ),
    "svamp": (  # MIT
        EvalFile("svamp/SVAMP.json", f"{_SVAMP}/SVAMP.json",
                 "5be77703a6d891ae476d7c082787ad361392aa02453b132516cdd5f4e7934e3e"),
        EvalFile("svamp/LICENSE", f"{_SVAMP}/LICENSE",
                 "07ce3a34de7a865345634f9278bc26ddcacc2d0defd348c28e3f4603448b9ba4"),
    ),
    "strategyqa": (  # Agent Lumos's copy (MIT); the questions are StrategyQA's train set, as Lumos evaluates
        EvalFile("strategyqa/test.json", f"{_LUMOS}/data/eval/strategyqa/test.json",
                 "bdce966d45be45b362e005af03ed0bf7ae2ed2c4a5f5a03955ec72b4df933637"),
        EvalFile("strategyqa/LUMOS_LICENSE", f"{_LUMOS}/LICENSE",
                 "cdd01f605006d2d229b7333d9a8ce83b44ae57549b9573023e807044e13d4afd"),
    ),
    "hotpotqa": (  # Agent Lumos's copy of HotpotQA dev; HotpotQA is CC BY-SA 4.0
        EvalFile("hotpotqa/test.json", f"{_LUMOS}/data/eval/hotpotqa/test.json",
                 "05001dcdeb2b2b2243a88f23daaf8de9237494cd387e13bc25854d3e031101d3"),
        EvalFile("hotpotqa/LUMOS_LICENSE", f"{_LUMOS}/LICENSE",
                 "cdd01f605006d2d229b7333d9a8ce83b44ae57549b9573023e807044e13d4afd"),
    ),
}  # fmt: skip


def download(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as reply:  # noqa: S310 (fixed https origins above)
        return reply.read()


def fetch_eval_sets(
    out: str | Path, names: Sequence[str] = tuple(EVAL_SETS), get: Getter | None = None, console: Console | None = None
) -> dict:
    """Download the files of the sets `names` (keys of EVAL_SETS) into `out`, each checked and recorded as soon as
    it is written. A file already there with the original's bytes is kept without a download. Returns the record
    (`out/fetch.json`); a file that cannot be downloaded, or whose bytes are not the original's, raises FetchError."""
    out, console, get = Path(out), console or Console(quiet=True), get or download
    record = read_record(out / RECORD)
    for name in names:
        for item in EVAL_SETS[name]:
            path = out / item.path
            if path.is_file() and _sha256(path.read_bytes()) == item.sha256:
                console.print(f"{path}: already the original", markup=False)
                continue
            data = _get(item, path, get)
            atomic_write_bytes(path, data)
            record["files"][item.path] = {"source": item.url, **file_digest(path),
                                          "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%S")}  # fmt: skip
            write_json(out / RECORD, record)
            console.print(f"{item.url}: {len(data):,} bytes -> {path}", markup=False)
    return record


def _get(item: EvalFile, path: Path, get: Getter) -> bytes:
    """The file's bytes, checked against the original's sha256; FetchError (nothing written) otherwise."""
    instead = f"Download it yourself to {path}, or point the config's data.heldin/heldout `path` at your copy"
    try:
        data = get(item.url)
    except Exception as exc:  # offline, a moved file, a refused connection: whatever the download raises ends here
        lines = str(exc).strip().splitlines()
        raise FetchError(
            f"could not fetch {item.url} ({type(exc).__name__}: {lines[0] if lines else 'no message'}); files "
            f"fetched before it are kept. {instead}"
        ) from exc
    got = _sha256(data)
    if got != item.sha256:
        raise FetchError(
            f"{item.url}: sha256 {got}, not the original's {item.sha256} ({len(data):,} bytes); nothing written "
            f"for it, files fetched before it are kept. {instead} (coalign reads any file in that format)"
        )
    return data


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
