"""Several processes on one run (`accelerate launch`, `torchrun`): the work shared, one writer, results in order.

The trainers (TRL's SFT, DPO and GRPO) shard their batches themselves. Every other loop (sampling, scoring,
grounding, evaluation, the critic) goes through `share`: the work is cut into the same batches as in one
process, each rank takes a contiguous run of them, and the results are gathered back in input order, so a
batch is computed from the same inputs, padding and seed whichever rank computes it, and a 2-process run
writes the artifacts a 1-process run writes. Only the main rank writes files (`runs` asks `is_main`), and a
run stage ends with a barrier, so every rank reads what the main one wrote.

One process (no `WORLD_SIZE` above 1 in the environment) never touches torch.distributed.
"""

from __future__ import annotations

import atexit
import math
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, TypeVar

from coalign.core.errors import RunError

T = TypeVar("T")
R = TypeVar("R")


TIMEOUT_S = 1800  # transformers' `ddp_timeout`: a collective waits this long before the run fails
_timeout_s = TIMEOUT_S
_alone = 0  # > 0 while this rank computes its own share: loops inside it run by themselves


def world_size() -> int:
    """Processes in this run, as the launcher (torchrun, accelerate) says; 1 when launched plainly."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    """This process's place among them (0 is the main one, which writes the run folder)."""
    return int(os.environ.get("RANK", "0")) if world_size() > 1 else 0


def is_main() -> bool:
    return rank() == 0


def set_timeout(seconds: int) -> None:
    """How long the process group's collectives wait (the run's `ddp_timeout`), before the group starts: torch's
    default for NCCL is 10 minutes, less than rank 0 can take to merge and save a 14B model to a shared disk while
    the other ranks wait at the barrier."""
    global _timeout_s
    _timeout_s = seconds


def timeout_s() -> int:
    """The collectives' timeout `set_timeout` set (the trainers' `ddp_timeout`, should accelerate start the group)."""
    return _timeout_s


@lru_cache(maxsize=1)
def _group():
    """torch.distributed, its process group started on first use (NCCL on GPUs, gloo on CPUs; collectives time out
    after `set_timeout`'s seconds) unless a trainer started it; accelerate and the trainers then use the same group."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, timeout=timedelta(seconds=_timeout_s))
    atexit.register(_close)
    return dist


def _close() -> None:
    """The process group closed before the interpreter exits: left to die with it, gloo's threads can abort the
    process ("terminate called without an active exception"), which the launcher then reports as a failed rank."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if world_size() > 1:
        _group().barrier()


def decided(decide: Callable[[], T]) -> T:
    """`decide()` on the main rank, its answer on every rank (e.g. whether a stage is done: a rank that
    looked after the main one had finished it would skip what the others still run together)."""
    if world_size() == 1:
        return decide()
    box = [decide() if is_main() else None]
    _group().broadcast_object_list(box, src=0)
    return box[0]


@contextmanager
def alone() -> Iterator[None]:
    """This rank's loops run by themselves inside (its share of the work may generate, e.g. a local critic model:
    the other ranks, busy with their own shares, would not join a shared loop)."""
    global _alone
    _alone += 1
    try:
        yield
    finally:
        _alone -= 1


def _together() -> bool:
    return world_size() > 1 and not _alone


def span(n: int) -> range:
    """The contiguous share of `n` pieces of work this rank computes (the first ranks take one more)."""
    if not _together():
        return range(n)
    size, r = world_size(), rank()
    per, extra = divmod(n, size)
    start = r * per + min(r, extra)
    return range(start, start + per + (r < extra))


def gather(local: list[Any]) -> list[Any]:
    """Every rank's `local` list, concatenated in rank order (with `span`, the input order)."""
    if not _together():
        return local
    parts: list[list[Any] | None] = [None] * world_size()
    _group().all_gather_object(parts, local)
    return [item for part in parts for item in part]  # type: ignore[union-attr]


def share(work: Callable[[T], R], pieces: Sequence[T]) -> list[R]:
    """`work(piece)` for every piece, each computed by one rank, returned to every rank in input order."""
    return share_all(lambda mine: [work(piece) for piece in mine], pieces)


def share_all(work: Callable[[list[T]], list[R]], items: Sequence[T]) -> list[R]:
    """`work` called once per rank on its contiguous part of `items` (one result per item), the results
    returned to every rank in input order."""
    mine = [items[i] for i in span(len(items))]
    with alone():
        done = work(mine)
    return gather(done)


def summed(counts: dict) -> dict:
    """Every rank's counts (nested dicts of numbers) added up, on every rank."""

    def add(a: dict, b: dict) -> dict:
        out = {}
        for k, v in a.items():
            if isinstance(v, dict):
                out[k] = add(v, b.get(k, {}))
            else:
                out[k] = v + b.get(k, 0) if isinstance(v, int | float) and not isinstance(v, bool) else v
        return out

    total: dict = {}
    for part in gather([counts]):
        total = add(part, total) if total else part
    return total


def batch_split(batch_size: int, grad_accum: int, key: str = "", group: int = 1) -> tuple[int, int]:
    """(per-process batch, accumulation steps) that keep a config's examples per optimizer step (batch_size x
    grad_accum) whatever the number of processes: each process takes an equal share of them, as the largest
    batch no larger than the config's that divides its share, and accumulates the rest. A RunError naming the
    config block `key` when the processes cannot share them equally; `group`: what the product must stay a
    multiple of besides (GRPO's whole groups), so the products the error suggests are ones the config takes."""
    size = world_size()
    total = batch_size * grad_accum
    if total % size == 0:
        share = total // size
        batch = next(b for b in range(min(batch_size, share), 0, -1) if share % b == 0)
        return batch, share // batch
    prefix = f"{key}." if key else ""
    fewer = max((n for n in range(1, size) if total % n == 0), default=1)
    more = next(n for n in range(size + 1, total + 1) if total % n == 0) if size < total else None
    launch = f"{fewer} or {more}" if more else str(fewer)
    step = size * group // math.gcd(size, group)  # the products both the processes and the groups divide
    products = [p for p in (total // step * step, (total // step + 1) * step) if p > 0]
    raise RunError(
        f"{prefix}batch_size {batch_size} x {prefix}grad_accum {grad_accum} = {total} examples per optimizer step "
        f"cannot be shared by {size} processes; to keep it, launch {launch} processes (a number that divides "
        f"{total}), or set {prefix}batch_size x {prefix}grad_accum to {' or '.join(map(str, products))}"
    )
