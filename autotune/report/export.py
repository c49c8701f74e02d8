"""Export the chosen configuration as files the real tools accept without editing.

    plan = plan_export(doc, study, pick="cheapest", offer=None)     # UserError if it cannot
    write_export(plan, Path("launch/"), force=False)                # all files or none

Writes: accelerate_config.yaml (`accelerate launch --config_file`; with ZeRO it holds the
DeepSpeed config itself, so the folder can move), ds_config.json when ZeRO is used
(`autotune.contract.deepspeed_config`, the very config the trial ran; with FSDP2 the
accelerate config's `fsdp_config`, `fsdp_version: 2`: autotune.report.sharding), launch.sh (the
trial's launcher with its exact batch, accumulation, precision, checkpointing and parallel
settings; the Python that exported it by default), trial_config.json (the TrialConfig),
bill.md and bill.json (the projected bill). `--for hf-trainer` writes Trainer flags and a
DeepSpeed JSON with "auto" instead (autotune.report.hf_trainer).
"""

from __future__ import annotations

import difflib
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.contract import ACCELERATE_MIXED_PRECISION, DeviceKind, FSDPMode, Launcher, TrialConfig
from autotune.contract.rank_env import cpu_rank_env
from autotune.errors import UserError
from autotune.format import fmt_bytes, fmt_hours, fmt_usd
from autotune.record import TrialRecord
from autotune.report.compiled import dynamo_fields
from autotune.report.sharding import export_deepspeed_config, fsdp_accelerate_fields, sharding_bill_lines, sharding_label

ACCELERATE_CONFIG = "accelerate_config.yaml"
DEEPSPEED_CONFIG = "ds_config.json"
LAUNCH_SCRIPT = "launch.sh"
TRIAL_CONFIG = "trial_config.json"
BILL_MD = "bill.md"
BILL_JSON = "bill.json"



@dataclass
class ExportPlan:
    study: str
    trial: int
    pick: str
    cfg: TrialConfig
    option: dict[str, Any] | None  # the report's OptionRow; None when the trial was not priced
    trial_row: dict[str, Any]
    catalog_note: str | None
    launcher: Launcher
    target: str = "script"  # EXPORT_TARGETS: your own training script, or Hugging Face Trainer
    python: str = sys.executable  # launch.sh's default interpreter: the one that exported it


# What `export --for` writes: files for your own training script, or for Hugging Face Trainer.
EXPORT_TARGETS = ("script", "hf-trainer")


# ---------------------------------------------------------------------------------------
# Choosing
# ---------------------------------------------------------------------------------------


