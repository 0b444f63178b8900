"""Validated run configuration, read from YAML.

One frozen pydantic model per concern; unknown keys are refused, so a typo is an error that
names the file, the line and the key instead of a silently ignored setting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from coalign.core.endpoint_options import (
    PLANNER_OPTIONS,
    SECRET_OPTIONS,
    check_critic_options,
    check_judge_options,
    split_endpoint_options,
)
from coalign.core.runs import value_changes


class Settings(BaseModel):
    # No inf/NaN floats: YAML `.inf` or `--set x.epochs=1e400` would pass `gt=0` and train forever or diverge.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    # Keys added after run folders were saved with this block: left out of its dump while at their default, so
    # those folders' saved configs and recorded stage settings still match, and they resume.
    new_keys: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _without_new_defaults(self, handler: SerializerFunctionWrapHandler) -> dict:
        data = handler(self)
        for name in self.new_keys:
            if getattr(self, name) == type(self).model_fields[name].default:
                data.pop(name, None)
        return data


def _precision(value: object) -> bool | str:
    if isinstance(value, bool) or value == "auto":
        return value
    raise ValueError(f"must be true, false or auto, not {value!r}")


# One validator, so a wrong value is one error, not one per member of the union.
Precision = Annotated[bool | Literal["auto"], PlainValidator(_precision)]
BF16 = "train in bf16: true, false, or auto (bf16 on a GPU that has it or a CPU with native bf16, else fp32)"
CHECKPOINTING = "recompute activations in the backward pass: less memory (a 7B model on one GPU), more time"


class SFTSettings(Settings):
    """Supervised fine-tuning. Defaults are the paper's (Lumos/MOAT: lr 2e-5, batch 128, 2 epochs)."""

    new_keys = ("gradient_checkpointing",)

    learning_rate: float = Field(2e-5, gt=0)
    epochs: float = Field(2.0, gt=0)
    batch_size: int = Field(8, ge=1, description="examples per forward pass in one process")
    grad_accum: int = Field(
        16, ge=1, description="batch per optimizer step = batch_size * grad_accum, however many processes share it"
    )
    max_length: int = Field(1024, ge=16)
    warmup_ratio: float = Field(0.03, ge=0, lt=1)
    lr_scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup"] = "linear"
    weight_decay: float = Field(0.0, ge=0)
    bf16: Precision = Field(False, description=BF16)
    gradient_checkpointing: bool = Field(False, description=CHECKPOINTING)
    logging_steps: int = Field(10, ge=1)
    group_by_length: bool = Field(
        False, description="batch examples of similar length: less padding (tiny grounder: 1.29x the steps/s)"
    )


class DPOSettings(Settings):
    """Planner DPO (MOAT stage 1). Defaults: the paper's (lr 4e-7, batch 4 x 8, cosine, max length 1024)
    and the authors' release (beta 0.2 sigmoid, warmup 0.05, weight decay 1e-4, 1 epoch)."""

    new_keys = ("gradient_checkpointing",)

    learning_rate: float = Field(4e-7, gt=0)
    beta: float = Field(0.2, gt=0)
    loss_type: str = "sigmoid"
    epochs: float = Field(1.0, gt=0)
    batch_size: int = Field(4, ge=1)
    grad_accum: int = Field(8, ge=1)
    max_length: int = Field(1024, ge=16)
    warmup_ratio: float = Field(0.05, ge=0, lt=1)
    lr_scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup"] = "cosine"
    weight_decay: float = Field(1e-4, ge=0)
    bf16: Precision = Field(False, description=BF16)
    gradient_checkpointing: bool = Field(False, description=CHECKPOINTING)
    logging_steps: int = Field(10, ge=1)


class TinySpec(Settings):
    """Size of a from-scratch Llama-style model (used when a model is given as `tiny`)."""

    vocab_size: int = Field(2048, ge=300)
    hidden_size: int = Field(128, ge=8)
    num_layers: int = Field(4, ge=1)
    num_heads: int = Field(4, ge=1)
    num_kv_heads: int = Field(4, ge=1)
    intermediate_size: int = Field(352, ge=8)
    max_positions: int = Field(1024, ge=64)

    @model_validator(mode="after")
    def _heads_divide(self) -> "TinySpec":
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError("hidden_size must be a multiple of num_heads, and num_heads of num_kv_heads")
        return self


