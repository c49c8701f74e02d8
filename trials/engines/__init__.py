"""Engines apply a TrialConfig's parallelism and precision to a model and run one
optimizer step at a time: DDP (ddp.py), DeepSpeed ZeRO 0-3 + offload (deepspeed.py), DTensor
tensor parallel (tp.py), accelerate's Accelerator (accelerate.py).

    engine = build_engine(cfg, model, device, world_size)
    loss = engine.train_step(batches)   # grad_accum_steps micro-batches, one optimizer step
    engine.optimizer_steps, engine.observations()

Every engine has that small interface (see `Engine`); the worker knows no more of them.
"""

from __future__ import annotations

from typing import Any, Iterator, Protocol

import torch

from autotune.contract import TrialConfig


class Engine(Protocol):
    optimizer_steps: int

    def train_step(self, batches: Iterator[Any]) -> torch.Tensor:
        """One optimizer step over `grad_accum_steps` micro-batches; returns the mean loss."""

    def observations(self) -> dict[str, Any]:
        """What was applied, as seen from inside (dtypes, shard sizes, where state lives)."""


def build_engine(cfg: TrialConfig, model: torch.nn.Module, device: torch.device, world_size: int) -> Engine:
    """The engine a config asks for (`autotune.contract.engine_for`: the rule the controller's
    memory estimate and calibration use too).

    Every launcher sets the same RANK / WORLD_SIZE environment, so ZeRO under torchrun or
    accelerate runs too (deepspeed.initialize, as a script calling it directly would)."""
    from autotune.contract import EngineKind, engine_for

    if cfg.zero_stage > 0 and cfg.tp_degree > 1:
        from trials.engines.deepspeed import ZERO_WITH_TP
        from trials.errors import UnsupportedConfig

        raise UnsupportedConfig(ZERO_WITH_TP)
    kind = engine_for(cfg.zero_stage, cfg.tp_degree, cfg.launcher)
    if kind is EngineKind.deepspeed:
        from trials.engines.deepspeed import DeepSpeedEngine

        return DeepSpeedEngine(cfg, model, device, world_size)
    if kind is EngineKind.tensor_parallel:
        from trials.engines.tp import TensorParallelEngine

        return TensorParallelEngine(cfg, model, device, world_size)
    if kind is EngineKind.accelerate:
        from trials.engines.accelerate import AccelerateEngine

        return AccelerateEngine(cfg, model, device, world_size)
    from trials.engines.ddp import DDPEngine

    return DDPEngine(cfg, model, device, world_size)
