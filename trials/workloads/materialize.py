"""Give a model built on the meta device real memory: only what this rank holds, allocated on
the trial's device, initialised with the model's own init.

    with torch.device("meta"):
        model = GPT(shape)                          # shapes only: no memory, no init
    fully_shard(model)                              # or parallelize_module: DTensor shards, still meta
    materialize(model, device, init_module=GPT.init_module)
    materialize(model, device, GPT.init_module, after_module=partition)   # ZeRO-3: partition as it goes

Module by module (`init_order`: children first, as `nn.Module.apply` visits them; the
embeddings and LM head before the repeated blocks): the module's own
parameters are allocated as this rank holds them (the whole tensor for a plain parameter,
the local shard for a DTensor of FSDP2 or tensor parallel), then its `reset_parameters()`
(PyTorch's default init of that layer) and the model's `init_module(module)` run, then
`after_module(module)` (DeepSpeed ZeRO-3 partitions it there). A plain parameter is
initialised in place. A sharded one is initialised as a whole, temporary tensor of its
global shape, of which this rank keeps its slice: the random draws are the same whatever the
layout, so every engine starts from exactly the weights of an unsharded build with the same
seed (tests compare their losses). Allocating module by module, the rank never holds more
than its share of the modules done so far plus one module whole: the build peak is the
rank's share plus the largest module, never the model.

Buffers: allocated on `device` uninitialised; the model's init must set them (Hugging Face's
`_init_weights` does for rotary embeddings; the built-in GPT has none).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

InitModule = Callable[[nn.Module], None]
# A change of layout applied to a whole parameter before it is sliced (tensor parallel's
# interleaved qkv rows), keyed by id() of the parameter.
FullTransform = Callable[[torch.Tensor], torch.Tensor]


def has_meta_tensors(model: nn.Module) -> bool:
    return any(_local(t).is_meta for t in [*model.parameters(), *model.buffers()])


def ensure_materialized(model: nn.Module, device: torch.device, init_module: InitModule | None = None,
                        **kwargs) -> dict | None:
    """`materialize` a model that still has meta tensors; returns the memory mark taken
    once its weights are in place (`trials.measure.memory_mark`), None when there was
    nothing to do."""
    from trials.measure import memory_mark

    if not has_meta_tensors(model):
        return None
    materialize(model, device, init_module, **kwargs)
    return memory_mark(device)


def materialize(model: nn.Module, device: torch.device, init_module: InitModule | None = None,
                transforms: dict[int, FullTransform] | None = None,
                param_device: torch.device | None = None,
                after_module: InitModule | None = None) -> None:
    """Allocate `model`'s meta tensors (this rank's part only) and initialise them, module by
    module: `reset_parameters()` where the module has it, then `init_module(module)`, then
    `after_module(module)`. `transforms`: {id(param): fn} applied to a sharded parameter's
    whole tensor before slicing; `param_device`: where parameters live when not on `device`
    (FSDP2's CPU offload keeps its shards in host memory)."""
    transforms = transforms or {}
    param_device = param_device or device
    done: set[int] = set()  # a tied parameter is allocated and initialised once
    with torch.no_grad():
        for module in init_order(model):
            _allocate_own(module, param_device, device)
            own = [(name, p) for name, p in module.named_parameters(recurse=False)
                   if id(p) not in done]
            sharded = [(name, p) for name, p in own if _is_dtensor(p)]
            temporaries = {name: nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device=param_device),
                                              requires_grad=p.requires_grad)
                           for name, p in sharded}
            # The init sees whole plain tensors where this rank holds a shard.
            for name, tmp in temporaries.items():
                module._parameters[name] = tmp
            try:
                _init_one(module, init_module)
            finally:
                for name, p in sharded:
                    module._parameters[name] = p
            for name, p in sharded:
                full = temporaries.pop(name).detach()
                fn = transforms.get(id(p))
                _copy_slice(p, fn(full) if fn is not None else full)
                del full
            done.update(id(p) for _, p in own)
            if after_module is not None:
                after_module(module)


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks: the ModuleList holding most parameters (the GPT's
    `blocks`, a transformers model's decoder layers); [] when there is none."""
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 1]
    if not lists:
        return []
    def size(module_list: nn.ModuleList) -> int:
        return sum(p.numel() for p in module_list.parameters())

    return list(max(lists, key=size))


def init_order(model: nn.Module) -> list[nn.Module]:
    """The order modules are materialised in, the same for every engine (so that every
    engine draws the same weights): children before their parent, as `nn.Module.apply`
    visits them, so that an init a parent applies to its children has the last word; and
    the modules outside the repeated blocks (embeddings, LM head, final norm: the largest
    single tensors) before the blocks, so that the temporary whole tensor of a large
    embedding never coexists with the blocks' shards. The blocks' ancestors come last."""
    blocks = repeated_blocks(model)
    everything = list(_post_order(model))
    if not blocks:
        return everything
    inside = {id(m) for b in blocks for m in b.modules()}
    # Every module on the path from the root to the blocks (the block list included).
    ancestors = {id(m) for m in model.modules() if id(m) not in inside and _contains(m, blocks[0])}
    first = [m for m in everything if id(m) not in inside and id(m) not in ancestors]
    last = [m for m in everything if id(m) in ancestors]
    return first + [m for b in blocks for m in _post_order(b)] + last


def _contains(module: nn.Module, target: nn.Module) -> bool:
    return any(m is target for m in module.modules())


def _post_order(module: nn.Module):
    for child in module.children():
        yield from _post_order(child)
    yield module


def _allocate_own(module: nn.Module, param_device: torch.device, buffer_device: torch.device) -> None:
    """Memory for the module's own meta tensors, as `to_empty` gives it (a DTensor gets its
    local shard), one module at a time. A parameter keeps its identity (tied weights, and
    FSDP2's records of its parameters, still point at it; FSDP2 re-reads the new local
    shard at its lazy init, before the first forward)."""
    for p in module._parameters.values():
        if p is None or not _local(p).is_meta:
            continue
        # Swap contents (as nn.Module._apply does for tensor subclasses): a meta tensor's
        # storage cannot be replaced by `.data =`, and the object must stay the same.
        new = nn.Parameter(torch.empty_like(p, device=param_device), requires_grad=p.requires_grad)
        torch.utils.swap_tensors(p, new)
    for name, b in module._buffers.items():
        if b is not None and _local(b).is_meta:
            module._buffers[name] = torch.empty_like(b, device=buffer_device)


def _init_one(module: nn.Module, init_module: InitModule | None) -> None:
    reset = getattr(module, "reset_parameters", None)
    if callable(reset):
        reset()
    if init_module is not None:
        init_module(module)


def _copy_slice(param: torch.Tensor, full: torch.Tensor) -> None:
    """Copy this rank's part of `full` into the DTensor `param`, computed locally: every rank
    drew the same whole tensor from the same seed, so no communication is needed
    (`src_data_rank=None`)."""
    local = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
    param.to_local().copy_(local.to_local())


def _is_dtensor(t: torch.Tensor) -> bool:
    return isinstance(t, DTensor)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if _is_dtensor(t) else t
