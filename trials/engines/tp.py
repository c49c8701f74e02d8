"""Tensor parallel through PyTorch DTensor, with data parallel over the remaining ranks.

    engine = TensorParallelEngine(cfg, model, device, world_size)
    loss = engine.train_step(batches)    # grad_accum_steps micro-batches, one optimizer step

The ranks form a 2-D mesh (dp, tp) = (world_size // tp_degree, tp_degree). In every block of
the built-in GPT the attention's qkv and the MLP's up projection are column-parallel and the
attention output and MLP down projection row-parallel (Megatron-LM's split, Shoeybi et al.
2019): each rank holds 1/tp of those weights and of the heads, and one all-reduce per
sublayer joins the partial outputs. Embeddings and LayerNorms stay replicated. Hugging Face
models are split by their own `config.base_model_tp_plan` (Llama, Qwen2, ...: q/k/v, gate
and up column-wise, o and down row-wise; Qwen3's per-head q/k norms whole on every rank, their
gradients summed over the TP group; OLMo-2's q/k/v and Phi-3's fused projections split and
gathered whole, GPT-NeoX's embedding split by vocabulary rows: SPLIT_STYLES). The ranks of
one TP group must see the same tokens: rank 0 of the group broadcasts each micro-batch, as a
Megatron data loader does. Gradients are averaged over the dp dimension once per optimizer
step (one flat all-reduce, like DDP's buckets).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Iterator

import torch
import torch.distributed as dist

from autotune.contract import Precision, TrialConfig
from trials.engines.ddp import loss_of, make_optimizer
from trials.engines.observe import ActivationDtype, observe_optimizer, observe_params
from trials.errors import UnsupportedConfig
from trials.precision import autocast_dtype

# Which linears of a GPT block are split, and how (torch.distributed.tensor.parallel styles).
COLWISE = ("attn.qkv", "mlp.up")
ROWWISE = ("attn.proj", "mlp.down")
# The styles of a transformers `base_model_tp_plan` the worker runs (names as in transformers
# 5.25.0's plans): the column/row-wise split; a column-wise split whose output is gathered
# whole on every rank (olmo2's q/k/v, whose norms run over all heads; phi3's fused qkv and
# gate_up, which the model splits by position after); a row-wise split of an input that
# arrives whole (olmo2's and phi3's o, phi3's down); the embedding split by vocabulary rows
# (gpt_neox's embed_in). And a weight kept whole on every rank whose gradient is summed over
# the TP group (qwen3's q_norm and k_norm: each rank normalises its own heads with them, so its
# gradient is a partial sum).
SPLIT_STYLES = ("colwise", "rowwise", "colwise_gather_output", "rowwise_split_input", "embedding_rowwise")
SUMMED = "replicated_with_grad_allreduce"
# The styles whose output is gathered whole: what follows them runs whole on every rank.
GATHERED = ("colwise_gather_output",)


def check_tp_shape(model: torch.nn.Module, tp: int, world_size: int) -> None:
    """Raise UnsupportedConfig unless this model can be split `tp` ways on `world_size` ranks
    (the search space never suggests such a degree; a hand-written config may)."""
    from trials.workloads.gpt import GPT

    if world_size % tp:
        raise UnsupportedConfig(f"tp_degree={tp} does not divide the {world_size} ranks. "
                                "To fix: choose a tp_degree that divides the GPU count")
    if isinstance(model, GPT):
        s = model.shape
        widths = {"n_heads": s.n_heads, "MLP width": s.ffn_mult * s.d_model}
    elif _hf_tp_plan(model) is not None:
        c = model.config
        widths = {"num_attention_heads": c.num_attention_heads,
                  "num_key_value_heads": getattr(c, "num_key_value_heads", None) or c.num_attention_heads,
                  "intermediate_size": c.intermediate_size}
    else:
        raise UnsupportedConfig(
            f"tensor parallel is implemented for the built-in GPT and Hugging Face models with "
            f"a `base_model_tp_plan` of the styles {', '.join(SPLIT_STYLES)} (Llama, Qwen3, "
            f"OLMo-2, Phi-3, GPT-NeoX, ...), not "
            f"{type(model).__name__}. To fix: set tp_degree 1 for this workload",
            workload_allows={"tp_degree": [1]})
    for name, width in widths.items():
        if width % tp:
            raise UnsupportedConfig(f"tp_degree={tp} does not divide {name}={width}: each rank "
                                    f"must hold whole heads and equal slices. To fix: choose a "
                                    f"tp_degree dividing {name}")


def _hf_tp_plan(model: torch.nn.Module) -> dict[str, str] | None:
    """A transformers model's own TP plan (`config.base_model_tp_plan`, FQN patterns relative
    to `model.base_model`), when it uses only the plain column/row-wise split."""
    plan = getattr(getattr(model, "config", None), "base_model_tp_plan", None)
    if not plan or not hasattr(model, "base_model"):
        return None
    if any(style not in (*SPLIT_STYLES, SUMMED) for style in plan.values()):
        return None
    return dict(plan)


def grad_summed_params(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The weights its TP plan keeps whole with their gradients summed over the TP group
    (SUMMED), by the plan's module patterns (relative to `model.base_model`)."""
    from fnmatch import fnmatchcase

    patterns = [p for p, style in (_hf_tp_plan(model) or {}).items() if style == SUMMED]
    if not patterns:
        return []
    return [param for name, module in model.base_model.named_modules()
            if any(fnmatchcase(name, p) for p in patterns) for param in module.parameters(recurse=False)]


