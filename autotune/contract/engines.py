"""Which engine runs a config, which launcher starts it, and accelerate's precision names:
rules the controller (launch, memory estimate, calibration, export) and the worker
(`trials/engines`) must agree on, so they live here once.

    engine_for(cfg.zero_stage, cfg.tp_degree, cfg.launcher, cfg.fsdp)   # EngineKind.deepspeed, ...
    default_launcher(zero_stage=2)                             # Launcher.deepspeed
    ACCELERATE_MIXED_PRECISION[Precision.fp32]                 # "no"
"""

from __future__ import annotations

from enum import Enum

from autotune.contract.config import FSDPMode, Launcher, Precision


class EngineKind(str, Enum):
    """The worker's engines (trials/engines/): what applies a config's parallelism."""

    ddp = "ddp"
    deepspeed = "deepspeed"
    tensor_parallel = "tensor_parallel"
    accelerate = "accelerate"
    fsdp2 = "fsdp2"


def default_launcher(zero_stage: int) -> Launcher:
    """The launcher a sweep starts a config with unless the spec names one: DeepSpeed's for
    ZeRO (as its users run it), torchrun otherwise."""
    return Launcher.deepspeed if zero_stage > 0 else Launcher.torchrun


def engine_for(zero_stage: int, tp_degree: int, launcher: Launcher | None = None,
               fsdp: FSDPMode = FSDPMode.none) -> EngineKind:
    """The engine a config runs on: FSDP2 when `fsdp` is set (with TP on a 2-D mesh, under
    any launcher); ZeRO -> DeepSpeed; TP -> DTensor tensor parallel; else the engine of the
    launcher the long run uses (DeepSpeed's, at ZeRO stage 0, under the DeepSpeed launcher;
    accelerate's Accelerator under accelerate); else torch DDP. `launcher` None: the sweep's
    default for the stage. ZeRO with TP counts as DeepSpeed here; the worker refuses it
    (trials/engines/deepspeed.py ZERO_WITH_TP)."""
    launcher = launcher or default_launcher(zero_stage)
    if fsdp is not FSDPMode.none:
        return EngineKind.fsdp2
    if zero_stage > 0:
        return EngineKind.deepspeed
    if tp_degree > 1:
        return EngineKind.tensor_parallel
    if launcher is Launcher.deepspeed:
        return EngineKind.deepspeed
    if launcher is Launcher.accelerate:
        return EngineKind.accelerate
    return EngineKind.ddp


# accelerate's names for our precisions (`accelerate launch --mixed_precision`, the
# `mixed_precision` of its config file; accelerate/utils/dataclasses.py PrecisionType).
ACCELERATE_MIXED_PRECISION = {Precision.fp32: "no", Precision.bf16: "bf16", Precision.fp16: "fp16",
                              Precision.fp8: "fp8"}
