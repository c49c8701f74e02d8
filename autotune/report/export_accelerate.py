"""The accelerate config file `autotune export` writes: accelerate's ClusterConfig fields for a
config (with ZeRO, the DeepSpeed config inside it; with FSDP2, accelerate's FSDP settings).

    text = accelerate_yaml(accelerate_config(cfg), header="written by autotune export")
"""

from __future__ import annotations

import json
from typing import Any

from autotune.contract import ACCELERATE_MIXED_PRECISION, DeviceKind, FSDPMode, TrialConfig
from autotune.report.compiled import dynamo_fields
from autotune.report.optimizer import accelerate_deepspeed_config
from autotune.report.sharding import fsdp_accelerate_fields


def accelerate_config(cfg: TrialConfig) -> dict[str, Any]:
    """The fields of accelerate's ClusterConfig (what `accelerate config` writes) for a config.

    On CPU several ranks go through torchrun (MULTI_GPU + use_cpu), as autotune's trials do;
    accelerate's MULTI_CPU type would want mpirun."""
    ranks = cfg.num_gpus * cfg.num_nodes
    cpu = cfg.device is DeviceKind.cpu
    if cfg.zero_stage > 0:
        dist = "DEEPSPEED"
    elif ranks > 1:
        dist = "MULTI_GPU"
    else:
        dist = "NO"
    out: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": dist,
        "downcast_bf16": "no",
        "enable_cpu_affinity": False,
        "gpu_ids": "all",
        "machine_rank": 0,
        "main_training_function": "main",
        "num_machines": cfg.num_nodes,
        "num_processes": ranks,
        "rdzv_backend": "static",
        "same_network": True,
        "tpu_env": [],
        "tpu_use_cluster": False,
        "tpu_use_sudo": False,
        "use_cpu": cpu, **dynamo_fields(cfg),  # torch.compile: Inductor, as the trial compiled
    }
    if cfg.zero_stage > 0:
        # The full DeepSpeed config, not loose fields: accelerate's plugin miscounts ranks on
        # CPU when it builds one from loose fields, and the full config keeps the batch exactly
        # the trial's. Its JSON text rather than a path: accelerate (>= 1.4) reads either, and a
        # path would break when the folder moves (it is read from the launch's working folder).
        # No `mixed_precision` beside it: accelerate refuses any key the DeepSpeed config
        # decides. No optimizer in it: the script's own runs (autotune.report.optimizer).
        out["deepspeed_config"] = {
            "deepspeed_config_file": json.dumps(accelerate_deepspeed_config(cfg), sort_keys=True),
            "zero3_init_flag": cfg.zero_stage == 3}
    else:
        out["mixed_precision"] = ACCELERATE_MIXED_PRECISION[cfg.precision]
    if cfg.fsdp is not FSDPMode.none:
        out.update(fsdp_accelerate_fields(cfg))
    return out


def accelerate_yaml(data: dict[str, Any], header: str) -> str:
    import yaml

    lines = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    return lines + yaml.safe_dump(data, sort_keys=True)
