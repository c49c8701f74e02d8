"""The optimizer in an accelerate export with ZeRO: the training script's own, as accelerate runs it.

    accelerate_deepspeed_config(cfg)   # the trial's DeepSpeed config, less its optimizer
    optimizer_notes(cfg)               # what the script does about its optimizer (bill.md)

accelerate refuses a script that hands `prepare` its own optimizer (`torch.optim.AdamW`) when
the DeepSpeed config names one, and a `DummyOptim` when it names none. Its DeepSpeed guide
calls the first case "Custom Optim + Custom Scheduler": both keys absent from the config, no
code change. So the config inside accelerate_config.yaml leaves the optimizer out and an
ordinary script runs unchanged; ds_config.json keeps the trial's optimizer for scripts that
call `deepspeed.initialize` without one.
"""

from __future__ import annotations

from typing import Any

from autotune.contract import Offload, TrialConfig
from autotune.report.sharding import export_deepspeed_config

# accelerate's documented way to take DeepSpeed's optimizer from the config instead
# (https://huggingface.co/docs/accelerate/usage_guides/deepspeed, "DS Optim + DS Scheduler").
DUMMY_OPTIM_PATTERN = ('optimizer_cls = torch.optim.AdamW if "optimizer" not in '
                       'accelerator.state.deepspeed_plugin.deepspeed_config else DummyOptim')


def accelerate_deepspeed_config(cfg: TrialConfig) -> dict[str, Any]:
    """The DeepSpeed config accelerate reads: the trial's, with no optimizer (and so no
    scheduler either: the trial names none)."""
    config = export_deepspeed_config(cfg)
    config.pop("optimizer", None)
    return config


def _trial_optimizer(cfg: TrialConfig) -> str:
    params = export_deepspeed_config(cfg).get("optimizer", {})
    p = params.get("params", {})
    shown = ", ".join(f"{k} {p[k]}" for k in ("lr", "weight_decay", "momentum") if k in p)
    return f"{params.get('type', cfg.optimizer)}: {shown}"


def optimizer_notes(cfg: TrialConfig) -> list[str]:
    """bill.md's lines on the optimizer of an accelerate launch with ZeRO."""
    if cfg.zero_stage == 0:
        return []
    lines = ["Optimizer under `accelerate launch`: your script creates its own, e.g. "
             "`torch.optim.AdamW(model.parameters(), lr=...)`, and passes it to `accelerator.prepare`; "
             "the DeepSpeed config inside accelerate_config.yaml names no optimizer, as accelerate "
             f"requires for a script's own one. The trial stepped {_trial_optimizer(cfg)}.", ""]
    if cfg.offload is not Offload.none and cfg.optimizer != "sgd":
        lines.append("Optimizer offload: accelerate replaces a `torch.optim.AdamW` (or Adam) with "
                     "DeepSpeed's `DeepSpeedCPUAdam` at the same lr and weight decay, the host-side "
                     "Adam the trial stepped (Adagrad becomes DeepSpeedCPUAdagrad, any other "
                     "optimizer DeepSpeedCPUAdam too). To let "
                     "DeepSpeed build the trial's optimizer instead, copy ds_config.json's "
                     "\"optimizer\" entry into the `deepspeed_config_file` JSON of "
                     "accelerate_config.yaml and use accelerate's pattern: "
                     f"`{DUMMY_OPTIM_PATTERN}` (from accelerate.utils import DummyOptim); a script "
                     "that also passes an LR scheduler to `prepare` then passes accelerate's "
                     "`DummyScheduler(optimizer, lr_scheduler_callable=...)` instead.")
    elif cfg.offload is not Offload.none:
        lines.append("Optimizer offload with SGD: the config sets zero_force_ds_cpu_optimizer false, "
                     "so accelerate keeps your optimizer as it is (DeepSpeed's CPU Adam is Adam only).")
    return lines + [""] if len(lines) > 2 else lines
