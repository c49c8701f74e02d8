"""The chosen configuration for Hugging Face Trainer: command-line flags of `TrainingArguments`
and a DeepSpeed JSON with "auto" where Trainer fills the values from those flags.

    autotune export --pick cheapest --for hf-trainer --out launch/
    launch/launch.sh train.py --output_dir run/      # adds the flags (and --deepspeed) itself

Trainer rejects a DeepSpeed config whose batch, precision or optimizer values differ from its
own arguments ("set these values to 'auto'"), so those are "auto" here and the trial's values
travel as flags; the ZeRO section (stage, offload) is the trial's own.
"""

from __future__ import annotations

from typing import Any

from autotune.contract import Checkpointing, DeviceKind, Launcher, Precision, TrialConfig, deepspeed_config
from autotune.errors import UserError

TRAINER_FLAGS = "trainer_flags.txt"


def check_trainer_export(cfg: TrialConfig, launcher: Launcher | None) -> Launcher:
    """The launcher of launch.sh for a Trainer export, or a UserError when the trial's config
    has no Trainer equivalent."""
    if cfg.tp_degree > 1:
        raise UserError(f"this trial runs tensor parallel degree {cfg.tp_degree}, which Trainer's "
                        "flags cannot express",
                        fix="pick a trial with TP 1 (autotune report lists them), or export "
                            "without --for hf-trainer")
    if cfg.fsdp.value != "none":
        raise UserError(f"this trial runs FSDP2 ({cfg.fsdp.value}); Trainer's FSDP flags are not "
                        "written by this export yet",
                        fix="export without --for hf-trainer: accelerate_config.yaml carries "
                            "`fsdp_version: 2` with the trial's settings")
    if launcher is Launcher.accelerate:
        raise UserError("--for hf-trainer --launcher accelerate: Trainer builds its own "
                        "Accelerator from its flags",
                        fix="use --launcher torchrun or --launcher deepspeed")
    if launcher is not None:
        return launcher
    return Launcher.deepspeed if cfg.launcher is Launcher.deepspeed else Launcher.torchrun


def trainer_flags(cfg: TrialConfig) -> list[str]:
    """`TrainingArguments` flags for the trial's batch, accumulation, precision and
    checkpointing, one `--name=value` per item (argparse reads that form)."""
    flags = [f"--per_device_train_batch_size={cfg.micro_batch_size}",
             f"--gradient_accumulation_steps={cfg.grad_accum_steps}"]
    if cfg.precision is Precision.bf16:
        flags.append("--bf16")
    elif cfg.precision is Precision.fp16:
        flags.append("--fp16")
    if cfg.checkpointing is Checkpointing.full:
        flags.append("--gradient_checkpointing")
    if cfg.compile:
        flags.append("--torch_compile")  # Trainer compiles the model (Inductor, default mode)
    if cfg.device is DeviceKind.cpu and cfg.zero_stage == 0:
        # Else Trainer refuses bf16 without a GPU. Not with ZeRO: --use_cpu turns Trainer's
        # DeepSpeed off (transformers' TrainingArguments._setup_devices).
        flags.append("--use_cpu")
    return flags


def trainer_notes(cfg: TrialConfig) -> list[str]:
    """What the flags do not carry, said in launch.sh and bill.md."""
    notes = []
    if cfg.checkpointing is Checkpointing.selective:
        notes.append(f"selective checkpointing (every {cfg.checkpoint_every} block(s)) has no Trainer "
                     "flag: the flags leave checkpointing off; your model applies it")
    if cfg.precision is Precision.fp8:
        notes.append("fp8 has no Trainer flag: set it in accelerate's config (mixed_precision: fp8)")
    if cfg.device is DeviceKind.cpu and cfg.zero_stage > 0:
        notes.append("on CPU, Trainer runs DeepSpeed in fp32 on one rank only (accelerate starts no "
                     "process group for DeepSpeed without a GPU, and Trainer refuses bf16 there); "
                     "on GPUs it runs on every rank")
    return notes


def hf_deepspeed_config(cfg: TrialConfig) -> dict[str, Any]:
    """The trial's DeepSpeed config with "auto" where Trainer fills values from its flags.

    No `train_batch_size`: DeepSpeed derives it from micro-batch x accumulation x its own world
    size (Trainer's "auto" for it counts one rank on CPU and trips DeepSpeed's check there)."""
    ds = deepspeed_config(cfg)
    ds.pop("train_batch_size", None)
    ds["train_micro_batch_size_per_gpu"] = "auto"
    ds["gradient_accumulation_steps"] = "auto"
    ds["bf16"] = {"enabled": "auto"}
    ds["fp16"] = {**ds["fp16"], "enabled": "auto"}
    opt = ds.get("optimizer") or {}
    if opt.get("type") == "AdamW":
        params = opt["params"]
        for key in ("lr", "betas", "eps", "weight_decay"):
            params[key] = "auto"
    else:  # Trainer builds its own optimizer (AdamW) from its flags when the JSON names none
        ds.pop("optimizer", None)
        ds.pop("zero_allow_untested_optimizer", None)
        ds.pop("zero_force_ds_cpu_optimizer", None)
    return ds


def launch_lines(cfg: TrialConfig, here_flags: str, here_ds: str | None) -> list[str]:
    """launch.sh lines that put the flags (and --deepspeed) right after the user's script, so
    the user's own arguments, after them, win."""
    ds = f' --deepspeed "{here_ds}"' if here_ds else ""
    return [
        'if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then  # a training script: add the Trainer flags',
        '  SCRIPT="$1"; shift',
        f'  mapfile -t TRAINER_FLAGS < "{here_flags}"',
        f'  set -- "$SCRIPT" "${{TRAINER_FLAGS[@]}}"{ds} "$@"',
        "fi",
    ]


def bill_lines(cfg: TrialConfig, launch_script: str, ds_file: str) -> list[str]:
    """bill.md's paragraph on how Trainer takes the files."""
    ds = (f" and `--deepspeed {ds_file}` (\"auto\" where Trainer fills values from those flags)"
          if cfg.zero_stage > 0 else "")
    out = [f"Hugging Face Trainer: `./{launch_script} train.py --output_dir ...` passes the flags of "
           f"`{TRAINER_FLAGS}`{ds} to a script that parses `TrainingArguments`; arguments after the "
           "script win.", ""]
    notes = trainer_notes(cfg)
    return out + [f"- {n[0].upper()}{n[1:]}." for n in notes] + ([""] if notes else [])
