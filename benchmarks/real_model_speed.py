"""SmolLM2-135M-Instruct on this CPU: the speed targets of a real model, each a ratio measured in one run.

1. Training: coalign's SFT (TRL's trainer, full fine-tuning, batch 8, as `coalign/configs/smol.yaml` trains) on
   GSM8K grounder examples, in fp32 and in bf16 (on a CPU only where it computes bf16 natively: avx512_bf16 or
   AMX), and beside them LoRA r=16 in bf16 (why smol fine-tunes every weight) and bf16 with TRL's own fused-head
   loss (why coalign computes the model's own on a CPU). Tokens per second of the whole `sft` call, loading and
   saving included.
2. Stage-1 scoring: K candidate plans per GSM8K task, each scored on the task's gold actions under its grounder
   prompt (SmolLM2's chat template, ~400 tokens a row), one row at a time in batches vs with the shared prefix
   (`moat.share_prefix`), at K = 4 and K = 15, in the precision training chose.

    .venv/bin/python benchmarks/real_model_speed.py [--part training|scoring|both] [--out docs/results/smol-speed]

Prints each measurement and the ratios, and writes each part with the machine to OUT/PART.json. Run it on an
otherwise idle machine; training takes about 12 minutes on 2 cores, scoring about 5.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from scoring_speed import prefix_share, stage1_rows
from trl import SFTTrainer

from coalign.config import LoraSettings, SFTSettings
from coalign.core.machine import cpu_bf16_flags, decide_bf16, describe_machine
from coalign.moat.scoring import score_completions
from coalign.moat.sft_data import grounder_pair
from coalign.models.agents import Agent
from coalign.models.bases import starting_point
from coalign.models.load import load_tokenizer, render_prompt
from coalign.tasks.gsm8k import load_gsm8k
from coalign.tasks.shipped import shipped_file
from coalign.training.sft import LogitsLossSFTTrainer, sft

MODEL = "smollm2-135m"


def train_speed(
    init: str, examples: list[tuple[str, str]], bf16: bool, lora: LoraSettings | None, trl_loss: bool = False
) -> dict:
    """Tokens per second of one `sft` call on `examples` (its loading and saving included); `trl_loss`: with TRL's
    fused-head loss where coalign computes the model's own (a CPU in bf16, `LogitsLossSFTTrainer`)."""
    tokenizer = load_tokenizer(init)
    settings = SFTSettings(
        learning_rate=1e-5, epochs=1, batch_size=8, grad_accum=1, max_length=768, logging_steps=10_000, bf16=bf16
    )
    tokens = sum(len(tokenizer(render_prompt(tokenizer, u) + c)["input_ids"]) for u, c in examples)
    own = LogitsLossSFTTrainer.compute_loss
    if trl_loss:
        LogitsLossSFTTrainer.compute_loss = SFTTrainer.compute_loss
    try:
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            sft(init, examples, Path(tmp, "out"), settings, lora=lora)
            seconds = time.perf_counter() - started
    finally:
        LogitsLossSFTTrainer.compute_loss = own
    return {"bf16": bf16, "lora": lora is not None, "trl_loss": trl_loss, "examples": len(examples), "tokens": tokens,
            "seconds": round(seconds, 1), "tokens_per_s": round(tokens / seconds, 1)}  # fmt: skip


def score_speed(agent: Agent, tasks, k: int, batch_size: int) -> dict:
    """Rows per second of stage-1 scoring, per candidate and with the shared prefix, for K candidates a task."""
    users, completions = stage1_rows(tasks, k)
    total, skipped, groups = prefix_share(agent.tokenizer, users, completions, batch_size)
    score_completions(agent, users[:batch_size], completions[:batch_size], batch_size, "warm-up")
    timed = {}
    for share in (False, True):
        started = time.perf_counter()
        score_completions(agent, users, completions, batch_size, f"K={k} shared={share}", share_prefix=share)
        timed[share] = time.perf_counter() - started
    return {"k": k, "rows": len(users), "tokens_per_row": round(total / len(users)),
            "share_not_recomputed": round(skipped / total, 3), "groups": groups,
            "per_candidate_rows_per_s": round(len(users) / timed[False], 2),
            "shared_rows_per_s": round(len(users) / timed[True], 2),
            "ratio": round(timed[False] / timed[True], 2)}  # fmt: skip


