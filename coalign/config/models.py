"""The models each agent starts from, and who writes their text when they generate (`generation`)."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from coalign.config.base import Settings


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
    """Where each agent starts: `scratch` or `tiny` (two names for a model of shape `tiny` made here), a base
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
    "vllm": ("gpu_memory_utilization", "tensor_parallel_size", "max_model_len"),
    "openai": ("planner", "grounder", "api_key_env", "timeout_s", "max_retries", "max_concurrency"),
}


class GenerationSettings(Settings):
    """Who writes the planner's and grounder's text in the lumos and moat recipes and `coalign eval`, and
    pilotrl's evaluation episodes (`backends`): `hf`, the model's own generate; `vllm`, vLLM's offline engine (a
    GPU, or a CPU with vLLM's CPU build); `openai`, finished
    checkpoints on OpenAI-compatible servers (`vllm serve`, SGLang), for `coalign eval` only, since a run that
    trains changes its models every stage. Each option belongs to one backend; another's, set off its default, is
    refused."""

    new_keys = ("tensor_parallel_size", "max_model_len")

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
        description="the vLLM engine's share of the GPU while it generates: one engine a process, the planner's "
        "and grounder's weights swapped in it, asleep while a stage trains or scores; the rest holds the grounder "
        "an evaluation scores with",
    )
    tensor_parallel_size: int = Field(
        1, ge=1, description="GPUs the engine spreads each model over (vLLM's); above 1 only in a run of one process"
    )
    max_model_len: int | None = Field(
        None,
        ge=16,
        description="the longest prompt and completion the engine holds; none: the longest sequence the run's "
        "stages train on (max_length) plus the most new tokens a generation asks for (pilotrl: max_context), "
        "within the model's positions",
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