def tp_plans(model: torch.nn.Module, tp: int) -> list[tuple[torch.nn.Module, dict[str, Any]]]:
    """(module, parallelize_module plan) pairs that split `model` `tp` ways. A model with
    real weights gets the GPT's qkv rows interleaved here; a meta-built one when it is
    materialised (`qkv_transforms`, after parallelize_module)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    from trials.workloads.gpt import GPT
    from trials.workloads.materialize import has_meta_tensors

    style = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel,
             "colwise_gather_output": lambda: ColwiseParallel(output_layouts=Replicate()),
             # torch's RowwiseParallel splits an nn.Embedding by rows (vocabulary) as well.
             "rowwise_split_input": lambda: RowwiseParallel(input_layouts=Replicate()),
             "embedding_rowwise": lambda: RowwiseParallel(input_layouts=Replicate())}
    if isinstance(model, GPT):
        plan = {**{n: "colwise" for n in COLWISE}, **{n: "rowwise" for n in ROWWISE}}
        if not has_meta_tensors(model):
            with torch.no_grad():
                for block in model.blocks:
                    for p in (block.attn.qkv.weight, block.attn.qkv.bias):
                        p.copy_(interleave_qkv(p, tp))
        return [(block, {n: style[s]() for n, s in plan.items()}) for block in model.blocks]
    # transformers' attention reshapes with -1 heads, so local heads follow the shard width.
    plan = _hf_tp_plan(model) or {}
    return [(model.base_model, {pattern: style[s]() for pattern, s in plan.items() if s in style})]


def interleave_qkv(full: torch.Tensor, tp: int) -> torch.Tensor:
    """The fused qkv rows (weight or bias) reordered from [q | k | v] to
    [q_0 k_0 v_0 | q_1 k_1 v_1 | ...], so that the r-th contiguous 1/tp of the rows (what
    ColwiseParallel gives rank r) holds the q, k and v of rank r's heads. The model computes
    the same function; only the layout changes."""
    d = full.shape[0] // 3
    chunk = d // tp
    idx = torch.cat([torch.arange(part * d + r * chunk, part * d + (r + 1) * chunk)
                     for r in range(tp) for part in range(3)]).to(full.device)
    return full[idx]


def qkv_transforms(model: torch.nn.Module, tp: int) -> dict[int, Any]:
    """{id(param): interleave} for a meta-built GPT's qkv weights, for `materialize`."""
    from trials.workloads.gpt import GPT

    if not isinstance(model, GPT):
        return {}
    return {id(p): (lambda full: interleave_qkv(full, tp))
            for block in model.blocks for p in (block.attn.qkv.weight, block.attn.qkv.bias)}


def apply_tp(model: torch.nn.Module, tp_mesh, tp: int) -> None:
    """Split the model's linears over `tp_mesh` (DTensor shards; on the meta device, shards
    of nothing yet). Real weights are first made equal on every rank: the sharded ones are
    scattered from the mesh's first rank and the replicated ones must match it."""
    from torch.distributed.tensor.parallel import parallelize_module

    from trials.workloads.materialize import has_meta_tensors

    if not has_meta_tensors(model):
        for p in model.parameters():
            dist.broadcast(p.data, src=0)
    for module, plan in tp_plans(model, tp):
        parallelize_module(module, tp_mesh, plan)


