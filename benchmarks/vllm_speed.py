"""vLLM against the model's own `generate`, side by side in one run, on SmolLM2-135M-Instruct (or `--model`):

- `sampling`: MOAT's stage 1, K candidate plans for each of N GSM8K training tasks (smol's settings: K=4,
  temperature 1, top-p 0.95, 200 new tokens at most), `sample_completions` through each engine;
- `episodes`: PilotRL episodes of different lengths (4 tasks in each of 4 environments, AdaPlan, sampled at
  temperature 1 as GRPO's rollouts are), `run_episodes` with the kept-cache HF writer and with vLLM's turns;
- `grpo`: one GRPO step (stage 3, one household task x G rollouts), rollouts by HF and by the colocated vLLM
  engine, the step's wall time, its rollout time and the engine's weight sync (`vllm_engine.reload_weights`).

    .venv/bin/python benchmarks/vllm_speed.py [--parts sampling,episodes,grpo] [--out docs/results/vllm-speed]

Each part's result is written to `<out>/results.json` as soon as it ends, and a part already there is not run
again (delete it to re-measure). Both engines run in this process, one after the other, in the precision a
smol run infers in (bf16 where the CPU has it natively); vLLM's start-up is timed apart from its generation.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

from coalign.config import GenerationSettings, GRPOSettings, load_config
from coalign.core.machine import decide_bf16
from coalign.formats.lumos import planner_prompt
from coalign.moat.sample import sample_completions
from coalign.models.agents import Agent
from coalign.models.bases import starting_point
from coalign.pilotrl import curriculum
from coalign.pilotrl.rollout import RolloutSpec, prompt_rows
from coalign.pilotrl.runtime import run_episodes
from coalign.tasks.gsm8k import load_gsm8k
from coalign.training import grpo

DATA = Path(__file__).parents[1] / "coalign" / "data" / "gsm8k" / "train.jsonl"
ENVS = ("household", "crafting", "wordle", "iqa")


def cpu_name() -> str:
    """The processor's model name (/proc/cpuinfo), else what platform says."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def tokens(tokenizer, texts: list[list[str]]) -> int:
    return sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for row in texts for t in row)


def timed(fn):
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def agents(model: str, bf16: bool) -> tuple[Agent, Agent, float]:
    """The model on its own generate and on vLLM, the engine started (its seconds returned)."""
    hf = Agent.load(model, bf16=bf16)
    vllm = Agent.load(model, generation=GenerationSettings(backend="vllm"), bf16=bf16)
    _, start = timed(lambda: vllm.backend.llm)
    return hf, vllm, start


def sampling(model: str, bf16: bool, args: argparse.Namespace) -> dict:
    hf, vllm, start = agents(model, bf16)
    prompts = [planner_prompt(task.question) for task in load_gsm8k(DATA)[: args.tasks]]
    row = {"tasks": len(prompts), "k": args.k, "vllm_start_s": round(start, 1)}
    for name, agent in (("hf", hf), ("vllm", vllm)):
        torch.manual_seed(0)
        out, seconds = timed(lambda a=agent: sample_completions(a, prompts, args.k, 1.0, 0.95, 200, 16))
        n = tokens(hf.tokenizer, out)
        row[name] = {"seconds": round(seconds, 1), "new_tokens": n, "tokens_per_s": round(n / seconds, 1)}
        print(f"sampling  {name:5} {seconds:7.1f} s  {n:6} tokens  {n / seconds:6.1f} tokens/s", flush=True)
    row["speedup"] = round(row["hf"]["seconds"] / row["vllm"]["seconds"], 2)
    return row


