"""The chosen configuration for Hugging Face Trainer: command-line flags of `TrainingArguments`
and a DeepSpeed JSON with "auto" where Trainer fills the values from those flags.

    autotune export --pick cheapest --for hf-trainer --out launch/
    launch/launch.sh train.py --output_dir run/      # adds the flags (and --deepspeed) itself

Trainer rejects a DeepSpeed config whose batch, precision or optimizer values differ from its
own arguments ("set these values to 'auto'"), so those are "auto" here and the trial's values
travel as flags; the ZeRO section (stage, offload) is the trial's own. An FSDP2 trial gets
`--fsdp` and fsdp_config.json (`hf_fsdp_config`: version 2, the trial's resharding and offload),
which launch.sh passes as `--fsdp_config`.

The checkpointing flags depend on the transformers version that will read them, taken from the
machine that exports (`autotune.contract.hardware.installed_version`):

    trainer_flags(cfg, "5.25.0")   # [..., "--activation_checkpointing",
                                   #  '--activation_checkpointing_kwargs={"every_n_layers":2}']
"""

from __future__ import annotations

import json
import re
from typing import Any

from autotune.contract import Checkpointing, DeviceKind, FSDPMode, Launcher, Precision, TrialConfig, deepspeed_config
from autotune.errors import UserError
from autotune.report.sharding import fsdp_accelerate_fields

TRAINER_FLAGS = "trainer_flags.txt"
FSDP_CONFIG = "fsdp_config.json"


def check_trainer_export(cfg: TrialConfig, launcher: Launcher | None,
                         transformers_version: str | None = None) -> Launcher:
    """The launcher of launch.sh for a Trainer export, or a UserError when the trial's config
    has no Trainer equivalent (in the transformers version installed here, where known)."""
    if cfg.tp_degree > 1:
        raise UserError(f"this trial runs tensor parallel degree {cfg.tp_degree}, which Trainer's "
                        "flags cannot express",
                        fix="pick a trial with TP 1 (autotune report lists them), or export "
                            "without --for hf-trainer")
    if cfg.fsdp is not FSDPMode.none and (0, 0) < _major_minor(transformers_version) < FSDP2_SINCE:
        raise UserError(f"this trial runs FSDP2 ({cfg.fsdp.value}), which Trainer takes from "
                        f"transformers {'.'.join(map(str, FSDP2_SINCE))} on, and transformers "
                        f"{transformers_version} is installed here",
                        fix="export where a newer transformers is installed (the flags are written "
                            "for that version), or without --for hf-trainer: accelerate_config.yaml "
                            "carries `fsdp_version: 2` with the trial's settings")
    if launcher is Launcher.accelerate:
        raise UserError("--for hf-trainer --launcher accelerate: Trainer builds its own "
                        "Accelerator from its flags",
                        fix="use --launcher torchrun or --launcher deepspeed")
    if launcher is not None:
        return launcher
    return Launcher.deepspeed if cfg.launcher is Launcher.deepspeed else Launcher.torchrun


# Trainer's checkpointing arguments by transformers version, read from each release's
# training_args.py and trainer.py (PyPI wheels, checked 2026-12-06):
# - from 5.16.0 Trainer takes `every_n_layers` out of the checkpointing kwargs and checkpoints the
#   decoder layers whose index % n == 0: the layers a selective trial checkpoints
#   (trials/workloads/hf.py `apply_checkpointing`). Before it, every key went on to
#   torch.utils.checkpoint, so only full checkpointing has a flag there.
# - from 5.23.0 the arguments are named activation_checkpointing(_kwargs); the gradient_* names
#   still work but warn that v6 removes them.
EVERY_N_LAYERS_SINCE = (5, 16)
ACTIVATION_NAMES_SINCE = (5, 23)
# - from 5.0.0 Trainer reads `fsdp_config`'s version and hands `fsdp_version: 2` with a boolean
#   `reshard_after_forward` to accelerate's FSDP plugin; 4.x set FSDP1's environment only.
FSDP2_SINCE = (5, 0)


def _major_minor(version: str | None) -> tuple[int, int]:
    """(5, 23) for "5.23.0" or "5.23.0.dev0"; (0, 0) when unknown (not installed)."""
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def checkpointing_flags(cfg: TrialConfig, transformers_version: str | None) -> list[str]:
    """The trial's activation checkpointing as Trainer flags for this transformers version:
    none where it has no flag (selective before 5.16; `trainer_notes` says so)."""
    version = _major_minor(transformers_version)
    name = "activation_checkpointing" if version >= ACTIVATION_NAMES_SINCE else "gradient_checkpointing"
    if cfg.checkpointing is Checkpointing.full:
        return [f"--{name}"]
    if cfg.checkpointing is Checkpointing.selective and version >= EVERY_N_LAYERS_SINCE:
        # Compact JSON: one word, so a flag file split on whitespace keeps it whole.
        kwargs = json.dumps({"every_n_layers": cfg.checkpoint_every}, separators=(",", ":"))
        return [f"--{name}", f"--{name}_kwargs={kwargs}"]
    return []


def hf_fsdp_config(cfg: TrialConfig) -> dict[str, Any]:
    """Trainer's `--fsdp_config` JSON for an FSDP2 trial: accelerate's own FSDP2 settings
    (autotune.report.sharding, the keys Trainer reads with their `fsdp_` prefix), checkpointing
    every block by FSDP's own wrapper where the trial checkpointed every block (Trainer's
    advice: its checkpointing flag under FSDP all-gathers again in backward)."""
    fsdp = dict(fsdp_accelerate_fields(cfg)["fsdp_config"])
    fsdp["fsdp_activation_checkpointing"] = cfg.checkpointing is Checkpointing.full
    # Trainer trains a transformers model: its own `_no_split_modules` names the decoder layer
    # each unit wraps (the built-in GPT's `Block` is no class of it, and accelerate would refuse).
    fsdp.pop("fsdp_transformer_layer_cls_to_wrap", None)
    return fsdp


