"""Each recipe at small sizes under the launch layouts a GPU user runs, on this CPU (gloo): one process,
`torchrun --nproc_per_node 2`, and two "nodes" on localhost (two torchrun launchers of 2 processes each,
`--nnodes 2 --node_rank 0|1`, one shared run folder). Every run must end with its evaluation; each
layout's run folder is then compared with the one-process run's: the stages it finished, the evaluation
metrics, the bytes of every JSONL artifact, and the largest difference of any trained weight.

Several processes take the same examples per optimizer step in the same order (a config's batch is per step,
`core.ranks.batch_split`), but their gradients are summed over processes in another order, so the weights
differ by float rounding and whatever was generated after the first training step may differ too. SFT runs
without `group_by_length`, whose megabatches transformers cuts per process (so the order changes with the layout).

    .venv/bin/python benchmarks/scale_out.py [--out docs/results/scale-out] [--recipes lumos,moat,pilotrl]

Resumable: a (recipe, layout) whose result is in the results JSON is not run again. Its run folders go to
`--runs` (default runs/scale-out).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coalign.config import config_to_yaml, load_config  # noqa: E402
from coalign.core.machine import describe_machine, machine_summary  # noqa: E402

SMALL_DATA = {
    "train": [{"kind": "suite", "split": "train", "n": 600}],
    "heldin": [{"kind": "suite", "split": "heldin", "n": 40}],
    "heldout": [{"kind": "suite", "split": "heldout", "n": 40}],
}
# group_by_length off: its megabatches are cut per process (transformers sizes them by the per-process batch
# x accumulation), so the data order would change with the layout
SFT = {"epochs": 1, "batch_size": 4, "grad_accum": 2, "logging_steps": 5, "group_by_length": False}
CONFIGS: dict[str, tuple[str, dict]] = {
    "lumos": ("tiny", {"name": "scale-lumos", "recipe": "lumos", "threads": 1, "data": SMALL_DATA,
                       "planner_sft": SFT, "grounder_sft": SFT}),
    "moat": ("tiny", {"name": "scale-moat", "recipe": "moat", "threads": 1, "data": SMALL_DATA,
                      "planner_sft": SFT, "grounder_sft": SFT,
                      "moat": {"rounds": 1, "tasks": 16, "k": 2, "batch_size": 16},
                      "planner_dpo": {"batch_size": 2, "grad_accum": 2, "logging_steps": 2},
                      "grounder_round_sft": SFT}),
    "pilotrl": ("tiny-pilotrl", {
        "name": "scale-pilotrl", "threads": 1,
        "pilotrl": {"heldin": ["household", "wordle"], "heldout": ["maze"], "train_tasks": 8, "eval_tasks": 4,
                    "train_update_every": [1], "eval_update_every": [1], "max_new_tokens": 96,
                    "max_context": 1024, "batch_size": 16,
                    "sft": {"epochs": 1, "batch_size": 2, "grad_accum": 2, "max_length": 4096},
                    "rl": {"tasks": 1, "num_generations": 2, "batch_size": 4, "grad_accum": 1,
                           "epochs": {"planner": 1.0}}},
    }),
    # ReAct + GRPO (Vanilla RL): at this size its groups have reward variance, so its GRPO steps train
    "pilotrl-vanilla": ("tiny-pilotrl", {
        "name": "scale-pilotrl-vanilla", "threads": 1,
        "pilotrl": {"heldin": ["household", "wordle"], "heldout": ["maze"], "train_tasks": 16, "eval_tasks": 4,
                    "train_update_every": [1], "eval_update_every": [1], "max_new_tokens": 96,
                    "max_context": 1024, "batch_size": 16, "mode": "react",
                    "sft": {"epochs": 2, "batch_size": 2, "grad_accum": 2, "max_length": 4096},
                    "rl": {"order": ["vanilla"], "tasks": 2, "num_generations": 4, "batch_size": 4, "grad_accum": 2,
                           "epochs": {"vanilla": 1.0}}},
    }),
}  # fmt: skip
LAYOUTS = {"1 process": (1, 1), "2 processes": (1, 2), "2 nodes x 2": (2, 2)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(config: Path, run_dir: Path, nodes: int, per_node: int, log: Path) -> tuple[int, float]:
    """`coalign train` under the layout; (exit code of the worst launcher, seconds)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    train = ["-m", "coalign.cli", "train", str(config), "--run-dir", str(run_dir)]
    if nodes * per_node == 1:
        commands = [[sys.executable, *train]]
    else:
        port = str(free_port())
        commands = [
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--node_rank", str(node),
             "--nproc_per_node", str(per_node), "--master_addr", "127.0.0.1", "--master_port", port, *train]
            for node in range(nodes)
        ]  # fmt: skip
    start = time.time()
    with log.open("w") as out:
        procs = [subprocess.Popen(c, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT) for c in commands]
        codes = [p.wait() for p in procs]
    return max(codes, key=abs), time.time() - start


