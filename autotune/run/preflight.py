"""Before a sweep's first trial: does the workload build at all, and may the sweep write its
trial folders where it is told to?

    check_workload(spec)                                   # UserError (exit 2) naming the problem
    folder = check_runs_dir(Path("autotune_runs"), "llama")    # RUNS_DIR/STUDY; creates nothing
    verdict = runs_folder_verdict(folder, "llama", url)        # reads only; refuses another's folder
    take_runs_folder(study, folder, url, verdict)              # once the study is open: the owner file

The built-in GPT needs no check. A Hugging Face config or a user's entry point is checked in
a subprocess (`python -m trials.preflight`, the trials' own environment, no torch in this
process): a missing or unreadable config file, an unknown model type, or an entry point that
does not import would otherwise end every trial the same way and spend the whole budget.

The runs folder RUNS_DIR/STUDY (trial folders trial_0000, trial_0001, ...) belongs to one study
in one storage: trial numbers restart at 0 in every study, so a second study writing there would
replace the first one's folders while its storage still cites them. RUNS_DIR/STUDY.OWNER_SUFFIX
(`owner_file`), beside the folder so that the folder keeps holding trial folders only, names
the study and holds its owner id: a claim in the study's own storage (autotune.run.claims),
keyed by the study's name and Optuna id. Every worker of the study, resumed or on another
machine, under whatever URL or mount path reaches that storage, reads the same id; the same
name in another storage, or a study deleted and created again, gets another. A file path or a
URL would not do: one database is reached by several host names, one journal by several mount
paths, and a moved SQLite file is still the same study. The file also names the storage, for
the message that refuses another study (no password: `storage_label`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from autotune.errors import UserError

if TYPE_CHECKING:
    from autotune.estimate.resolved import ResolvedModel

PREFLIGHT_TIMEOUT_S = 300.0


def check_workload(spec, python: str = sys.executable, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> ResolvedModel | None:
    """UserError when the workload cannot build; else, for a Hugging Face family the count does
    not know (autotune.estimate.resolved), what the trials' transformers builds for it."""
    from autotune.contract import HFWorkload, TrialConfig
    from autotune.contract.trial_files import TrialFiles
    from autotune.estimate.resolved import ResolvedModel, needs_resolving

    wl = spec.workload
    if wl.kind == "gpt":
        return None
    where = f"{spec.source}: " if spec.source else ""
    if isinstance(wl, HFWorkload) and wl.config_path:
        check_hf_file(wl.config_file() or Path(wl.config_path), where)
    from autotune.run.argv import launch_env

    cfg = TrialConfig(workload=wl, seq_len=spec.seq_len)
    with tempfile.TemporaryDirectory(prefix="autotune-preflight-") as tmp:
        path = TrialFiles(Path(tmp)).config
        cfg.write(path)
        model_out = Path(tmp) / "model.json"
        resolve = ["--model-out", str(model_out)] if needs_resolving(wl) else []
        try:
            p = subprocess.run([python, "-m", "trials.preflight", str(path), *resolve], env=launch_env(cfg),
                               capture_output=True, text=True, timeout=timeout_s,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise UserError(f"{where}workload: checking it took more than {timeout_s:.0f} s",
                            fix="make the entry point's module import quickly (build the "
                                "model inside the function, not at import)") from None
        if p.returncode != 0:
            lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
            reason = lines[-1] if lines else f"exit code {p.returncode}"
            message, _, fix = reason.partition(". To fix: ")
            raise UserError(f"{where}workload {wl.kind}: {message}",
                            fix=fix or "correct the workload section of the spec")
        return ResolvedModel.model_validate_json(model_out.read_text()) if resolve else None


def resolve_unknown_family(spec) -> None:
    """For `autotune plan` and `estimate`, which run no trial: a Hugging Face family the count
    does not know, counted as the trials' transformers builds it (check_workload), where one is
    installed. Where the preflight fails, the count's own reading stands if it can count the
    config (approximate); if it cannot either (sizes left out), the preflight's reason is the
    error."""
    from autotune.estimate.resolved import needs_resolving, remember
    from autotune.estimate.workload import model_from_workload

    if not needs_resolving(spec.workload):
        return
    try:
        remember(spec.workload, check_workload(spec))
    except UserError as exc:
        try:
            model_from_workload(spec.workload)
        except UserError:
            raise exc from None


def check_hf_file(path: Path, where: str) -> None:
    """The config file's own problems, named without starting a subprocess (`where`: the file
    that names it, e.g. "spec.yaml: "); also `autotune trial`'s check before it launches."""
    if not path.is_file():
        raise UserError(f"{where}workload: HF config '{path}' does not exist",
                        fix="point config_path at a local config.json (a relative path is read "
                            "from the spec file's folder)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{where}workload: HF config '{path}' is not readable JSON: "
                        f"{type(exc).__name__}: {exc}", fix="give a transformers config.json") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise UserError(f"{where}workload: HF config '{path}' has no `model_type`",
                        fix='add e.g. "model_type": "llama"')


# The runs folder's owner (which study, in which storage): RUNS_DIR/STUDY + this, beside it.
OWNER_SUFFIX = ".autotune-study.json"
TRIAL_FOLDER = re.compile(r"trial_\d{4,}")
Verdict = Literal["new", "ours", "adopt"]


def check_runs_dir(runs_dir: Path, study: str) -> Path:
    """RUNS_DIR/STUDY, once it is sure the sweep can create it (or write in it) and write its
    owner file beside it: UserError naming the path and the reason otherwise. Creates nothing."""
    runs_dir = Path(runs_dir)
    folder = runs_dir / study
    _check_writable(runs_dir, folder, runs_dir)
    if folder.exists() or folder.is_symlink():
        _check_writable(folder, folder, runs_dir)
    return folder


def _check_writable(path: Path, folder: Path, runs_dir: Path) -> None:
    """UserError unless the folder `path`, or the nearest folder above it that exists, is one
    this user can create folders in (for the runs folder `folder`)."""
    fix = "give --runs-dir a folder this user can write in (it is created when missing)"
    while not path.exists():
        if path.is_symlink():
            raise UserError(f"cannot create the runs folder '{folder}': '{path}' is a broken link", fix=fix)
        if path.parent == path:
            break
        path = path.parent
    if not path.is_dir():
        what = "is a file, not a folder" if path.is_file() else "is not a folder"
        if path == runs_dir:
            raise UserError(f"--runs-dir '{runs_dir}' {what}", fix=fix)
        raise UserError(f"cannot create the runs folder '{folder}': '{path}' {what}", fix=fix)
    if not os.access(path, os.W_OK | os.X_OK):
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
        why = "Read-only file system" if read_only else f"no permission to write in '{path}'"
        raise UserError(f"cannot create the runs folder '{folder}': {why}", fix=fix)


def storage_label(url: str) -> str:
    """The storage as a reader may see it: no password; a file storage by its absolute path."""
    from autotune.run.storage import redact_url, storage_file, storage_kind

    path = storage_file(url)
    if path is None:
        return redact_url(url)
    return f"{'journal://' if storage_kind(url) == 'journal' else 'sqlite:///'}{path.resolve()}"


def owner_file(folder: Path) -> Path:
    """The file naming the study that owns the runs folder `folder` (RUNS_DIR/STUDY)."""
    return folder.with_name(folder.name + OWNER_SUFFIX)


def read_owner(folder: Path) -> dict[str, Any] | None:
    """The folder's owner file, None when it has none. A file another worker is writing right
    now is waited for; one that stays unreadable is a UserError."""
    path = owner_file(folder)
    for _ in range(20):
        if not path.exists() and not path.is_symlink():
            return None
        try:
            data = json.loads(path.read_text())
            if isinstance(data, dict) and isinstance(data.get("owner"), str):
                return data
        except (OSError, UnicodeDecodeError, ValueError):
            pass
        time.sleep(0.1)
    raise UserError(f"'{path}' is not the JSON autotune writes there (the study that owns "
                    f"the trial folders of '{folder}')",
                    fix="give --runs-dir another folder, or restore that file")


def trial_folders(folder: Path) -> list[str]:
    """The names of the trial folders in `folder`, sorted."""
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if TRIAL_FOLDER.fullmatch(p.name) and p.is_dir())