def fsdp_flag(cfg: TrialConfig) -> list[str]:
    """`--fsdp` in the form every release from FSDP2_SINCE reads: the sharding, each block its
    own unit, and `offload` with the parameters offloaded; the version and the resharding
    come from `--fsdp_config` (hf_fsdp_config), which launch.sh adds."""
    if cfg.fsdp is FSDPMode.none:
        return []
    words = [cfg.fsdp.value, "auto_wrap"] + (["offload"] if cfg.offload.value == "optimizer+params" else [])
    return [f"--fsdp={' '.join(words)}"]


def trainer_flags(cfg: TrialConfig, transformers_version: str | None) -> list[str]:
    """`TrainingArguments` flags for the trial's batch, accumulation, precision and
    checkpointing, one `--name=value` per item (argparse reads that form), for the given
    transformers version (None: not known, the flags every version reads)."""
    flags = [f"--per_device_train_batch_size={cfg.micro_batch_size}",
             f"--gradient_accumulation_steps={cfg.grad_accum_steps}"]
    if cfg.precision is Precision.bf16:
        flags.append("--bf16")
    elif cfg.precision is Precision.fp16:
        flags.append("--fp16")
    if not (cfg.fsdp is not FSDPMode.none and cfg.checkpointing is Checkpointing.full):
        flags += checkpointing_flags(cfg, transformers_version)  # else FSDP's own (hf_fsdp_config)
    flags += fsdp_flag(cfg)
    if cfg.compile:
        flags.append("--torch_compile")  # Trainer compiles the model (Inductor, default mode)
    if cfg.device is DeviceKind.cpu and cfg.zero_stage == 0:
        # Else Trainer refuses bf16 without a GPU. Not with ZeRO: --use_cpu turns Trainer's
        # DeepSpeed off (transformers' TrainingArguments._setup_devices).
        flags.append("--use_cpu")
    return flags


def trainer_notes(cfg: TrialConfig, transformers_version: str | None) -> list[str]:
    """What the flags do not carry, said in launch.sh and bill.md."""
    notes = []
    if cfg.checkpointing is Checkpointing.selective and not checkpointing_flags(cfg, transformers_version):
        have = (f"transformers {transformers_version} is installed here" if transformers_version
                else "transformers is not installed here")
        since = ".".join(map(str, EVERY_N_LAYERS_SINCE))
        notes.append(f"selective checkpointing (every {cfg.checkpoint_every} block(s)) has a Trainer flag "
                     f"from transformers {since} on, and {have}: the flags leave checkpointing off; "
                     f"your model applies it, or export again where transformers >= {since} is installed")
    if cfg.precision is Precision.fp8:
        notes.append("fp8 has no Trainer flag: set it in accelerate's config (mixed_precision: fp8)")
    if cfg.fsdp is not FSDPMode.none and transformers_version is None:
        notes.append(f"FSDP2 is written as transformers {'.'.join(map(str, FSDP2_SINCE))} and later "
                     "read it (`--fsdp` with `--fsdp_config` naming version 2); before, Trainer runs FSDP1")
    if cfg.fsdp is not FSDPMode.none and cfg.device is DeviceKind.cpu:
        notes.append("on CPU, Trainer's accelerate runs FSDP2 as plain data parallel (its FSDP needs a "
                     "GPU-type backend); on GPUs it shards as the trial did")
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


def launch_lines(cfg: TrialConfig, here_flags: str, here_ds: str | None,
                 here_fsdp: str | None = None) -> list[str]:
    """launch.sh lines that put the flags (and --deepspeed or --fsdp_config, by the export's
    folder) right after the user's script, so the user's own arguments, after them, win."""
    ds = f' --deepspeed "{here_ds}"' if here_ds else ""
    ds += f' --fsdp_config "{here_fsdp}"' if here_fsdp else ""
    return [
        'if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then  # a training script: add the Trainer flags',
        '  SCRIPT="$1"; shift',
        f'  mapfile -t TRAINER_FLAGS < "{here_flags}"',
        f'  set -- "$SCRIPT" "${{TRAINER_FLAGS[@]}}"{ds} "$@"',
        "fi",
    ]


def bill_lines(cfg: TrialConfig, launch_script: str, ds_file: str,
               transformers_version: str | None) -> list[str]:
    """bill.md's paragraph on how Trainer takes the files."""
    ds = (f" and `--deepspeed {ds_file}` (\"auto\" where Trainer fills values from those flags)"
          if cfg.zero_stage > 0 else
          f" and `--fsdp_config {FSDP_CONFIG}` (FSDP2 as the trial sharded)" if cfg.fsdp is not FSDPMode.none else "")
    written_for = (f"transformers {transformers_version}, installed where `autotune export` ran"
                   if transformers_version else "any transformers: none was installed where `autotune export` ran")
    out = [f"Hugging Face Trainer: `./{launch_script} train.py --output_dir ...` passes the flags of "
           f"`{TRAINER_FLAGS}`{ds} to a script that parses `TrainingArguments`; arguments after the "
           f"script win. The flags are written for {written_for}.", ""]
    notes = trainer_notes(cfg, transformers_version)
    return out + [f"- {n[0].upper()}{n[1:]}." for n in notes] + ([""] if notes else [])
