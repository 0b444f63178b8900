"""A pretraining run's validated config (`coalign pretrain CONFIG`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from coalign.config import ConfigError, Settings, TinySpec, load_settings
from coalign.pretraining.corpus import CorpusSettings


class PretrainTraining(Settings):
    """Causal-LM training on packed blocks of `seq_len` tokens; `max_steps` optimizer steps in all, however
    many sittings (`coalign pretrain --steps N`) they take."""

    seq_len: int = Field(512, ge=16)
    batch_size: int = Field(16, ge=1)
    grad_accum: int = Field(1, ge=1)
    learning_rate: float = Field(2e-3, gt=0)
    warmup_steps: int = Field(200, ge=0)
    lr_scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup"] = "cosine"
    weight_decay: float = Field(0.01, ge=0)
    bf16: bool = False
    max_steps: int = Field(10_000, ge=1)
    save_steps: int = Field(250, ge=1, description="a checkpoint to resume from every this many steps")
    logging_steps: int = Field(25, ge=1)
    eval_steps: int = Field(250, ge=1, description="held-out losses (copy drills, mixed text) every this many")
    eval_documents: int = Field(300, ge=1, description="per held-out set, generated with another seed")


class LeakageSettings(Settings):
    """The contamination check (`leakage.leakage_report`): how many tasks of each suite split and environment
    are probed (3000 and 50 cover every bundled config), and where GSM8K test and SVAMP are, if anywhere."""

    tasks: int = Field(3000, ge=1)
    env_tasks: int = Field(50, ge=1)
    data: str | None = Field(None, description="a folder with gsm8k/test.jsonl and svamp/SVAMP.json")


class PretrainConfig(Settings):
    name: str
    seed: int = 0
    init_from: str | None = Field(
        None,
        description="continue pretraining a base (a shipped name or a folder with recipe.json): its weights and "
        "tokenizer, not a new tokenizer and random weights",
    )
    corpus: CorpusSettings = CorpusSettings()
    model: TinySpec | None = Field(
        None, description="a new model's shape (default: TinySpec's); none with init_from, which keeps its parent's"
    )
    split_words: bool = Field(
        False,
        description="a tokenizer whose merges never cross a word boundary (GPT-2's split), so a copied word is "
        "the same tokens; off for the shipped bases, whose merges cross spaces (shorter sequences)",
    )
    train: PretrainTraining = PretrainTraining()
    threads: int | None = Field(None, ge=1, description="torch CPU threads (default: torch's choice)")
    leakage: LeakageSettings = LeakageSettings()

    @model_validator(mode="before")
    @classmethod
    def _default_shape(cls, data: object) -> object:
        if isinstance(data, dict) and not data.get("init_from") and data.get("model") is None:
            return {**data, "model": {}}
        return data

    @model_validator(mode="after")
    def _one_start(self) -> "PretrainConfig":
        """A continued run's shape and tokenizer are its parent's: a `model` block beside `init_from` would be
        recorded in the run (and the shipped `pretrain.yaml`) without describing the model that was trained."""
        if self.init_from and self.split_words:
            raise ValueError("split_words trains a new tokenizer; a run with init_from keeps its parent's")
        if self.init_from and self.model is not None:
            raise ValueError("model: a run with init_from keeps its parent's shape; remove the model block")
        return self


BUNDLED = Path(__file__).parent / "configs"


def load_pretrain_config(name_or_path: str | Path, overrides: dict | None = None) -> PretrainConfig:
    """A pretraining YAML path, or the name of a bundled one."""
    path = Path(name_or_path)
    if not path.exists():
        path = BUNDLED / f"{name_or_path}.yaml"
        if not path.exists():
            known = sorted(p.stem for p in BUNDLED.glob("*.yaml"))
            raise ConfigError(f"{name_or_path}: no such file, and no bundled pretraining config of that name ({known})")
    return load_settings(path, PretrainConfig, overrides)
