"""How many optimizer steps of `coalign pretrain` fit a wall-clock budget on this machine's GPU (or CPU).

A fixed `max_steps` sets the cosine schedule, so a run sized by time needs the step time first: this times
`--probe` training steps of the base's own model on random blocks of the config's batch shape (bf16 autocast
on a GPU, fused AdamW, the trainer's defaults there), the first few untimed, and prints
floor(budget / (step time x overhead + per_step)): the two cover what the trainer adds per step (data loading,
logging, the held-out evaluations) in proportion, `per_step` seconds of it whatever the model's size. The
estimate and its inputs go to stderr. The defaults are measured: on one H200 (2026-12-04) `coalign-base-5`'s
shape (1.07M parameters, 64 x 512 tokens a step) took 25.6 ms a bare step and 61 ms a trainer step (16.5 steps
a second, 540k tokens a second, TRL 1.16 / transformers 5.17, bf16): 25.6 x 1.0 + 35 ms.

    N=$(python benchmarks/pretrain_steps_for.py coalign-base-5 --budget 240)
    coalign pretrain coalign-base-5 --set train.max_steps=$N
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from coalign.models.load import load_model
from coalign.models.bases import finished_base
from coalign.pretraining.growth import grow_depth
from coalign.pretraining.settings import load_pretrain_config


def step_seconds(base: str, grow_layers: int | None, batch: int, seq_len: int, probe: int) -> float:
    """Seconds per bare training step of the model the run trains: the base, grown first if the config grows it."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_model(finished_base(base), dtype="float32")
    if grow_layers:
        model = grow_depth(model, grow_layers)
    model = model.to(device)
    model.train()
    optim = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    ids = torch.randint(4, model.config.vocab_size, (batch, seq_len), device=device)
    warm = 3
    for i in range(warm + probe):
        if i == warm:
            if device == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / probe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a pretraining config with init_from (its base, grown if it grows, is timed)")
    parser.add_argument("--budget", type=float, required=True, help="seconds of training to fill")
    parser.add_argument("--probe", type=int, default=40, help="timed steps")
    parser.add_argument("--overhead", type=float, default=1.0, help="trainer time per step / bare step time")
    parser.add_argument("--per-step", type=float, default=0.035, help="trainer seconds added to every step")
    args = parser.parse_args()
    config = load_pretrain_config(args.config)
    if not config.init_from:
        raise SystemExit(f"{args.config}: the probe times the model of init_from; this config has none")
    t = config.train
    batch = t.batch_size * t.grad_accum
    seconds = step_seconds(config.init_from, config.grow_layers, batch, t.seq_len, args.probe)
    steps = int(args.budget / (seconds * args.overhead + args.per_step))
    print(
        f"{args.config}: {seconds * 1000:.1f} ms per bare step of {batch} x {t.seq_len} tokens;"
        f" x{args.overhead} + {args.per_step} s -> {steps} steps in {args.budget:.0f} s",
        file=sys.stderr,
    )
    print(steps)


if __name__ == "__main__":
    main()
