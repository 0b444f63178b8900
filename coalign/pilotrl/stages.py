"""One PilotRL GRPO stage: episodes from the AdaPlan runtime (`rollout`), the stage's reward components
(`rewards`) and its trained tokens (`config.STAGES`), handed to the shared GRPO trainer (`training.grpo`).
"""

from __future__ import annotations

from pathlib import Path

from coalign.config import GRPOSettings, LoraSettings, Stage
from coalign.models.load import inference_device, load_model
from coalign.pilotrl.rewards import reward_functions
from coalign.pilotrl.rollout import RolloutSpec, make_rollout_func


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
    (`rollout.prompt_rows`); save it to `out`. `executor`: a fixed model that writes the rest of each turn
    after the policy's plan block."""
    # imported here: TRL's GRPO trainer imports vLLM, 4 s of every process that imports the registry (each rank
    # of a launched SFT, each Ray job), which only a GRPO stage needs
    from coalign.training.grpo import train_grpo

    weights = {name: settings.weights.get(name, 0.0) for name in stage.rewards}
    funcs, reward_weights = reward_functions(weights, slack=settings.slack, judge=judge)
    fixed = load_model(executor, trust_remote_code, dtype="float32").to(inference_device()) if executor else None
    return train_grpo(
        init, out, rows, stage, settings, funcs, reward_weights, make_rollout_func(rows, spec, fixed),
        spec.max_new_tokens, seed, trust_remote_code, lora, context_tokens=spec.max_context,
    )  # fmt: skip
