"""PilotRL's curriculum: the GRPO stages after the SFT cold start, what each runs, trains and rewards, and how
a run goes through them.

A run's `pilotrl.rl.order` names the stages it trains, in turn, each from the checkpoint of the one before.
The paper's progressive order is executor -> planner -> joint (1->2->3, the default); its ablations reorder
those, train everything in one stage (`all`), train ReAct without a plan (`vanilla`), or split the planner
from the executor (`executor`, then `planner_isolated`: two models, evaluated together).

Read top to bottom: the stages (`STAGES`), an order's label and each stage's epochs, the loop over an order
(`grpo_stages`), and one stage handed to the shared GRPO trainer (`grpo_stage`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from coalign.config import GRPOSettings, LoraSettings, RunConfig
from coalign.core.runs import Run, read_json
from coalign.models.load import inference_device, load_model
from coalign.pilotrl.rewards import llm_judge, reward_functions
from coalign.pilotrl.rollout import RolloutSpec, make_rollout_func, prompt_rows
from coalign.training.setup import training_dependencies


@dataclass(frozen=True)
class Stage:
    """One GRPO stage: the episodes it runs, the tokens it trains, the rewards it sums."""

    name: str
    """What `pilotrl.rl.order` calls it."""
    label: str
    """The paper's name for it, as an order is written: 1->2->3, 1&2&3, Vanilla RL."""
    mode: str
    """The episodes' format: adaplan (plan, act, update the plan) or react (no plan)."""
    train: str
    """The generated tokens that train: all, plan or action (`rollout.TRAINS`); the others are context."""
    rewards: tuple[str, ...]
    """The reward components summed, each by its weight in `pilotrl.rl.weights` (`rewards.COMPONENTS`)."""
    epochs: float
    """Unless `pilotrl.rl.epochs` names the stage: the paper's 1 / 2 / 1 for the three progressive stages, their
    sum, 4, for a stage that stands for all three."""
    guided: bool = False
    """The expert writes the plan blocks, as context: the model learns to act by a given plan."""
    separate: bool = False
    """A second model, from the cold start, trains beside the previous stage's, which stays fixed."""


# 2: write the plans; among a task's rollouts the group-relative advantage prefers the plans that worked, while the
# actions, learnt in stage 1, are context
_PLANNER = Stage(
    name="planner",
    label="2",
    mode="adaplan",
    train="plan",
    rewards=("format", "end_to_end", "plan_quality"),
    epochs=2.0,
)

STAGES: dict[str, Stage] = {
    stage.name: stage
    for stage in (
        # 1: act by the expert's plans
        Stage(
            name="executor",
            label="1",
            mode="adaplan",
            guided=True,
            train="action",
            rewards=("format", "adherence", "end_to_end"),
            epochs=1.0,
        ),
        _PLANNER,  # 2: write the plans (above)
        # 3: plans and actions together
        Stage(name="joint", label="3", mode="adaplan", train="all", rewards=("format", "end_to_end"), epochs=1.0),
        # ablation: one stage, every reward
        Stage(
            name="all",
            label="1&2&3",
            mode="adaplan",
            train="all",
            rewards=("format", "adherence", "end_to_end", "plan_quality"),
            epochs=4.0,
        ),
        # ablation: Vanilla RL, ReAct without a plan
        Stage(
            name="vanilla", label="Vanilla RL", mode="react", train="all", rewards=("format", "end_to_end"), epochs=4.0
        ),
        # the unified-vs-isolated comparison: after `executor`, a second model writes the plan blocks while
        # that executor, fixed, writes the rest of each turn
        dataclasses.replace(_PLANNER, name="planner_isolated", label="2 (isolated)", separate=True),
    )
}
# What a `pilotrl.rl` block is checked against when its config loads: the config sits below the recipes and cannot
# import this module, so the registry hands it these (`config.load_config(stages=...)`).
STAGE_MODES: dict[str, str] = {name: stage.mode for name, stage in STAGES.items()}


def order_label(order: list[str]) -> str:
    """An order as the paper writes it: 1->2->3, 1&2&3, Vanilla RL."""
    return "->".join(STAGES[name].label for name in order)


def stage_epochs(rl: GRPOSettings, name: str) -> float:
    """A stage's epochs: its own, unless `pilotrl.rl.epochs` names it."""
    return rl.epochs.get(name, STAGES[name].epochs)