class ModelSettings(Settings):
    """Where each agent starts: `scratch` (a model of shape `tiny` made here; `tiny` is its older name), a base
    shipped with the package by name (`coalign-base-4`, `coalign-base-2`, `coalign-base`), or any HF causal LM
    path / hub id. `models: NAME` (a string) starts both agents from NAME."""

    planner: str = "tiny"
    grounder: str = "tiny"
    tiny: TinySpec = TinySpec()
    trust_remote_code: bool = False

    @model_validator(mode="before")
    @classmethod
    def _one_name_for_both(cls, data):
        return {"planner": data, "grounder": data} if isinstance(data, str) else data


GENERATED_KINDS = ("suite", "qa_suite", "web_suite")


class DataSource(Settings):
    """One set of tasks.

    kind `suite` / `qa_suite` / `web_suite`: the bundled maths / QA / web generator (split, n, seed);
    `gsm8k` / `svamp` / `strategyqa` / `hotpotqa`: the public files at `path`; `mind2web`: a Mind2Web
    JSON file or a folder of them at `path`; `webshop`: a WebShop data folder at `path` (the QA and
    web ones have no gold plans: evaluation only); `lumos`: Agent Lumos `messages` JSONL, onetime or
    iterative, planner rows at `path`, grounder rows at `grounder_path`. `n` keeps the first n tasks.
    `path: shipped:gsm8k/train.jsonl` reads a benchmark file shipped with coalign (coalign/data/README.md),
    so a run needs no download; its sha256 is checked when it is read.
    """

    new_keys = ("subgoals",)

    kind: Literal[
        "suite", "qa_suite", "web_suite", "gsm8k", "svamp", "strategyqa", "hotpotqa", "mind2web", "webshop", "lumos"
    ]
    path: Path | None = None
    grounder_path: Path | None = None
    split: Literal["train", "heldin", "heldout"] | None = None
    n: int | None = Field(None, ge=1)
    seed: int = 0
    subgoals: Literal["written", "deferred"] = Field(
        "written",
        description="gsm8k: a plain solution step as its subgoal, 'written' with its results (`Natalia sold 48/2 = "
        "24 clips`) or 'deferred', each result left to the grounder (`Natalia sold 48/2 clips`), so the planner "
        "does no arithmetic; socratic files' sub-questions are kept either way",
    )

    @field_validator("path")
    @classmethod
    def _shipped(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        """A `shipped:` name must be a data file of the package's data folder, of the source's kind."""
        if path is None or not path.as_posix().startswith("shipped:"):
            return path
        name, folder = path.as_posix().removeprefix("shipped:"), Path(__file__).resolve().parent / "data"
        known = sorted(p.relative_to(folder).as_posix() for p in folder.glob("*/*.json*"))
        if name not in known:
            raise ValueError(f"no shipped file {name!r}; coalign ships: {', '.join(f'shipped:{k}' for k in known)}")
        kind = info.data.get("kind")
        if kind and name.split("/")[0] != kind:
            raise ValueError(f"shipped:{name} is a {name.split('/')[0]} file, not one of kind {kind!r}")
        return path

    @field_validator("subgoals")
    @classmethod
    def _gsm8k_only(cls, subgoals: str, info: ValidationInfo) -> str:
        if subgoals != "written" and info.data.get("kind") != "gsm8k":
            raise ValueError(
                f"'{subgoals}' subgoals are for kind gsm8k only (its solution steps), not {info.data.get('kind')!r}"
            )
        return subgoals

    @model_validator(mode="after")
    def _needs(self) -> "DataSource":
        generated = self.kind in GENERATED_KINDS
        if generated and (self.split is None or self.n is None):
            raise ValueError(f"kind '{self.kind}' needs 'split' and 'n'")
        if not generated and self.path is None:
            raise ValueError(f"kind '{self.kind}' needs 'path'")
        if self.kind == "lumos" and self.grounder_path is None:
            raise ValueError("kind 'lumos' needs 'grounder_path' (the grounder rows) beside 'path' (planner rows)")
        return self


class DataSettings(Settings):
    train: list[DataSource] = Field(min_length=1)
    heldin: list[DataSource] = []
    heldout: list[DataSource] = []
    plan_following: float = Field(
        0.0,
        ge=0,
        le=1,
        description="share of training tasks whose subgoals name every operand that are also given to the "
        "grounder with another task's text (tasks/plan_following.py); 0 = off, as in the paper",
    )
    plan_compositions: float = Field(
        0.0,
        ge=0,
        le=4,
        description="grounder rows, per training task, whose plans chain readable steps of different training "
        "tasks in new orders, each with another task's text (tasks/plan_following.py); 0 = off, as in the paper",
    )
    composed_stories: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="maths stories that recombine the held-in events in new ways, never into a held-out "
        "structure (the maths suite's split 'composed'), added to the planner's data; 0 = off, as in the paper",
    )
    skip_bad_rows: bool = Field(
        False,
        description="leave out data rows that fail validation (counted by reason, reported and recorded in the "
        "run) instead of stopping at the first; a source with no task left still stops the run",
    )


