"""A PilotRL evaluation's numbers, from its episode records (`runtime.Episode.to_json()`): per environment
and averaged per split, as metrics.json holds them and the reports read them."""

from __future__ import annotations

from coalign.config import PilotRLSettings
from coalign.pilotrl.rewards import first_plan_correct, first_plan_progress


def summarise(episodes: list[dict]) -> dict:
    """Success rate (%), mean reward, steps and generated tokens per task, the share of turns written in
    the format (%, 0 when no turn was taken), how episodes stopped (and the share out of context, %) and, for
    AdaPlan, the share of first plans that solve their task followed on their own (%): a planning failure told
    from an acting one, and how far they get toward it (%, the graded correctness: `rewards.first_plan_progress`)."""
    n = len(episodes)
    adaplan = all(e.get("mode") == "adaplan" for e in episodes)
    stops: dict[str, int] = {}
    for e in episodes:
        stops[e["stop"]] = stops.get(e["stop"], 0) + 1
    turns = [t for e in episodes for t in e["turns"]]
    return {
        "tasks": n,
        "success": 100 * sum(e["success"] for e in episodes) / n,
        "reward": sum(e["reward"] for e in episodes) / n,
        "steps": sum(e["steps"] for e in episodes) / n,
        "tokens": sum(e["tokens"] for e in episodes) / n,
        "well_formed": 100 * sum(not t["errors"] for t in turns) / len(turns) if turns else 0.0,
        "stops": stops,
        "context_stops": 100 * stops.get("context", 0) / n,
        "plan_correct": 100 * sum(first_plan_correct(e) for e in episodes) / n if adaplan else None,
        "plan_progress": 100 * sum(first_plan_progress(e) for e in episodes) / n if adaplan else None,
    }


def split_average(per_env: dict[str, dict], names: list[str]) -> dict:
    """Unweighted mean over a split's environments (the paper's ID / OOD averages)."""
    keys = ("success", "reward", "steps", "tokens", "well_formed", "context_stops", "plan_correct", "plan_progress")
    if not names:
        return {}
    return {
        k: sum(per_env[n][k] for n in names) / len(names)
        for k in keys
        if all(per_env[n].get(k) is not None for n in names)
    }


def eval_metrics(rows: list[dict], settings: PilotRLSettings, every: int, rl_order: list[str] | None) -> dict:
    """An evaluation's metrics from its episode records: per environment and per split. `rl_order`: the GRPO
    stages the evaluated model went through (None: an SFT model), for the report's label."""
    names = list(dict.fromkeys(r["env"] for r in rows))
    per_env = {env: summarise([r for r in rows if r["env"] == env]) for env in names}
    return {
        "mode": settings.mode,
        "rl_order": rl_order,
        "update_every": every,
        "envs": per_env,
        "heldin_envs": list(settings.heldin),
        "heldout_envs": list(settings.heldout),
        "heldin": split_average(per_env, settings.heldin),
        "heldout": split_average(per_env, settings.heldout),
    }
