"""One check of coalign on a single GPU machine: what vLLM, prefix sharing and LoRA buy there, as ratios measured
in this one run.

It makes a random-weight Llama of a 1-3B shape (default: hidden 2048, 22 layers, 16 heads, vocabulary 32,000,
about 1.2B parameters) in a temporary folder, with a GPT-2-style tokenizer trained on generated text, so it
downloads nothing. On that model it measures and prints:

1. sampling tokens/s: HF `generate` (coalign's HFBackend) and vLLM's offline engine (VLLMBackend, when vllm is
   installed; else "vllm not installed: skipped"), K=15 samples per ~300-token prompt at temperature 1, in one
   call each; ratio vLLM/HF;
2. stage-1 scoring tokens/s: `scoring.score_completions` on MOAT-shaped rows (K candidates per suite task, which
   share the grounder prompt), with `share_prefix` False and True; ratio shared/plain;
3. training: seconds per SFT, DPO (reference log-probs precomputed, as coalign's DPO stage does) and GRPO step
   (TRL's GRPOTrainer sampling with `generate`, a reward that is the completion's length), and peak memory,
   each with LoRA (coalign's defaults: r 16, every linear layer) and with every weight; ratios LoRA/full.

Each measurement runs in a process of its own, so each peak is its own: `torch.cuda.max_memory_allocated` on a
GPU, peak RSS (VmHWM, imports included) on a CPU; and vLLM's reserved memory is gone before training starts.
On a GPU the checkpoint is saved in bf16, sampling and scoring run in bf16 and training keeps float32 weights
under bf16 autocast (`bf16: true` in a coalign config). The first training step of each variant is not timed.
On one GPU, from the repository root (options pass through; expected to take 5-10 minutes on an H200):

    bash benchmarks/gpu_check.sh

On a CPU, `--tiny` runs every code path on a very small model in a few minutes; its timings mean nothing:

    .venv/bin/python benchmarks/gpu_check.py --tiny
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from datasets import Dataset
from dpo_memory import peak_rss_mib, random_triples, random_words
from scoring_speed import prefix_share, seconds, stage1_rows, standard_grounder
from transformers import TrainerCallback
from transformers.utils import logging as hf_logging
from trl import DPOConfig, DPOTrainer, GRPOTrainer, SFTConfig, SFTTrainer

from coalign.config import STAGES, DPOSettings, GenerationSettings, GRPOSettings, LoraSettings, SFTSettings, TinySpec
from coalign.formats.lumos import lumos_generation_prompt
from coalign.moat.sft_data import grounder_pair
from coalign.models.agents import Agent
from coalign.models.backends import HFBackend, VLLMBackend
from coalign.models.load import load_model, load_tokenizer, make_tiny_model, parameter_count, render_prompt
from coalign.tasks.maths_suite import generate_suite
from coalign.training.common import quiet_transformers, trainer_args, training_model
from coalign.training.dpo import dpo_dataset
from coalign.training.grpo import grpo_config
from coalign.training.sft import sft_dataset

CUDA = torch.cuda.is_available()  # without starting CUDA, which would make vLLM spawn its engine, not fork it
TRAINED = ("sft", "dpo", "grpo")
# option: (default, default under --tiny, help); None: each stage's batch size in coalign's settings
SIZES: dict[str, tuple[int | None, int, str]] = {
    "hidden": (2048, 64, "model: hidden size (the MLP's is 11/4 of it)"),
    "layers": (22, 2, "model: decoder layers"),
    "heads": (16, 4, "model: attention heads, as many key-value heads"),
    "vocab": (32000, 512, "model: tokenizer and embedding size"),
    "prompts": (16, 2, "sampling: prompts, all in one call, each sampled K times"),
    "prompt_tokens": (300, 48, "sampling: tokens of random words a prompt, before the chat format"),
    "new_tokens": (128, 16, "sampling and GRPO: most tokens a completion"),
    "tasks": (64, 4, "scoring: suite tasks, K candidate rows each"),
    "steps": (4, 2, "training: steps a variant, the first not timed (at least 2)"),
    "words": (256, 24, "training: random words an example: half prompt, a quarter each answer (SFT: chosen)"),
    "train_batch": (None, 2, "training: sequences a step, one batch; default coalign's: SFT 8, DPO 4, GRPO 16"),
    "generations": (16, 2, "GRPO: completions per prompt (num_generations; a divisor of the GRPO batch)"),
}


def bf16() -> bool:
    """A GPU with bf16 in hardware: the checkpoint saved, sampled and scored in bf16, training under its autocast."""
    return CUDA and torch.cuda.is_bf16_supported(including_emulation=False)


def random_llama(folder: Path, args: argparse.Namespace) -> Path:
    """A Llama of the asked shape with random weights and a GPT-2-style tokenizer of `args.vocab` tokens: trained
    on the suite's grounder rows, so stage-1 rows are as long as under a real model's tokenizer (~300 tokens), and
    on random words, which fill the vocabulary. On a GPU it is saved in bf16, as hub checkpoints are."""
    rng = random.Random(0)
    texts = [lumos_generation_prompt(u) + c for u, c in map(grounder_pair, generate_suite("train", 500))]
    texts += [random_words(rng, 400) for _ in range(200)]
    spec = TinySpec(
        vocab_size=300, hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
        num_kv_heads=args.heads, intermediate_size=args.hidden * 11 // 4, max_positions=2048,
    )  # fmt: skip
    make_tiny_model(texts, folder, spec)  # the shape; its small tokenizer and embeddings are replaced next
    standard_grounder(texts, folder, spec, vocab_size=args.vocab)
    if bf16():
        load_model(folder, dtype="bfloat16").save_pretrained(folder)
    return folder


def _prompts(tokenizer, args: argparse.Namespace) -> list[str]:
    """`args.prompts` user turns of `args.prompt_tokens` tokens of random words, rendered as coalign renders them."""
    rng, n = random.Random(1), args.prompt_tokens
    cut = [tokenizer(random_words(rng, n)).input_ids[:n] for _ in range(args.prompts)]
    return [render_prompt(tokenizer, tokenizer.decode(ids)) for ids in cut]


class CountingModel:
    """The model as HFBackend uses it, counting the tokens each `generate` samples: each row's up to its first EOS
    (a row that ended early is padded to the batch's longest)."""

    def __init__(self, model) -> None:
        self.model, self.tokens = model, 0

    @property
    def device(self) -> torch.device:
        return self.model.device

    def generate(self, **kwargs) -> torch.Tensor:
        out = self.model.generate(**kwargs)
        eos = out[:, kwargs["input_ids"].shape[1] :] == kwargs["eos_token_id"]
        self.tokens += int((eos.cumsum(1) - eos.int() == 0).sum())  # no EOS before the token
        return out


class CountingLLM:
    """vLLM's engine as VLLMBackend uses it, counting the tokens each `generate` samples."""

    def __init__(self, llm) -> None:
        self.llm, self.tokens = llm, 0

    def generate(self, *args, **kwargs) -> list:
        results = self.llm.generate(*args, **kwargs)
        self.tokens += sum(len(c.token_ids) for r in results for c in r.outputs)
        return results


def _sample(backend, counter: CountingModel | CountingLLM, tokenizer, args: argparse.Namespace) -> dict:
    """One timed call of K samples per prompt at temperature 1, after an untimed warm-up on another prompt (no
    prefix cache hit); `counter` counts the tokens sampled."""
    prompts = _prompts(tokenizer, args)
    backend.complete([render_prompt(tokenizer, "warm up")], 4, 2, 1.0, 1.0)
    counter.tokens = 0
    torch.manual_seed(0)
    started = time.perf_counter()
    backend.complete(prompts, args.new_tokens, args.k, 1.0, 1.0)
    return {
        "sample_s": time.perf_counter() - started,
        "sampled_tokens": counter.tokens,
        "prompt_tokens": statistics.mean(len(tokenizer(p).input_ids) for p in prompts),
    }


def _inference(init: str, args: argparse.Namespace) -> dict:
    """HF sampling, then stage-1 scoring plain and with prefix sharing (each after an untimed warm-up batch), on
    the model on the GPU (coalign's `Agent.load` leaves it where `from_pretrained` puts it, the CPU)."""
    tokenizer = load_tokenizer(init)
    model = load_model(init).to("cuda" if CUDA else "cpu")
    counter = CountingModel(model)
    result = _sample(HFBackend(counter, tokenizer, batch_size=args.prompts), counter, tokenizer, args)
    agent = Agent(model, tokenizer)
    users, completions = stage1_rows(generate_suite("train", args.tasks), args.k)
    total, skipped, groups = prefix_share(tokenizer, users, completions, args.score_batch)
    warm = args.score_batch
    for share in (False, True):
        seconds(agent, users[:warm], completions[:warm], args.score_batch, share)
    plain = seconds(agent, users, completions, args.score_batch, False)
    shared = seconds(agent, users, completions, args.score_batch, True)
    return {
        **result, "parameters": parameter_count(model), "rows": len(users), "row_tokens": total,
        "skipped": skipped, "groups": groups, "plain_s": plain, "shared_s": shared,
    }  # fmt: skip


def _vllm(init: str, args: argparse.Namespace) -> dict:
    """The same sampling through vLLM's engine, as `generation.backend: vllm` runs it."""
    tokenizer = load_tokenizer(init)
    backend = VLLMBackend(init, tokenizer, False, args.gpu_memory_utilization)
    backend.llm = counter = CountingLLM(backend.llm)
    return _sample(backend, counter, tokenizer, args)


class StepTimes(TrainerCallback):
    """Wall seconds of each optimizer step (a GRPO step's include its sampling), the GPU drained at both ends so
    queued work lands in its own step."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.started = 0.0

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        if CUDA:
            torch.cuda.synchronize()
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if CUDA:
            torch.cuda.synchronize()
        self.seconds.append(time.perf_counter() - self.started)


def _length_reward(completions: list[str], **_) -> list[float]:
    """A completion's length: it differs within a group, so every GRPO step has advantages and a gradient."""
    return [float(len(c)) for c in completions]


def _trainer(stage: str, model, peft_config, tokenizer, out: Path, args: argparse.Namespace):
    """TRL's trainer for `stage`, configured from coalign's settings as its stages do, for `args.steps` steps (GRPO
    on plain prompts, sampled by `generate`, not on AdaPlan episodes)."""
    if stage == "grpo":
        settings = GRPOSettings(
            num_generations=args.generations, batch_size=args.train_batch or GRPOSettings().batch_size,
            grad_accum=1, bf16=bf16(),
        )  # fmt: skip
        config = grpo_config(settings, STAGES["joint"], out, 0, [1.0], args.new_tokens)
        config.max_steps = args.steps
        triples = random_triples(args.steps * settings.batch_size, args.words)
        data = Dataset.from_dict({"prompt": [render_prompt(tokenizer, prompt) for prompt, _, _ in triples]})
        return GRPOTrainer(
            model=model, reward_funcs=[_length_reward], args=config, train_dataset=data, processing_class=tokenizer,
            peft_config=peft_config,
        )  # fmt: skip
    tokenizer.padding_side = "right"
    kind = SFTSettings if stage == "sft" else DPOSettings
    settings = kind(batch_size=args.train_batch or kind().batch_size, grad_accum=1, bf16=bf16())
    triples = random_triples(args.steps * settings.batch_size, args.words)
    if stage == "sft":
        config = SFTConfig(completion_only_loss=True, max_steps=args.steps, **trainer_args(settings, out, 0))
        data = sft_dataset(tokenizer, [(prompt, chosen) for prompt, chosen, _ in triples])
        return SFTTrainer(
            model=model, args=config, train_dataset=data, processing_class=tokenizer, peft_config=peft_config
        )
    config = DPOConfig(
        beta=settings.beta, loss_type=[settings.loss_type], precompute_ref_log_probs=True, max_steps=args.steps,
        **trainer_args(settings, out, 0),
    )  # fmt: skip
    data = dpo_dataset(tokenizer, triples)
    return DPOTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer, peft_config=peft_config)