class EvalSettings(Settings):
    batch_size: int = Field(64, ge=1)
    max_new_tokens_plan: int = Field(160, ge=1)
    max_new_tokens_ground: int = Field(160, ge=1)
    diagnostics: bool = Field(True, description="also ground gold and blanked subgoals (the subgoals-matter check)")
    max_turns: int = Field(
        12, ge=1, description="iterative loop (web family): planner turns per task before it is stopped (gold <= 9)"
    )


class MoatSettings(Settings):
    """MOAT rounds (Algorithm 1). Defaults are the paper's; `tasks` subsamples the training set."""

    rounds: int = Field(2, ge=1)
    tasks: int | None = Field(None, ge=1, description="training tasks used per round (the first n); None = all")
    k: int = Field(15, ge=1, description="subgoal candidates sampled per task")
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(0.95, gt=0, le=1)
    max_new_tokens_plan: int = Field(512, ge=1)
    score_reduction: Literal["mean", "content", "sum"] = Field(
        "mean", description="grounder NLL of gold actions: mean over all action tokens (paper), content tokens, or sum"
    )
    pair_threshold: float = Field(0.1, ge=0, description="drop a pair whose chosen/rejected gap is below this")
    pair_gap_on: Literal["nll", "ppl"] = Field("nll", description="gap measured on mean NLL (release) or on PPL")
    ground_temperature: float = Field(0.1, ge=0, description="stage-2 grounder sampling (release: 0.1)")
    ground_top_p: float = Field(0.95, gt=0, le=1)
    max_new_tokens_ground: int = Field(512, ge=1)
    critic: Literal["execution", "llm", "none"] = "execution"
    critic_options: dict = Field(
        default_factory=dict, description="keyword options of the critic (llm: base_url, model, ...)"
    )
    use_corrected_subgoals: bool = Field(
        False, description="train on the critic's corrected subgoals (Algorithm 1: no)"
    )
    mix_ratio: float = Field(1.0, ge=0, description="initial grounder examples per critic-built example (paper 1:1)")
    stage1: bool = Field(True, description="planner DPO; false = the 'w/o stage 1' ablation")
    stage2: bool = Field(True, description="grounder SFT on critic-judged data; false = 'w/o stage 2'")
    batch_size: int = Field(64, ge=1)
    share_prefix: bool = Field(
        False, description="stage-1 scoring runs the prompt prefix a task's K candidates share once (same scores)"
    )
    web_turns_per_task: int | None = Field(
        None,
        ge=1,
        description="planner turns sampled per web task each round (drawn once per seed and task); None = all",
    )

    @model_validator(mode="after")
    def _runnable(self) -> "MoatSettings":
        """Refuse what would fail hours into a run (K=1, critic options that do not fit) or leak a secret."""
        if self.stage1 and self.k < 2:
            raise ValueError(
                "k must be >= 2 when stage1 is on: a preference pair needs two candidates "
                "(set moat.k >= 2, or moat.stage1: false)"
            )
        if self.pair_gap_on == "ppl" and self.score_reduction == "sum":
            raise ValueError(
                "pair_gap_on 'ppl' needs a per-token score: exp of a summed NLL is no perplexity (and overflows "
                "past 709 nats); set moat.score_reduction to 'mean' or 'content', or moat.pair_gap_on to 'nll'"
            )
        check_critic_options(self.critic, self.critic_options)
        return self


