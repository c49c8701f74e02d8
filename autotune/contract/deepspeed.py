"""The DeepSpeed JSON config of a trial: what the trial's DeepSpeed engine runs and what
`autotune export` writes for the long run, so both run the same thing.

    json.dump(deepspeed_config(cfg), open("ds_config.json", "w"))
"""

from __future__ import annotations

from typing import Any

from autotune.contract.config import DeviceKind, Offload, Precision, TrialConfig


def deepspeed_config(cfg: TrialConfig) -> dict[str, Any]:
    """The full DeepSpeed JSON config of a TrialConfig: what the trial's DeepSpeed engine runs
    and what `export` writes for the long run (so both run the same thing).

        json.dump(deepspeed_config(cfg), open("ds_config.json", "w"))

    Keys follow https://www.deepspeed.ai/docs/config-json/ (checked against DeepSpeed 0.19).
    The optimizer is AdamW (or SGD) with the trial's lr; without offload it is torch's own
    (`torch_adam`: no JIT-built kernel), with optimizer offload DeepSpeedCPUAdam, the
    optimizer ZeRO-Offload is built for (DeepSpeed picks it when the config names AdamW).
    """
    pin = cfg.device is DeviceKind.cuda  # pinned host memory speeds GPU<->CPU copies only
    zero: dict[str, Any] = {"stage": cfg.zero_stage}
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
