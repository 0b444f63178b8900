"""Stage-1 scoring throughput: the plain path vs prefix sharing (`moat.share_prefix`), in one run.

Rows are shaped as MOAT stage 1 builds them: N suite tasks x K candidate subgoal sequences, each
scored on the task's gold actions under the grounder prompt. Candidates are the task's own subgoals
and perturbations of them (another task's subgoals, or the last one swapped for another task's), so
a task's rows share the preamble and the task text and differ after it.

    .venv/bin/python benchmarks/scoring_speed.py [--tasks 64] [--k 5] [--batch-size 32]

By default the grounder is a fresh tiny model (its tokenizer merges the fixed prompt lines into a
few tokens, so its prompts are much shorter than a pretrained model's); `--standard-tokenizer` gives it
a GPT-2-style tokenizer instead (byte-level BPE within words, digits apart, vocabulary 8,192: ~300-token
rows, as a real model's); `--grounder PATH` scores with a saved checkpoint. Prints rows per second for
both paths, their ratio and the share of tokens that sharing does not recompute. Run it on an otherwise
idle machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from coalign.config import TinySpec
from coalign.formats.lumos import EOS, format_actions, format_subgoals, grounder_prompt, lumos_generation_prompt
from coalign.moat.scoring import encode_completion, prefix_groups, score_completions
from coalign.moat.sft_data import grounder_pair
from coalign.models.agents import Agent
from coalign.models.load import SPECIAL_TOKENS, make_tiny_model
from coalign.tasks import Task
from coalign.tasks.maths_suite import generate_suite


def stage1_rows(tasks: list[Task], k: int) -> tuple[list[str], list[str]]:
    """K (grounder prompt, gold actions) rows per task: its own subgoals first, then perturbations."""
    users, completions = [], []
    for i, task in enumerate(tasks):
        for j in range(k):
            other = tasks[(i + j) % len(tasks)].subgoals
            subgoals = task.subgoals if j == 0 else other if j % 2 else task.subgoals[:-1] + other[:1]
            users.append(grounder_prompt(task.question, format_subgoals(list(subgoals)), task.family))
            completions.append(format_actions(list(task.actions)))
    return users, completions


def standard_grounder(texts: list[str], folder: Path, spec: TinySpec, vocab_size: int = 8192) -> None:
    """Replace the tiny model in `folder` by one of the same shape over a GPT-2-style tokenizer: pre-tokenized
    at word boundaries (no merges across spaces), each digit its own token, `vocab_size` tokens (fewer where
    `texts` hold fewer words and pieces)."""
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=SPECIAL_TOKENS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token=EOS,
        pad_token="<pad>",
        additional_special_tokens=SPECIAL_TOKENS[4:],
    )
    config = LlamaConfig.from_pretrained(folder)
    config.vocab_size = len(tokenizer)
    config.bos_token_id, config.eos_token_id, config.pad_token_id = (
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def prefix_share(tokenizer, users: list[str], completions: list[str], batch_size: int) -> tuple[int, int, int]:
    """The rows' tokens, how many of them prefix sharing does not recompute, and its groups."""
    rows = [encode_completion(tokenizer, u, c) for u, c in zip(users, completions)]
    groups = prefix_groups(rows, batch_size)
    return sum(len(r.ids) for r in rows), sum((len(g.rows) - 1) * g.shared for g in groups), len(groups)


def seconds(agent: Agent, users: list[str], completions: list[str], batch_size: int, share: bool) -> float:
    started = time.perf_counter()
    score_completions(agent, users, completions, batch_size, "shared" if share else "plain", share_prefix=share)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--k", type=int, default=5, help="candidates per task")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hidden-size", type=int, default=128, help="tiny grounder only")
    parser.add_argument("--layers", type=int, default=4, help="tiny grounder only")
    parser.add_argument("--grounder", help="a saved checkpoint folder instead of a fresh tiny model")
    parser.add_argument("--standard-tokenizer", action="store_true", help="GPT-2-style tokenizer: ~300-token rows")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per path; the fastest counts")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tasks = generate_suite("train", args.tasks)
    users, completions = stage1_rows(tasks, args.k)
    with tempfile.TemporaryDirectory() as tmp:
        if args.grounder:
            agent = Agent.load(args.grounder)
        else:
            texts = [lumos_generation_prompt(u) + c for u, c in map(grounder_pair, generate_suite("train", 500))]
            spec = TinySpec(hidden_size=args.hidden_size, num_layers=args.layers)
            folder = make_tiny_model(texts, Path(tmp, "grounder"), spec)
            if args.standard_tokenizer:
                standard_grounder(texts, folder, spec)
            agent = Agent.load(str(folder))
        total, skipped, groups = prefix_share(agent.tokenizer, users, completions, args.batch_size)
        warm = args.batch_size
        for share in (False, True):
            seconds(agent, users[:warm], completions[:warm], args.batch_size, share)
        plain = min(seconds(agent, users, completions, args.batch_size, False) for _ in range(args.repeats))
        shared = min(seconds(agent, users, completions, args.batch_size, True) for _ in range(args.repeats))
    print(f"rows: {len(users)} ({args.tasks} tasks x {args.k}), {total / len(users):.0f} tokens a row")
    print(f"prefix share: {skipped / total:.1%} of tokens not recomputed ({groups} groups)")
    print(f"plain path:    {len(users) / plain:.1f} rows/s")
    print(f"shared prefix: {len(users) / shared:.1f} rows/s")
    print(f"ratio shared/plain: {plain / shared:.2f}x")


if __name__ == "__main__":
    main()