# PilotRL's GRPO stages: what each one runs, trains and rewards (the paper's progressive curriculum); the
# names a `pilotrl.rl.order` may list.
# 1. executor: the expert writes the plan blocks; the model learns to act by them (its thought and action
#    tokens train; the given plan is context). Rewards: format + adherence + end-to-end.
# 2. planner: the model writes its plans; among a task's rollouts the group-relative advantage prefers
#    the plans that worked (its plan tokens train; its actions, already learnt in stage 1, are context).
#    Rewards: format + end-to-end + plan quality.
# 3. joint: plans and actions train together. Rewards: format + end-to-end.
# The ablations: "all" (one stage, every reward, plan and action tokens) and "vanilla" (Vanilla RL: ReAct,
# no plan, format + end-to-end). Isolated planner and executor (the paper's unified-vs-isolated comparison):
# "executor", then "planner_isolated", which trains a second model from the cold start to write the plan
# blocks while the first stage's executor, fixed, writes the rest of each turn; evaluation runs the two
# together. Orders are lists of these names (`GRPOSettings.order`).


@dataclass(frozen=True)
class Stage:
    name: str
    label: str  # the paper's name for it
    mode: str  # adaplan or react
    guided: bool  # the expert writes the plan blocks
    train: str  # the generated tokens that train: all, plan or action (`rollout.TRAINS`)
    rewards: tuple[str, ...]
    epochs: float  # the paper's: 1 / 2 / 1; the one-stage ablations get the three stages' 4
    separate: bool = False  # a second model (from the cold start) beside the previous stage's, fixed


STAGES = {
    "executor": Stage("executor", "1", "adaplan", True, "action", ("format", "adherence", "end_to_end"), 1.0),
    "planner": Stage("planner", "2", "adaplan", False, "plan", ("format", "end_to_end", "plan_quality"), 2.0),
    "joint": Stage("joint", "3", "adaplan", False, "all", ("format", "end_to_end"), 1.0),
    "all": Stage("all", "1&2&3", "adaplan", False, "all", ("format", "adherence", "end_to_end", "plan_quality"), 4.0),
    "vanilla": Stage("vanilla", "Vanilla RL", "react", False, "all", ("format", "end_to_end"), 4.0),
    "planner_isolated": Stage(
        "planner_isolated",
        "2 (isolated)",
        "adaplan",
        False,
        "plan",
        ("format", "end_to_end", "plan_quality"),
        2.0,
        separate=True,
    ),
}


def order_label(order: list[str]) -> str:
    """An order as the paper writes it: 1->2->3, 1&2&3, Vanilla RL."""
    return "->".join(STAGES[name].label for name in order)


class GRPOSettings(Settings):
    """PilotRL's GRPO stages (`STAGES`), run in `order` from the SFT checkpoint. Defaults are
    the paper's (lr 1e-6, 16 rollouts per task, no KL, clip 0.2; epochs are each stage's own, 1 / 2 / 1)."""

    new_keys = ("gradient_checkpointing",)

    order: list[str] = Field(["executor", "planner", "joint"], min_length=1, description="stages, in turn")
    tasks: int = Field(64, ge=1, description="training tasks per held-in environment (seeds after the SFT's)")
    num_generations: int = Field(16, ge=2, description="rollouts per task (GRPO's group)")
    batch_size: int = Field(
        16, ge=1, description="episodes per forward pass in one process (split as SFT's); x grad_accum: whole groups"
    )
    grad_accum: int = Field(16, ge=1)
    learning_rate: float = Field(1e-6, gt=0)
    epochs: dict[str, float] = Field({}, description="per stage, over the stage's own (STAGES)")
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
    def _check(self) -> "GRPOSettings":
        unknown = [name for name in [*self.order, *self.epochs] if name not in STAGES]
        if unknown:
            raise ValueError(f"unknown GRPO stage {unknown[0]!r}; the stages are {', '.join(STAGES)}")
        if any(epochs <= 0 for epochs in self.epochs.values()):
            raise ValueError(f"epochs must be > 0: {self.epochs}")
        check_judge_options(self.judge, self.judge_options)
        if (self.batch_size * self.grad_accum) % self.num_generations:  # TRL's generation batch: whole groups
            raise ValueError(
                f"batch_size {self.batch_size} x grad_accum {self.grad_accum} is not a multiple of num_generations "
                f"{self.num_generations}"
            )
        return self

    def stage_epochs(self, name: str) -> float:
        """A stage's epochs: its own (`STAGES`), unless `epochs` names it."""
        return self.epochs.get(name, STAGES[name].epochs)