def runs_folder_verdict(folder: Path, study: str, storage_url: str) -> Verdict:
    """May study `study` of `storage_url` write its trial folders in `folder`? Reads, never
    writes, and never creates the storage: "new" (nothing there: it becomes the study's),
    "ours" (its owner file names this study), "adopt" (trial folders this study's trials point
    at: a folder written before owner files existed, or copied with its study by `autotune
    study copy`, which copies the folder alone); UserError for another study's folder, naming
    both and the way out.

    A folder without an owner file but with trial folders, none of which this study's trials
    point at, is refused: their owner is unknown, and trial numbers restart at 0 in a new
    study, so writing there would replace them. An owner file of another study is obeyed even
    when this study's trials point into the folder (a copy that shares its source's folder),
    unless it was copied from elsewhere along with the folder (it names the folder it was
    written for)."""
    owner = read_owner(folder)
    found = trial_folders(folder)
    if owner is None and not found:
        return "new"
    storage, study_id = _stored_study(storage_url, study)
    mine = _owner_id(storage, study, study_id) if storage is not None else None
    if owner is not None and mine is not None and owner.get("owner") == mine:
        return "ours"
    # Another owner's file, copied here with its folder, names the folder it was written in.
    copied = owner is None or owner.get("folder") != str(folder.resolve())
    if storage is not None and copied and _points_into(storage, study_id, folder):
        return "adopt"
    here = f"study '{study}' in {storage_label(storage_url)}"
    if owner is not None and (owner.get("study"), owner.get("storage")) == (study, storage_label(storage_url)):
        raise UserError(f"runs folder '{folder}' was written by an earlier study '{study}' in "
                        f"{owner.get('storage')}, which no longer holds it (deleted, or made anew); "
                        "this sweep would overwrite its trial folders",
                        fix=f"move '{folder}' and '{owner_file(folder)}' away (or delete them), or "
                            "pass another --runs-dir (or --study) for this sweep")
    if owner is not None:
        theirs = f"study '{owner.get('study')}' in {owner.get('storage')}"
        raise UserError(f"runs folder '{folder}' belongs to {theirs} ('{owner_file(folder)}' "
                        f"records it); {here} would overwrite its trial folders",
                        fix="pass another --runs-dir (or --study) for this sweep; to give the "
                            f"folder to it, move '{folder}' and that file away first")
    shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
    raise UserError(f"runs folder '{folder}' holds trial folders ({shown}) that {here} did not "
                    "write (no owner recorded: an older autotune wrote them, for a study in "
                    "another storage or one since deleted); this sweep would overwrite them",
                    fix=f"pass another --runs-dir (or --study) for this sweep, or move '{folder}' away")


