"""Precision as applied by the engines: which configs can run here, and the fp8 conversion.

    check_precision(cfg, device)        # raises UnsupportedConfig with the reason
    model = apply_fp8(model)            # torchao float8 linears (Hopper/Ada GPUs)

fp32: nothing. bf16 / fp16: autocast, fp32 master weights (fp16 with a GradScaler for loss
scaling; torch's CPU kernels support it). fp8: torchao's float8 training on GPUs with
compute capability >= 8.9, its matmuls in fp8 and the rest under bf16 autocast.
"""

from __future__ import annotations

import torch

from autotune.contract import Precision, TrialConfig
from trials.errors import UnsupportedConfig

# fp8 tensor cores: Ada (sm_89) and Hopper (sm_90) onwards (NVIDIA CUDA programming guide,
# "Compute capabilities" table, checked 2026-05).
FP8_MIN_CAPABILITY = (8, 9)


def check_precision(cfg: TrialConfig, device: torch.device) -> None:
    if cfg.precision is Precision.fp8:
        _check_fp8(device)
    if cfg.precision is Precision.bf16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise UnsupportedConfig(f"{torch.cuda.get_device_name(device)} has no bf16 support")


def _check_fp8(device: torch.device) -> None:
    if device.type != "cuda":
        raise UnsupportedConfig("fp8 training needs an Ada/Hopper-class GPU (compute capability "
                                ">= 8.9); this trial runs on CPU")
    cap = torch.cuda.get_device_capability(device)
    if cap < FP8_MIN_CAPABILITY:
        raise UnsupportedConfig(f"fp8 training needs compute capability >= 8.9; "
                                f"{torch.cuda.get_device_name(device)} has {cap[0]}.{cap[1]}")
    try:
        import torchao.float8  # noqa: F401
    except ImportError:
        raise UnsupportedConfig("fp8 training uses torchao float8, which is not installed. "
                                "To fix: pip install 'autotune-llm[fp8]'") from None


def apply_fp8(model: torch.nn.Module) -> torch.nn.Module:
    """Swap eligible nn.Linear layers for torchao Float8Linear (dynamic tensorwise scaling).

    GPU path, left ready: it cannot run on CPU. torchao's fp8 GEMMs need both dimensions
    divisible by 16, so smaller or odd layers stay in bf16."""
    from torchao.float8 import convert_to_float8_training

    def eligible(module: torch.nn.Module, _fqn: str) -> bool:
        return (isinstance(module, torch.nn.Linear)
                and module.in_features % 16 == 0 and module.out_features % 16 == 0)

    convert_to_float8_training(model, module_filter_fn=eligible)
    return model


def autocast_dtype(precision: Precision) -> torch.dtype | None:
    """The autocast dtype of a precision; fp8 runs its non-fp8 ops under bf16."""
    return {Precision.bf16: torch.bfloat16, Precision.fp16: torch.float16,
            Precision.fp8: torch.bfloat16}.get(precision)
