"""The user's own model and data: `module:function` returning (model, batches[, info]).

    model, batches, info = build_entry_point(EntryPointWorkload(entry_point="my_pkg.train:build"),
                                             seq_len=512, micro_batch_size=4, device=device)

The calling convention is `autotune.contract.EntryPointWorkload`'s. The batch iterator is
made endless (a re-iterable such as a DataLoader starts again; a one-shot generator that
runs dry is an error naming the function).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Iterable, Iterator

import torch

from autotune.contract import EntryPointWorkload


def load_function(wl: EntryPointWorkload):
    for folder in reversed(wl.python_path):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    module_name, _, fn_name = wl.entry_point.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"cannot import '{module_name}' for entry point '{wl.entry_point}': "
                          f"{exc}. To fix: put its folder in workload.python_path") from exc
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise AttributeError(f"'{module_name}' has no function '{fn_name}' "
                             f"(entry point '{wl.entry_point}')")
    return fn


def build_entry_point(wl: EntryPointWorkload, seq_len: int, micro_batch_size: int,
                      device: torch.device) -> tuple[torch.nn.Module, Iterator[Any], dict]:
    fn = load_function(wl)
    out = fn(seq_len=seq_len, micro_batch_size=micro_batch_size, device=device, **wl.kwargs)
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        raise TypeError(f"entry point '{wl.entry_point}' must return (model, batches) or "
                        f"(model, batches, info), got {type(out).__name__}")
    model, batches = out[0], out[1]
    info = dict(out[2]) if len(out) == 3 else {}
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"entry point '{wl.entry_point}' returned a {type(model).__name__} "
                        "as its model; expected a torch.nn.Module")
    from trials.workloads.materialize import has_meta_tensors

    # A meta-built model gets memory from the engine (trials.workloads.materialize, this
    # rank's part only); a model built on a real device moves to the trial's device whole.
    if not has_meta_tensors(model):
        model = model.to(device)
    return model, endless(batches, device, wl.entry_point), info


def endless(batches: Iterable[Any], device: torch.device, name: str) -> Iterator[Any]:
    restartable = iter(batches) is not batches
    it = iter(batches)
    served = 0
    while True:
        try:
            batch = next(it)
        except StopIteration:
            if not restartable or served == 0:
                raise RuntimeError(f"the batch iterator of '{name}' ran dry after {served} "
                                   "batches. To fix: return an endless iterator or a "
                                   "re-iterable (e.g. a DataLoader)") from None
            it, served = iter(batches), 0
            continue
        served += 1
        yield _to(batch, device)


def _to(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch if batch.device == device else batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to(v, device) for k, v in batch.items()}
    return batch