def take_runs_folder(study, folder: Path, storage_url: str, verdict: Verdict) -> None:
    """Make `folder` the open `study`'s, as `runs_folder_verdict` allowed: create it and write
    its owner file (an adopted folder's copied one is replaced). A worker of another study that
    wrote the file since the verdict wins, and this sweep is refused."""
    if verdict == "ours":
        return
    storage = study._storage
    mine = _owner_id(storage, study.study_name, storage.get_study_id_from_name(study.study_name),
                     create=True)
    data = {"study": study.study_name, "owner": mine, "storage": storage_label(storage_url),
            "folder": str(folder.resolve()),
            "about": "the study these trial folders belong to: autotune sweep refuses any other here"}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if verdict == "adopt":
            from autotune.contract import write_json_atomic

            write_json_atomic(owner_file(folder), data)
            return
        created = _create_exclusive(owner_file(folder), data)
    except OSError as exc:  # a disk full, or a folder made read-only since the check
        raise UserError(f"cannot write the runs folder '{folder}' or '{owner_file(folder)}': "
                        f"{exc.strerror or exc}", fix="give --runs-dir a folder this user can write in") from None
    if not created:
        runs_folder_verdict(folder, study.study_name, storage_url)  # raises unless it is ours


def _stored_study(storage_url: str, study: str):
    """(the storage, the study's Optuna id) when the study exists there, else (None, None);
    a SQLite or journal file that does not exist is not created."""
    from autotune.run.storage import NoOptunaTables, open_storage, storage_file, user_study_names

    path = storage_file(storage_url)
    if path is None:  # a server: its errors are the sweep's own; read only, so that an empty
        try:          # database refused here is left without Optuna's tables
            storage = open_storage(storage_url, must_exist=True)
        except NoOptunaTables:
            return None, None
    elif not path.is_file():
        return None, None
    else:
        try:  # read only: a file without Optuna's tables (someone's database) is left as it is
            storage = open_storage(storage_url, must_exist=True)
        except UserError:
            return None, None
    if study not in user_study_names(storage):
        return None, None
    return storage, storage.get_study_id_from_name(study)


def _owner_id(storage, study: str, study_id: int, create: bool = False) -> str | None:
    """The study's owner id (module docstring); `create`: claimed now when it has none."""
    import uuid

    from autotune.run.claims import claim, claim_owner

    name = f"{study}/runs-folder/{study_id}"
    if create:
        mine = uuid.uuid4().hex
        if claim(storage, name, {"owner": mine}):
            return mine
    for _ in range(50):  # a claim made by another worker this instant may not hold its id yet
        held = claim_owner(storage, name)
        if held is None or held.get("owner"):
            return None if held is None else str(held["owner"])
        time.sleep(0.1)
    return None


def _points_into(storage, study_id: int, folder: Path) -> bool:
    """Whether a trial of the study has its trial folder in `folder`."""
    from autotune.record import TrialRecord

    root = folder.resolve()
    for t in storage.get_all_trials(study_id, deepcopy=False):
        where = TrialRecord.of(t).trial_dir
        if where and Path(where).resolve().parent == root:
            return True
    return False


def _create_exclusive(path: Path, data: dict[str, Any]) -> bool:
    """Write `path` whole unless it exists (False then): a reader never sees half of it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        try:
            os.link(tmp, path)  # fails when the file exists: the first writer wins
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links
            try:
                fd2 = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            except FileExistsError:
                return False
            with os.fdopen(fd2, "w") as f:
                f.write(Path(tmp).read_text())
        return True
    finally:
        os.unlink(tmp)
