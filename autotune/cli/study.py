"""`autotune study copy`: move a study between storages, with its trial folders.
`autotune study status`: who works on a study: its sweep workers and their Slurm jobs.

    autotune study status --study llama --storage-file ~/.autotune-db-url

    autotune study copy sqlite:///autotune.db - --dst-file ~/.autotune-db-url --study llama
    autotune study copy sqlite:///a.db journal:///shared/studies.log --runs-dir autotune_runs \\
        --to-runs-dir /shared/autotune_runs

A study started on a laptop continues on a cluster: what Optuna's `copy_study` does: trials,
parameters, values, constraints and attributes; the trial folders (config, command, logs,
result) are copied from RUNS_DIR/STUDY to TO_RUNS_DIR/TO_STUDY and each copied trial's
`trial_dir` attribute points at its new folder. The destination must not hold the study yet.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

import typer

from autotune.cli.common import console, storage_file_option, storage_option
from autotune.errors import UserError
from autotune.paths import existing_ancestor, probe_writable, writing

study_app = typer.Typer(no_args_is_help=True, help="Manage studies: copy one to another storage; "
                        "show its workers and their Slurm jobs.")


def register(app: typer.Typer) -> None:
    app.add_typer(study_app, name="study")


@study_app.command("copy")
def copy(
    src_url: str = typer.Argument(..., help="storage URL holding the study"),
    dst_url: str = typer.Argument(..., help="storage URL to copy it into"),
    study: str = typer.Option("default", help="study name in SRC_URL"),
    to_study: Optional[str] = typer.Option(None, help="name in DST_URL (default: the same)"),
    runs_dir: Optional[Path] = typer.Option(None, help="trial folders of the source (default: autotune_runs)"),
    to_runs_dir: Optional[Path] = typer.Option(None, help="where to copy the trial folders "
                                               "(default: RUNS_DIR; nothing to copy then "
                                               "unless the study name changes)"),
    src_file: Optional[Path] = typer.Option(
        None, "--src-file", help="read SRC_URL from this file's first line (give '-' as SRC_URL)"),
    dst_file: Optional[Path] = typer.Option(
        None, "--dst-file", help="read DST_URL from this file's first line (give '-' as DST_URL)"),
    as_json: bool = typer.Option(False, "--json", help="print what was copied as one JSON document"),
) -> None:
    """Copy the study named by --study from SRC_URL to DST_URL (Optuna copy_study), plus its trial folders.

    Under the same name and runs folder the copy is a move: the folder goes to the copy, and
    a sweep of the source is refused there (a folder's trial numbers go on in one study);
    --to-study or --to-runs-dir keep the source's folder its own."""

    from autotune.run.storage import resolve_storage

    def url(given: str, file: Optional[Path], option: str) -> str:
        # '-' with a file: the URL (and its password) stays off the command line.
        if given == "-" and file is None:
            raise UserError(f"'-' needs {option} FILE", fix=f"add {option} with the URL on its first line")
        if given != "-" and file is not None:
            raise UserError(f"{option} given with a URL: which one to copy is unclear",
                            fix=f"give '-' in the URL's place to read it from {option}, or drop {option}")
        return resolve_storage(None if given == "-" else given, file)

    src_url, dst_url = url(src_url, src_file, "--src-file"), url(dst_url, dst_file, "--dst-file")
    if runs_dir is not None and not runs_dir.is_dir():  # the default may be absent: a study copied alone
        raise UserError(f"--runs-dir '{runs_dir}' is not a folder", fix="give the source's trial folders, "
                        "or leave --runs-dir out to copy the study alone")
    runs_dir = runs_dir or Path("autotune_runs")
    result = copy_study(src_url, dst_url, study, to_study or study, runs_dir, to_runs_dir or runs_dir)
    if as_json:
        from autotune.cli.common import print_json

        print_json({**result, "study": study})
        return
    console().print(
        f"copied study '{study}' ({result['trials']} trials) from {result['src']} to "
        f"{result['dst']} as '{result['to_study']}'; {result['folders']} trial folders -> "
        f"{result['runs']}", soft_wrap=True)
    if result["moved_runs"]:
        console().print(f"the trial folders in {result['runs']} now belong to the copy (a move): sweeps "
                        f"of '{study}' in {result['src']} are refused there; give them another "
                        "--runs-dir to go on", soft_wrap=True)


@study_app.command("status")
def status(
    storage: Optional[str] = storage_option(),
    storage_file: Optional[Path] = storage_file_option(),
    study: str = typer.Option("default", help="study name"),
    as_json: bool = typer.Option(False, "--json", help="print the workers and jobs as one JSON document"),
) -> None:
    """The study's sweep workers (host, process, Slurm job; trials done and running) and the
    Slurm jobs submitted for it (`autotune sweep --slurm-jobs`) with their state now."""
    from autotune.run.storage import redact_url, resolve_storage
    from autotune.search.study import open_study

    url = resolve_storage(storage, storage_file)
    st = open_study(url, study, create=False)
    doc = {"study": study, "storage": redact_url(url), **workers_and_jobs(st)}
    if as_json:
        from autotune.cli.common import print_json

        print_json(doc)
        return
    con = console()
    con.print(f"study '{study}' in {doc['storage']}: {len(doc['workers'])} worker(s)", soft_wrap=True)
    for w in doc["workers"]:
        job = f" slurm job {w['slurm_job_id']}" if w["slurm_job_id"] else ""
        running = f", running trial {', '.join(map(str, w['running']))}" if w["running"] else ""
        if w["running"] and w["gone"]:  # killed (kill -9, out of memory, a node lost): says so
            # A sweep on any machine fails a trial whose Slurm job ended; only one on its host
            # can tell that a pid is gone (autotune.run.processes.recover_dead_trials).
            running += (f" (its Slurm job {w['slurm_job_id']} ended: the next sweep of the study" if w["slurm_job_id"]
                        else f" (its controller is gone: the next sweep of the study on {w['host']}") + \
                " fails it and queues it again)"
        ended = ", ".join(f"{w[k]} {k}" for k in ("complete", "pruned", "failed") if w[k])
        con.print(f"  {w['host']} pid {w['pid']}{job}: {w['finished']} trial(s) finished"
                  f"{f' ({ended})' if ended else ''}{running}", soft_wrap=True, markup=False)
    for j in doc["slurm_jobs"]:
        con.print(f"  slurm job {j['job_id']}: {j['state']} (submitted {j['submitted_at']}; output "
                  f"{j['log']})", soft_wrap=True, markup=False)


def workers_and_jobs(study) -> dict:
    """Workers, from the controller each trial records; jobs, from the study's list of
    submitted jobs with Slurm's state now ("unknown" where Slurm cannot be asked)."""
    import socket

    from optuna.trial import TrialState

    from autotune.cli.sweep_slurm import submitted_jobs
    from autotune.record import TrialRecord
    from autotune.run.processes import controller_gone
    from autotune.run.slurm import job_info

    workers: dict[tuple, dict] = {}
    for t in study.get_trials(deepcopy=False):
        ctl = TrialRecord.of(t).controller
        if ctl is None:
            continue
        w = workers.setdefault((ctl.host, ctl.pid, ctl.slurm_job_id), {
            "host": ctl.host, "pid": ctl.pid, "slurm_job_id": ctl.slurm_job_id, "finished": 0,
            "complete": 0, "pruned": 0, "failed": 0, "running": [], "gone": False})
        if t.state is TrialState.RUNNING:
            w["running"].append(t.number)
            # Dead here (its pid), or its Slurm job ended; elsewhere unknown: a heartbeat decides.
            w["gone"] = w["gone"] or controller_gone(ctl, socket.gethostname())
        elif t.state.is_finished():
            # A trial a later sweep failed for its dead controller is finished, not measured.
            w["finished"] += 1
            w[{TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned"}.get(t.state, "failed")] += 1
    jobs = []
    for j in submitted_jobs(study):
        info = job_info(j["job_id"])
        state = "unknown" if info is None else info.get("JobState", "ended (no longer listed)")
        jobs.append({**j, "state": state})
    return {"workers": list(workers.values()), "slurm_jobs": jobs}


# Set on a destination study while its trials are being copied; a copy that died half-way
# (killed, disk full) leaves it set, so the next attempt knows the study is its own leftover.
COPY_INCOMPLETE = "autotune:copy_incomplete"


def copy_study(src_url: str, dst_url: str, study: str, to_study: str, runs_dir: Path,
               to_runs_dir: Path) -> dict:
    """Copy a study and its trial folders, all or nothing: the folders are staged under a
    temporary name and renamed into place once the study is copied; a failure removes what this
    copy wrote (the destination study it created, the staged folders) and nothing else."""
    import optuna

    from autotune.names import check_study_name
    from autotune.run.storage import open_storage, redact_url, user_study_names

    check_study_name(study, "--study")
    check_study_name(to_study, "--to-study")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    src = open_storage(src_url, must_exist=True)  # reading the source never creates it
    if study not in user_study_names(src):
        names = user_study_names(src)
        raise UserError(f"no study '{study}' in {redact_url(src_url)}",
                        fix=f"use one of: {', '.join(names) or '(none)'}")
    src_runs, dst_runs = runs_dir / study, to_runs_dir / to_study
    copy_folders = src_runs.resolve() != dst_runs.resolve() and src_runs.is_dir()
    if copy_folders:  # checked before the destination storage is opened (which may create it)
        _check_runs_dest(dst_runs)
    dst = open_storage(dst_url)
    if to_study in user_study_names(dst):
        if not _remove_incomplete_copy(dst, to_study):
            raise UserError(f"study '{to_study}' already exists in {redact_url(dst_url)}",
                            fix="pick another name with --to-study, or copy into another storage")
    staged: Path | None = None
    made: list[Path] = []
    try:
        if copy_folders:
            made = _make_folders(dst_runs.parent)
            with writing(dst_runs, "--to-runs-dir"):
                staged = Path(tempfile.mkdtemp(prefix=f".{to_study}.copying.", dir=dst_runs.parent))
        folders = 0
        if staged is not None:
            # copyfile, not copy2: the copies get the permissions of any new file (the umask).
            shutil.copytree(src_runs, staged, dirs_exist_ok=True, copy_function=shutil.copyfile)
            folders = sum(1 for p in staged.iterdir() if p.is_dir())
        copied = {p.name for p in staged.iterdir() if p.is_dir()} if staged is not None else set()
        trials = _copy_trials(src, dst, study, to_study, dst_runs, copied)
        if staged is not None:
            os.rename(staged, dst_runs)  # replaces an empty folder; the last step
            staged = None
        to_id = dst.get_study_id_from_name(to_study)
        dst.set_study_system_attr(to_id, COPY_INCOMPLETE, False)
        # One folder for source and copy (same runs folder, same name): a move. The folder's
        # trial numbers can go on in one study only, so it goes with the copy.
        moved_runs = not copy_folders and dst_runs.is_dir()
        if moved_runs:
            from autotune.run.preflight import take_runs_folder

            take_runs_folder(optuna.load_study(study_name=to_study, storage=dst), dst_runs, dst_url, "adopt")
    except BaseException:
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)
        for folder in reversed(made):  # the folders this copy made, if still empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        _remove_incomplete_copy(dst, to_study)
        raise
    return {"trials": trials, "folders": folders, "src": redact_url(src_url),
            "dst": redact_url(dst_url), "to_study": to_study, "runs": str(dst_runs),
            "moved_runs": moved_runs}


def _check_runs_dest(dst_runs: Path) -> None:
    """UserError unless the trial folders can be copied to `dst_runs`: an empty or new folder
    under folders (not files) that can be written. Nothing is left created."""
    if dst_runs.exists() and (not dst_runs.is_dir() or any(dst_runs.iterdir())):
        raise UserError(f"trial folder '{dst_runs}' is not empty",
                        fix="choose another --to-runs-dir or --to-study")
    above = existing_ancestor(dst_runs.parent)
    if not above.is_dir():
        raise UserError(f"--to-runs-dir: '{above}' is a file, not a folder (for the trial folders "
                        f"'{dst_runs}')", fix="give --to-runs-dir a folder, or move that file away")
    probe_writable(above, dst_runs, "--to-runs-dir")


def _make_folders(folder: Path) -> list[Path]:
    """Make `folder` and its missing parents; returns those made, outermost first."""
    missing = [p for p in (folder, *folder.absolute().parents) if not os.path.lexists(p)][::-1]
    with writing(folder, "--to-runs-dir"):
        for p in missing:
            p.mkdir()
    return missing


def _copy_trials(src, dst, study: str, to_study: str, dst_runs: Path, copied: set[str]) -> int:
    """optuna.copy_study, marked incomplete until the end, with each trial's `trial_dir`
    pointed at its copied folder (`copied`: the folder names copied into `dst_runs`) (a
    finished trial's attributes cannot change once stored, so they are rewritten on the way)."""
    import optuna

    from_study = optuna.load_study(study_name=study, storage=src)
    to = optuna.create_study(study_name=to_study, storage=dst, directions=from_study.directions)
    dst.set_study_system_attr(to._study_id, COPY_INCOMPLETE, True)
    for k, v in src.get_study_system_attrs(from_study._study_id).items():
        dst.set_study_system_attr(to._study_id, k, v)
    for k, v in from_study.user_attrs.items():
        to.set_user_attr(k, v)
    from autotune.record import TrialRecord

    trials = []
    for t in from_study.get_trials(deepcopy=True):
        old = TrialRecord.of(t).trial_dir
        if old and Path(old).name in copied:
            moved = TrialRecord.attrs(trial_dir=str((dst_runs / Path(old).name).resolve()))
            t.user_attrs = {**t.user_attrs, **moved}
        trials.append(t)
    to.add_trials(trials)
    return len(trials)


def _remove_incomplete_copy(storage, name: str) -> bool:
    """Delete study `name` if it is an unfinished copy (this tool's own leftover)."""
    import optuna

    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        return False
    if not storage.get_study_system_attrs(study_id).get(COPY_INCOMPLETE):
        return False
    optuna.delete_study(study_name=name, storage=storage)
    return True
