"""Export the chosen configuration as files the real tools accept without editing.

    plan = plan_export(doc, trials_by_number, pick="cheapest")     # UserError if it cannot
    write_export(plan, Path("launch/"), force=False)                # all files or none

Writes: accelerate_config.yaml (`accelerate launch --config_file`; with ZeRO it holds the
DeepSpeed config itself, so the folder can move), ds_config.json when ZeRO is used
(`autotune.contract.deepspeed_config`, the very config the trial ran; with FSDP2 the
accelerate config's `fsdp_config`, `fsdp_version: 2`: autotune.report.sharding), launch.sh (the
trial's launcher with its exact batch, accumulation, precision, checkpointing and parallel
settings; the Python that exported it by default), trial_config.json (the TrialConfig),
bill.md and bill.json (the projected bill). `--for hf-trainer` writes Trainer flags and a
DeepSpeed JSON with "auto" (or, with FSDP2, Trainer's fsdp_config.json) instead
(autotune.report.hf_trainer).
"""

from __future__ import annotations

import json
from pathlib import Path

from autotune.contract import FSDPMode
from autotune.report.export_accelerate import accelerate_config, accelerate_yaml
from autotune.report.export_bill import bill_markdown, config_line
from autotune.report.export_launch import launch_script
from autotune.report.export_plan import (
    ACCELERATE_CONFIG,
    BILL_JSON,
    BILL_MD,
    DEEPSPEED_CONFIG,
    EXPORT_TARGETS,
    LAUNCH_SCRIPT,
    TRIAL_CONFIG,
    ExportPlan,
    plan_export,
)
from autotune.report.sharding import export_deepspeed_config

# What the commands import from here (the export's public face), defined in the modules above.
__all__ = ["BILL_MD", "EXPORT_TARGETS", "ExportPlan", "plan_export", "render", "write_export"]


def render(plan: ExportPlan) -> dict[str, str]:
    """Every file's text, by name. No file names a path: the folder can move."""
    cfg = plan.cfg
    files: dict[str, str] = {}
    if plan.target == "hf-trainer":
        from autotune.report.hf_trainer import (
            FSDP_CONFIG,
            TRAINER_FLAGS,
            hf_deepspeed_config,
            hf_fsdp_config,
            trainer_flags,
        )

        files[TRAINER_FLAGS] = "".join(f + "\n" for f in trainer_flags(cfg, plan.transformers_version))
        if cfg.zero_stage > 0:
            files[DEEPSPEED_CONFIG] = json.dumps(hf_deepspeed_config(cfg), indent=2, sort_keys=True) + "\n"
        if cfg.fsdp is not FSDPMode.none:
            files[FSDP_CONFIG] = json.dumps(hf_fsdp_config(cfg), indent=2, sort_keys=True) + "\n"
    else:
        if cfg.zero_stage > 0:
            files[DEEPSPEED_CONFIG] = json.dumps(export_deepspeed_config(cfg), indent=2, sort_keys=True) + "\n"
        header = (f"accelerate config written by `autotune export` (study {plan.study!r}, trial {plan.trial}).\n"
                  f"{config_line(cfg, plan.launcher)}\n"
                  f"Use: accelerate launch --config_file {ACCELERATE_CONFIG} train.py (or ./{LAUNCH_SCRIPT}).\n"
                  + ("deepspeed_config_file: ds_config.json less its optimizer (the script brings its own; bill.md)."
                     if cfg.zero_stage > 0 else
                     "Accumulation has no key here: set ACCELERATE_GRADIENT_ACCUMULATION_STEPS="
                     f"{cfg.grad_accum_steps} (launch.sh does)."))
        files[ACCELERATE_CONFIG] = accelerate_yaml(accelerate_config(cfg), header)
    files[LAUNCH_SCRIPT] = launch_script(plan)
    files[TRIAL_CONFIG] = json.dumps(cfg.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    files[BILL_JSON] = json.dumps({"study": plan.study, "trial": plan.trial, "pick": plan.pick,
                                   "launcher": plan.launcher.value, "for": plan.target, "option": plan.option,
                                   "catalog_note": plan.catalog_note},
                                  indent=2, sort_keys=True, default=str) + "\n"
    files[BILL_MD] = bill_markdown(plan, sorted([*files, BILL_MD]))
    return files


def write_export(plan: ExportPlan, out: Path, force: bool = False) -> list[Path]:
    """Every file into `out`, all or nothing; a folder holding other files (the user's, ones
    changed since autotune wrote them, a report's) needs `force`, and even then those files are
    kept: one under a name the export writes (a launch.sh of the user's) is refused, `force` or
    not, and only an earlier export's unchanged files are replaced or removed (autotune.report.files)."""
    from autotune.report.files import EXPORT, prepare_out_dir, write_files

    files = render(plan)
    out = prepare_out_dir(out, force, names=files, kind=EXPORT)  # never over a file that is not the export's
    return write_files(out, files, executable={LAUNCH_SCRIPT}, kind=EXPORT)
