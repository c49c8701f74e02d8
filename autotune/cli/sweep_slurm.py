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
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Optional

from autotune.errors import UserError

# The study's system attribute holding the jobs submitted for it (`autotune study status`).
JOBS_ATTR = "autotune:slurm_jobs"
STORAGE_FLAG_WARNING = (
    "warning: --storage puts the storage URL (and any password in it) on this command line, which "
    "other users of this machine see (ps) and the shell history keeps; prefer --storage-file FILE "
    "or AUTOTUNE_STORAGE")


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
                   jobs: int, sbatch_args: list[str], forwarded: list[str], storage_flag: bool = False) -> dict:
    """Write the batch script, create the study, sbatch it `jobs` times; what was submitted.

    `storage_flag`: the URL came from `--storage` (warned of once, and never repeated in the
    hint). When sbatch refuses the first job, the script and the folders this call made are
    removed (a script an earlier submission wrote is put back as it was); the study stays,
    created but empty, and the next submission uses it."""
    from autotune.run.preflight import check_runs_dir
    from autotune.run.slurm import LOG_NAME, batch_script, output_pattern, submit
    from autotune.run.storage import STORAGE_ENV, redact_url, storage_kind
    from autotune.search.study import open_study

    if storage_kind(spec.storage) == "sqlite":
        raise UserError(f"Slurm workers cannot share the SQLite file {redact_url(spec.storage)}",
                        fix="give a PostgreSQL (or MySQL) URL every node reaches, or a journal file "
                            "every node sees (journal:///shared/study.log), by --storage-file or "
                            "AUTOTUNE_STORAGE")
    if storage_flag:
        print(STORAGE_FLAG_WARNING, file=sys.stderr)
    check_runs_dir(runs_dir, spec.study)  # before the study is created (each worker checks its owner)
    folder = (runs_dir / spec.study / "slurm").resolve()
    pattern = output_pattern(folder)  # a folder sbatch cannot name is refused before anything is made
    study = open_study(spec.storage, spec.study, seed=spec.seed)
    made = [d for d in (folder, *folder.parents) if not d.exists()]  # deepest first
    folder.mkdir(parents=True, exist_ok=True)
    argv = worker_argv(spec_file, spec.study, runs_dir, storage_file, forwarded)
    script = folder / "worker.sbatch"
    earlier = script.read_text() if script.is_file() else None  # an earlier submission's script
    _write_atomic(script, batch_script(argv, Path.cwd().resolve(), f"autotune-{spec.study}"))
    env = {} if storage_file is not None else {STORAGE_ENV: spec.storage}
    log = str(folder / LOG_NAME)
    submitted: list[str] = []
    try:
        for _ in range(jobs):
            submitted.append(submit(script, sbatch_args, env, pattern))
    except UserError as exc:
        if submitted:
            raise UserError(f"{exc.message} (jobs {', '.join(submitted)} were submitted)", fix=exc.fix) from None
        _undo(script, earlier, made)  # nothing submitted: nothing of this call left on disk
        raise
    finally:
        record_jobs(study, submitted, str(script), log)
    return {"jobs": submitted, "script": str(script), "log": log, "study": spec.study,
            "watch": watch_command(spec, storage_file, storage_flag)}


def _undo(script: Path, earlier: Optional[str], made: list[Path]) -> None:
    """Put back what the script was before this call (or remove it), then the folders it made."""
    if earlier is not None:
        _write_atomic(script, earlier)
    else:
        script.unlink(missing_ok=True)
    for d in made:
        try:
            d.rmdir()  # only when empty: never a file this call did not write
        except OSError:
            break


def record_jobs(study, job_ids: list[str], script: str, log: str) -> None:
    """Append the submitted jobs to the study's list (read by `autotune study status`)."""
    from autotune.run.slurm import log_path

    if not job_ids:
        return
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    known = submitted_jobs(study)
    known += [{"job_id": j, "submitted_at": now, "script": script, "log": log_path(Path(log).parent, j)}
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


def watch_command(spec, storage_file: Optional[Path], storage_flag: bool) -> str:
    """`autotune study status` for this study, with the storage that finds it: the file by its
    absolute path (as the jobs get it), nothing for AUTOTUNE_STORAGE, and for a URL given
    otherwise a placeholder, never the URL (it may hold a password)."""
    from autotune.run.storage import STORAGE_ENV

    line = f"autotune study status --study {shlex.quote(spec.study)}"
    if storage_file is not None:
        return f"{line} --storage-file {shlex.quote(str(storage_file.resolve()))}"
    if spec.storage == os.environ.get(STORAGE_ENV):
        return line
    given = "the --storage given here" if storage_flag else "the spec's storage"
    return f"{line} --storage URL (URL: {given})"


def describe(result: dict) -> str:
    return (f"submitted {len(result['jobs'])} sweep worker(s) as Slurm jobs {', '.join(result['jobs'])} "
            f"into study '{result['study']}' (script {result['script']}; output {result['log']}). "
            f"Watch: {result['watch']}")
