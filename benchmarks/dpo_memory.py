"""Peak memory of DPO training steps: full fine-tuning with a resident reference model, full fine-tuning with
the reference log-probs precomputed (coalign's DPO stage), and LoRA (and QLoRA where CUDA and bitsandbytes
are there), on one random Llama of a configurable shape. Each variant runs in its own process, so each peak
is its own: peak RSS (`peak_rss_mib`), and on CUDA `torch.cuda.max_memory_allocated`.

    .venv/bin/python benchmarks/dpo_memory.py [--hidden 512 --layers 8 --vocab 8192 --steps 3 --length 32]

Prints, per variant, the peak and its rise over the process before the model was loaded (imports, data),
then the ratios to full fine-tuning with a resident reference, measured in this one run. LoRA saves what
scales with the weights (their gradients, Adam's two moments, the reference copy), not activations: the
longer the pairs (`--length`) for a model this small, the nearer the ratio comes to 1.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from trl import DPOConfig, DPOTrainer

from coalign.config import DPOSettings, LoraSettings, TinySpec, qlora_missing
from coalign.models.load import load_model, load_tokenizer, make_tiny_model, parameter_count
from coalign.training.common import trainer_args, training_model
from coalign.training.dpo import dpo_dataset

VARIANTS = ("resident", "precomputed", "lora", "qlora")


def random_words(rng: random.Random, n: int) -> str:
    """`n` random lowercase words of 2-7 letters: filler for prompts and answers, the same for a seed."""
    return " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 7))) for _ in range(n))


def random_triples(count: int, length: int) -> list[tuple[str, str, str]]:
    """`count` (prompt, chosen, rejected) triples of about `length` random words: half prompt, a quarter each
    answer; the same in every process."""
    rng = random.Random(0)
    return [
        (random_words(rng, length // 2), random_words(rng, length // 4), random_words(rng, length // 4))
        for _ in range(count)
    ]


def peak_rss_mib() -> float:
    """This process's peak resident set (Linux's VmHWM). Not `ru_maxrss`: that carries the parent's peak through
    fork and exec, so a child started by a parent bigger than it would report the parent's."""
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) / 1024


def _child(variant: str, init: str, steps: int, length: int) -> dict:
    """Train `steps` DPO steps of `variant` from `init`; the process's memory peaks."""
    triples = random_triples(steps * 4, length)
    tokenizer = load_tokenizer(init)
    tokenizer.padding_side = "right"
    data = dpo_dataset(tokenizer, triples)
    before = peak_rss_mib()
    lora = LoraSettings(qlora=variant == "qlora") if variant in ("lora", "qlora") else None
    model, peft_config = training_model(init, False, lora, bf16=False)  # DPOSettings.bf16: false
    settings = DPOSettings(learning_rate=1e-5, epochs=1, batch_size=4, grad_accum=1, max_length=2 * length)
    with tempfile.TemporaryDirectory() as out:
        args = DPOConfig(
            beta=settings.beta,
            precompute_ref_log_probs=variant != "resident",
            max_steps=steps,
            **trainer_args(settings, Path(out), 0),
        )
        trainer = DPOTrainer(
            model=model, args=args, train_dataset=data, processing_class=tokenizer, peft_config=peft_config
        )
        trainer.train()
    return {
        "reference": "a second model" if trainer.ref_model is not None else "none resident",
        "before_mib": before,
        "peak_mib": peak_rss_mib(),
        "cuda_mib": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=3, help="DPO steps of 4 pairs each")
    parser.add_argument("--length", type=int, default=32, help="words per pair: half prompt, a quarter each answer")
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "INIT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child[0], args.child[1], args.steps, args.length)))
        return
    variants = [v for v in VARIANTS if v != "qlora" or qlora_missing() is None]
    with tempfile.TemporaryDirectory() as tmp:
        rng = random.Random(0)
        spec = TinySpec(
            vocab_size=args.vocab, hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
            num_kv_heads=args.heads, intermediate_size=args.hidden * 11 // 4, max_positions=max(1024, 4 * args.length),
        )  # fmt: skip
        init = make_tiny_model([random_words(rng, 400) for _ in range(2000)], Path(tmp, "init"), spec)
        model = load_model(init)
        print(f"random Llama: hidden {args.hidden}, {args.layers} layers, vocab {model.config.vocab_size}, "
              f"{parameter_count(model) / 1e6:.1f}M parameters; {args.steps} DPO steps of 4 pairs, "
              f"~{args.length} words each; {'CUDA' if torch.cuda.is_available() else 'CPU'}")  # fmt: skip
        del model
        results = {}
        for variant in variants:
            child = [sys.executable, __file__, "--child", variant, str(init), "--steps", str(args.steps)]
            done = subprocess.run([*child, "--length", str(args.length)], capture_output=True, text=True, check=False)
            if done.returncode:
                sys.exit(f"{variant} failed:\n{done.stderr[-3000:]}")
            results[variant] = json.loads(done.stdout.strip().splitlines()[-1])
    full = results["resident"]
    for r in results.values():
        r["rise_mib"] = r["peak_mib"] - r["before_mib"]
    for variant, r in results.items():
        cuda = f", CUDA peak {r['cuda_mib']:.1f} MiB" if r["cuda_mib"] else ""
        print(f"{variant:11s} reference: {r['reference']:13s}  peak RSS {r['peak_mib']:7.1f} MiB, "
              f"rise over imports and data {r['rise_mib']:7.1f} MiB{cuda}")  # fmt: skip
    names = {"peak_mib": "peak RSS", "rise_mib": "RSS rise", "cuda_mib": "CUDA peak"}
    for variant, r in results.items():
        if variant != "resident":
            ratios = ", ".join(f"{name} {r[k] / full[k]:.2f}x" for k, name in names.items() if full[k])
            print(f"ratio {variant} / full with resident reference: {ratios}")


if __name__ == "__main__":
    main()
