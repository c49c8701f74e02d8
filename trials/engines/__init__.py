"""Engines apply a TrialConfig's parallelism and precision to a model and run one
optimizer step at a time.

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
    from trials.errors import UnsupportedConfig

    if cfg.zero_stage > 0:
        raise UnsupportedConfig("ZeRO stages > 0 are not implemented by this worker yet")
    if cfg.tp_degree > 1:
        raise UnsupportedConfig("tensor parallel is not implemented by this worker yet")
    from trials.engines.ddp import DDPEngine

    return DDPEngine(cfg, model, device, world_size)