def grpo_stages(run: Run, config: RunConfig, cold: str, console: Console) -> tuple[str, str | None]:
    """The GRPO stages of `pilotrl.rl.order` on the held-in environments' seeds after the SFT's, each from
    the checkpoint of the one before; a `separate` stage (isolated planner) trains a second model from the
    cold start `cold` beside the current one, fixed. The paths of the last checkpoint and of a separate
    planner (None without one)."""
    settings, rl, trust = config.pilotrl, config.pilotrl.rl, config.models.trust_remote_code
    seeds = range(settings.train_tasks, settings.train_tasks + rl.tasks)
    rows = prompt_rows([(name, seed) for name in settings.heldin for seed in seeds], settings.mode)
    model, planner = cold, None
    for i, name in enumerate(rl.order, 1):
        stage, out = STAGES[name], run.path("checkpoints", stage_folder(i, name))
        init, executor = (cold, model) if stage.separate else (model, None)
        spec = RolloutSpec(
            stage.mode, rl.update_every, stage.guided, stage.train,
            settings.max_new_tokens, settings.max_context, settings.batch_size, settings.history,
        )  # fmt: skip

        def train(init: str = init, out: Path = out, stage=stage, spec: RolloutSpec = spec, executor=executor) -> dict:
            beside = f", beside the fixed executor {executor}" if executor else ""
            console.print(f"[bold]grpo stage {stage.label} ({stage.name})[/bold]: {len(rows)} tasks x "
                          f"{rl.num_generations} rollouts, rewards {' + '.join(stage.rewards)}, trains "
                          f"{stage.train} tokens, from {init}{beside}")  # fmt: skip
            judged = {"adherence", "plan_quality"} & set(stage.rewards)
            judge = llm_judge(rl.judge_options) if rl.judge == "llm" and judged else None
            grpo_stage(
                init, out, rows, stage, rl, spec, config.seed, trust, judge=judge, executor=executor,
                lora=config.lora,
            )  # fmt: skip
            log = read_json(out / "train_log.json")
            record = {"tasks": len(rows), "steps": log["steps"], "grpo_stage": stage.name}
            return {**record, "judge": judge.stats} if judge else record

        rollout = {k: v for k, v in dataclasses.asdict(spec).items() if k != "history" or v is not None}  # as before it
        trained = {**training_dependencies(rl, config.seed, config.lora, rows), "rollout": rollout}
        del trained["training"]["order"]  # the stages before this one are its input checkpoint
        inputs = [init, *([executor] if executor else [])]
        run.stage(f"grpo{i}_{name}", train, [out], inputs=inputs, depends_on=trained)
        if stage.separate:
            planner = str(out)
        else:
            model = str(out)
    return model, planner


def stage_folder(index: int, name: str) -> str:
    """The checkpoint folder of the `index`-th GRPO stage (from 1), inside the run's checkpoints/."""
    return f"grpo{index}-{name}"


def grpo_stage(
    init: str | Path,
    out: str | Path,
    rows: list[dict],
    stage: Stage,
    settings: GRPOSettings,
    spec: RolloutSpec,
    seed: int = 0,
    trust_remote_code: bool = False,
    judge=None,
    executor: str | Path | None = None,
    lora: LoraSettings | None = None,
) -> Path:
    """Train the model at `init` (LoRA adapters under `lora`) by GRPO on the tasks of `rows`
    (`rollout.prompt_rows`): episodes from the AdaPlan runtime (`rollout`), the stage's reward components
    (`rewards`) and its trained tokens, handed to the shared GRPO trainer (`training.grpo`); save it to `out`.
    `executor`: a fixed model that writes the rest of each turn after the policy's plan block."""
    # imported here: TRL's GRPO trainer imports vLLM, 4 s of every process that imports the registry (each rank
    # of a launched SFT, each Ray job), which only a GRPO stage needs
    from coalign.training.grpo import train_grpo

    weights = {name: settings.weights.get(name, 0.0) for name in stage.rewards}
    funcs, reward_weights = reward_functions(weights, slack=settings.slack, judge=judge)
    fixed = load_model(executor, trust_remote_code, dtype="float32").to(inference_device()) if executor else None
    return train_grpo(
        init, out, rows, settings, funcs, reward_weights, make_rollout_func(rows, spec, fixed), spec.max_new_tokens,
        name=stage.name, epochs=stage_epochs(settings, stage.name), seed=seed, trust_remote_code=trust_remote_code,
        lora=lora, context_tokens=spec.max_context,
    )  # fmt: skip
