"""A search space file (`autotune/data/search_spaces/*.yaml`, or the user's): its typed model and
the loader that names what is wrong with one, as autotune.search.space uses them.

    space = load_space("default")                # or a path to a YAML file; UserError if bad
    space = load_space({"num_gpus": [1, 2]}, where="spec.yaml")   # a spec's inline `space:`
    space.zero_stage, space.fsdp                 # the choices it lists
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from autotune.contract import Checkpointing, FSDPMode, Offload, Precision
from autotune.errors import UserError, did_you_mean, format_validation_error, load_yaml_file

SPACES_DIR = Path(__file__).resolve().parents[1] / "data" / "search_spaces"


def _positive_unique(values: list[int]) -> list[int]:
    if any(v <= 0 for v in values):
        raise ValueError("choices must be positive integers")
    return sorted(set(values))


class SearchSpace(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_gpus: list[int] = Field(default=[1], min_length=1)
    micro_batch_size: list[int] = Field(default=[1], min_length=1)
    grad_accum_steps: list[int] = Field(default=[1], min_length=1)
    precision: list[Precision] = Field(default=[Precision.fp32], min_length=1)
    checkpointing: list[Checkpointing] = Field(default=[Checkpointing.none], min_length=1)
    zero_stage: list[int] = Field(default=[0], min_length=1)
    offload: list[Offload] = Field(default=[Offload.none], min_length=1)
    tp_degree: list[int] = Field(default=[1], min_length=1)
    fsdp: list[FSDPMode] = Field(default=[FSDPMode.none], min_length=1)
    compile: list[bool] = Field(default=[False], min_length=1, description=(
        "torch.compile off / on (default mode): `[false, true]` measures both. fp8 is offered "
        "only with compile on (eager fp8 casts cost more than its matmuls save)"))

    _ints = field_validator("num_gpus", "micro_batch_size", "grad_accum_steps", "tp_degree")(
        _positive_unique
    )

    @field_validator("compile")
    @classmethod
    def _unique(cls, v: list[bool]) -> list[bool]:
        return sorted(set(v))

    @field_validator("zero_stage")
    @classmethod
    def _stages(cls, v: list[int]) -> list[int]:
        if any(s not in (0, 1, 2, 3) for s in v):
            raise ValueError("ZeRO stages are 0, 1, 2 or 3")
        return sorted(set(v))

    @model_validator(mode="after")
    def _fsdp_needs_stage_0(self) -> "SearchSpace":
        # FSDP2 replaces ZeRO (fsdp_choices): with no stage 0 its choices are never offered, a
        # setting accepted and not applied (the 7B example's space listed full_shard beside ZeRO 1-3).
        if any(f is not FSDPMode.none for f in self.fsdp) and 0 not in self.zero_stage:
            raise ValueError("fsdp runs at zero_stage 0 (FSDP2 replaces ZeRO), which zero_stage "
                             "does not list: add 0 to zero_stage, or leave fsdp out")
        return self


def _shipped() -> list[str]:
    return sorted(f.stem for f in SPACES_DIR.glob("*.yaml"))


def load_space(name_or_path: str | dict[str, Any], where: str | None = None) -> SearchSpace:
    """A shipped space by name, a YAML file by path, or a spec's inline `space:` mapping
    (`where`: the spec file it came from, which an error in it names)."""
    if isinstance(name_or_path, dict):
        return _inline_space(name_or_path, where or "spec")
    p = Path(name_or_path)
    if not p.suffix:
        p = SPACES_DIR / f"{name_or_path}.yaml"
        if not p.is_file():
            known = _shipped()
            raise UserError(f"unknown search space '{name_or_path}'{did_you_mean(name_or_path, known)}",
                            fix=f"use one of {', '.join(known)} or a path to a YAML file")
    if not p.exists():
        raise UserError(f"search space file '{p}' does not exist",
                        fix="check the path (a spec's `space:` file is read from the spec file's folder; "
                            f"a shipped space is named without .yaml: {', '.join(_shipped())})")
    data = load_yaml_file(p, "search space", empty_fix="list the choices of at least one dimension, e.g. "
                          "`micro_batch_size: [1, 2, 4]` (autotune/data/search_spaces/default.yaml)")
    try:
        return SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(p, exc, SearchSpace),
                        fix="see autotune/data/search_spaces/default.yaml for the format") from None


class _InSpec(BaseModel):
    """A spec's inline space, validated where the spec holds it: an error names `space.<field>`."""

    space: SearchSpace


def _inline_space(data: dict[str, Any], where: str) -> SearchSpace:
    try:
        return _InSpec.model_validate({"space": data}).space
    except ValidationError as exc:
        raise UserError(format_validation_error(where, exc, _InSpec),
                        fix="list each dimension's choices, e.g. `space: {num_gpus: [1, 2], "
                            "micro_batch_size: [1, 2, 4]}` (every dimension: "
                            "autotune/data/search_spaces/default.yaml)") from None
