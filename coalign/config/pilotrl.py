"""PilotRL's settings: its environments, SFT cold start, GRPO stages and evaluation.

The GRPO stages themselves are the curriculum's (`pilotrl.curriculum`), above the config, so the config learns
their names and modes from the validation context: `context["stages"]`, each stage's name -> the mode of the
episodes it runs (`load_config(stages=...)`, which `registry.load_config` passes). Without it, an order's stage
names are not checked.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, model_validator

from coalign.config.base import BF16, CHECKPOINTING, Precision, Settings
from coalign.config.training import SFTSettings
from coalign.core.endpoint_options import PLANNER_OPTIONS, check_judge_options, split_endpoint_options


def _stage_modes(info: ValidationInfo) -> dict[str, str] | None:
    """The GRPO stages the validation context names, each with the mode it runs (None: not checked)."""
    return (info.context or {}).get("stages")


class GRPOSettings(Settings):
    """PilotRL's GRPO stages (`pilotrl.curriculum`), run in `order` from the SFT checkpoint. Defaults are
    the paper's (lr 1e-6, 16 rollouts per task, no KL, clip 0.2; epochs are each stage's own, 1 / 2 / 1)."""

    new_keys = ("gradient_checkpointing", "micro_batch_size")

    order: list[str] = Field(["executor", "planner", "joint"], min_length=1, description="stages, in turn")
    tasks: int = Field(64, ge=1, description="training tasks per held-in environment (seeds after the SFT's)")
    num_generations: int = Field(16, ge=2, description="rollouts per task (GRPO's group)")
    batch_size: int = Field(
        16, ge=1, description="x grad_accum: episodes per optimizer step, whole groups, shared among the processes"
    )
    grad_accum: int = Field(16, ge=1)
    micro_batch_size: int = Field(
        4,
        ge=1,
        description="episodes per forward pass in one process, the rest of its share accumulated: activations and "
        "logits grow with this, not with the step (verl's ppo_micro_batch_size_per_gpu)",
    )
    learning_rate: float = Field(1e-6, gt=0)
    epochs: dict[str, float] = Field({}, description="per stage, over the stage's own (`pilotrl.curriculum`)")
    beta: float = Field(0.0, ge=0, description="KL coefficient (the paper: none)")
    epsilon: float = Field(0.2, gt=0, description="PPO clip")
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    update_every: int = Field(1, ge=1, description="plan-update interval of the rollouts")
    weights: dict[str, float] = Field(
        {"format": 1.0, "adherence": 1.0, "end_to_end": 1.0, "plan_quality": 1.0},
        description="weight of each normalized reward component; a stage sums those it uses",
    )
    slack: int = Field(2, ge=0, description="end-to-end 2 = success within the optimal steps + slack")
    judge: Literal["rule", "llm"] = Field("rule", description="adherence and plan quality by rule, or by an LLM")
    judge_options: dict = Field(
        {},
        description="the LLM judge's endpoint (base_url, model, api_key_env, timeout_s, ...) and budget "
        "(max_calls, max_retries, backoff_s, max_delay_s)",
    )
    mask_truncated_completions: bool = False
    generation: Literal["hf", "vllm_colocate", "vllm_server"] = Field(
        "hf", description="who samples the rollouts' turns: the model's generate, or vLLM (GPU, `pip install vllm`)"
    )
    vllm_server_url: str | None = Field(None, description="vllm_server: the `trl vllm-serve` server's base URL")
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1, description="vllm_colocate: vLLM's share of a GPU")
    warmup_ratio: float = Field(0.0, ge=0, lt=1)
    lr_scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup"] = "constant"
    bf16: Precision = Field(False, description=BF16)
    gradient_checkpointing: bool = Field(False, description=CHECKPOINTING)
    logging_steps: int = Field(1, ge=1)
    save_steps: int = Field(10, ge=1, description="a checkpoint every this many steps: a killed stage resumes there")

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> "GRPOSettings":
        stages = _stage_modes(info)
        unknown = [] if stages is None else [name for name in [*self.order, *self.epochs] if name not in stages]
        if unknown:
            raise ValueError(f"unknown GRPO stage {unknown[0]!r}; the stages are {', '.join(stages)}")
        if any(epochs <= 0 for epochs in self.epochs.values()):
            raise ValueError(f"epochs must be > 0: {self.epochs}")
        check_judge_options(self.judge, self.judge_options)
        if (self.batch_size * self.grad_accum) % self.num_generations:  # TRL's generation batch: whole groups
            raise ValueError(
                f"batch_size {self.batch_size} x grad_accum {self.grad_accum} is not a multiple of num_generations "
                f"{self.num_generations}"
            )
        return self


class PilotRLSettings(Settings):
    """PilotRL / AdaPlan: one model plans and acts in the bundled text environments.

    Training tasks are seeds 0..train_tasks-1 of each held-in environment, evaluation tasks seeds from
    `eval_seed` on (the same for every run seed, so runs compare on one set)."""

    new_keys = ("history",)

    model: str = Field("tiny", description="`tiny` (made from scratch here, `models.tiny`) or any HF causal LM")
    heldin: list[str] = Field(["household", "crafting", "wordle", "iqa"], description="coalign.envs.REGISTRY names")
    heldout: list[str] = ["babyai", "maze"]
    mode: Literal["adaplan", "react"] = Field("adaplan", description="AdaPlan (plan, act, update) or ReAct")
    train_tasks: int = Field(200, ge=1, description="expert episodes per held-in environment")
    train_update_every: list[int] = Field(
        [1], min_length=1, description="plan-update intervals of the SFT episodes, drawn per episode"
    )
    eval_tasks: int = Field(50, ge=1, description="evaluation episodes per environment")
    eval_seed: int = Field(1_000_000, ge=0, description="first evaluation seed (training seeds start at 0)")
    eval_update_every: list[int] = Field([1], min_length=1, description="AdaPlan evaluated at each interval")
    eval_expert_plans: bool = Field(
        False,
        description="AdaPlan also evaluated with the expert's remaining plan given as each due plan block (the "
        "executor alone, as GRPO stage 1 trains it): tells planning failures from acting ones",
    )
    max_new_tokens: int = Field(160, ge=1, description="per model turn")
    max_context: int = Field(2048, ge=64, description="an episode whose context would pass this stops")
    history: int | None = Field(
        None,
        ge=0,
        description="a bounded context, as the authors' executor prompt: each turn after the first sees the task, "
        "the plan so far, the last action with its observation and this many turns before it, in the SFT episodes, "
        "the evaluation and GRPO's rollouts, each turn then trained in its own context (0: the authors'); null: "
        "the whole episode",
    )
    batch_size: int = Field(32, ge=1)
    plan_llm: dict = Field(
        {},
        description="an LLM that adds candidate plans to the expert's (OpenAI-compatible endpoint: base_url, "
        "model, api_key_env, ...; candidates per task, max_calls); none: the expert's candidates only",
    )
    sft: SFTSettings = SFTSettings()
    rl: GRPOSettings | None = Field(None, description="GRPO stages after the SFT; none: the SFT cold start only")

    @model_validator(mode="after")
    def _intervals(self, info: ValidationInfo) -> "PilotRLSettings":
        if min(self.train_update_every + self.eval_update_every) < 1:
            raise ValueError("plan-update intervals must be >= 1")
        if self.plan_llm:
            split_endpoint_options(self.plan_llm, "plan_llm", PLANNER_OPTIONS)
        if self.rl and (stages := _stage_modes(info)) is not None:
            other = [name for name in self.rl.order if stages[name] != self.mode]
            if other:
                mode, fit = stages[other[0]], ", ".join(n for n, m in stages.items() if m == self.mode)
                raise ValueError(
                    f"GRPO stage {other[0]!r} runs {mode} episodes, not pilotrl.mode {self.mode}: set pilotrl.rl: "
                    f"null (the SFT alone) or a pilotrl.rl.order of {self.mode} stages ({fit})"
                )
        if self.rl and self.history is not None and self.rl.beta > 0:
            raise ValueError(
                f"pilotrl.history {self.history} with pilotrl.rl.beta {self.rl.beta}: a bounded context trains each "
                "turn in its own context, and the KL term's reference log-probs are not computed per turn; set "
                "rl.beta: 0 (the paper's) or pilotrl.history: null"
            )
        used = self.train_tasks + (self.rl.tasks if self.rl else 0)
        if used > self.eval_seed:
            raise ValueError(f"training seeds 0..{used - 1} would overlap evaluation seeds from {self.eval_seed}")
        return self