def _train(stage: str, lora: bool, init: str, args: argparse.Namespace) -> dict:
    """Median seconds of a step after the first, and this process's peak memory in MiB."""
    tokenizer = load_tokenizer(init)
    model, peft_config = training_model(init, False, LoraSettings() if lora else None)
    timer = StepTimes()
    with tempfile.TemporaryDirectory() as out, quiet_transformers():
        trainer = _trainer(stage, model, peft_config, tokenizer, Path(out), args)
        trainer.add_callback(timer)
        trainer.train()
    return {
        "step_s": statistics.median(timer.seconds[1:]),
        "peak_mib": _peak_mib(),
        "batch": trainer.args.train_batch_size,
    }


def _peak_mib() -> float:
    """This process's peak: on a GPU its tensors' (`max_memory_allocated`), else its resident set's."""
    return torch.cuda.max_memory_allocated() / 2**20 if CUDA else peak_rss_mib()


def _child(task: str, init: Path) -> dict | None:
    """`task` in a fresh process (the same options, `--child`): its result, or None after printing its error."""
    command = [sys.executable, __file__, *sys.argv[1:], "--child", task, str(init)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return json.loads(done.stdout.strip().splitlines()[-1])
    print(f"   {task} failed (exit {done.returncode}); its last output:", *done.stderr.strip().splitlines()[-15:],
          sep="\n     ", flush=True)  # fmt: skip
    return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="a very small model and workload: the code paths on a CPU")
    for name, (full, tiny, text) in SIZES.items():
        default = f"default {full}; " if full is not None else ""
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, help=f"{text} ({default}--tiny: {tiny})")
    parser.add_argument("--k", type=int, default=15, help="samples per prompt and scored candidates per task (15)")
    parser.add_argument("--score-batch", type=int, default=32, help="scoring: rows per forward pass (32)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=GenerationSettings().gpu_memory_utilization,
                        help="vLLM's share of the GPU (coalign's default, %(default)s)")  # fmt: skip
    parser.add_argument("--child", nargs=2, metavar=("TASK", "INIT"), help=argparse.SUPPRESS)
    return parser


