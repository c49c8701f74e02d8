"""How an export carries the trial's sharding: accelerate's FSDP2 settings, the DeepSpeed JSON
with ZeRO's buffers sized to the model as the trial ran them, and their labels.

    fsdp_accelerate_fields(cfg)   # {"distributed_type": "FSDP", "fsdp_config": {"fsdp_version": 2, ...}}
    export_deepspeed_config(cfg)  # autotune.contract.deepspeed_config with the model's hidden size
    sharding_label(cfg)           # "ZeRO 3 +optimizer" or "FSDP2 full_shard"
"""

from __future__ import annotations

from typing import Any

from autotune.contract import FSDPMode, GPTWorkload, TrialConfig, deepspeed_config
from autotune.report.labels import zero_summary


def fsdp_accelerate_fields(cfg: TrialConfig) -> dict[str, Any]:
    """accelerate's FSDP2 settings for the trial's knobs (the keys `accelerate config` writes
    for `fsdp_version: 2`, accelerate 1.15): each transformer block its own unit, as the
    trial's engine wraps them, resharded after forward for full_shard, parameters and
    gradients offloaded with CPU offload, and weights loaded on one rank and broadcast
    (`cpu_ram_efficient_loading`, which accelerate's launcher requires with
    `sync_module_states`): no rank loads the whole model."""
    fsdp: dict[str, Any] = {
        "fsdp_version": 2,
        "fsdp_reshard_after_forward": cfg.fsdp is FSDPMode.full_shard,
        "fsdp_offload_params": cfg.offload.value == "optimizer+params",
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_sync_module_states": True,
        "fsdp_activation_checkpointing": False,  # model code: AUTOTUNE_CHECKPOINTING
    }
    if isinstance(cfg.workload, GPTWorkload):
        # The built-in GPT's block class; a transformers model's own `_no_split_modules`
        # names its decoder layer when this key is absent.
        fsdp["fsdp_transformer_layer_cls_to_wrap"] = "Block"
    return {"distributed_type": "FSDP", "fsdp_config": fsdp}


def export_deepspeed_config(cfg: TrialConfig) -> dict[str, Any]:
    """The DeepSpeed JSON the trial ran: its buffers sized to the model's hidden size, which
    the worker reads from the same workload description (a user entry point has none:
    DeepSpeed's defaults, in the trial too)."""
    from autotune.estimate.workload import model_shape_for

    shape = model_shape_for(cfg.workload)
    return deepspeed_config(cfg, hidden_size=shape.d_model if shape is not None else None)


def sharding_label(cfg: TrialConfig) -> str:
    text = zero_summary(cfg.model_dump(mode="json"))
    return text if cfg.fsdp is not FSDPMode.none else f"ZeRO {text}"


def sharding_bill_lines(cfg: TrialConfig) -> list[str]:
    if cfg.fsdp is FSDPMode.none:
        return []
    return ["FSDP2: accelerate's Accelerator applies it from accelerate_config.yaml "
            "(`fsdp_version: 2`) on GPUs; under torchrun your script calls `fully_shard` on each "
            "block and the model as AUTOTUNE_FSDP says (full_shard: reshard after forward). On CPU "
            "accelerate runs plain data parallel instead (its FSDP needs a GPU-type backend).", ""]