class TensorParallelEngine:
    def __init__(self, cfg: TrialConfig, model: torch.nn.Module, device: torch.device, world_size: int,
                 init_module=None):
        from torch.distributed.device_mesh import init_device_mesh

        from trials.workloads.materialize import ensure_materialized

        tp = cfg.tp_degree
        if cfg.zero_stage > 0:
            from trials.engines.deepspeed import ZERO_WITH_TP

            raise UnsupportedConfig(ZERO_WITH_TP)
        if cfg.precision is Precision.fp8:
            raise UnsupportedConfig("fp8 with tensor parallel is not implemented (torchao float8 "
                                    "needs its own TP styles). To fix: use bf16 with tp_degree > 1")
        check_tp_shape(model, tp, world_size)
        self.cfg, self.device, self.raw_model = cfg, device, model
        self.tp, self.dp = tp, world_size // tp
        self.mesh = init_device_mesh(device.type, (self.dp, tp), mesh_dim_names=("dp", "tp"))
        tp_mesh = self.mesh["tp"]
        self.tp_group = tp_mesh.get_group()
        self.tp_src = dist.get_global_rank(self.tp_group, 0)
        self.dp_group = self.mesh["dp"].get_group() if self.dp > 1 else None
        apply_tp(model, tp_mesh, tp)
        # A meta-built model: each rank allocates its shards and the replicated weights,
        # drawn from the same seed on every rank, so they start equal without a broadcast.
        self.weights_mark = ensure_materialized(model, device, init_module,
                                                transforms=qkv_transforms(model, tp))
        self._activations = ActivationDtype(model)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.summed = grad_summed_params(model) if tp > 1 else []
        self.optimizers = self._optimizers()
        self.forward_model = model  # the whole model compiled, its DTensor shards traced
        if cfg.compile:
            from trials.compile import compile_module

            self.forward_model = compile_module(model, cfg)
        dtype = autocast_dtype(cfg.precision)
        self.autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else nullcontext
        self.scaler = torch.amp.GradScaler(device.type) if cfg.precision is Precision.fp16 else None
        self.optimizer_steps = 0
        self.micro_steps = 0

    def _optimizers(self) -> list[torch.optim.Optimizer]:
        """One optimizer for the DTensor shards, one for the replicated plain tensors: foreach
        kernels (CUDA's default) and the GradScaler's unscale cannot mix the two kinds in one
        call, and a GradScaler steps several optimizers with one scale (torch.amp docs)."""
        from torch.distributed.tensor import DTensor

        sharded = [p for p in self.params if isinstance(p, DTensor)]
        plain = [p for p in self.params if not isinstance(p, DTensor)]
        out = []
        for group in (sharded, plain):
            if not group:
                continue
            out.append(make_optimizer(group, self.cfg))
        return out

    def _group_batch(self, batch: Any) -> dict[str, torch.Tensor]:
        return group_batch(batch, self.tp_group if self.tp > 1 else None, self.tp_src)

    def _average_over_dp(self) -> None:
        _all_reduce_grads([_local(p.grad) for p in self.params if p.grad is not None], self.dp_group, self.dp)


    def train_step(self, batches: Iterator[Any]) -> torch.Tensor:
        accum = self.cfg.grad_accum_steps
        total = torch.zeros((), device=self.device)
        for _ in range(accum):
            batch = self._group_batch(next(batches))
            with self.autocast():
                loss = loss_of(self.forward_model, batch)
            scaled = loss / accum
            if self.scaler is not None:
                scaled = self.scaler.scale(scaled)
            scaled.backward()
            total += loss.detach().float() / accum
            self.micro_steps += 1
        sum_over_tp(self.summed, self.tp_group)
        if self.dp_group is not None:
            self._average_over_dp()
        for optimizer in self.optimizers:
            if self.scaler is not None:
                self.scaler.step(optimizer)  # skipped, for both, if any gradient overflowed
            else:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.update()
        self.optimizer_steps += 1
        return total

    def observations(self) -> dict[str, Any]:
        from torch.distributed.tensor import DTensor

        linears: dict[str, dict[str, Any]] = {}
        for name, module in self.raw_model.named_modules():
            if isinstance(module, torch.nn.Linear):
                w = module.weight
                dt = isinstance(w, DTensor)
                linears[name] = {
                    "dtensor": dt,
                    "placements": [str(p) for p in w.placements] if dt else None,
                    "local_shape": list(_local(w).shape),
                    "global_shape": list(w.shape),
                }
        dtype = autocast_dtype(self.cfg.precision)
        return {
            "engine": "tensor_parallel",
            "compiled": self.forward_model is not self.raw_model,
            "tp_degree": self.tp,
            "dp_degree": self.dp,
            "mesh_shape": list(self.mesh.shape),
            "tp_linear_weights": linears,
            "sharded_linears": sum(1 for v in linears.values() if v["dtensor"]),
            # The weights kept whole with summed gradients (qwen3's q/k norms) and how far the
            # TP group's copies are apart (summed_drift).
            "grad_summed_weights": len(self.summed),
            "grad_summed_max_abs_diff": summed_drift(self.summed, self.tp_group, self.tp_src, self.device),
            "autocast_dtype": str(dtype) if dtype else None,
            "linear_output_dtype": self._activations.dtype,
            "loss_scaling": self.scaler is not None,
            "optimizer_steps": self.optimizer_steps,
            "micro_steps": self.micro_steps,
            **observe_params(self.raw_model),
            **_merged(observe_optimizer(o) for o in self.optimizers),
        }


