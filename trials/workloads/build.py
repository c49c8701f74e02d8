"""Build the model and its batch iterator for a TrialConfig's workload."""

from __future__ import annotations

from typing import Any, Iterator

import torch

from autotune.contract import GPTWorkload, TrialConfig
from trials.errors import UnsupportedConfig


def build_workload(cfg: TrialConfig, device: torch.device) -> tuple[torch.nn.Module, Iterator[dict[str, Any]], dict]:
    """Returns (model on `device`, endless batch iterator, info dict with `params`, `shape`)."""
    wl = cfg.workload
    if isinstance(wl, GPTWorkload):
        from trials.workloads.gpt import GPT, random_batches

        shape = wl.resolved_shape()
        if cfg.seq_len > shape.max_seq_len:
            raise UnsupportedConfig(
                f"seq_len {cfg.seq_len} exceeds the preset's max_seq_len {shape.max_seq_len}")
        model = GPT(shape).to(device)
        batches = random_batches(shape.vocab_size, cfg.seq_len, cfg.micro_batch_size, device,
                                 seed=cfg.seed + 1000 * _rank())
        return model, batches, {"params": shape.num_params(), "shape": shape.model_dump()}
    raise UnsupportedConfig(f"workload kind '{wl.kind}' is not implemented by this worker yet")


def _rank() -> int:
    import os

    return int(os.environ.get("RANK", "0"))
