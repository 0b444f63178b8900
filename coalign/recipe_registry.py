"""Recipes by name: what `coalign train` runs, what a config's `recipe` may say, what `coalign bench` compares.

One entry per recipe; the CLI, config validation and the bench look it up here instead of keeping
if-chains. Functions are named as "module:function" and imported on use, so this module sits low
(config reads the names without importing the recipes above it), as `envs.REGISTRY` does for
environments. A new recipe is one module under `recipes/` and one entry in `REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any


@dataclass(frozen=True)
class Recipe:
    """A recipe's entry.

    run: (config, run_dir, console, force) -> results, as `coalign train` calls it.
    rounds: (run, config, train, planner, grounder, round0, console) -> evaluation after every round,
        continuing a bench's shared cold start.
    history: whether `run` returns the evaluation after every round (else one evaluation).
    section: the config section its bench variants override (None: no variants beyond its name).
    round_sections: the config sections only its rounds read; a bench's cold start leaves them at their
        defaults, so benches that differ only in their rounds share a seed's cold start.
    variants: bench recipe name -> overrides of `section` (the paper's ablations).
    default_variants: what `coalign bench` runs for a config of this recipe when not told (None: every
        variant of every recipe sharing its bench runner).
    sweeps: bench recipe name prefix -> an integer field of `section` (`moat_k8`: moat.k = 8).
    check: (config, train) -> None, raising RunError for a config that would fail after the cold start.
    bench: a bench runner of its own, (config, root, seeds, variants, workers, console, name, force) ->
        results, for a recipe whose runs share no planner/grounder cold start (None: `bench.run_bench`).
    report: (results) -> markdown, the report of its own bench.
    show: (results) -> markdown, what `coalign train` prints after a run (None: the evaluation tables).
    evaluate: (config, run_dir, model, console, force) -> results, `coalign eval` of its configs (None: the
        planner -> grounder -> executor evaluation).
    """

    run: str
    rounds: str | None
    history: bool
    section: str | None = None
    round_sections: tuple[str, ...] = ()
    variants: dict[str, dict] = field(default_factory=dict)
    default_variants: tuple[str, ...] | None = None
    sweeps: dict[str, str] = field(default_factory=dict)
    check: str | None = None
    bench: str | None = None
    report: str | None = None
    show: str | None = None
    evaluate: str | None = None


REGISTRY: dict[str, Recipe] = {
    "lumos": Recipe(
        run="coalign.recipes.lumos:run_lumos",
        rounds="coalign.recipes.lumos:matched_rounds",
        history=False,
        round_sections=("moat", "grounder_round_sft", "planner_round_sft"),
        variants={"lumos": {}},
    ),
    "moat": Recipe(
        run="coalign.recipes.moat:run_moat",
        rounds="coalign.recipes.moat:moat_rounds",
        history=True,
        section="moat",
        round_sections=("moat", "planner_dpo", "grounder_round_sft"),
        variants={
            "moat": {},
            "moat_no_stage1": {"stage1": False},
            "moat_no_stage2": {"stage2": False},
            "moat_no_critic": {"critic": "none", "critic_options": {}},  # an llm critic's options do not fit "none"
        },
        sweeps={"moat_k": "k"},
        check="coalign.recipes.moat:refuse_llm_critic_on_turns",
    ),
    "pilotrl": Recipe(
        run="coalign.recipes.pilotrl:run_pilotrl",
        rounds=None,
        history=False,
        section="pilotrl",
        variants={
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
        },
        default_variants=("adaplan", "react", "vanilla_rl", "pilotrl"),  # the paper's main comparison
        bench="coalign.pilotrl_bench:run_pilotrl_bench",
        report="coalign.pilotrl_report:report_markdown",
        show="coalign.pilotrl_report:run_markdown",
        evaluate="coalign.recipes.pilotrl:evaluate_checkpoint",
    ),
}
RECIPES = tuple(REGISTRY)


def recipe(name: str) -> Recipe:
    if name not in REGISTRY:
        raise ValueError(f"unknown recipe {name!r}; known: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def load(ref: str) -> Callable[..., Any]:
    """The function a "module:function" reference names."""
    module, _, attr = ref.partition(":")
    return getattr(import_module(module), attr)


def bench_names(config_recipe: str = "lumos") -> tuple[str, ...]:
    """What `coalign bench` runs by default for a config of `config_recipe`: its recipe's default variants
    when it names some (pilotrl), else the variants of every recipe sharing its bench runner (lumos, moat
    and its ablations share one)."""
    entry = recipe(config_recipe)
    if entry.default_variants is not None:
        return entry.default_variants
    runner = entry.bench
    return tuple(name for entry in REGISTRY.values() if entry.bench == runner for name in entry.variants)


def bench_variant(name: str) -> tuple[str, dict]:
    """(recipe, overrides of its config section) that a bench recipe name stands for; ValueError if none."""
    for recipe_name, entry in REGISTRY.items():
        if name in entry.variants:
            return recipe_name, entry.variants[name]
        for prefix, key in entry.sweeps.items():
            if name.startswith(prefix) and name[len(prefix) :].isdigit():
                return recipe_name, {key: int(name[len(prefix) :])}
    sweeps = [f"{prefix}<{key.upper()}>" for entry in REGISTRY.values() for prefix, key in entry.sweeps.items()]
    known = [variant for entry in REGISTRY.values() for variant in entry.variants]
    raise ValueError(f"unknown recipe {name!r}; known: {', '.join([*known, *sweeps])}")
