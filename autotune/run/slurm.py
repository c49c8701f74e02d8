"""Sweep workers as Slurm jobs: the batch script, sbatch's argv, and what Slurm says of a job.

    text = batch_script(worker_argv, workdir=Path.cwd(), job_name="autotune-llama")
    job_id = submit(script_path, ["--gres=gpu:4"], {STORAGE_ENV: url},
                    output_pattern(folder))                    # sbatch --parsable; the job's log
    job_ended(SlurmJobRef(job_id="123", restarts=0))    # True / False; None: Slurm cannot say

The script holds only shell-quoted words (`shlex.quote`) and no secret: the storage URL reaches
the job through the environment sbatch exports (`--export=ALL`), never through the script or
its log. Each job runs `autotune sweep` inside its allocation, so the hardware it detects is
the job's (`CUDA_VISIBLE_DEVICES` as Slurm sets it), never the login node's.

A job's processes are Slurm's to kill (scancel, preemption, time limit); the trial its
controller was running stays RUNNING in the study until a sweep finds the controller gone: on
the same host by its pid (`autotune.run.processes`), from any host by asking Slurm whether the
job (or the restart of it that ran the trial) has ended (`job_ended`), else by the storage's
heartbeat.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from pydantic import BaseModel, Field

from autotune.errors import UserError

# JobState values of a job that still runs or may run again (Slurm's squeue(1), "JOB STATE
# CODES", read 2026-12). Any other state (COMPLETED, CANCELLED, FAILED, TIMEOUT, PREEMPTED,
# NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE) means its processes are gone or being killed.
LIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "COMPLETING",
                         "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SIGNALING",
                         "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "SPECIAL_EXIT"})


class SlurmJobRef(BaseModel):
    """The Slurm job a controller runs in (from the variables Slurm sets in a job)."""

    job_id: str = Field(description="SLURM_JOB_ID")
    restarts: int = Field(0, description="SLURM_RESTART_COUNT: a requeued job keeps its id")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "SlurmJobRef | None":
        env = os.environ if environ is None else environ
        job = env.get("SLURM_JOB_ID")
        if not job:
            return None
        restarts = env.get("SLURM_RESTART_COUNT", "0")
        return cls(job_id=job, restarts=int(restarts) if restarts.isdigit() else 0)


def batch_script(worker_argv: list[str], workdir: Path, job_name: str) -> str:
    """A bash batch script that runs `worker_argv` in `workdir`; every value shell-quoted."""
    q = shlex.quote
    return "\n".join([
        "#!/bin/bash",
        f"#SBATCH --job-name={q(job_name)}",
        "# Written by `autotune sweep --slurm-jobs`: one sweep worker. It detects its hardware",
        "# here, inside the job; the storage URL comes from the environment sbatch exported.",
        "set -euo pipefail",
        f"cd {q(str(workdir))}",
        "exec " + " ".join(q(a) for a in worker_argv),
        ""])


# Each job's output file, in the submission's folder: sbatch puts the job id for %j.
LOG_NAME = "worker-%j.out"


def output_pattern(folder: Path) -> str:
    """sbatch's `--output` for LOG_NAME in `folder`, read as written. sbatch expands %j, %x,
    %u, %N ... anywhere in that value, the folder's path included (a runs dir "50%x" became
    "50autotune-NAME", a folder that does not exist, and the job failed to launch): a '%' of
    the path is written '%%'. A backslash anywhere turns every expansion off, %j too, so all
    jobs would share one log: such a folder is refused."""
    text = str(folder)
    if "\\" in text:
        raise UserError(f"the folder for the Slurm jobs' logs, '{text}', holds a backslash, which sbatch "
                        "reads as 'expand nothing': every job would write one log, 'worker-%j.out'",
                        fix="choose a --runs-dir whose path has no '\\'")
    return text.replace("%", "%%") + "/" + LOG_NAME


def log_path(folder: Path, job_id: str) -> str:
    """Where the job `job_id` writes its output (`output_pattern` expanded)."""
    return str(folder / LOG_NAME.replace("%j", job_id))


def submit(script: Path, sbatch_args: list[str], env: dict[str, str], log: str) -> str:
    """sbatch the script (argv list, `--parsable`); the job id. `env` is added to this
    process's environment for the job (a secret goes here, never into the script); `log`: the
    job's output file as sbatch reads it (`output_pattern`: `%j` = job id, '%%' = '%')."""
    argv = ["sbatch", "--parsable", "--export=ALL", f"--output={log}", *sbatch_args, str(script)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                              env={**os.environ, **env})
    except FileNotFoundError:
        raise UserError("sbatch not found: this machine is not a Slurm login node",
                        fix="run `autotune sweep --slurm-jobs N` where `sbatch` works, or drop "
                            "--slurm-jobs to run the sweep here") from None
    except subprocess.TimeoutExpired:
        raise UserError("sbatch did not answer within 120 s",
                        fix="check the cluster with `sinfo`, then submit again") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise UserError(f"sbatch refused the job: {why}",
                        fix="check the --sbatch-arg options (partition, account, gres, time)")
    return done.stdout.strip().split(";")[0]  # --parsable: "ID" or "ID;CLUSTER"


def job_info(job_id: str) -> dict[str, str] | None:
    """scontrol's fields of a job ({"JobState": "RUNNING", "Restarts": "0", ...}); {} when
    Slurm no longer knows it (ended long enough ago to be purged); None when Slurm cannot be
    asked (no scontrol, controller unreachable)."""
    try:
        done = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True,
                              text=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return {} if "invalid job id" in done.stderr.lower() else None
    return dict(w.split("=", 1) for w in done.stdout.split() if "=" in w)


def job_ended(ref: SlurmJobRef) -> bool | None:
    """Whether the run of the job that `ref` names is over: the job ended, Slurm forgot it,
    or it was requeued since (a new run of the same id). None when Slurm cannot say."""
    info = job_info(ref.job_id)
    if info is None:
        return None
    if not info:
        return True
    restarts = info.get("Restarts", "0")
    if restarts.isdigit() and int(restarts) != ref.restarts:
        return True
    return info.get("JobState", "") not in LIVE_STATES
