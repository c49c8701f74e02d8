"""What the sharding engines hold beyond a rank's shard of the model states: the parameters
ZeRO-3 and FSDP2 gather to compute, and their gradient buffers and optimizer-step
temporaries (used by `autotune.estimate.memory.estimate_memory`).

    gathered_params_bytes(model, cfg, w_pp=2, compute_bytes=2)   # gathered at the peak
    deepspeed_transients(model, cfg, w_pp=2)                     # (buckets, step temporaries)
    fsdp2_transients(model, cfg, compute_bytes=2)

`cfg` is a `MemoryConfig`. DeepSpeed's buffers follow autotune's DeepSpeed config: sized to
the model's hidden size where it is known (`autotune.contract.deepspeed_buffer_sizes`),
DeepSpeed's defaults otherwise.
"""

from __future__ import annotations

from typing import Any

from autotune.contract import FSDPMode, Offload, Precision, deepspeed_buffer_sizes
from autotune.estimate.compute import ModelShape

# DeepSpeed ZeRO defaults (deepspeed/runtime/zero/config.py, v0.19): bucket sizes in elements.
DS_REDUCE_BUCKET_ELEMS = 500_000_000
DS_ALLGATHER_BUCKET_ELEMS = 500_000_000
DS_PREFETCH_BUCKET_ELEMS = 50_000_000
DS_MAX_LIVE_PARAMETERS = 1_000_000_000
# ZeRO-3's optimizer steps one sub-group of its partition at a time (stage3.py, v0.19).
DS_SUB_GROUP_ELEMS = 1_000_000_000


def gathered_params_bytes(model: ModelShape, cfg: Any, w_pp: float, compute_bytes: int) -> float:
    """Parameters a fully sharded rank holds gathered at its peak, beyond its own shard.

    ZeRO-3 keeps gathered what it will reuse within `stage3_max_reuse_distance` and
    prefetches up to its prefetch bucket: with autotune's config sized to the model (about
    one layer, 12·hidden², + 0.9·hidden²) that, or the largest single module (it is gathered
    whole), whichever is larger; with DeepSpeed's defaults (1e9 elements), a model under 1e9
    parameters stays gathered whole. FSDP2 full_shard gathers the root's parameters
    (embeddings, final norm, LM head) for the whole forward and backward, and a block at a
    time with the next one prefetched; shard_grad_op keeps every block gathered from its
    forward to its backward: the model.
    """
    psi = model.tp_local_params(cfg.tp_degree)
    if cfg.resolved_engine == "fsdp2":
        c = 4.0 if cfg.precision is Precision.fp32 else float(compute_bytes)
        if cfg.fsdp is FSDPMode.shard_grad_op or not model.block_params or not model.n_layers:
            return psi * c
        block = model.tp_block_params(cfg.tp_degree)
        root = max(0.0, psi - model.n_layers * block)
        return min(psi, root + 2 * block) * c
    largest = (model.largest_layer_params or 0) / cfg.tp_degree
    if model.d_model:
        sizes = deepspeed_buffer_sizes(model.d_model, 3)
        live = sizes["stage3_max_live_parameters"] + sizes["stage3_prefetch_bucket_size"]
        return min(psi, max(live / cfg.tp_degree, largest)) * w_pp
    return min(psi, max(DS_MAX_LIVE_PARAMETERS, largest)) * w_pp


def deepspeed_transients(model: ModelShape, cfg: Any, w_pp: float) -> tuple[float, float]:
    """(communication buckets, optimizer-step temporaries) of a DeepSpeed rank, bytes."""
    psi = model.tp_local_params(cfg.tp_degree)
    opt_temp = buckets = 0.0
    if cfg.optimizer == "adamw" and cfg.offload is Offload.none:
        # autotune's DeepSpeed config runs torch's AdamW (`torch_adam`), whose foreach step
        # builds sqrt(exp_avg_sq) over this rank's optimizer partition. That is the GPU's
        # figure: torch 2.13 takes foreach only for accelerator tensors (CUDA, XPU, ...;
        # torch/utils/_foreach_utils.py `_get_foreach_kernels_supported_devices`). On CPU its
        # single-tensor step (`exp_avg_sq.sqrt() / bias_correction2_sqrt`, torch/optim/adam.py)
        # holds two such temporaries at once: a CPU rank's step peak is one fp32 partition above
        # this, which the estimate (the GPU's figure) leaves out.
        opt_temp = psi * 4.0 / (cfg.dp_degree if cfg.zero_stage >= 1 else 1)
    if cfg.zero_stage == 3 and cfg.offload is Offload.none:
        # ZeRO-3's step flattens each sub-group's gradient partition into a new fp32 tensor
        # before stepping it (stage3.py `_prepare_fp32_grad_for_sub_group`, v0.19).
        opt_temp += min(psi / cfg.dp_degree, DS_SUB_GROUP_ELEMS) * 4.0
    if cfg.dp_degree > 1:
        # Sized to the model when its hidden size is known, as autotune.contract.deepspeed_config.
        reduce_elems = (deepspeed_buffer_sizes(model.d_model, cfg.zero_stage)["reduce_bucket_size"]
                        if model.d_model and cfg.zero_stage > 0 else DS_REDUCE_BUCKET_ELEMS)
        buckets = min(psi, reduce_elems) * w_pp
        if cfg.zero_stage in (1, 2):
            buckets += min(psi, DS_ALLGATHER_BUCKET_ELEMS) * w_pp
    return buckets, opt_temp


def fsdp2_transients(model: ModelShape, cfg: Any, compute_bytes: int) -> tuple[float, float]:
    """(gradient buffers, optimizer-step temporaries) of an FSDP2 rank, bytes."""
    psi = model.tp_local_params(cfg.tp_degree)
    opt_temp = buckets = 0.0
    if cfg.optimizer == "adamw" and cfg.offload is Offload.none:
        opt_temp = psi / cfg.dp_degree * 4.0  # torch's foreach AdamW: sqrt(exp_avg_sq) of the shard
    # Backward holds a block's unsharded gradients (in the compute dtype, and their fp32 copy
    # for the reduce-scatter under mixed precision) until they are reduce-scattered, and the
    # root's (embeddings, LM head) from the LM head's backward to the end.
    if model.block_params and model.n_layers:
        block = model.tp_block_params(cfg.tp_degree)
        root = max(0.0, psi - model.n_layers * block)
        mixed = cfg.precision is not Precision.fp32
        buckets = (root + block) * (4.0 + (compute_bytes if mixed else 0.0))
    return buckets, opt_temp
