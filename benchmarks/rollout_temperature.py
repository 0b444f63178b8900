"""How often GRPO's rollouts succeed at each sampling temperature: the end-to-end reward a stage can learn from.

GRPO learns only from groups whose rollouts differ in reward; a group in which every episode fails teaches
the end-to-end reward nothing. This runs a checkpoint as GRPO stage 1 does (the expert's remaining plan given
as each plan block, `adaplan.expert_guide`, the policy writing thought and action) on the first GRPO training
tasks of `tiny-pilotrl` (the held-in seeds after the SFT's), each sampled `--samples` times per temperature
(0 = greedy), and prints per temperature the success rate, the mean adherence reward and the wall seconds.

    .venv/bin/python benchmarks/rollout_temperature.py --model RUN/checkpoints/sft [--temperatures 1.0,0.5,0]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from coalign.pilotrl.runtime import expert_guide, run_episodes
from coalign.config import load_config
from coalign.models.load import load_model, load_tokenizer
from coalign.pilotrl.rewards import adherence_score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a PilotRL checkpoint (an AdaPlan SFT one)")
    parser.add_argument("--config", default="tiny-pilotrl")
    parser.add_argument("--temperatures", default="1.0,0.5,0")
    parser.add_argument("--tasks", type=int, default=2, help="GRPO training tasks per held-in environment")
    parser.add_argument("--samples", type=int, default=4, help="episodes per task and temperature")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    settings = load_config(args.config).pilotrl
    tokenizer, model = load_tokenizer(args.model), load_model(args.model, dtype="float32").eval()
    seeds = range(settings.train_tasks, settings.train_tasks + args.tasks)
    tasks = [(name, seed) for name in settings.heldin for seed in seeds for _ in range(args.samples)]
    for temperature in (float(t) for t in args.temperatures.split(",")):
        torch.manual_seed(args.seed)
        start = time.perf_counter()
        episodes = run_episodes(
            model, tokenizer, tasks, "adaplan", 1, settings.max_new_tokens, settings.max_context,
            settings.rl.batch_size, temperature=temperature, top_p=settings.rl.top_p, guide=expert_guide,
            progress=False,
        )  # fmt: skip
        records = [e.to_json() for e in episodes]
        print(json.dumps({
            "temperature": temperature,
            "episodes": len(records),
            "success_pct": round(100 * sum(r["success"] for r in records) / len(records), 1),
            "adherence": round(sum(adherence_score(r) for r in records) / len(records), 3),
            "seconds": round(time.perf_counter() - start, 1),
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