def _arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, each size left unset taking its default, or its --tiny one."""
    parser = _parser()
    args = parser.parse_args(argv)
    for name, (full, tiny, _) in SIZES.items():
        if getattr(args, name) is None:
            setattr(args, name, tiny if args.tiny else full)
    if args.steps < 2:
        parser.error("--steps must be at least 2: the first step is not timed")
    return args


def _ratio(numerator: float | None, denominator: float | None) -> str:
    return f"{numerator / denominator:.2f}x" if numerator and denominator else "n/a"


def _training_header() -> None:
    memory = "CUDA peak, max_memory_allocated" if CUDA else "peak RSS"
    print(f"   {'stage':5s} {'batch':>5s} {'full s/step':>11s} {'LoRA s/step':>11s} {'LoRA/full':>9s} "
          f"{'full MiB':>10s} {'LoRA MiB':>10s} {'LoRA/full':>9s}   (MiB: {memory})", flush=True)  # fmt: skip


def _training_row(stage: str, full: dict | None, lora: dict | None) -> None:
    """One stage's step seconds and peaks, with LoRA and without, and their ratios."""
    full, lora = full or {}, lora or {}
    batch = full.get("batch") or lora.get("batch") or "-"
    steps = [f"{r['step_s']:11.3f}" if r else f"{'failed':>11s}" for r in (full, lora)]
    peaks = [f"{r['peak_mib']:10.0f}" if r else f"{'failed':>10s}" for r in (full, lora)]
    step_ratio = _ratio(lora.get("step_s"), full.get("step_s"))
    peak_ratio = _ratio(lora.get("peak_mib"), full.get("peak_mib"))
    print(f"   {stage.upper():5s} {batch:>5} {steps[0]} {steps[1]} {step_ratio:>9s} {peaks[0]} {peaks[1]} "
          f"{peak_ratio:>9s}", flush=True)  # fmt: skip