class PilotRLSettings(Settings):
    """PilotRL / AdaPlan: one model plans and acts in the bundled text environments.

    Training tasks are seeds 0..train_tasks-1 of each held-in environment, evaluation tasks seeds from
    `eval_seed` on (the same for every run seed, so runs compare on one set)."""

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
    batch_size: int = Field(32, ge=1)
    plan_llm: dict = Field(
        {},
        description="an LLM that adds candidate plans to the expert's (OpenAI-compatible endpoint: base_url, "
        "model, api_key_env, ...; candidates per task, max_calls); none: the expert's candidates only",
    )
    sft: SFTSettings = SFTSettings()
    rl: GRPOSettings | None = Field(None, description="GRPO stages after the SFT; none: the SFT cold start only")

    @model_validator(mode="after")
    def _intervals(self) -> "PilotRLSettings":
        if min(self.train_update_every + self.eval_update_every) < 1:
            raise ValueError("plan-update intervals must be >= 1")
        if self.plan_llm:
            split_endpoint_options(self.plan_llm, "plan_llm", PLANNER_OPTIONS)
        if self.rl:
            other = [name for name in self.rl.order if STAGES[name].mode != self.mode]
            if other:
                mode = STAGES[other[0]].mode
                raise ValueError(f"GRPO stage {other[0]!r} runs {mode} episodes, not pilotrl.mode {self.mode}")
        used = self.train_tasks + (self.rl.tasks if self.rl else 0)
        if used > self.eval_seed:
            raise ValueError(f"training seeds 0..{used - 1} would overlap evaluation seeds from {self.eval_seed}")
        return self


def qlora_missing() -> str | None:
    """What this machine lacks for a 4-bit base (bitsandbytes kernels run on CUDA only), or None."""
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return "a CUDA GPU"
    if importlib.util.find_spec("bitsandbytes") is None:
        return "bitsandbytes (pip install bitsandbytes)"
    return None


class LoraSettings(Settings):
    """Low-rank adapters (PEFT's LoRA) trained instead of every weight, in every SFT, DPO and GRPO stage.

    `merge: true` (default) saves each stage's checkpoint as a plain model (the adapter merged into its
    base), so the next stage, generation and any other tool load it like the base, and each stage trains a
    fresh adapter on the last; `false` saves the adapter alone (MBs, not GBs) beside the tokenizer, its base
    recorded relative to it, and the next stage trains the same adapter on."""

    r: int = Field(16, ge=1, description="rank")
    alpha: int = Field(32, ge=1, description="the update is scaled by alpha / r")
    dropout: float = Field(0.05, ge=0, lt=1)
    target_modules: str | list[str] = Field(
        "all-linear", description="'all-linear' (every linear layer but the output head) or module names"
    )
    bias: Literal["none", "all", "lora_only"] = "none"
    qlora: bool = Field(False, description="the frozen base in 4 bits (NF4, bitsandbytes): CUDA only")
    merge: bool = True

    @field_validator("target_modules", mode="before")
    @classmethod
    def _targets(cls, value):
        """Checked before the type, so a wrong value is one error, not one per member of the union."""
        names = isinstance(value, list) and value and all(isinstance(name, str) and name for name in value)
        if value != "all-linear" and not names:
            raise ValueError(f"'all-linear' or a non-empty list of module names (q_proj, v_proj, ...), got {value!r}")
        return value

    @field_validator("qlora")
    @classmethod
    def _runs_here(cls, on: bool) -> bool:
        """Refused when the config is read, not hours later when the first stage loads its model."""
        if on and (missing := qlora_missing()):
            raise ValueError(
                f"lora.qlora needs {missing}; set lora.qlora: false to train LoRA on a full-precision base"
            )
        return on


