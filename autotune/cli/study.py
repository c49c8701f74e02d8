"""`autotune study copy`: move a study between storages, with its trial folders.

    autotune study copy sqlite:///autotune.db postgresql://tuner:pw@db/autotune --study llama
    autotune study copy sqlite:///a.db journal:///shared/studies.log --runs-dir autotune_runs \\
        --to-runs-dir /shared/autotune_runs

A study started on a laptop continues on a cluster: what Optuna's `copy_study` does: trials,
parameters, values, constraints and attributes; the trial folders (config, command, logs,
result) are copied from RUNS_DIR/STUDY to TO_RUNS_DIR/TO_STUDY and each copied trial's
`trial_dir` attribute points at its new folder. The destination must not hold the study yet.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Optional

import typer

from autotune.cli.common import console
from autotune.errors import UserError

study_app = typer.Typer(no_args_is_help=True, help="Manage studies: copy one to another storage.")


def register(app: typer.Typer) -> None:
    app.add_typer(study_app, name="study")


@study_app.command("copy")
def copy(
    src_url: str = typer.Argument(..., help="storage URL holding the study"),
    dst_url: str = typer.Argument(..., help="storage URL to copy it into"),
    study: str = typer.Option("default", help="study name in SRC_URL"),
    to_study: Optional[str] = typer.Option(None, help="name in DST_URL (default: the same)"),
    runs_dir: Path = typer.Option(Path("autotune_runs"), help="trial folders of the source"),
    to_runs_dir: Optional[Path] = typer.Option(None, help="where to copy the trial folders "
                                               "(default: RUNS_DIR; nothing to copy then "
                                               "unless the study name changes)"),
) -> None:
    """Copy STUDY from SRC_URL to DST_URL (Optuna copy_study) plus its trial folders."""
    result = copy_study(src_url, dst_url, study, to_study or study, runs_dir, to_runs_dir or runs_dir)
    console().print(
        f"copied study '{study}' ({result['trials']} trials) from {result['src']} to "
        f"{result['dst']} as '{result['to_study']}'; {result['folders']} trial folders -> "
        f"{result['runs']}")


def copy_study(src_url: str, dst_url: str, study: str, to_study: str, runs_dir: Path,
               to_runs_dir: Path) -> dict:
    import optuna

    from autotune.record import TrialRecord
    from autotune.run.storage import open_storage, redact_url, user_study_names

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    src, dst = open_storage(src_url), open_storage(dst_url)
    if study not in user_study_names(src):
        names = user_study_names(src)
        raise UserError(f"no study '{study}' in {redact_url(src_url)}",
                        fix=f"use one of: {', '.join(names) or '(none)'}")
    if to_study in user_study_names(dst):
        raise UserError(f"study '{to_study}' already exists in {redact_url(dst_url)}",
                        fix="pick another name with --to-study, or copy into another storage")
    src_runs, dst_runs = runs_dir / study, to_runs_dir / to_study
    folders = 0
    if src_runs.resolve() != dst_runs.resolve() and src_runs.is_dir():
        if dst_runs.exists() and any(dst_runs.iterdir()):
            raise UserError(f"trial folder '{dst_runs}' is not empty",
                            fix="choose another --to-runs-dir or --to-study")
        # Folders first: a failed copy leaves no half-copied study in the destination.
        shutil.copytree(src_runs, dst_runs, dirs_exist_ok=True)
        folders = sum(1 for p in dst_runs.iterdir() if p.is_dir())
    # optuna.copy_study, with each trial's `trial_dir` pointed at its copied folder (a finished
    # trial's attributes cannot change once it is stored, so they are rewritten on the way).
    from_study = optuna.load_study(study_name=study, storage=src)
    to = optuna.create_study(study_name=to_study, storage=dst, directions=from_study.directions)
    for k, v in src.get_study_system_attrs(from_study._study_id).items():
        to._storage.set_study_system_attr(to._study_id, k, v)
    for k, v in from_study.user_attrs.items():
        to.set_user_attr(k, v)
    trials = []
    for t in from_study.get_trials(deepcopy=True):
        old = TrialRecord.of(t).trial_dir
        if old and folders and (dst_runs / Path(old).name).is_dir():
            moved = TrialRecord.attrs(trial_dir=str((dst_runs / Path(old).name).resolve()))
            t.user_attrs = {**t.user_attrs, **moved}
        trials.append(t)
    to.add_trials(trials)
    return {"trials": len(trials), "folders": folders, "src": redact_url(src_url),
            "dst": redact_url(dst_url), "to_study": to_study, "runs": str(dst_runs)}
