"""The arguments of `autotune.estimate` and `autotune.cost` from Python, checked as the
commands check their flags: a value out of range, of the wrong kind or an unknown choice is a
UserError naming the argument as its flag (`dp=0` is "--dp 0"), never a ZeroDivisionError from
inside or an empty answer.

    a = CostArgs.checked(gpus=8, run_gpus=8, tokens_per_s="3200")   # run_gpus [8], 3200.0
    a = EstimateArgs.checked(tp=0)                                   # UserError: --tp 0: ...

The commands' own options have the same bounds (typer's `min`); these are for the callers
that pass no command line. A single name where a list is taken (`offers="lambda-h100"`) is a
list of that one name, not of its letters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from autotune.contract import Checkpointing, FSDPMode, Offload, Precision
from autotune.errors import UserError, plain_message

_A = TypeVar("_A", bound="_Args")


class _Args(BaseModel):
    # Lax: "3200" is 3200.0 as on a command line; never a bool for a number (True is not 1 GPU).
    model_config = ConfigDict(extra="forbid")
    command: ClassVar[str] = ""
    # Arguments whose flag is not `--` + the name with dashes; None: no flag (Python only).
    flags: ClassVar[dict[str, str | None]] = {}

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError("a number or a name, not a truth value")
        return v

    @classmethod
    def checked(cls: type[_A], **values: Any) -> _A:
        """The arguments validated (converted where a command line would), or a UserError."""
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            err = exc.errors()[0]
            name = str(err["loc"][0]) if err["loc"] else ""
            flag = cls.flags.get(name, "--" + name.replace("_", "-"))
            shown = f"{flag} {values.get(name)!r}" if flag else f"{name}={values.get(name)!r}"
            msg = plain_message(err["msg"])
            raise UserError(f"{shown}: {msg}",
                            fix=f"see what it takes: autotune {cls.command} --help") from None


def _names(v: Any) -> Any:
    return [v] if isinstance(v, str) else v


class EstimateArgs(_Args):
    command = "estimate"
    model: str | None = None
    precision: Precision = Precision.bf16
    checkpointing: Checkpointing = Checkpointing.none
    offload: Offload = Offload.none
    fsdp: FSDPMode = FSDPMode.none
    optimizer: Literal["adamw", "sgd", "adafactor"] = "adamw"  # the optimizers the estimate models
    seq_len: int | None = Field(default=None, gt=0)
    micro_batch: int = Field(default=1, gt=0)
    zero_stage: int = Field(default=0, ge=0, le=3)
    dp: int = Field(default=1, gt=0)
    tp: int = Field(default=1, gt=0)
    layers: int | None = Field(default=None, gt=0)
    hidden: int | None = Field(default=None, gt=0)
    heads: int | None = Field(default=None, gt=0)
    vocab: int | None = Field(default=None, gt=0)

    @field_validator("model", mode="before")
    @classmethod
    def _path_is_a_name(cls, v: Any) -> Any:
        return str(v) if isinstance(v, Path) else v


class CostArgs(_Args):
    command = "cost"
    flags = {"offers": "--offer", "providers": None, "regions": None}
    gpus: int = Field(default=1, gt=0)
    mfu: float | None = None  # its range: the command's own check (autotune.api.plan)
    tokens_per_s: float | None = Field(default=None, gt=0)
    params: float | None = Field(default=None, gt=0)
    zero_stage: int = Field(default=0, ge=0, le=3)
    target_tokens: float | None = Field(default=None, gt=0)
    target_steps: int | None = Field(default=None, gt=0)
    global_batch_tokens: float | None = Field(default=None, gt=0)
    run_gpus: list[int] | None = None
    offers: list[str] | None = None
    providers: list[str] | None = None
    regions: list[str] | None = None
    checkpoint_gb: float | None = Field(default=None, ge=0)
    dataset_gb: float | None = Field(default=None, ge=0)
    final_model_gb: float | None = Field(default=None, ge=0)
    egress_checkpoints: int = Field(default=0, ge=0)
    checkpoints_kept: int = Field(default=2, ge=1)
    checkpoint_interval_hours: float = Field(default=1.0, gt=0)

    @field_validator("run_gpus", mode="before")
    @classmethod
    def _one_count(cls, v: Any) -> Any:
        return [v] if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("run_gpus")
    @classmethod
    def _counts(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or min(v) < 1):
            raise ValueError("each GPU count must be 1 or more")
        return v

    _offer_names = field_validator("offers", "providers", "regions", mode="before")(_names)