class ServedModel(Settings):
    """A checkpoint on an OpenAI-compatible server: its base URL and the name it is served under
    (`vllm serve PATH --served-model-name NAME`)."""

    base_url: str = Field(description="http://host:port/v1")
    model: str

    @field_validator("base_url")
    @classmethod
    def _plain_url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"an http(s) URL such as http://127.0.0.1:8000/v1, got {url!r}")
        if parts.username or parts.password or parts.query:
            raise ValueError("must not hold credentials or a query; name the key's variable in generation.api_key_env")
        return url


BACKEND_SETTINGS = {
    "hf": (),
    "vllm": ("gpu_memory_utilization",),
    "openai": ("planner", "grounder", "api_key_env", "timeout_s", "max_retries", "max_concurrency"),
}


class GenerationSettings(Settings):
    """Who writes the planner's and grounder's text in the lumos and moat recipes and `coalign eval`, and
    pilotrl's evaluation episodes (`backends`): `hf`, the model's own generate; `vllm`, vLLM's offline engine (a
    GPU, or a CPU with vLLM's CPU build); `openai`, finished
    checkpoints on OpenAI-compatible servers (`vllm serve`, SGLang), for `coalign eval` only, since a run that
    trains changes its models every stage. Each option belongs to one backend; another's, set off its default, is
    refused."""

    backend: Literal["hf", "vllm", "openai"] = "hf"
    planner: ServedModel | None = None
    grounder: ServedModel | None = None
    api_key_env: str = Field("OPENAI_API_KEY", description="the variable holding the servers' key; unset: none sent")
    timeout_s: float = Field(120.0, gt=0, description="per request")
    max_retries: int = Field(3, ge=0, description="of a timeout, connection error, 429 or 5xx, with back-off")
    max_concurrency: int = Field(8, ge=1, description="requests in flight per agent")
    gpu_memory_utilization: float = Field(
        0.4,
        gt=0,
        le=1,
        description="each vLLM engine's share of the GPU: evaluation holds two (planner and grounder), and the rest "
        "is left to the stages that train",
    )

    @model_validator(mode="after")
    def _fits_backend(self) -> "GenerationSettings":
        own = {"backend", *BACKEND_SETTINGS[self.backend]}
        fields = type(self).model_fields
        stray = sorted(name for name in fields if name not in own and getattr(self, name) != fields[name].default)
        if stray:
            raise ValueError(f"generation.{stray[0]} does not apply to backend {self.backend}")
        missing = [role for role in ("planner", "grounder") if self.backend == "openai" and getattr(self, role) is None]
        if missing:
            raise ValueError(
                f"backend openai needs generation.{missing[0]}: {{base_url, model}}, the server of that checkpoint"
            )
        return self


TRAINING_STAGES = ("planner_sft", "grounder_sft", "planner_dpo", "grounder_round_sft", "planner_round_sft")


