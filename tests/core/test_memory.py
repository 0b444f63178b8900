"""A finished stage hands back what its work freed: its garbage cycles, and the heap pages glibc would keep."""

import gc
import subprocess
import sys
import weakref

import pytest

from coalign.core import runs
from coalign.core.memory import _malloc_trim
from coalign.core.runs import Run


class _Node:
    """An object in a reference cycle, as a Trainer and its callbacks are."""

    def __init__(self) -> None:
        self.me = self


@pytest.mark.parametrize("long_after_s, collected", [(0.0, True), (3600.0, False)])
def test_a_long_stage_collects_the_cycles_its_work_left(tmp_path, monkeypatch, long_after_s, collected):
    """A stage that ran `RELEASE_AFTER_S` or longer; a shorter one skips the collection (it costs 0.1-0.2 s)."""
    monkeypatch.setattr(runs, "RELEASE_AFTER_S", long_after_s)
    left: list[weakref.ref] = []

    def work() -> dict:
        left.append(weakref.ref(_Node()))
        return {}

    gc.disable()  # only an explicit collection frees a cycle now
    try:
        Run(tmp_path / "run").stage("train", work, [])
        assert (left[0]() is None) is collected
    finally:
        gc.enable()


HEAP = """
import sys
from coalign.core.memory import release_memory

def resident_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS"))

junk = [bytes(1000) for _ in range(200_000)]  # 200 MB of malloc'd chunks on the heap
above = bytes(1000)  # a live chunk above them, so free() cannot shrink the heap from its top
del junk
freed = resident_mb()
release_memory()
print(freed, resident_mb())
"""


@pytest.mark.skipif(_malloc_trim() is None or not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_release_memory_returns_freed_heap_pages_to_the_system():
    out = subprocess.run([sys.executable, "-c", HEAP], capture_output=True, text=True, check=True).stdout
    freed, released = map(int, out.split())
    assert freed - released > 150  # MB: the freed chunks were resident until released
