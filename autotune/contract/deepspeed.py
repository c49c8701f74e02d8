"""The DeepSpeed JSON config of a trial: what the trial's DeepSpeed engine runs and what
`autotune export` writes for the long run, so both run the same thing.

    json.dump(deepspeed_config(cfg, hidden_size=4096), open("ds_config.json", "w"))

ZeRO's buffers are sized to the model's hidden size (`deepspeed_buffer_sizes`).
"""

from __future__ import annotations

from typing import Any

from autotune.contract.config import DeviceKind, Offload, Precision, TrialConfig


def deepspeed_buffer_sizes(hidden_size: int, zero_stage: int) -> dict[str, int]:
    """ZeRO's communication and gather buffers sized to the model, in elements.

    As the Hugging Face integration fills its "auto" values (transformers
    `integrations/deepspeed.py`, `HfTrainerDeepSpeedConfig.trainer_config_finalize`,
    transformers 5.24, read 2026-11-30): reduce bucket hidden², ZeRO-3 prefetch bucket
    0.9·hidden², ZeRO-3 parameter persistence threshold 10·hidden. DeepSpeed's own defaults
    (5e8, 5e7, 1e5; deepspeed/runtime/zero/config.py, v0.19) are sized for 10B+ models: a
    5e8-element reduce bucket alone is 2 GB in fp32 on every rank.

    And ZeRO-3's reuse distance and live-parameter limit at one transformer layer's
    parameters (12·hidden²; Llama's 4h² attention + 3·h·8h/3 MLP is the same): DeepSpeed's
    defaults (1e9 elements each) keep every gathered parameter of a model under 1e9 parameters
    until its reuse in backward, so such a model sits gathered whole on every rank and ZeRO-3
    saves no weight memory (docs/benchmarks.md, trials at scale, compares the two). With it,
    ZeRO-3 is the ZeRO paper's stage 3: each rank holds its partition and about one layer gathered, and
    parameters are gathered again for backward (1.5x data parallel's communication).
    DeepSpeed config docs, "ZeRO optimizations": smaller values of both use less memory and
    communicate more."""
    sizes = {"reduce_bucket_size": hidden_size * hidden_size}
    if zero_stage == 3:
        layer = 12 * hidden_size * hidden_size
        sizes.update(stage3_prefetch_bucket_size=int(0.9 * hidden_size * hidden_size),
                     stage3_param_persistence_threshold=10 * hidden_size,
                     stage3_max_live_parameters=layer, stage3_max_reuse_distance=layer)
    return sizes


def deepspeed_config(cfg: TrialConfig, hidden_size: int | None = None) -> dict[str, Any]:
    """The full DeepSpeed JSON config of a TrialConfig: what the trial's DeepSpeed engine runs
    and what `export` writes for the long run (so both run the same thing).

        json.dump(deepspeed_config(cfg, hidden_size=4096), open("ds_config.json", "w"))

    `hidden_size`: the model's hidden size; ZeRO's buffers are then sized to the model
    (`deepspeed_buffer_sizes`), else DeepSpeed's defaults apply (a user entry point that
    does not state its `d_model`).

    Keys follow https://www.deepspeed.ai/docs/config-json/ (checked against DeepSpeed 0.19).
    The optimizer is AdamW (or SGD) with the trial's lr; without offload it is torch's own
    (`torch_adam`: no JIT-built kernel), with optimizer offload DeepSpeedCPUAdam, the
    optimizer ZeRO-Offload is built for (DeepSpeed picks it when the config names AdamW).
    """
    pin = cfg.device is DeviceKind.cuda  # pinned host memory speeds GPU<->CPU copies only
    zero: dict[str, Any] = {"stage": cfg.zero_stage}
    if hidden_size and cfg.zero_stage > 0:
        zero.update(deepspeed_buffer_sizes(hidden_size, cfg.zero_stage))
    if cfg.offload in (Offload.optimizer, Offload.optimizer_params):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": pin}
    if cfg.offload is Offload.optimizer_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": pin}
    offloaded = cfg.offload is not Offload.none
    if cfg.optimizer == "sgd":
        optimizer = {"type": "SGD", "params": {"lr": cfg.lr, "momentum": 0.9}}
    else:
        params: dict[str, Any] = {"lr": cfg.lr, "betas": [0.9, 0.999], "eps": 1e-8,
                                  "weight_decay": 0.1}
        if not offloaded:
            params["torch_adam"] = True
        optimizer = {"type": "AdamW", "params": params}
    config: dict[str, Any] = {
        # DeepSpeed checks train_batch_size == micro x accumulation x data-parallel ranks.
        "train_batch_size": cfg.global_batch_samples,
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": cfg.grad_accum_steps,
        "bf16": {"enabled": cfg.precision is Precision.bf16},
        # loss_scale 0 = dynamic loss scaling, DeepSpeed's default for fp16.
        "fp16": {"enabled": cfg.precision is Precision.fp16, "loss_scale": 0,
                 "initial_scale_power": 16, "loss_scale_window": 1000, "hysteresis": 2,
                 "min_loss_scale": 1},
        "zero_optimization": zero,
        "optimizer": optimizer,
    }
    if cfg.optimizer == "sgd" and cfg.zero_stage > 0:
        # torch's SGD is not on DeepSpeed's list of ZeRO-tested optimizers, and DeepSpeed
        # refuses an offloaded optimizer other than its CPU Adam, unless told to.
        config["zero_allow_untested_optimizer"] = True
        if offloaded:
            config["zero_force_ds_cpu_optimizer"] = False
    return config