class RunConfig(Settings):
    new_keys = ("bf16",)

    name: str
    recipe: str = Field("lumos", description="a recipe of `registry.REGISTRY`: lumos, moat, pilotrl")
    seed: int = 0
    threads: int | None = Field(None, ge=1, description="torch CPU threads; default = all cores")
    data: DataSettings | None = Field(None, description="task sets of the lumos and moat recipes")
    models: ModelSettings = ModelSettings()
    planner_sft: SFTSettings = SFTSettings()
    grounder_sft: SFTSettings = SFTSettings()
    planner_dpo: DPOSettings = DPOSettings()
    grounder_round_sft: SFTSettings = SFTSettings()
    planner_round_sft: SFTSettings = Field(
        SFTSettings(), description="the Lumos baseline's planner SFT per matched round (bench); MOAT uses DPO"
    )
    moat: MoatSettings = MoatSettings()
    eval: EvalSettings = EvalSettings()
    pilotrl: PilotRLSettings = PilotRLSettings()
    lora: LoraSettings | None = Field(None, description="LoRA adapters in every training stage; none: full fine-tuning")
    generation: GenerationSettings | None = Field(None, description="generation backend; none: hf")
    bf16: Precision | None = Field(
        None,
        description="bf16 for every training stage whose block does not set its own, and for generation and "
        "scoring: true, false or auto (where the GPU or CPU computes bf16 natively); none: each stage's own "
        "setting, and generation and scoring in bf16 where any training stage trains in bf16, else fp32",
    )

    @model_validator(mode="before")
    @classmethod
    def _bf16_everywhere(cls, data):
        """The run's `bf16` is every training stage's unless the stage's block sets its own."""
        if not isinstance(data, dict) or not (isinstance(data.get("bf16"), bool) or data.get("bf16") == "auto"):
            return data  # none, or a wrong value: its own error, once, for the key the config gave
        data = dict(data)
        for name in TRAINING_STAGES:
            block = data.get(name)
            if block is None or isinstance(block, dict):
                data[name] = {"bf16": data["bf16"], **(block or {})}
        pilotrl = data.get("pilotrl")
        if pilotrl is None or isinstance(pilotrl, dict):
            pilotrl = dict(pilotrl or {})
            for name in ("sft", "rl"):
                block = pilotrl.get(name)
                if isinstance(block, dict) or (block is None and name == "sft"):
                    pilotrl[name] = {"bf16": data["bf16"], **(block or {})}
            data["pilotrl"] = pilotrl
        return data

    def stage_settings(self) -> dict[str, BaseModel]:
        """Every training stage's settings by its config key (pilotrl's SFT and GRPO ones included)."""
        stages = {name: getattr(self, name) for name in TRAINING_STAGES}
        stages["pilotrl.sft"] = self.pilotrl.sft
        if self.pilotrl.rl is not None:
            stages["pilotrl.rl"] = self.pilotrl.rl
        return stages

    @model_validator(mode="after")
    def _has_data(self) -> "RunConfig":
        if self.recipe != "pilotrl" and self.data is None:
            raise ValueError(f"recipe '{self.recipe}' needs a 'data' section (its train, heldin and heldout sets)")
        return self

    @model_validator(mode="after")
    def _generation_fits(self) -> "RunConfig":
        if self.generation is None:
            return self
        if self.recipe == "pilotrl" and self.generation.backend == "openai":
            raise ValueError(
                "generation.backend openai: pilotrl's episodes are written token by token, a server's completions "
                "are text; pilotrl evaluates with hf or vllm (its GRPO rollouts: pilotrl.rl.generation)"
            )
        if self.generation.backend == "vllm" and self.lora is not None and not self.lora.merge:
            raise ValueError("generation.backend vllm loads whole models; with it, set lora.merge: true")
        return self

    @field_validator("recipe")
    @classmethod
    def _known_recipe(cls, name: str, info: ValidationInfo) -> str:
        """Checked against the recipes the loader names (`registry.load_config`), which sit above the config."""
        known = (info.context or {}).get("recipes")
        if known is not None and name not in known:
            raise ValueError(f"unknown recipe {name!r}; known: {', '.join(known)}")
        return name


SECRET_KEY = (
    "a secret is refused in a config, which is saved with the run; put it in an environment variable and give "
    "that variable's name (api_key_env)"
)


class ConfigError(ValueError):
    """A config file that does not validate; the message names file, line and key."""


class Overrides(dict):
    """Settings given on the command line, as the nested dict merged over a config file's (`--set lora.r=0` is
    `{"lora": {"r": 0}}`), and how each was given by its key path (`given[("lora", "r")] == "--set lora.r=0"`):
    an error in a value one of them set names it, not the line of the file the value replaced."""

    def __init__(self) -> None:
        super().__init__()
        self.given: dict[tuple[str, ...], str] = {}


BUNDLED = Path(__file__).resolve().parent / "configs"


