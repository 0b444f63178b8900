"""Can a base copy? The leading indicator of what the bundled agents lack (issue 14: grounders that copy the
wrong operands). For each base, on the same probes: a line of 3-7 random numbers (2-5 digits) and invented
names, then `Copy:`; the loss per token of the copied half (teacher-forced; predictable only by copying) beside
the first half's (unpredictable), the loss on the copied half's digits alone (against ln 10 = 2.30, a uniform
guess among the ten digits: a model that copies goes far below it), and how many of the probes greedy
decoding copies exactly.

    .venv/bin/python benchmarks/copy_probe.py coalign-base coalign-base-2 [/path/to/a/run/base ...]
"""

from __future__ import annotations

import argparse
import random

import torch

from coalign.models.load import load_model, load_tokenizer
from coalign.models.bases import starting_point
from coalign.pretraining.words import invented


def probes(n: int, seed: int) -> list[str]:
    """`n` sequences of random numbers and invented names (no seed of the corpus's: these are new)."""
    rng = random.Random(seed)
    pick = (lambda: str(rng.randint(10, 99_999)), lambda: invented(rng))
    return [" ".join(rng.choice(pick)() for _ in range(rng.randint(3, 7))) for _ in range(n)]


def split_at_copy(tokenizer, seq: str) -> tuple[list[int], int]:
    """The whole drill's ids as the model read them in pretraining, and how many of them come before the copy.

    Tokenized whole, not as two strings: this tokenizer's merges cross spaces (`Copy: ` is one token), so a
    prompt cut at `Copy:` would end in tokens (`Cop`, `y`, `:`) the model never saw before a copy."""
    text = f"Copy: {seq}\nCopy: {seq}\n"
    start = text.index("\n") + len("\nCopy: ")  # the copy's first character
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    n_head = next(i for i, (a, _) in enumerate(encoded.offset_mapping) if a >= start)
    return encoded.input_ids, n_head


@torch.inference_mode()
def measure(path: str, sequences: list[str]) -> dict:
    """Mean loss per token of each half and the share of exact greedy copies."""
    tokenizer, model = load_tokenizer(path), load_model(path, dtype="float32")
    first = copied = tokens_first = tokens_copied = exact = digits = tokens_digits = 0
    for seq in sequences:
        ids, n_head = split_at_copy(tokenizer, seq)
        tail = ids[n_head:]
        ids = torch.tensor([ids])
        losses = torch.nn.functional.cross_entropy(model(ids).logits[0, :-1], ids[0, 1:], reduction="none")
        cut = n_head - 1  # losses[i] predicts token i + 1
        first, tokens_first = first + losses[:cut].sum().item(), tokens_first + cut
        copied, tokens_copied = copied + losses[cut:].sum().item(), tokens_copied + len(tail)
        is_digit = torch.tensor([tokenizer.decode([t]).isdigit() for t in tail])
        digits, tokens_digits = digits + losses[cut:][is_digit].sum().item(), tokens_digits + int(is_digit.sum())
        out = model.generate(ids[:, :n_head], max_new_tokens=len(tail) + 4, do_sample=False)
        lines = tokenizer.decode(out[0], skip_special_tokens=True).split("\n")
        exact += len(lines) > 1 and lines[1] == f"Copy: {seq}"
    return {
        "first": first / tokens_first,
        "copied": copied / tokens_copied,
        "digits": digits / max(tokens_digits, 1),
        "exact": exact / len(sequences),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bases", nargs="+", help="shipped base names or model folders")
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=20261201)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sequences = probes(args.probes, args.seed)
    print(f"{args.probes} probes: 3-7 random numbers (2-5 digits) and invented names, then `Copy:`")
    print(f"{'base':<40} {'loss/token, first half':>24} {'copied half':>12} {'its digits':>11} {'exact copies':>13}")
    for base in args.bases:
        row = measure(starting_point(base) or base, sequences)
        print(f"{base:<40} {row['first']:>24.2f} {row['copied']:>12.2f} {row['digits']:>11.2f} {row['exact']:>13.1%}")


if __name__ == "__main__":
    main()
