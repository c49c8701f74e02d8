"""launch.sh, as `autotune export` writes it: the trial's launcher with its exact settings, and
the environment a training script reads them from.

    script = launch_script(plan)
    env = settings_env(cfg)          # [("AUTOTUNE_MICRO_BATCH_SIZE", "4"), ...]
"""

from __future__ import annotations

import shlex
import textwrap

from autotune.contract import ACCELERATE_MIXED_PRECISION, DeviceKind, FSDPMode, Launcher, TrialConfig
from autotune.contract.rank_env import CPU_HUGE_PAGES, cpu_rank_env
from autotune.report.export_bill import bill_line, config_line
from autotune.report.export_plan import ACCELERATE_CONFIG, DEEPSPEED_CONFIG, LAUNCH_SCRIPT, TRIAL_CONFIG, ExportPlan
from autotune.run.shm import SHM_DIR, deepspeed_shm_pattern

# Where `launch.sh --check` has autotune's worker write its result (AUTOTUNE_RESULT chooses).
CHECK_RESULT = "autotune_check_result.json"
# The launcher's module, as the script runs it.
_LAUNCHER_MODULE = {Launcher.torchrun: "python -m torch.distributed.run",
                    Launcher.deepspeed: "python -m deepspeed.launcher.runner",
                    Launcher.accelerate: "python -m accelerate.commands.launch"}
# In a usage line: the path the script was called by ("$0").
_ME = object()
# Settings the usage shows when they differ from these values (batch and precision always).
_KEY_SETTINGS = [("AUTOTUNE_ZERO_STAGE", "0"), ("AUTOTUNE_OFFLOAD", "none"), ("AUTOTUNE_FSDP", "none"),
                 ("AUTOTUNE_TP_DEGREE", "1"), ("AUTOTUNE_CHECKPOINTING", "none"), ("AUTOTUNE_COMPILE", "0")]


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
        f"# Written by `autotune export`: study {plan.study!r}, {plan.label}.",
        f"# {_one_line(config_line(cfg, plan.launcher))}",
        f"# {_one_line(bill_line(plan))}",
        "#",
        f"#   ./{LAUNCH_SCRIPT} train.py --my-args  # your training script, launched the same way",
        f"#   ./{LAUNCH_SCRIPT} --check             # autotune's worker re-runs the measured trial",
        f"#   ./{LAUNCH_SCRIPT}                     # (or -h, --help) what it launches; exits 2",
        "#",
        "# Your script applies the settings below: read AUTOTUNE_* (or the TrialConfig in",
        "# $AUTOTUNE_TRIAL_CONFIG); accelerate's Accelerator() takes accumulation and precision",
        "# itself; a DeepSpeed script passes $AUTOTUNE_DEEPSPEED_CONFIG to deepspeed.initialize.",
        "# Multi-node: set NNODES, NODE_RANK, MASTER_ADDR (and MASTER_PORT) on every node.",
        "set -euo pipefail",
        *_usage_lines(plan),
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
    # The huge-page switch as the sweep reads it: set in the environment (THP_MEM_ALLOC_ENABLE=0
    # ./launch.sh), it is kept; else as the trial ran (off where `THP_MEM_ALLOC_ENABLE=0 autotune
    # sweep` measured it: its record's cpu_huge_pages). Every other setting is the trial's,
    # whatever the environment holds.
    thp_off = plan.trial_row.get("cpu_huge_pages") is False
    lines += [f'export {k}="${{{k}:-{"0" if thp_off else v}}}"' if k in CPU_HUGE_PAGES else f"export {k}={q(v)}"
              for k, v in settings_env(cfg, trainer)]
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
        from autotune.report.hf_trainer import FSDP_CONFIG, TRAINER_FLAGS, launch_lines, trainer_notes

        lines += [f"# {_one_line(n)}" for n in trainer_notes(cfg, plan.transformers_version)]
        lines += launch_lines(cfg, f"$HERE/{TRAINER_FLAGS}",
                              f"$HERE/{DEEPSPEED_CONFIG}" if cfg.zero_stage > 0 else None,
                              f"$HERE/{FSDP_CONFIG}" if cfg.fsdp is not FSDPMode.none else None)
    lines += _check_lines()
    return "\n".join(lines + _with_check_line(plan, _launcher_lines(plan))) + "\n"