def resolve_config_path(name_or_path: str | Path) -> Path:
    """A YAML path, or the name of a bundled config (`tiny`, `paper`)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    bundled = BUNDLED / f"{name_or_path}.yaml"
    if bundled.exists():
        return bundled
    known = sorted(p.stem for p in BUNDLED.glob("*.yaml"))
    raise ConfigError(f"{name_or_path}: no such file, and no bundled config of that name (bundled: {known})")


def _line_of(node: yaml.Node, loc: tuple) -> int | None:
    """1-based line of the deepest YAML node found along a pydantic error location."""
    line = node.start_mark.line + 1
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == key), None)
            key_node = next((k for k, v in node.value if k.value == key), None)
            if match is None:
                return line
            line, node = key_node.start_mark.line + 1, match
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def load_config(
    name_or_path: str | Path, overrides: dict | None = None, recipes: Sequence[str] | None = None
) -> RunConfig:
    """Read and validate a run config; `overrides` (nested dict) are applied on top; `recipes`, when given,
    the recipe names it may use."""
    context = None if recipes is None else {"recipes": tuple(recipes)}
    return load_settings(resolve_config_path(name_or_path), RunConfig, overrides, context)


def load_settings(path: Path, model: type[Settings], overrides: dict | None = None, context: dict | None = None):
    """Read the YAML at `path` into `model`; an invalid field is a ConfigError naming the file, line and key."""
    text = _read_text(path)
    try:
        raw = yaml.safe_load(text)
        root = yaml.compose(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    raw = {} if raw is None else raw  # only an empty file is an empty mapping: `[]` or `false` is no config
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}, line 1: a config is a mapping of keys, got {type(raw).__name__}")
    overrides = overrides or {}
    try:
        return model.model_validate(_merge(raw, overrides), context=context)
    except ValidationError as err:
        lines = []
        for e in err.errors():
            loc = _loc(e)
            key = ".".join(str(p) for p in loc) or "(top level)"
            line = _line_of(root, loc) if root is not None else None
            given = _given(overrides, loc, lambda tree: model.model_validate(_merge(raw, tree), context=context), e)
            where = ", ".join(given) or (f"{path}, line {line}" if line else str(path))
            msg = e["msg"]
            if e["type"] == "extra_forbidden":
                msg = SECRET_KEY if str(loc[-1]).lower() in SECRET_OPTIONS else "unknown key (typo?)"
            lines.append(f"{where}: field '{key}': {msg}")
        raise ConfigError("invalid config:\n  " + "\n  ".join(lines)) from None


def _loc(error) -> tuple:
    """A pydantic error's location as config keys (without the validators' own entries)."""
    return tuple(p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-after")))


def _given(overrides: dict, loc: tuple, validate: Callable[[dict], object], error) -> list[str]:
    """How the overrides that caused `error` at `loc` were given (`--set lora.r=0`); none when the file did.

    A value an override set is that override's. An error of a whole block (two settings that do not fit, at the
    block or at the top level) is that of each override under it without which the error goes away (`validate`
    the file with the others), so a conflict between two `--set`s names both."""
    named = overrides.given if isinstance(overrides, Overrides) else {}
    node: object = overrides
    for depth, key in enumerate(loc):
        if not isinstance(node, dict):  # an override's value holds the location
            loc = loc[:depth]
            break
        if key not in node:
            return []  # the file's value
        node = node[key]
    if not isinstance(node, dict):
        owner = next((loc[:end] for end in range(len(loc), 0, -1) if loc[:end] in named), None)
        return [named[owner]] if owner else []
    blamed = []
    for path, text in named.items():
        if path[: len(loc)] != loc and loc[: len(path)] != path:
            continue
        try:
            validate(_without(overrides, path))
        except ValidationError as err:
            if any(_loc(e) == loc and e["msg"] == error["msg"] for e in err.errors()):
                continue
        blamed.append(text)
    return blamed


def _without(tree: dict, path: tuple[str, ...]) -> dict:
    """`tree` without the value at `path`."""
    out = dict(tree)
    if len(path) == 1:
        out.pop(path[0], None)
    elif isinstance(out.get(path[0]), dict):
        out[path[0]] = _without(out[path[0]], path[1:])
    return out


def _read_text(path: Path) -> str:
    """The file as UTF-8 text; undecodable bytes or an unreadable path are a ConfigError naming the file (and line)."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise ConfigError(f"{path}, line {line}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from None


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def config_to_yaml(config: RunConfig) -> str:
    """The config as saved in a run folder; without LoRA no `lora` key, without a generation block no
    `generation` key, so runs saved before they existed resume."""
    unset = {name for name in ("lora", "generation") if getattr(config, name) is None}
    return yaml.safe_dump(config.model_dump(mode="json", exclude=unset or None), sort_keys=False)


def config_changes(old_yaml: str, new_yaml: str) -> list[str]:
    """How two saved configs differ, one `dotted.key: old -> new` line per changed value (list items by
    index, `<unset>` for a key only one side has); none when they differ only in layout."""
    return [f"{k}: {a} -> {b}" for k, a, b in value_changes(yaml.safe_load(old_yaml), yaml.safe_load(new_yaml))]