def main() -> None:
    args = _arguments()
    if args.child:
        task, init = args.child
        if task == "inference":
            result = _inference(init, args)
        elif task == "vllm":
            result = _vllm(init, args)
        else:
            stage, variant = task.split(":")
            result = _train(stage, variant == "lora", init, args)
        print(json.dumps(result))
        return
    os.environ.update(HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1")  # nothing leaves the machine, children included
    hf_logging.disable_progress_bar()  # save_pretrained's
    started = time.perf_counter()
    device = f"{torch.cuda.get_device_name()}, {'bf16' if bf16() else 'float32'}" if CUDA else "CPU, float32"
    print(f"coalign GPU check on {device}{' (--tiny: the code paths; its timings mean nothing)' if args.tiny else ''}")
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        init = random_llama(Path(tmp, "model"), args)
        tokenizer = load_tokenizer(init)
        prompt, chosen, _ = random_triples(1, args.words)[0]
        example_tokens = len(tokenizer(render_prompt(tokenizer, prompt) + chosen).input_ids)
        print(f"model: random Llama, hidden {args.hidden}, {args.layers} layers, {args.heads} heads, vocabulary "
              f"{len(tokenizer)}; made in {time.perf_counter() - started:.0f} s", flush=True)  # fmt: skip

        hf = _child("inference", init)
        failed |= hf is None
        if hf:
            print(f"   {hf['parameters'] / 1e6:.1f}M parameters")
        prompt_tokens = hf["prompt_tokens"] if hf else args.prompt_tokens
        print(f"\n1. sampling: {args.prompts} prompts of ~{prompt_tokens:.0f} tokens, K={args.k} samples each, "
              f"up to {args.new_tokens} new tokens, temperature 1")  # fmt: skip
        if hf:
            print(f"   HF generate (HFBackend):  {hf['sampled_tokens'] / hf['sample_s']:10.1f} tokens/s "
                  f"({hf['sampled_tokens']} tokens in {hf['sample_s']:.1f} s)", flush=True)  # fmt: skip
        vllm = None
        if importlib.util.find_spec("vllm") is None:
            print("   vllm not installed: skipped")
        elif not CUDA:
            print("   no CUDA GPU: vllm skipped")
        else:
            vllm = _child("vllm", init)
            failed |= vllm is None
            if vllm:
                print(f"   vLLM (VLLMBackend):       {vllm['sampled_tokens'] / vllm['sample_s']:10.1f} tokens/s "
                      f"({vllm['sampled_tokens']} tokens in {vllm['sample_s']:.1f} s)")  # fmt: skip
        hf_rate = hf and hf["sampled_tokens"] / hf["sample_s"]
        print(f"   ratio vLLM/HF tokens/s: {_ratio(vllm and vllm['sampled_tokens'] / vllm['sample_s'], hf_rate)}")

        print(f"\n2. stage-1 scoring: {args.tasks} tasks x K={args.k} candidate rows, batch {args.score_batch}", end="")
        if hf:
            print(f"; {hf['row_tokens'] / hf['rows']:.0f} tokens a row, prefix sharing skips "
                  f"{hf['skipped'] / hf['row_tokens']:.1%} of them ({hf['groups']} groups)")  # fmt: skip
            for name, key in (("plain  (share_prefix False)", "plain_s"), ("shared (share_prefix True) ", "shared_s")):
                print(f"   {name}: {hf['row_tokens'] / hf[key]:10.1f} tokens/s ({hf[key]:.2f} s)")
            print(f"   ratio shared/plain tokens/s: {_ratio(hf['plain_s'], hf['shared_s'])}")
        else:
            print("\n   failed with sampling (see above)")

        print(f"\n3. training: {args.steps} steps a variant (the first not timed), ~{example_tokens} tokens an SFT "
              f"example; LoRA r {LoraSettings().r} on every linear layer; each variant in its own process",
              flush=True)  # fmt: skip
        _training_header()
        for stage in TRAINED:
            full, lora = _child(f"{stage}:full", init), _child(f"{stage}:lora", init)
            failed |= full is None or lora is None
            _training_row(stage, full, lora)
    print(f"\ntotal wall time: {time.perf_counter() - started:.0f} s")
    if failed:
        sys.exit("some measurements failed (their errors are above)")


if __name__ == "__main__":
    main()