def _usage_lines(plan: ExportPlan) -> list[str]:
    """The script's first step: with no argument, or -h / --help alone, it says what it launches
    and how to call it (on stderr) and exits 2, before it launches or writes anything. Every
    part of a line is quoted (shlex); `_ME` becomes the path the script was called by."""
    cfg = plan.cfg
    trainer = plan.target == "hf-trainer"
    ranks = "CPU rank(s)" if cfg.device is DeviceKind.cpu else "GPU(s)"
    env = dict(settings_env(cfg, trainer))
    shown = ["AUTOTUNE_MICRO_BATCH_SIZE", "AUTOTUNE_GRAD_ACCUM_STEPS", "AUTOTUNE_GLOBAL_BATCH_SAMPLES",
             "AUTOTUNE_PRECISION"] + [k for k, default in _KEY_SETTINGS if env[k] != default]
    exports = [f"{k}={env[k]}" for k in shown]
    text: list[list] = [  # str parts, and _ME
        [f"{LAUNCH_SCRIPT}: your training script, launched as trial {plan.trial} of study "
         f"{plan.study!r} (--pick {plan.pick}) ran:"],
        [f"  {plan.launcher.value} ({_LAUNCHER_MODULE[plan.launcher]}), {cfg.num_gpus} {ranks} per node "
         f"x {cfg.num_nodes} node(s) = {cfg.num_gpus * cfg.num_nodes} rank(s)"],
        *[[w] for w in textwrap.wrap(" ".join(exports), 96, initial_indent="  exports ",
                                      subsequent_indent=" " * 10, break_on_hyphens=False)],
        ["          and the other AUTOTUNE_* settings (your script reads them; see this file)"],
    ]
    if trainer:
        from autotune.report.hf_trainer import FSDP_CONFIG, TRAINER_FLAGS

        ds = (f" and --deepspeed {DEEPSPEED_CONFIG}" if cfg.zero_stage > 0 else
              f" and --fsdp_config {FSDP_CONFIG}" if cfg.fsdp is not FSDPMode.none else "")
        text.append([f"  adds the Trainer flags of {TRAINER_FLAGS}{ds} after your script"])
    text += [
        ["usage: ", _ME, " train.py --your-args      (your script and its arguments, on every rank)"],
        ["       PYTHON=/path/to/python ", _ME, f" train.py ...   (default: {plan.python})"],
        ["       ", _ME, " --check   autotune's worker runs the measured trial, to check the setup:"],
        [f"                 it writes {CHECK_RESULT} and fatal.rank*.log into the current"],
        ["                 folder (AUTOTUNE_RESULT=dir/result.json: into dir/ instead), and ends"],
        ["                 with one line: its tokens/s and peak memory beside the sweep's"],
        ["multi-node: set NNODES, NODE_RANK, MASTER_ADDR (and MASTER_PORT) on every node"
         + ("; DEEPSPEED_HOSTFILE" if plan.launcher is Launcher.deepspeed else "")],
    ]
    words = ["".join('"$0"' if part is _ME else shlex.quote(_one_line(str(part))) for part in line)
             for line in text]
    return [
        'if [ "$#" -eq 0 ] || { [ "$#" -eq 1 ] && { [ "$1" = -h ] || [ "$1" = --help ]; }; }; then',
        "  printf '%s\\n' \\",
        *[f"    {w} \\" for w in words[:-1]],
        f"    {words[-1]} >&2",
        "  exit 2",
        "fi",
    ]


def _check_lines() -> list[str]:
    """`launch.sh --check`: autotune's own worker, a few steps of the measured trial, in place of
    the user's script; it writes its result where AUTOTUNE_RESULT says (the working folder's
    CHECK_RESULT by default), and its ranks' fatal logs beside it."""
    return [
        'CHECK=""',
        'if [ "$#" -eq 1 ] && [ "$1" = --check ]; then',
        "  # autotune's own worker, a few steps of the measured trial: checks the setup end to end.",
        "  CHECK=1",
        f'  RESULT="${{AUTOTUNE_RESULT:-$PWD/{CHECK_RESULT}}}"',
        '  case "$RESULT" in /*) ;; *) RESULT="$PWD/$RESULT" ;; esac',
        '  echo "launch.sh --check: autotune\'s worker runs the measured trial; its result: $RESULT" >&2',
        "  # From / : a folder named trials/ in the working folder would shadow autotune's worker.",
        '  WORKER="$(cd / && "$PYTHON" -c \'import trials.worker as w; print(w.__file__)\')"',
        '  set -- "$WORKER" --config "$AUTOTUNE_TRIAL_CONFIG" --result "$RESULT"',
        "fi",
        "",
    ]


def _with_check_line(plan: ExportPlan, launch: list[str]) -> list[str]:
    """The launcher's lines, its command (the last) run as a child under --check, whose end
    prints one line: the worker's result beside the sweep's figures (autotune.report.check_line,
    from / so that a folder named autotune/ here cannot shadow it)."""
    command = launch[-1].removeprefix("exec ")
    row = plan.trial_row
    sweep = " ".join(shlex.quote(str(row.get(k) or "")) for k in ("tokens_per_s", "peak_mem_bytes"))
    return launch[:-1] + [
        'if [ -n "$CHECK" ]; then',
        "  code=0",
        f"  {command} || code=$?",
        f'  (cd / && "$PYTHON" -m autotune.report.check_line "$RESULT" "$code" {sweep}) || true',
        '  exit "$code"',
        "fi",
        launch[-1],
    ]


def _launcher_lines(plan: ExportPlan) -> list[str]:
    """The script's last line: the trial's launcher, with the node settings from the environment."""
    lines: list[str] = []
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
    if plan.cfg.device is DeviceKind.cpu and plan.cfg.zero_stage > 0:
        # The buffers DeepSpeed's CPU all-reduce leaves in /dev/shm (autotune.run.shm) would
        # hold their RAM until reboot: the launcher runs as a child instead of replacing the
        # script, so that its end, however it comes, removes this run's.
        buffers = deepspeed_shm_pattern('"$(id -u)"', '"$MASTER_PORT"')
        lines = [
            "# DeepSpeed's CPU all-reduce leaves its shared-memory buffers behind when the ranks",
            "# exit; this run's are removed when the launcher ends, however it ends.",
            f"remove_shm() {{ rm -f {SHM_DIR}/{buffers}; }}",
            "trap remove_shm EXIT",
        ] + [line.removeprefix("exec ") for line in lines]
    return lines


def _one_line(text: str) -> str:
    """Text for a shell comment: a newline (or any control character) in a name would end the
    comment and run the rest as a command."""
    return "".join(ch if ch.isprintable() else " " for ch in text)
