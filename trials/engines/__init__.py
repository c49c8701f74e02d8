"""Engines apply a TrialConfig's parallelism and precision to a model and run one
optimizer step at a time: DDP (ddp.py), DeepSpeed ZeRO 0-3 + offload (deepspeed.py), FSDP2
fully_shard (fsdp.py), DTensor tensor parallel (tp.py), accelerate's Accelerator (accelerate.py).

    engine = build_engine(cfg, model, device, world_size)
    loss = engine.train_step(batches)   # grad_accum_steps micro-batches, one optimizer step
    engine.optimizer_steps, engine.observations()

Every engine has that small interface (see `Engine`); the worker knows no more of them.
"""

from __future__ import annotations

import importlib
from typing import Any, Iterator, Protocol

import torch

from autotune.contract import TrialConfig


class Engine(Protocol):
    optimizer_steps: int

    def train_step(self, batches: Iterator[Any]) -> torch.Tensor:
        """One optimizer step over `grad_accum_steps` micro-batches; returns the mean loss."""

    def observations(self) -> dict[str, Any]:
        """What was applied, as seen from inside (dtypes, shard sizes, where state lives)."""


def engine_kind(cfg: TrialConfig):
    """The engine a config runs on: `autotune.contract.engine_for`, the rule the controller's
    memory estimate and calibration use too."""
    from autotune.contract import engine_for

    return engine_for(cfg.zero_stage, cfg.tp_degree, cfg.launcher, cfg.fsdp)


def engine_class(cfg: TrialConfig):
    """The class of the engine a config runs, its module and the libraries it needs imported:
    the worker imports them before the build, so that neither the build's time nor its memory
    counts imports."""
    from autotune.contract import EngineKind

    kind = engine_kind(cfg)
    if kind is EngineKind.fsdp2:
        from trials.engines.fsdp import FSDP2Engine

        return FSDP2Engine
    if kind is EngineKind.deepspeed:
        importlib.import_module("deepspeed")  # the engine imports it lazily, at a cost in time and memory

        from trials.engines.deepspeed import DeepSpeedEngine

        return DeepSpeedEngine
    if kind is EngineKind.tensor_parallel:
        from trials.engines.tp import TensorParallelEngine

        return TensorParallelEngine
    if kind is EngineKind.accelerate:
        importlib.import_module("accelerate")

        from trials.engines.accelerate import AccelerateEngine

        return AccelerateEngine
    from trials.engines.ddp import DDPEngine

    return DDPEngine


def build_engine(cfg: TrialConfig, model: torch.nn.Module, device: torch.device, world_size: int,
                 init_module=None, hidden_size: int | None = None) -> Engine:
    """The engine a config asks for (`engine_kind`): FSDP2 (with TP on a 2-D mesh); ZeRO ->
    DeepSpeed; TP -> DTensor tensor parallel; else the engine of the launcher the long run
    uses (DeepSpeed's, at ZeRO stage 0, for the DeepSpeed launcher; accelerate's Accelerator
    for accelerate); else torch DDP.

    `model` may come built on the meta device (see trials/workloads/build.py): the engine
    decides what this rank holds and materialises that with `init_module`. `hidden_size`
    sizes DeepSpeed's buffers. Every launcher sets the same RANK / WORLD_SIZE environment,
    so ZeRO or FSDP2 under any launcher runs too (as a script calling them directly would)."""
    from autotune.contract import EngineKind

    if cfg.zero_stage > 0 and cfg.tp_degree > 1:
        from trials.engines.deepspeed import ZERO_WITH_TP
        from trials.errors import UnsupportedConfig

        raise UnsupportedConfig(ZERO_WITH_TP)
    cls = engine_class(cfg)
    if engine_kind(cfg) is EngineKind.deepspeed:
        return cls(cfg, model, device, world_size, init_module, hidden_size)
    return cls(cfg, model, device, world_size, init_module)
