"""How an export carries torch.compile: accelerate's dynamo settings for a compiled config.

    accelerate_config(cfg) | dynamo_fields(cfg)   # {"dynamo_config": {"dynamo_backend": "INDUCTOR", ...}}

The HF Trainer's flag is `--torch_compile` (autotune.report.hf_trainer); a user's own script
reads AUTOTUNE_COMPILE=1 from launch.sh's environment (autotune.report.export_launch.settings_env).
"""

from __future__ import annotations

from typing import Any

from autotune.contract import FSDPMode, TrialConfig


def dynamo_fields(cfg: TrialConfig) -> dict[str, Any]:
    """accelerate's `dynamo_config` (what `accelerate config` writes) for a compiled config:
    Inductor in its default mode, as the trial compiled; under FSDP2 per repeated block
    (accelerate's regional compilation), as the trial's blocks were. {} for eager."""
    if not cfg.compile:
        return {}
    dynamo: dict[str, Any] = {"dynamo_backend": "INDUCTOR", "dynamo_mode": "default"}
    if cfg.fsdp is not FSDPMode.none:
        dynamo["dynamo_use_regional_compilation"] = True
    return {"dynamo_config": dynamo}
