"""Training throughput of the tiny grounder on the bundled suite: two measured ratios, one run.

1. length-grouped batches vs random batches (`group_by_length`), one process each, side by side;
2. two SFT jobs side by side with one torch thread each vs the same two jobs one after another
   with all cores (what `coalign bench --workers` exploits).

    .venv/bin/python benchmarks/training_speed.py [--steps 150]

Prints steps per second and the ratios. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from coalign.config import SFTSettings, TinySpec
from coalign.core.parallel import Job, run_jobs
from coalign.formats.lumos import lumos_generation_prompt
from coalign.moat.sft_data import grounder_pair
from coalign.models.load import make_tiny_model
from coalign.tasks.maths_suite import generate_suite
from coalign.training.sft import sft


def _train(init: str, out: str, steps: int, grouped: bool) -> float:
    """Seconds for `steps` SFT steps (batch 8) on grounder examples of the suite."""
    examples = [grounder_pair(t) for t in generate_suite("train", steps * 8)]
    settings = SFTSettings(
        learning_rate=3e-3, epochs=1, batch_size=8, grad_accum=1, max_length=512, logging_steps=10_000,
        group_by_length=grouped,
    )  # fmt: skip
    started = time.perf_counter()
    sft(init, examples, out, settings)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=150)
    steps = parser.parse_args().steps
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        texts = [lumos_generation_prompt(u) + c for t in generate_suite("train", 500) for u, c in [grounder_pair(t)]]
        init = str(make_tiny_model(texts, Path(tmp, "init"), TinySpec(vocab_size=2048)))
        grouped, plain = run_jobs(
            [
                Job("grouped", _train, (init, f"{tmp}/g", steps, True), Path(tmp, "g.log")),
                Job("random", _train, (init, f"{tmp}/r", steps, False), Path(tmp, "r.log")),
            ],
            workers=2,
            desc="grouped vs random batches",
        )
        print(f"random batches:         {steps / plain:.2f} steps/s")
        print(f"length-grouped batches: {steps / grouped:.2f} steps/s")
        print(f"ratio grouped/random:   {plain / grouped:.2f}x")

        jobs = [Job(f"job{i}", _train, (init, f"{tmp}/p{i}", steps, True), Path(tmp, f"p{i}.log")) for i in range(2)]
        started = time.perf_counter()
        run_jobs(jobs, workers=2, desc="two jobs side by side")
        side_by_side = time.perf_counter() - started
        started = time.perf_counter()
        run_jobs([Job(j.name, j.fn, (init, f"{tmp}/s{i}", steps, True), j.log) for i, j in enumerate(jobs)], 1, "")
        one_after_another = time.perf_counter() - started
        print(f"two jobs, one after another ({cores} threads each): {one_after_another:.1f} s")
        print(f"two jobs side by side ({max(1, cores // 2)} thread(s) each):   {side_by_side:.1f} s")
        print(f"ratio:                                            {one_after_another / side_by_side:.2f}x")


if __name__ == "__main__":
    main()
