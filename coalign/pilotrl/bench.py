"""The PilotRL bench: variants x seeds of the pilotrl recipe, side by side, into one results file and report.

Variants (`VARIANTS`): the SFT cold starts (`adaplan`: plan, act, rewrite the plan, evaluated at
each plan-update interval of `pilotrl.eval_update_every`; `react`: no plan), and GRPO from them: `pilotrl`
(stages 1 -> 2 -> 3), `vanilla_rl` (ReAct, no plan) and the stage-order ablations (`order_all`, `order_23`,
`order_13`, `order_12`, `order_213`). Each (variant, seed) is its own resumable run folder,
`<bench>/seed<s>/<variant>/`; the GRPO variants start from their seed's SFT run of the same format, which
runs first (so one cold start serves every variant of a seed, as the paper compares from one SFT model).
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from coalign.config import GRPOSettings, PilotRLSettings, RunConfig
from coalign.core.parallel import Job, run_jobs
from coalign.core.runs import Run, write_json
from coalign.pilotrl.curriculum import STAGE_MODES, stage_epochs
from coalign.pilotrl.curves import bench_curves, plot_curves, stage_curves, stage_summaries
from coalign.pilotrl.recipe import run_pilotrl
from coalign.pilotrl.report import write_report
from coalign.training.setup import job_memory

# bench variant -> its format and GRPO order: the SFT cold starts, Vanilla RL, PilotRL and the paper's ablations
VARIANTS: dict[str, dict] = {
    "adaplan": {"mode": "adaplan", "rl": None},  # the SFT cold starts
    "react": {"mode": "react", "rl": None},
    "vanilla_rl": {"mode": "react", "rl": {"order": ["vanilla"]}},  # GRPO without a plan
    "pilotrl": {"mode": "adaplan", "rl": {"order": ["executor", "planner", "joint"]}},
    "order_all": {"mode": "adaplan", "rl": {"order": ["all"]}},  # the paper's stage-order ablations
    "order_23": {"mode": "adaplan", "rl": {"order": ["planner", "joint"]}},
    "order_13": {"mode": "adaplan", "rl": {"order": ["executor", "joint"]}},
    "order_12": {"mode": "adaplan", "rl": {"order": ["executor", "planner"]}},
    "order_213": {"mode": "adaplan", "rl": {"order": ["planner", "executor", "joint"]}},
    "isolated": {  # separate planner and executor models, 2 epochs each: the unified model's 4
        "mode": "adaplan",
        "rl": {"order": ["executor", "planner_isolated"], "epochs": {"executor": 2.0}},
    },
}
DEFAULT_VARIANTS = ("adaplan", "react", "vanilla_rl", "pilotrl")  # the paper's main comparison


def _variant(name: str) -> dict:
    if name not in VARIANTS:
        raise ValueError(f"unknown pilotrl bench variant {name!r}; known: {', '.join(VARIANTS)}")
    return VARIANTS[name]


def variant_config(config: RunConfig, variant: str, seed: int) -> RunConfig:
    """The run of one bench variant for one seed: the config's pilotrl section with the variant's format and
    GRPO order (its other GRPO settings are the config's `pilotrl.rl`, else the defaults)."""
    overrides = _variant(variant)
    settings = config.pilotrl.model_dump()
    settings["mode"] = overrides["mode"]
    settings["rl"] = None if overrides["rl"] is None else {**(settings["rl"] or {}), **overrides["rl"]}
    pilotrl = PilotRLSettings.model_validate(settings, context={"stages": STAGE_MODES})
    return config.model_copy(update={"seed": seed, "name": f"{config.name}-{variant}-s{seed}", "pilotrl": pilotrl})


def cold_start_variant(variant: str) -> str | None:
    """The SFT variant a GRPO variant starts from (None for an SFT variant itself)."""
    overrides = _variant(variant)
    return None if overrides["rl"] is None else overrides["mode"]


def variant_weight(variant: str) -> float:
    """A job's expected length relative to the others', so the longest start first (`Job.weight`): an AdaPlan
    episode is about twice a ReAct one, and each GRPO epoch rolls out and trains anew (an SFT run counts 1)."""
    overrides = _variant(variant)
    rl = GRPOSettings(**overrides["rl"]) if overrides["rl"] else None
    epochs = sum(stage_epochs(rl, name) for name in rl.order) if rl else 0
    return (2.0 if overrides["mode"] == "adaplan" else 1.0) * (1 + epochs)


def _run(config: RunConfig, run_dir: Path, force: bool, start: str | None = None) -> dict:
    return run_pilotrl(config, run_dir, Console(), force, start)


def run_pilotrl_bench(
    config: RunConfig,
    root: str | Path,
    seeds: list[int],
    variants: list[str],
    workers: int,
    console: Console,
    name: str = "",
    force: bool = False,
) -> dict:
    """Run every (variant, seed), the SFT runs first, and write `<name>results.json` and `<name>report.md`
    under `root` (with `<name>curves.png`, the GRPO reward curves, when a variant trains by GRPO)."""
    root = Path(root)
    cold = list(dict.fromkeys(cold_start_variant(v) or v for v in variants))  # SFT runs, asked for or needed
    rl = [v for v in dict.fromkeys(variants) if cold_start_variant(v) is not None]
    runs: dict = {}
    for phase, desc in ((cold, "pilotrl SFT runs"), (rl, "pilotrl GRPO runs")):
        pairs = [(variant, seed) for seed in seeds for variant in phase]
        jobs = []
        for variant, seed in pairs:
            run_dir = root / f"seed{seed}" / variant
            sft = cold_start_variant(variant)
            start = str(root / f"seed{seed}" / sft / "checkpoints" / "sft") if sft else None
            args = (variant_config(config, variant, seed), run_dir, force, start)
            memory = job_memory(args[0])
            jobs.append(Job(f"{variant} seed {seed}", _run, args, run_dir / "log.txt", variant_weight(variant), memory))
        for (variant, seed), metrics in zip(pairs, run_jobs(jobs, workers, desc), strict=True):
            run_dir = root / f"seed{seed}" / variant
            if cold_start_variant(variant):  # its GRPO stages' rewards, kept with its evaluation in results.json
                metrics = {**metrics, "grpo": stage_summaries(stage_curves(run_dir))}
            runs.setdefault(variant, {})[str(seed)] = {**metrics, "seconds": Run(run_dir).stage_seconds()}
    results = {
        "seeds": seeds,
        "heldin": list(config.pilotrl.heldin),
        "heldout": list(config.pilotrl.heldout),
        "config": config.model_dump(mode="json"),
        "runs": runs,
    }
    prefix = f"{name}-" if name else ""
    write_json(root / f"{prefix}results.json", results)
    curves = f"{prefix}curves.png" if rl else ""
    write_report(results, root, prefix, curves)
    if curves:
        plot_curves(bench_curves(root, seeds, rl), root / curves)
    return results