def training_part(init: str, tasks, n: int, native: bool) -> dict:
    """Part 1: SFT tokens/s in fp32, bf16, LoRA in bf16 and bf16 with TRL's loss, and their ratios."""
    examples = [grounder_pair(t) for t in tasks[:n]]
    lora = LoraSettings(r=16, alpha=32, dropout=0.0, target_modules="all-linear")
    runs = [train_speed(init, examples, False, None)]
    if native:
        runs += [train_speed(init, examples, True, None), train_speed(init, examples, True, lora),
                 train_speed(init, examples, True, None, trl_loss=True)]  # fmt: skip
    for row in runs:
        kind = f"{'LoRA r=16' if row['lora'] else 'full'}, {'bf16' if row['bf16'] else 'fp32'}"
        kind += ", TRL's fused-head loss" if row["trl_loss"] else ""
        print(f"training ({kind}): {row['tokens_per_s']} tokens/s ({row['tokens']} tokens, {row['seconds']} s)")
    result: dict = {"training": runs}
    if native:
        rate = [row["tokens_per_s"] for row in runs]
        result |= {"bf16_over_fp32": round(rate[1] / rate[0], 2), "full_over_lora": round(rate[1] / rate[2], 2),
                   "own_loss_over_trl_loss": round(rate[1] / rate[3], 2)}  # fmt: skip
        print(f"ratio bf16/fp32 training: {result['bf16_over_fp32']}x; full/LoRA: {result['full_over_lora']}x; "
              f"own loss/TRL's: {result['own_loss_over_trl_loss']}x")  # fmt: skip
    return result


def scoring_part(init: str, tasks, n: int, batch_size: int, native: bool) -> dict:
    """Part 2: stage-1 scoring per candidate and with the shared prefix, at K = 4 and 15."""
    agent = Agent.load(init, bf16=native)
    rows = [score_speed(agent, tasks[:n], k, batch_size) for k in (4, 15)]
    for row in rows:
        print(f"scoring K={row['k']} ({row['rows']} rows, {row['tokens_per_row']} tokens a row, "
              f"{row['share_not_recomputed']:.0%} shared): per candidate {row['per_candidate_rows_per_s']} rows/s, "
              f"shared prefix {row['shared_rows_per_s']} rows/s, ratio {row['ratio']}x")  # fmt: skip
    return {"batch_size": batch_size, "scoring": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("training", "scoring", "both"), default="both")
    parser.add_argument("--train-examples", type=int, default=48, help="GSM8K grounder examples per training run")
    parser.add_argument("--score-tasks", type=int, default=16, help="GSM8K tasks scored, K candidates each")
    parser.add_argument("--batch-size", type=int, default=16, help="scoring rows per forward pass (smol: 16)")
    parser.add_argument("--out", type=Path, default=Path("docs/results/smol-speed"), help="folder: PART.json each")
    args = parser.parse_args()
    init = starting_point(MODEL)
    tasks = load_gsm8k(shipped_file("gsm8k/train.jsonl"))
    native = decide_bf16("auto")
    print(f"{MODEL}: {init}; CPU bf16 flags: {', '.join(cpu_bf16_flags()) or 'none'}; bf16 used: {native}")
    parts = ["training", "scoring"] if args.part == "both" else [args.part]
    for part in parts:
        if part == "training":
            result = training_part(init, tasks, args.train_examples, native)
        else:
            result = scoring_part(init, tasks, args.score_tasks, args.batch_size, native)
        header = {"model": MODEL, "part": part, "machine": describe_machine(), "date": time.strftime("%Y-%m-%d"),
                  "cpu_bf16_flags": cpu_bf16_flags(), "bf16": native}  # fmt: skip
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{part}.json").write_text(json.dumps({**header, **result}, indent=2) + "\n")
        print(f"written: {args.out / f'{part}.json'}")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
