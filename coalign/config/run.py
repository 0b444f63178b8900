"""A run's whole config: one block per concern, and the run-wide settings (`bf16`) its stages inherit."""

from __future__ import annotations

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from coalign.config.base import Precision, Settings
from coalign.config.data import DataSettings, EvalSettings
from coalign.config.moat import MoatSettings
from coalign.config.models import GenerationSettings, ModelSettings
from coalign.config.pilotrl import PilotRLSettings
from coalign.config.training import DPOSettings, LoraSettings, SFTSettings

TRAINING_STAGES = ("planner_sft", "grounder_sft", "planner_dpo", "grounder_round_sft", "planner_round_sft")


class RunConfig(Settings):
    new_keys = ("bf16", "ddp_timeout")

    name: str
    recipe: str = Field("lumos", description="a recipe of `registry.REGISTRY`: lumos, moat, pilotrl")
    seed: int = 0
    threads: int | None = Field(None, ge=1, description="torch CPU threads; default = all cores")
    ddp_timeout: int = Field(
        1800, ge=1, description="seconds a collective of several processes waits before the run fails (transformers')"
    )
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
