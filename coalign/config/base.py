"""What every settings block shares: a frozen pydantic model that refuses unknown keys and inf/NaN, and the
`bf16` setting's values."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, PlainValidator, SerializerFunctionWrapHandler, model_serializer


class Settings(BaseModel):
    # No inf/NaN floats: YAML `.inf` or `--set x.epochs=1e400` would pass `gt=0` and train forever or diverge.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    # Keys that run folders' saved configs and recorded stage settings may lack: left out of the block's dump while
    # at their default, so those folders still match their config and resume.
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