def sum_over_tp(summed: list[torch.nn.Parameter], tp_group) -> None:
    """The SUMMED weights' gradients (grad_summed_params): each rank's share of the heads,
    summed over the TP group; their local shards where FSDP2 shards them over dp (the ranks of
    one TP group hold the same dp shard)."""
    if summed:
        _all_reduce_grads([_local(p.grad) for p in summed if p.grad is not None], tp_group, 1)


def summed_drift(summed: list[torch.nn.Parameter], tp_group, tp_src: int, device: torch.device) -> float | None:
    """The largest |w - w on the TP group's first rank| over the SUMMED weights (their local
    shards), the group's on every rank: 0.0 while each step sums their gradients (a rank
    stepping on its own share would drift); None without any."""
    if not summed:
        return None
    drift = torch.zeros((), device=device)
    for p in summed:
        mine = _local(p.detach())
        first = mine.clone()
        dist.broadcast(first, src=tp_src, group=tp_group)
        drift = torch.maximum(drift, (mine - first).abs().max().float())
    dist.all_reduce(drift, op=dist.ReduceOp.MAX, group=tp_group)
    return float(drift)


def _all_reduce_grads(grads: list[torch.Tensor], group, divisor: int) -> None:
    """Sum `grads` over `group` in one flat all-reduce (like DDP's buckets), divided by
    `divisor` (gloo has no AVG)."""
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat, group=group)
    if divisor != 1:
        flat.div_(divisor)
    for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
        g.copy_(synced)


def group_batch(batch: Any, tp_group, tp_src: int) -> dict[str, torch.Tensor]:
    """The micro-batch of this TP group: rank 0 of the group sends its own to the others
    (`tp_group` None: no TP, the rank's own batch)."""
    if isinstance(batch, torch.Tensor):
        batch = {"input_ids": batch, "labels": batch}
    if tp_group is None:
        return batch
    out = {}
    for key in ("input_ids", "labels"):
        t = batch[key].contiguous()
        dist.broadcast(t, src=tp_src, group=tp_group)
        out[key] = t
    return out


def _local(t: torch.Tensor) -> torch.Tensor:
    to_local = getattr(t, "to_local", None)
    return to_local() if to_local is not None else t


def _merged(views) -> dict[str, Any]:
    """One optimizer view from several: state elements summed, devices and dtypes joined."""
    out: dict[str, Any] = {}
    for v in views:
        if not out:
            out = dict(v)
            continue
        out["optimizer_state_elements_local"] += v["optimizer_state_elements_local"]
        for key in ("optimizer_state_devices", "optimizer_state_dtypes"):
            out[key] = sorted(set(out[key]) | set(v[key]))
    return out
