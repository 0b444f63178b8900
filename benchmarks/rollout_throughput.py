"""Rollout throughput of the AdaPlan runtime on the CPU: how much batching episodes per turn buys, in one run.

GRPO's cost is mostly its rollouts (`rollout.py`: `run_episodes` at temperature 1), so this runs the same
episodes at each batch size: N tasks of each of the six environments, sampled at temperature 1.0.

    .venv/bin/python benchmarks/rollout_throughput.py [--tasks 4] [--batch-sizes 1,16,64] [--threads 1] [--cache]

By default the model is made as `coalign train tiny-pilotrl` makes it (the config's tiny spec, a tokenizer
trained on the recipe's expert episodes) and left untrained: it rarely writes an end of turn, so its turns
run to `max_new_tokens` and its episodes to the context limit, the rollout budget's worst case.
`--model PATH` runs a saved checkpoint instead (an SFT one writes turns of realistic length). Prints per
batch size generated tokens/s, the tokens processed (what went through prefill forwards, padding left out,
plus what was generated), episodes/s, wall seconds and the model's seconds in prefill and in decoding, then
each batch size's tokens/s over batch size 1's. The runtime keeps each episode's key/value cache across
turns (`turn_writers.PrefixCachedWriter`); with `--reread`, each batch size runs again re-reading every
turn's whole context (`hf_turns(keep_cache=False)`), and the kept cache's speed over that is printed. With
`--cache` (which implies `--reread`), each batch size above 1 of the re-read runs also runs with `generate`'s
default key/value cache (grown by concatenation) in place of the static one (`turn_writers.turn_cache`).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

from coalign.config import load_config
from coalign.envs import HELDIN, HELDOUT
from coalign.formats.lumos import lumos_chat
from coalign.models.load import load_model, load_tokenizer, make_tiny_model
from coalign.models.turn_writers import hf_turns
from coalign.pilotrl.recipe import training_episodes
from coalign.pilotrl.runtime import run_episodes


class ForwardClock:
    """Seconds the model spends in prefill forwards (a turn's prompt, or what a kept cache lacks of it) and in
    decoding ones (one new token each), and the tokens prefilled (padding left out), from forward hooks: where
    a rollout's time goes."""

    def __init__(self, model, pad_id: int) -> None:
        self.seconds = {"prefill": 0.0, "decode": 0.0}
        self.prefilled, self._pad = 0, pad_id
        self._kind, self._started = "prefill", 0.0
        self._hooks = [model.register_forward_pre_hook(self._pre, with_kwargs=True),
                       model.register_forward_hook(self._post, with_kwargs=True)]  # fmt: skip

    def _pre(self, module, args, kwargs) -> None:
        ids = kwargs["input_ids"]
        self._kind = "decode" if ids.shape[1] == 1 else "prefill"
        if self._kind == "prefill":
            self.prefilled += int((ids != self._pad).sum())
        self._started = time.perf_counter()

    def _post(self, module, args, kwargs, output) -> None:
        self.seconds[self._kind] += time.perf_counter() - self._started

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()


def tiny_model(out: Path) -> Path:
    """The tiny-pilotrl config's initial model: its spec, a BPE tokenizer on the recipe's expert episodes."""
    config = load_config("tiny-pilotrl")
    texts = [lumos_chat(row["messages"]) for row in training_episodes(config.pilotrl, config.seed)]
    return make_tiny_model(texts, out, config.models.tiny, seed=config.seed)


def measure(
    model, tokenizer, tasks: list[tuple[str, int]], batch_size: int, args: argparse.Namespace, keep_cache: bool = True
) -> dict:
    """One timed `run_episodes` over all tasks at `batch_size` (sampling seeded, so reruns repeat)."""
    clock = ForwardClock(model, tokenizer.pad_token_id)
    torch.manual_seed(0)
    started = time.perf_counter()
    episodes = run_episodes(
        model, tokenizer, tasks, "adaplan", 1, args.max_new_tokens, args.max_context, batch_size,
        temperature=1.0, progress=False, writer=hf_turns(model, tokenizer, keep_cache),
    )  # fmt: skip
    wall = time.perf_counter() - started
    clock.close()
    generated = sum(e.generated_tokens for e in episodes)
    return {
        "wall": wall,
        "generated": generated,
        "processed": clock.prefilled + generated,
        "tokens_per_s": generated / wall,
        "episodes_per_s": len(episodes) / wall,
        **clock.seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=4, help="tasks per environment (all six)")
    parser.add_argument("--batch-sizes", default="1,16,64", help="comma-separated; batch size 1 is always run")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: a tiny model's ops are too small to split, and on a "
                             "busy CPU extra threads were much slower)")  # fmt: skip
    parser.add_argument("--model", help="a saved checkpoint folder instead of a fresh tiny model")
    parser.add_argument("--max-new-tokens", type=int, default=192, help="per turn (tiny-pilotrl's)")
    parser.add_argument("--max-context", type=int, default=1536, help="per episode (tiny-pilotrl's)")
    parser.add_argument("--reread", action="store_true", help="also run re-reading each turn's whole context")
    parser.add_argument("--cache", action="store_true",
                        help="also re-read with generate's default (growing) cache; implies --reread")  # fmt: skip
    args = parser.parse_args()
    sizes = sorted({1, *(int(b) for b in args.batch_sizes.split(","))})
    torch.set_num_threads(args.threads)
    print(f"machine: {os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} torch threads")
    print("note: timings on a shared CPU are noisy; compare ratios measured in one run")
    tasks = [(name, 1_000_000 + i) for name in (*HELDIN, *HELDOUT) for i in range(args.tasks)]  # evaluation seeds
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or tiny_model(Path(tmp, "tiny"))
        tokenizer, model = load_tokenizer(path), load_model(path, dtype="float32")
        print(f"model: {args.model or 'fresh tiny-pilotrl model'}; {len(tasks)} episodes ({args.tasks} per env), "
              f"temperature 1.0, max_new_tokens {args.max_new_tokens}, max_context {args.max_context}")  # fmt: skip
        # warm-up, not timed: torch's first calls pay one-off costs
        run_episodes(model, tokenizer, tasks[:1], "adaplan", 1, 8, args.max_context, 1, temperature=1.0, progress=False)
        results = {b: measure(model, tokenizer, tasks, b, args) for b in sizes}
        reread, growing = {}, {}
        if args.reread or args.cache:
            reread = {b: measure(model, tokenizer, tasks, b, args, keep_cache=False) for b in sizes}
        if args.cache:
            with mock.patch(
                "coalign.models.turn_writers.turn_cache", lambda model, rows, length: {}
            ):  # generate's default
                growing = {b: measure(model, tokenizer, tasks, b, args, keep_cache=False) for b in sizes if b > 1}
    print(f"{'batch':>5} {'gen tok/s':>10} {'generated':>10} {'processed':>10} {'episodes/s':>10} {'wall s':>8} "
          f"{'prefill s':>9} {'decode s':>8}")  # fmt: skip
    rows = [(f"{b}", r) for b, r in results.items()] + [(f"{b} re", r) for b, r in reread.items()]
    for b, r in rows:
        print(f"{b:>5} {r['tokens_per_s']:>10.1f} {r['generated']:>10} {r['processed']:>10} "
              f"{r['episodes_per_s']:>10.3f} {r['wall']:>8.1f} {r['prefill']:>9.1f} {r['decode']:>8.1f}")  # fmt: skip
    if sizes[-1] > len(tasks):
        print(f"(a batch size above {len(tasks)} runs all {len(tasks)} episodes' turns in one batch)")
    for b, r in results.items():
        if b > 1:
            print(f"tokens/s, batch {b} / batch 1: {r['tokens_per_s'] / results[1]['tokens_per_s']:.2f}x")
    for b, r in reread.items():
        print(f"batch {b}: kept cache / re-read ({b} re): {results[b]['tokens_per_s'] / r['tokens_per_s']:.2f}x "
              f"tokens/s, prefill {r['prefill']:.1f} s -> {results[b]['prefill']:.1f} s")  # fmt: skip
    for b, r in growing.items():
        print(
            f"batch {b}, re-read: default cache {r['tokens_per_s']:.1f} tokens/s ({r['wall']:.1f} s, decoding "
            f"{r['decode']:.1f} s); static cache / default: {reread[b]['tokens_per_s'] / r['tokens_per_s']:.2f}x "
            f"tokens/s, {r['decode'] / reread[b]['decode']:.2f}x faster decoding"
        )


if __name__ == "__main__":
    main()
