"""Search spaces: `search_spaces/*.yaml` -> define-by-run suggestions for an Optuna trial.

    space = load_space("default")                       # or a path to a YAML file
    choices = restrict(space, capabilities_for(hw), shape_heads=4)
    values = suggest(trial, choices, batch_policy)      # dict of TrialConfig fields

Only what this machine and the worker can run is offered. Where the valid choices of one
dimension depend on another (TP degree on the GPU count, offload on the ZeRO stage,
micro-batch on a fixed global batch), the dependent parameter gets a name that carries the
condition (e.g. `tp_degree|gpus=2`), because Optuna requires one fixed choice list per name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from autotune.contract import Checkpointing, DeviceKind, HardwareFingerprint, Offload, Precision
from autotune.errors import UserError, format_validation_error, load_yaml_file
from autotune.hardware import max_ranks

SPACES_DIR = Path(__file__).resolve().parent.parent / "search_spaces"


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

    _ints = field_validator("num_gpus", "micro_batch_size", "grad_accum_steps", "tp_degree")(
        _positive_unique
    )

    @field_validator("zero_stage")
    @classmethod
    def _stages(cls, v: list[int]) -> list[int]:
        if any(s not in (0, 1, 2, 3) for s in v):
            raise ValueError("ZeRO stages are 0, 1, 2 or 3")
        return sorted(set(v))


def load_space(name_or_path: str) -> SearchSpace:
    p = Path(name_or_path)
    if not p.suffix:
        p = SPACES_DIR / f"{name_or_path}.yaml"
        if not p.is_file():
            known = sorted(f.stem for f in SPACES_DIR.glob("*.yaml"))
            raise UserError(f"unknown search space '{name_or_path}'",
                            fix=f"use one of {', '.join(known)} or a path to a YAML file")
    data = load_yaml_file(p, "search space")
    try:
        return SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(p, exc),
                        fix="see search_spaces/default.yaml for the format") from None


@dataclass(frozen=True)
class Capabilities:
    """What this machine plus the worker can run."""

    device: DeviceKind
    max_ranks: int
    precisions: frozenset[Precision]
    # What the worker implements today (see trials/engines/); widen as engines land.
    zero_stages: frozenset[int] = frozenset({0})
    tensor_parallel: bool = False
    offload: bool = False


def capabilities_for(hw: HardwareFingerprint, threads_per_rank: int = 1,
                     compute_capability: tuple[int, int] | None = None,
                     fp8_library: bool = False) -> Capabilities:
    if hw.device_kind is DeviceKind.cpu:
        # fp16 on CPU has no maintained loss-scaled training path worth measuring, and fp8
        # needs Hopper/Ada tensor cores: neither is offered on a CPU machine.
        precisions = {Precision.fp32, Precision.bf16}
    else:
        precisions = {Precision.fp32, Precision.fp16}
        if compute_capability is None or compute_capability >= (8, 0):
            precisions.add(Precision.bf16)
        if fp8_library and compute_capability is not None and compute_capability >= (8, 9):
            precisions.add(Precision.fp8)
    return Capabilities(device=hw.device_kind, max_ranks=max_ranks(hw, threads_per_rank),
                        precisions=frozenset(precisions))


@dataclass
class RestrictedSpace:
    """The choices left after the hardware and the model shape have had their say."""

    num_gpus: list[int]
    micro_batch_size: list[int]
    grad_accum_steps: list[int]
    precision: list[Precision]
    checkpointing: list[Checkpointing]
    zero_stage: list[int]
    offload: list[Offload]
    tp_degree: list[int]
    dropped: dict[str, list[Any]] = field(default_factory=dict)

    def tp_choices(self, num_gpus: int) -> list[int]:
        return [t for t in self.tp_degree if num_gpus % t == 0]

    def offload_choices(self, zero_stage: int) -> list[Offload]:
        if zero_stage == 0:
            return [Offload.none]
        allowed = [Offload.none, Offload.optimizer] + ([Offload.optimizer_params] if zero_stage == 3 else [])
        return [o for o in self.offload if o in allowed] or [Offload.none]


def restrict(space: SearchSpace, caps: Capabilities, n_heads: int | None = None) -> RestrictedSpace:
    dropped: dict[str, list[Any]] = {}

    def keep(name: str, values: list[Any], ok) -> list[Any]:
        kept = [v for v in values if ok(v)]
        gone = [v for v in values if not ok(v)]
        if gone:
            dropped[name] = gone
        if not kept:
            raise UserError(
                f"search space: no choice of `{name}` ({values}) can run on this machine",
                fix=f"add a choice this machine supports to `{name}`")
        return kept

    num_gpus = keep("num_gpus", space.num_gpus, lambda n: n <= caps.max_ranks)
    tp = keep("tp_degree", space.tp_degree,
              lambda t: t <= max(num_gpus) and (caps.tensor_parallel or t == 1)
              and (n_heads is None or n_heads % t == 0))
    return RestrictedSpace(
        num_gpus=num_gpus,
        micro_batch_size=list(space.micro_batch_size),
        grad_accum_steps=list(space.grad_accum_steps),
        precision=keep("precision", space.precision, lambda p: p in caps.precisions),
        checkpointing=list(space.checkpointing),
        zero_stage=keep("zero_stage", space.zero_stage, lambda z: z in caps.zero_stages),
        offload=keep("offload", space.offload, lambda o: caps.offload or o is Offload.none),
        tp_degree=tp,
        dropped=dropped,
    )


def suggest(trial: Any, rs: RestrictedSpace, global_batch_samples: int | None = None) -> dict[str, Any]:
    """Suggest one configuration (TrialConfig fields) from an Optuna trial.

    Returns None-free values; raises `optuna.TrialPruned` never: every suggestion is valid.
    """
    num_gpus = trial.suggest_categorical("num_gpus", rs.num_gpus)
    tp_choices = rs.tp_choices(num_gpus)
    tp = tp_choices[0] if len(tp_choices) == 1 else trial.suggest_categorical(
        f"tp_degree|gpus={num_gpus}", tp_choices)
    dp = num_gpus // tp
    if global_batch_samples is None:
        micro = trial.suggest_categorical("micro_batch_size", rs.micro_batch_size)
        accum = trial.suggest_categorical("grad_accum_steps", rs.grad_accum_steps)
    else:
        # Derive accumulation: global = micro x accum x dp, exactly; offer only micros that fit.
        micros = [m for m in rs.micro_batch_size if global_batch_samples % (m * dp) == 0]
        if not micros:
            raise UserError(
                f"no micro-batch in {rs.micro_batch_size} meets global batch "
                f"{global_batch_samples} with {dp} data-parallel ranks",
                fix="change batch.global_batch_samples or the micro_batch_size choices")
        micro = micros[0] if len(micros) == 1 else trial.suggest_categorical(
            f"micro_batch_size|dp={dp}", micros)
        accum = global_batch_samples // (micro * dp)
    precision = Precision(trial.suggest_categorical("precision", [p.value for p in rs.precision]))
    ckpt = Checkpointing(trial.suggest_categorical("checkpointing", [c.value for c in rs.checkpointing]))
    zero = trial.suggest_categorical("zero_stage", rs.zero_stage) if len(rs.zero_stage) > 1 else rs.zero_stage[0]
    off_choices = rs.offload_choices(zero)
    offload = off_choices[0] if len(off_choices) == 1 else Offload(trial.suggest_categorical(
        f"offload|zero={zero}", [o.value for o in off_choices]))
    return dict(num_gpus=num_gpus, tp_degree=tp, micro_batch_size=micro, grad_accum_steps=accum,
                precision=precision, checkpointing=ckpt, zero_stage=zero, offload=offload)
