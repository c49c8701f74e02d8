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
from trials.errors import EntryPointContractError


def load_function(wl: EntryPointWorkload):
    for folder in reversed(wl.python_path):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    module_name, _, fn_name = wl.entry_point.partition(":")
    module = import_module(module_name, wl.entry_point)
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise AttributeError(f"'{module_name}' has no function '{fn_name}' (entry point "
                             f"'{wl.entry_point}'). To fix: name one of its functions after the colon")
    check_call(fn, wl)
    return fn


def import_module(module_name: str, entry_point: str):
    """The entry point's module; an ImportError whose fix fits the cause: the module not found
    (its folder is not on the path), a module it imports not installed here, or the module
    raising as it imports."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and not (module_name == missing or module_name.startswith(missing + ".")):
            raise ImportError(f"'{module_name}' (entry point '{entry_point}') imports '{missing}', which "
                              f"is not installed for {sys.executable}. To fix: install it there "
                              "(the trials run with this Python), or correct the import") from exc
        raise ImportError(f"cannot import '{module_name}' for entry point '{entry_point}': "
                          f"{exc}. To fix: put its folder in workload.python_path") from exc
    except Exception as exc:  # a SyntaxError, or the module's own code raising at import
        raise ImportError(f"importing '{module_name}' (entry point '{entry_point}') raised "
                          f"{type(exc).__name__}: {exc}. To fix: correct the module so that "
                          f"`import {module_name}` succeeds") from exc


def check_call(fn, wl: EntryPointWorkload) -> None:
    """TypeError unless `fn` takes the call the worker makes (seq_len, micro_batch_size, device
    and the workload's kwargs): checked at the sweep's preflight, where a keyword the function
    does not take would otherwise fail every trial the same way."""
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C-implemented callable: nothing to read
        return
    try:
        signature.bind(seq_len=1, micro_batch_size=1, device=None, **wl.kwargs)
    except TypeError as exc:
        raise TypeError(f"entry point '{wl.entry_point}' cannot take the worker's call "
                        f"fn(seq_len=..., micro_batch_size=..., device=..., **kwargs): {exc}. To fix: "
                        "give the function those parameters (or **kwargs), and workload.kwargs only "
                        "the names it takes") from None


def build_entry_point(wl: EntryPointWorkload, seq_len: int, micro_batch_size: int,
                      device: torch.device) -> tuple[torch.nn.Module, Iterator[Any], dict]:
    fn = load_function(wl)
    out = fn(seq_len=seq_len, micro_batch_size=micro_batch_size, device=device, **wl.kwargs)
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        raise EntryPointContractError(f"entry point '{wl.entry_point}' must return (model, batches) or "
                                      f"(model, batches, info), got {type(out).__name__}")
    model, batches = out[0], out[1]
    info = dict(out[2]) if len(out) == 3 else {}
    if not isinstance(model, torch.nn.Module):
        raise EntryPointContractError(f"entry point '{wl.entry_point}' returned a {type(model).__name__} "
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