def plan_export(doc: dict[str, Any], trials_by_number: dict[int, Any], pick: str,
                offer: str | None = None, launcher: Launcher | None = None,
                target: str = "script") -> ExportPlan:
    """Resolve `pick` (cheapest | fastest | a trial number) and `offer` against a report."""
    options = doc["options"]
    if offer is not None:
        known = sorted({o["offer"] for o in options})
        if offer not in known:
            close = difflib.get_close_matches(offer, known, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise UserError(f"--offer '{offer}': no completed trial is priced on it.{hint}",
                            fix=f"use one of: {', '.join(known) or '(none: no priced trial yet)'}")
        options = [o for o in options if o["offer"] == offer]
    p = pick.strip().lower()
    if p in ("cheapest", "fastest"):
        feasible = [o for o in options if o["feasible"]]
        if not feasible:
            why = "no priced trial yet" if not options else "no option meets the budget/deadline"
            raise UserError(f"--pick {p}: {why}",
                            fix="run more trials, relax --max-usd / --deadline-hours, or pick a trial number")
        key = (lambda o: (o["usd"], o["hours"])) if p == "cheapest" else (lambda o: (o["hours"], o["usd"]))
        option = min(feasible, key=key)
        number = option["trial"]
    else:
        try:
            number = int(p)
        except ValueError:
            raise UserError(f"--pick '{pick}' is not cheapest, fastest or a trial number",
                            fix="e.g. --pick cheapest, --pick fastest or --pick 12") from None
        row = next((t for t in doc["trials"] if t["number"] == number), None)
        if row is None:
            raise UserError(f"--pick {number}: study '{doc['study']}' has no trial {number}",
                            fix=f"use a trial number from 0 to {len(doc['trials']) - 1} (autotune report)")
        if row["state"] != "COMPLETE":
            raise UserError(f"--pick {number}: trial {number} did not complete ({row['state']}, "
                            f"{row['status']}): there is no measured config to export",
                            fix="pick a completed trial (autotune report lists them)")
        mine = [o for o in options if o["trial"] == number]
        if offer is not None and not mine:
            raise UserError(f"--pick {number} --offer {offer}: trial {number} is not priced on that offer",
                            fix="drop --offer to take the trial's cheapest offer")
        option = min(mine, key=lambda o: (o["usd"], o["hours"]), default=None)
    row = next(t for t in doc["trials"] if t["number"] == number)
    try:
        cfg = TrialRecord.of(trials_by_number[number]).trial_config()
    except ValueError as exc:
        raise UserError(f"trial {number}: its stored config is unreadable ({type(exc).__name__})",
                        fix="re-run the trial with this version of autotune") from None
    if target == "hf-trainer":
        from autotune.report.hf_trainer import check_trainer_export

        launcher = check_trainer_export(cfg, launcher)
    return ExportPlan(study=doc["study"], trial=number, pick=p, cfg=cfg, option=option, trial_row=row,
                      catalog_note=doc.get("catalog_note"), launcher=launcher or cfg.launcher,
                      target=target)


# ---------------------------------------------------------------------------------------
# The files
# ---------------------------------------------------------------------------------------


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
        # decides ("When using `deepspeed_config_file`, the following ... will be ignored").
        out["deepspeed_config"] = {
            "deepspeed_config_file": json.dumps(export_deepspeed_config(cfg), sort_keys=True),
            "zero3_init_flag": cfg.zero_stage == 3}
    else:
        out["mixed_precision"] = ACCELERATE_MIXED_PRECISION[cfg.precision]
    if cfg.fsdp is not FSDPMode.none:
        out.update(fsdp_accelerate_fields(cfg))
    return out


def _yaml(data: dict[str, Any], header: str) -> str:
    import yaml

    lines = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    return lines + yaml.safe_dump(data, sort_keys=True)


def settings_env(cfg: TrialConfig, trainer: bool = False) -> list[tuple[str, str]]:
    """What a training script needs to apply the config, as environment variables. `trainer`:
    for Hugging Face Trainer, which takes accumulation and precision from its flags alone."""
    env = [
        ("AUTOTUNE_MICRO_BATCH_SIZE", str(cfg.micro_batch_size)),
        ("AUTOTUNE_GRAD_ACCUM_STEPS", str(cfg.grad_accum_steps)),
        ("AUTOTUNE_GLOBAL_BATCH_SAMPLES", str(cfg.global_batch_samples)),
        ("AUTOTUNE_SEQ_LEN", str(cfg.seq_len)),
        ("AUTOTUNE_PRECISION", cfg.precision.value),
        ("AUTOTUNE_CHECKPOINTING", cfg.checkpointing.value),
        ("AUTOTUNE_CHECKPOINT_EVERY", str(cfg.checkpoint_every)),
        ("AUTOTUNE_ZERO_STAGE", str(cfg.zero_stage)),
        ("AUTOTUNE_OFFLOAD", cfg.offload.value),
        ("AUTOTUNE_TP_DEGREE", str(cfg.tp_degree)),
        ("AUTOTUNE_FSDP", cfg.fsdp.value), ("AUTOTUNE_COMPILE", str(int(cfg.compile))),
        ("AUTOTUNE_NUM_GPUS", str(cfg.num_gpus * cfg.num_nodes)),
        # Accelerator() reads these: accumulation has no key in accelerate's config file, and
        # under torchrun / deepspeed no config file is read at all.
        ("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", str(cfg.grad_accum_steps)),
        ("ACCELERATE_MIXED_PRECISION", ACCELERATE_MIXED_PRECISION[cfg.precision]),
        # DeepSpeed picks its accelerator by probing; say which, as autotune's trials do.
        ("DS_ACCELERATOR", cfg.device.value),
    ]
    if cfg.device is DeviceKind.cpu:
        # One CPU "GPU" = one rank with threads_per_rank threads; accelerate under torchrun
        # runs every rank alone on CPU unless ACCELERATE_USE_CPU is set. Not with ZeRO: that
        # flag turns accelerate's DeepSpeed off (DeepSpeed starts the process group itself).
        # Huge pages too (autotune.contract.rank_env): the trial measured with them.
        env += [*cpu_rank_env(cfg.threads_per_rank).items()] + [("ACCELERATE_USE_CPU", "true")] * (cfg.zero_stage == 0)
    # Trainer builds its Accelerator from its own flags; these would contradict them.
    return [(k, v) for k, v in env if not (trainer and k.startswith("ACCELERATE_")
                                           and k != "ACCELERATE_USE_CPU")]


def launch_script(plan: ExportPlan) -> str:
    """A bash script that launches the long run the way the trial was launched.

    Values are quoted with shlex; the user's script and its arguments pass through as "$@",
    never re-parsed."""
    cfg, q = plan.cfg, shlex.quote
    per_node = cfg.num_gpus
    lines = [
        "#!/usr/bin/env bash",
        f"# Written by `autotune export`: study {plan.study!r}, trial {plan.trial} ({plan.pick}).",
        f"# {_one_line(_config_line(cfg))}",
        f"# {_one_line(_bill_line(plan))}",
        "#",
        f"#   ./{LAUNCH_SCRIPT}                     # no script: re-run the measured trial (autotune's worker)",
        f"#   ./{LAUNCH_SCRIPT} train.py --my-args  # your training script, launched the same way",
        "#",
        "# Your script applies the settings below: read AUTOTUNE_* (or the TrialConfig in",
        "# $AUTOTUNE_TRIAL_CONFIG); accelerate's Accelerator() takes accumulation and precision",
        "# itself; a DeepSpeed script passes $AUTOTUNE_DEEPSPEED_CONFIG to deepspeed.initialize.",
        "# Multi-node: set NNODES, NODE_RANK, MASTER_ADDR (and MASTER_PORT) on every node.",
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        "# The Python that exported this folder has torch, the launchers and autotune's worker;",
        "# PYTHON=... picks another one.",
        f"EXPORTED_WITH={q(plan.python)}",
        'if [ -z "${PYTHON:-}" ]; then',
        '  if [ -x "$EXPORTED_WITH" ]; then PYTHON="$EXPORTED_WITH"; else',
        '    PYTHON=python3',
        '    echo "launch.sh: $EXPORTED_WITH is not here; using python3 (set PYTHON=... to choose)" >&2',
        "  fi",
        "fi",
        "",
        f'export AUTOTUNE_TRIAL_CONFIG="$HERE/{TRIAL_CONFIG}"',
    ]
    if cfg.zero_stage > 0:
        lines.append(f'export AUTOTUNE_DEEPSPEED_CONFIG="$HERE/{DEEPSPEED_CONFIG}"')
    trainer = plan.target == "hf-trainer"
    lines += [f"export {k}={q(v)}" for k, v in settings_env(cfg, trainer)]
    lines += [
        "",
        f"NPROC_PER_NODE={per_node}",
        f'NNODES="${{NNODES:-{cfg.num_nodes}}}"',
        'NODE_RANK="${NODE_RANK:-0}"',
        'MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"',
        'MASTER_PORT="${MASTER_PORT:-29500}"',
        "",
    ]
    if trainer:
        from autotune.report.hf_trainer import TRAINER_FLAGS, launch_lines, trainer_notes

        lines += [f"# {_one_line(n)}" for n in trainer_notes(cfg)]
        lines += launch_lines(cfg, f"$HERE/{TRAINER_FLAGS}",
                              f"$HERE/{DEEPSPEED_CONFIG}" if cfg.zero_stage > 0 else None)
    lines += [
        'if [ "$#" -eq 0 ]; then',
        "  # autotune's own worker, a few steps of the measured trial: checks the setup end to end.",
        '  WORKER="$("$PYTHON" -c \'import trials.worker as w; print(w.__file__)\')"',
        '  set -- "$WORKER" --config "$AUTOTUNE_TRIAL_CONFIG" --result "${AUTOTUNE_RESULT:-$PWD/autotune_check_result.json}"',
        "fi",
        "",
    ]
    if plan.launcher is Launcher.torchrun:
        lines.append('exec "$PYTHON" -m torch.distributed.run --nnodes "$NNODES" --node-rank "$NODE_RANK" '
                     '--nproc-per-node "$NPROC_PER_NODE" --master-addr "$MASTER_ADDR" '
                     '--master-port "$MASTER_PORT" "$@"')
    elif plan.launcher is Launcher.deepspeed:
        lines += [
            "# More than one node: DeepSpeed's launcher reads a hostfile (DEEPSPEED_HOSTFILE).",
            'HOSTFILE_ARGS=()',
            'if [ -n "${DEEPSPEED_HOSTFILE:-}" ]; then HOSTFILE_ARGS=(--hostfile "$DEEPSPEED_HOSTFILE"); fi',
            'exec "$PYTHON" -m deepspeed.launcher.runner "${HOSTFILE_ARGS[@]}" --num_nodes "$NNODES" '
            '--num_gpus "$NPROC_PER_NODE" --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" "$@"',
        ]
    else:  # the DeepSpeed config, when there is one, is inside the accelerate config
        lines.append(f'exec "$PYTHON" -m accelerate.commands.launch --config_file "$HERE/{ACCELERATE_CONFIG}"'
                     ' --num_machines "$NNODES" --machine_rank "$NODE_RANK" '
                     '--main_process_ip "$MASTER_ADDR" --main_process_port "$MASTER_PORT" "$@"')
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    """Text for a shell comment: a newline (or any control character) in a name would end the
    comment and run the rest as a command."""
    return "".join(ch if ch.isprintable() else " " for ch in text)


def _config_line(cfg: TrialConfig) -> str:
    return (f"{cfg.num_gpus * cfg.num_nodes} {'CPU rank(s)' if cfg.device is DeviceKind.cpu else 'GPU(s)'}"
            f" on {cfg.num_nodes} node(s), micro-batch {cfg.micro_batch_size} x accumulation "
            f"{cfg.grad_accum_steps} x {cfg.dp_degree} data-parallel = global batch "
            f"{cfg.global_batch_samples} samples ({cfg.global_batch_tokens} tokens), "
            f"{cfg.precision.value}, checkpointing {cfg.checkpointing.value}, "
            f"{sharding_label(cfg)}, TP {cfg.tp_degree}, launcher {cfg.launcher.value}")


def _bill_line(plan: ExportPlan) -> str:
    o = plan.option
    if o is None:
        return "Not priced: no catalog offer matched this trial's hardware."
    return (f"Projected on {o['offer']}: {fmt_hours(o['hours'])}, {fmt_usd(o['usd'])} "
            f"({o['basis_kind']}; see {BILL_MD}).")


def bill_markdown(plan: ExportPlan, files: list[str]) -> str:
    cfg, o, t = plan.cfg, plan.option, plan.trial_row
    out = [f"# autotune export: study '{plan.study}', trial {plan.trial} ({plan.pick})", "",
           f"Config: {_config_line(cfg)}.", ""]
    tps = f"{t['tokens_per_s']:,.0f} tokens/s" if t.get("tokens_per_s") else "throughput not measured"
    mem = (f"peak memory {fmt_bytes(t['peak_mem_bytes'])} per rank ({t['peak_mem_source']})"
           if t.get("peak_mem_bytes") else "peak memory not measured")
    out += [f"Measured on {t.get('hardware') or 'unknown hardware'}: {tps}, {mem}.", ""]
    if o is None:
        out += ["Not priced: no catalog offer matched this trial's hardware.", ""]
    else:
        s = o.get("sensitivity") or {}
        price = o.get("price_usd_per_gpu_hour")
        out += [f"Projected bill on **{o['offer']}** ({o['platform']}"
                + (f", instance {o['instance']}" if o.get("instance") else "")
                + (f", region {', '.join(o['regions'])}" if o.get("regions") else "")
                + (f", {fmt_usd(price)} per GPU-hour as of {o.get('price_date')}" if price is not None else "")
                + f"); figures {o['basis_kind']}: {o['basis']}.", "",
                "| case | hours | dollars |", "|---|---:|---:|",
                f"| to target | {fmt_hours(o['hours'])} | {fmt_usd(o['usd'])} |"]
        if s:
            out += [f"| +30% time | {fmt_hours(s.get('plus_30pct_time_hours'))} | {fmt_usd(s.get('plus_30pct_time_usd'))} |",
                    f"| one interruption | {fmt_hours(s.get('one_interruption_hours'))} | "
                    f"{fmt_usd(s.get('one_interruption_usd'))} |"]
        if o.get("usd_worst_case") is not None:
            out.append(f"| worst case (both) | {fmt_hours(o.get('hours_worst_case'))} | {fmt_usd(o['usd_worst_case'])} |")
        out.append("")
        if o.get("breakdown"):
            out += ["Breakdown: " + ", ".join(f"{k} {fmt_usd(v)}" for k, v in o["breakdown"].items()), ""]
    if plan.catalog_note:
        out += [plan.catalog_note[0].upper() + plan.catalog_note[1:] + ".", ""]
    out += ["Files:", ""] + [f"- `{f}`" for f in files] + [""]
    if plan.target == "hf-trainer":
        from autotune.report.hf_trainer import bill_lines

        out += bill_lines(cfg, LAUNCH_SCRIPT, DEEPSPEED_CONFIG)
    else:
        out += ["Activation checkpointing, tensor parallelism and torch.compile (AUTOTUNE_COMPILE=1: compile "
                "the model) are model code: your script applies them from AUTOTUNE_CHECKPOINTING / AUTOTUNE_TP_DEGREE / AUTOTUNE_COMPILE (see launch.sh).", ""]
        out += sharding_bill_lines(cfg)
    return "\n".join(out)


def render(plan: ExportPlan) -> dict[str, str]:
    """Every file's text, by name. No file names a path: the folder can move."""
    cfg = plan.cfg
    files: dict[str, str] = {}
    if plan.target == "hf-trainer":
        from autotune.report.hf_trainer import TRAINER_FLAGS, hf_deepspeed_config, trainer_flags

        files[TRAINER_FLAGS] = "".join(f + "\n" for f in trainer_flags(cfg))
        if cfg.zero_stage > 0:
            files[DEEPSPEED_CONFIG] = json.dumps(hf_deepspeed_config(cfg), indent=2, sort_keys=True) + "\n"
    else:
        if cfg.zero_stage > 0:
            files[DEEPSPEED_CONFIG] = json.dumps(export_deepspeed_config(cfg), indent=2, sort_keys=True) + "\n"
        header = (f"accelerate config written by `autotune export` (study {plan.study!r}, trial {plan.trial}).\n"
                  f"{_config_line(cfg)}\n"
                  f"Use: accelerate launch --config_file {ACCELERATE_CONFIG} train.py (or ./{LAUNCH_SCRIPT}).\n"
                  + ("deepspeed_config_file holds the DeepSpeed config itself (the JSON of ds_config.json)."
                     if cfg.zero_stage > 0 else
                     "Accumulation has no key here: set ACCELERATE_GRADIENT_ACCUMULATION_STEPS="
                     f"{cfg.grad_accum_steps} (launch.sh does)."))
        files[ACCELERATE_CONFIG] = _yaml(accelerate_config(cfg), header)
    files[LAUNCH_SCRIPT] = launch_script(plan)
    files[TRIAL_CONFIG] = json.dumps(cfg.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    files[BILL_JSON] = json.dumps({"study": plan.study, "trial": plan.trial, "pick": plan.pick,
                                   "launcher": plan.launcher.value, "for": plan.target, "option": plan.option,
                                   "catalog_note": plan.catalog_note},
                                  indent=2, sort_keys=True, default=str) + "\n"
    files[BILL_MD] = bill_markdown(plan, sorted([*files, BILL_MD]))
    return files


def write_export(plan: ExportPlan, out: Path, force: bool = False) -> list[Path]:
    """Every file into `out`, all or nothing; a folder holding files autotune did not write
    needs `force`, and even then those files are kept (autotune.report.files)."""
    from autotune.report.files import prepare_out_dir, write_files

    out = prepare_out_dir(out, force)
    return write_files(out, render(plan), executable={LAUNCH_SCRIPT})
