"""Handing a finished stage's memory back to the operating system, for the next stage and the jobs beside it.

A stage that trained leaves two kinds of memory behind. A Trainer, its model and its callbacks refer to one
another, so they outlive the stage until Python's cyclic collector next runs. And what they free goes back to
glibc's heap, not to the system: measured on SmolLM2-135M (docs/log/2026-12-07-smol-suite.md), a process held
6.1 GB after an SFT returned, 5.6 GB after `gc.collect()` and 0.6 GB after `malloc_trim(0)`. Two bench jobs
side by side each carried that into their next stage (a vLLM engine, another SFT), past the machine's memory.
"""

from __future__ import annotations

import ctypes
import functools
import gc
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none (macOS, musl)."""
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None


def release_memory() -> None:
    """Collect the garbage cycles left behind and return the heap's free pages to the system."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