def episodes(model: str, bf16: bool, args: argparse.Namespace) -> dict:
    hf, vllm, start = agents(model, bf16)
    tasks = [(env, 1000 + i) for env in ENVS for i in range(args.episodes // len(ENVS))]
    row = {"episodes": len(tasks), "vllm_start_s": round(start, 1)}
    for name, writer in (("hf", None), ("vllm", vllm.backend.turns)):
        torch.manual_seed(0)
        done, seconds = timed(
            lambda w=writer: run_episodes(
                hf.model, hf.tokenizer, tasks, "adaplan", 1, 128, 2048, len(tasks), temperature=1.0, writer=w
            )
        )
        n = sum(e.generated_tokens for e in done)
        row[name] = {"seconds": round(seconds, 1), "new_tokens": n, "tokens_per_s": round(n / seconds, 1),
                     "turns": [len(e.turns) for e in done], "lengths": [len(e.ids) for e in done]}  # fmt: skip
        print(f"episodes  {name:5} {seconds:7.1f} s  {n:6} tokens  {n / seconds:6.1f} tokens/s", flush=True)
    row["speedup"] = round(row["hf"]["seconds"] / row["vllm"]["seconds"], 2)
    return row


def one_step(model: str, bf16: bool, generation: str, generations: int) -> dict:
    """One GRPO step of stage 3 on one household task with rollouts by `generation`, its rollouts timed
    (`make_rollout_func` wrapped) and each weight sync into vLLM (`reload_weights` wrapped)."""
    rows = prompt_rows([("household", 1000)], "adaplan")
    spec = RolloutSpec(max_new_tokens=128, max_context=2048, batch_size=generations)
    spent = {"rollout_s": 0.0, "sync_s": 0.0, "syncs": 0}
    make, reload = curriculum.make_rollout_func, grpo.reload_weights

    def timed_rollouts(*a, **k):
        rollout = make(*a, **k)

        def run(prompts, trainer):
            out, seconds = timed(lambda: rollout(prompts, trainer))
            spent["rollout_s"] += seconds
            return out

        return run

    def timed_sync(llm, weights) -> None:
        _, seconds = timed(lambda: reload(llm, weights))
        spent["sync_s"] += seconds
        spent["syncs"] += 1

    settings = GRPOSettings(
        order=["joint"], tasks=1, num_generations=generations, batch_size=1, grad_accum=generations,
        learning_rate=1e-5, bf16=bf16, save_steps=100, generation=generation,
    )  # fmt: skip
    with (
        tempfile.TemporaryDirectory() as tmp,
        mock.patch.object(curriculum, "make_rollout_func", timed_rollouts),
        mock.patch.object(grpo, "reload_weights", timed_sync),
    ):
        torch.manual_seed(0)
        joint = curriculum.STAGES["joint"]
        _, seconds = timed(lambda: curriculum.grpo_stage(model, Path(tmp) / "out", rows, joint, settings, spec))
    return {"seconds": round(seconds, 1), **{k: round(v, 2) for k, v in spent.items()}}


def grpo_step(model: str, bf16: bool, args: argparse.Namespace) -> dict:
    row: dict = {"generations": args.generations}
    for generation in ("hf", "vllm_colocate"):
        row[generation] = step = one_step(model, bf16, generation, args.generations)
        print(f"grpo step {generation:13} {step['seconds']:7.1f} s  rollouts {step['rollout_s']:6.1f} s  "
              f"sync {step['sync_s']:5.2f} s", flush=True)  # fmt: skip
    row["speedup"] = round(row["hf"]["seconds"] / row["vllm_colocate"]["seconds"], 2)
    row["rollout_speedup"] = round(row["hf"]["rollout_s"] / row["vllm_colocate"]["rollout_s"], 2)
    return row


def write(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")


PARTS = {"sampling": sampling, "episodes": episodes, "grpo": grpo_step}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--model", default="smollm2-135m", help="a model name or folder (default SmolLM2)")
    parser.add_argument("--tasks", type=int, default=32, help="sampling: GSM8K tasks")
    parser.add_argument("--k", type=int, default=4, help="sampling: candidates per task")
    parser.add_argument("--episodes", type=int, default=16, help="episodes: how many (split over 4 environments)")
    parser.add_argument("--generations", type=int, default=4, help="grpo: rollouts of the step's task")
    parser.add_argument("--out", type=Path, default=Path("docs/results/vllm-speed"))
    args = parser.parse_args()
    model = starting_point(args.model)
    bf16 = decide_bf16(load_config("smol").bf16)
    path = args.out / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results["machine"] = {"cpu": cpu_name(), "cores": torch.get_num_threads(),
                          "torch": torch.__version__, "bf16": bf16, "model": args.model}  # fmt: skip
    for part in args.parts.split(","):
        if part in results:
            print(f"{part}: measured already ({path}); delete it there to measure again")
            continue
        results[part] = {**PARTS[part](model, bf16, args), "date": time.strftime("%Y-%m-%d %H:%M")}
        write(path, results)
    write(path, results)
    for part in PARTS:
        if part in results:
            print(f"{part:9} vLLM over HF: {results[part]['speedup']}x")


if __name__ == "__main__":
    main()