def metrics(run_dir: Path) -> dict:
    return {str(p.relative_to(run_dir)): json.loads(p.read_text()) for p in sorted(run_dir.rglob("metrics.json"))}


def numbers_apart(a: object, b: object) -> float:
    """The largest difference between two JSON values' numbers, walked together (inf where their shapes differ)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return float("inf")
        return max((numbers_apart(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return float("inf")
        return max((numbers_apart(x, y) for x, y in zip(a, b)), default=0.0)
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return abs(a - b)
    return 0.0 if a == b else float("inf")


def compare(one: Path, other: Path) -> dict:
    """What differs between the one-process run folder and another layout's."""
    stages = sorted(p.name for p in (one / "stages").iterdir())
    jsonl = sorted(p.relative_to(one) for p in one.rglob("*.jsonl") if "checkpoints" not in p.parts)
    differ = [str(p) for p in jsonl if not (other / p).exists() or (other / p).read_bytes() != (one / p).read_bytes()]
    weights = {}
    for path in sorted((one / "checkpoints").rglob("model.safetensors")):
        rel = path.relative_to(one)
        a, b = load_file(path), load_file(other / rel)
        weights[str(rel.parent.name)] = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    return {
        "same_stages": stages == sorted(p.name for p in (other / "stages").iterdir()),
        "metrics_max_diff": numbers_apart(metrics(one), metrics(other)),
        "jsonl_files": len(jsonl),
        "jsonl_differ": differ,
        "max_weight_diff": weights,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "scale-out")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "scale-out")
    parser.add_argument("--recipes", default=",".join(CONFIGS))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    args.runs.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    results["machine"] = machine_summary(describe_machine())
    for recipe in args.recipes.split(","):
        base, overrides = CONFIGS[recipe]
        config = args.runs / f"{recipe}.yaml"
        config.write_text(config_to_yaml(load_config(base, overrides)))
        done = results.setdefault(recipe, {})
        for layout, (nodes, per_node) in LAYOUTS.items():
            if done.get(layout, {}).get("code") == 0:
                continue
            run_dir = args.runs / f"{recipe}-{nodes}x{per_node}"
            code, seconds = launch(config, run_dir, nodes, per_node, args.runs / f"{recipe}-{nodes}x{per_node}.log")
            row = {"processes": nodes * per_node, "nodes": nodes, "code": code, "seconds": round(seconds, 1)}
            if code == 0:
                row["metrics"] = metrics(run_dir)
                if nodes * per_node > 1 and (args.runs / f"{recipe}-1x1").is_dir():
                    row["versus_1_process"] = compare(args.runs / f"{recipe}-1x1", run_dir)
            done[layout] = row
            results["date"] = date.today().isoformat()
            results_path.write_text(json.dumps(results, indent=2) + "\n")
            print(f"{recipe:8} {layout:12} exit {code}  {seconds:7.1f} s", flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
