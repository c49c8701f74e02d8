"""What an engine applied, seen from inside a rank: shard sizes, dtypes, where state lives.

    seen = ActivationDtype(model)          # records the dtype of the first linear's output
    observe_params(model)                  # {"param_elements_local": ..., "param_dtype": ...}
    observe_optimizer(optimizer)           # {"optimizer_class": ..., "optimizer_state_device": ...}

Engines put these into `observations()`, so a test (and a curious user) can check that a
knob changed what ran: ZeRO-3 holds a fraction of the elements per rank, TP weights are
DTensor shards, offload keeps the optimizer state in CPU memory.
"""

from __future__ import annotations

from typing import Any

import torch


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The part of a parameter this rank holds: a DTensor's local shard, a ZeRO-3
    partition (`ds_tensor`), or the tensor itself."""
    if hasattr(t, "ds_tensor"):  # ZeRO-3: `t.data` is an empty placeholder between uses
        return t.ds_tensor
    to_local = getattr(t, "to_local", None)
    return to_local() if to_local is not None else t


def full_numel(t: torch.Tensor) -> int:
    return int(getattr(t, "ds_numel", t.numel()))


def observe_params(model: torch.nn.Module) -> dict[str, Any]:
    params = list(model.parameters())
    local = [local_tensor(p) for p in params]
    return {
        "param_elements_local": int(sum(t.numel() for t in local)),
        "param_elements_total": int(sum(full_numel(p) for p in params)),
        "param_dtype": str(local[0].dtype) if local else None,
        "param_devices": sorted({str(t.device) for t in local}),
    }


def observe_optimizer(optimizer: Any) -> dict[str, Any]:
    """The optimizer that really steps (DeepSpeed wraps one in its ZeRO optimizer) and its
    state tensors: how many elements this rank holds, on which device, in which dtype."""
    wrapper = None
    inner = optimizer
    while isinstance(getattr(inner, "optimizer", None), torch.optim.Optimizer):
        wrapper = wrapper or type(inner).__name__
        inner = inner.optimizer
    devices, dtypes, elements = set(), set(), 0
    for state in getattr(inner, "state", {}).values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                t = local_tensor(value)
                devices.add(str(t.device))
                dtypes.add(str(t.dtype))
                elements += t.numel()
    return {
        "optimizer_class": type(inner).__name__,
        "optimizer_wrapper": wrapper,
        "optimizer_state_elements_local": int(elements),
        "optimizer_state_devices": sorted(devices),
        "optimizer_state_dtypes": sorted(dtypes),
    }


class ActivationDtype:
    """Records the dtype of the first nn.Linear output of the model's forward, once: the
    dtype activations really had under the engine's precision (autocast, a bf16 module)."""

    def __init__(self, model: torch.nn.Module):
        self.dtype: str | None = None
        first = next((m for m in model.modules() if isinstance(m, torch.nn.Linear)), None)
        self._handle = first.register_forward_hook(self._hook) if first is not None else None

    def _hook(self, _module, _inputs, output) -> None:
        if isinstance(output, torch.Tensor):
            self.dtype = str(output.dtype)
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
