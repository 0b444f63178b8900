"""Validated run configuration, read from YAML.

One frozen pydantic model per concern; unknown keys are refused, so a typo is an error that
names the file, the line and the key instead of a silently ignored setting.

base: the `Settings` every block is; training: SFT, DPO and LoRA; models: the starting models and who
generates; data: task sets and the lumos/moat evaluation; moat and pilotrl: each recipe's own; run: the whole
`RunConfig`; loader: reading, validating and saving one. The config sits above `coalign.core` alone: what the
layers above it define (recipe names, PilotRL's stages) reaches its validators through the loader's context.
"""

from coalign.config.base import Precision, Settings
from coalign.config.data import GENERATED_KINDS, DataSettings, DataSource, EvalSettings
from coalign.config.loader import (
    BUNDLED,
    ConfigError,
    Overrides,
    config_changes,
    config_to_yaml,
    load_config,
    load_settings,
    resolve_config_path,
)
from coalign.config.moat import MoatSettings
from coalign.config.models import GenerationSettings, ModelSettings, ServedModel, TinySpec
from coalign.config.pilotrl import GRPOSettings, PilotRLSettings
from coalign.config.run import TRAINING_STAGES, RunConfig
from coalign.config.training import DPOSettings, LoraSettings, SFTSettings, qlora_missing

__all__ = [
    "BUNDLED",
    "GENERATED_KINDS",
    "TRAINING_STAGES",
    "ConfigError",
    "DPOSettings",
    "DataSettings",
    "DataSource",
    "EvalSettings",
    "GRPOSettings",
    "GenerationSettings",
    "LoraSettings",
    "ModelSettings",
    "MoatSettings",
    "Overrides",
    "PilotRLSettings",
    "Precision",
    "RunConfig",
    "SFTSettings",
    "ServedModel",
    "Settings",
    "TinySpec",
    "config_changes",
    "config_to_yaml",
    "load_config",
    "load_settings",
    "qlora_missing",
    "resolve_config_path",
]
