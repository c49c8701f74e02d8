"""`autotune sweep --slurm-jobs N`: submit N sweep workers as Slurm jobs into one study.

    autotune sweep spec.yaml --study llama --storage-file ~/.autotune-db-url --slurm-jobs 4 \\
        --trials 10 --sbatch-arg=--gres=gpu:4 --sbatch-arg=--time=02:00:00

Nothing is measured on the login node: each job runs `autotune sweep` (the same spec, study and
flags) inside its allocation, detects the hardware there and writes into the shared study. The
study is created here first, so the jobs never race to create it, and the submitted jobs are
stored with it (`autotune study status` lists them). The storage URL reaches the jobs by
--storage-file (a path every node reads) or by the environment sbatch exports; it is never
written into the batch script or its log.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
from pathlib import Path
from typing import Optional

from autotune.errors import UserError

# The study's system attribute holding the jobs submitted for it (`autotune study status`).
JOBS_ATTR = "autotune:slurm_jobs"


def worker_argv(spec_file: Optional[Path], study: str, runs_dir: Path, storage_file: Optional[Path],
                forwarded: list[str]) -> list[str]:
    """The `autotune sweep` a job runs: absolute paths (a job starts in its own folder)."""
    argv = [sys.executable, "-m", "autotune.cli", "sweep"]
    if spec_file is not None:
        argv.append(str(spec_file.resolve()))
    argv += ["--study", study, "--runs-dir", str(runs_dir.resolve()), *forwarded]
    if storage_file is not None:
        argv += ["--storage-file", str(storage_file.resolve())]
    return argv


def submit_workers(spec, spec_file: Optional[Path], storage_file: Optional[Path], runs_dir: Path,
                   jobs: int, sbatch_args: list[str], forwarded: list[str]) -> dict:
    """Write the batch script, create the study, sbatch it `jobs` times; what was submitted."""
    from autotune.run.preflight import check_runs_dir
    from autotune.run.slurm import batch_script, submit
    from autotune.run.storage import STORAGE_ENV, redact_url, storage_kind
    from autotune.search.study import open_study

    if storage_kind(spec.storage) == "sqlite":
        raise UserError(f"Slurm workers cannot share the SQLite file {redact_url(spec.storage)}",
                        fix="give a PostgreSQL (or MySQL) URL every node reaches, by "
                            "--storage-file or AUTOTUNE_STORAGE")
    check_runs_dir(runs_dir, spec.study)  # before the study is created (each worker checks its owner)
    study = open_study(spec.storage, spec.study, seed=spec.seed)
    folder = (runs_dir / spec.study / "slurm").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    argv = worker_argv(spec_file, spec.study, runs_dir, storage_file, forwarded)
    script = folder / "worker.sbatch"
    _write_atomic(script, batch_script(argv, Path.cwd().resolve(), f"autotune-{spec.study}"))
    env = {} if storage_file is not None else {STORAGE_ENV: spec.storage}
    log = str(folder / "worker-%j.out")
    submitted: list[str] = []
    try:
        for _ in range(jobs):
            submitted.append(submit(script, sbatch_args, env, log))
    except UserError as exc:
        if submitted:
            raise UserError(f"{exc.message} (jobs {', '.join(submitted)} were submitted)", fix=exc.fix) from None
        raise
    finally:
        record_jobs(study, submitted, str(script), log)
    return {"jobs": submitted, "script": str(script), "log": log, "study": spec.study}


def record_jobs(study, job_ids: list[str], script: str, log: str) -> None:
    """Append the submitted jobs to the study's list (read by `autotune study status`)."""
    if not job_ids:
        return
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    known = submitted_jobs(study)
    known += [{"job_id": j, "submitted_at": now, "script": script, "log": log.replace("%j", j)}
              for j in job_ids]
    study._storage.set_study_system_attr(study._study_id, JOBS_ATTR, known)


def submitted_jobs(study) -> list[dict]:
    return list(study._storage.get_study_system_attrs(study._study_id).get(JOBS_ATTR, []))


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)


def describe(result: dict) -> str:
    return (f"submitted {len(result['jobs'])} sweep worker(s) as Slurm jobs {', '.join(result['jobs'])} "
            f"into study '{result['study']}' (script {result['script']}; output {result['log']}). "
            f"Watch: autotune study status --study {result['study']}")
