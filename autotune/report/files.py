"""Files a command writes: nothing of the user's is deleted or overwritten, nothing is half-written.

    folder = prepare_out_dir(Path("report/"), force=False)      # UserError (exit 2) if unsafe
    write_files(folder, {"report.json": text, "report.html": html}, executable={"launch.sh"})
    write_text_atomic(Path("report.html"), text)                # one file: temp name, then rename

The rules, for `report --out`, `export --out`, `trial --out` and `study copy`'s trial folders:
- a new folder is made; an existing one is used only when it is empty or holds nothing but
  files autotune wrote there earlier and nobody changed since (listed, with their SHA-256, in
  its manifest `.autotune-files.json`); anything else needs `--force`;
- with `--force`, autotune replaces only files it wrote (those its manifest lists), and removes
  only files of its own earlier run that are still exactly as it wrote them; every other file
  stays, and a file it did not write under a name it writes is refused, `--force` or not;
- every file is written to a temporary name first and renamed into place once all are written,
  so a failure leaves the old files (a new folder is staged whole and renamed into place);
- a path the system will not let autotune write (read-only, no permission, a file where a
  folder should be) is a UserError naming the path and the system's reason, found before any
  work where it can be (a probe file, removed at once), and nothing is left behind;
- permissions follow the umask, like any file the user makes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Mapping

from autotune.errors import UserError
from autotune.paths import check_parent, probe_writable, writing

MANIFEST = ".autotune-files.json"


def umask() -> int:
    """The process umask (read without changing it for long: set and restored at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def chmod_like_umask(path: Path, executable: bool = False) -> None:
    """mkstemp / mkdtemp make 0600 / 0700 entries; give them the mode the user expects."""
    base = 0o777 if executable or path.is_dir() else 0o666
    os.chmod(path, base & ~umask())


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _manifest(folder: Path) -> dict[str, str]:
    """{file name: sha256} of what autotune wrote into `folder` last time ({} if none)."""
    try:
        data = json.loads((folder / MANIFEST).read_text())
        return {str(k): str(v) for k, v in data.get("files", {}).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def note_written(folder: Path, names: Iterable[str]) -> None:
    """Add files autotune has just written into `folder` by other means (a trial's run) to its
    manifest, so that a later --force may replace them and nothing else."""
    files = {**_manifest(folder), **{n: d for n in names if (d := _sha256(folder / n)) is not None}}
    manifest = json.dumps({"written_by": "autotune", "files": files}, indent=2, sort_keys=True)
    with writing(folder / MANIFEST):
        tmp = _stage(folder, MANIFEST, (manifest + "\n").encode(), False, folder)
        os.replace(tmp, folder / MANIFEST)


def _ours_unchanged(folder: Path) -> set[str]:
    """Entries of `folder` that autotune wrote and nobody changed since."""
    return {name for name, digest in _manifest(folder).items()
            if (folder / name).is_file() and _sha256(folder / name) == digest}


def not_ours(folder: Path, names: Iterable[str]) -> list[str]:
    """Those of `names` present in `folder` that autotune did not write there (not in its
    manifest, or not a plain file): never replaced, even with --force."""
    written = _manifest(folder)
    return sorted(n for n in names if os.path.lexists(folder / n)
                  and (n not in written or (folder / n).is_symlink() or not (folder / n).is_file()))


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def prepare_out_dir(folder: str | Path, force: bool = False, flag: str = "--out",
                    names: Iterable[str] = (), force_flag: str | None = "--force") -> Path:
    """Check that autotune may write `names` (and any other of its files) into `folder` (see
    the module's rules); returns it absolute. Nothing is left created or changed here.
    `force_flag`: the command's flag for `force`, named in the fix (None: it has none)."""
    folder = check_out_path(folder, flag)
    if folder.is_dir():
        clash = not_ours(folder, names)
        if clash:
            raise UserError(
                f"{flag} {folder} holds {_shown(clash)}, which autotune did not write and would "
                "replace", fix=f"move {'it' if len(clash) == 1 else 'them'} out of the folder, or "
                f"choose another {flag} (--force never replaces a file autotune did not write)")
    if folder.is_dir() and not force:
        ours = _ours_unchanged(folder) | {MANIFEST}
        foreign = sorted(p.name for p in folder.iterdir() if p.name not in ours)
        if foreign:
            raise UserError(
                f"{flag} {folder} holds files autotune did not write or that changed since "
                f"({_shown(foreign)})",
                fix=f"choose a new or empty folder, or add {force_flag} to write autotune's files "
                    "into it (other files are kept)" if force_flag else
                    "choose a new or empty folder, or move those files out of it")
    return folder


def check_out_path(folder: str | Path, flag: str = "--out") -> Path:
    """The checks of `prepare_out_dir` on the path alone, not what the folder holds: a folder
    (not a file) in an existing folder, that autotune can write. Returns it absolute."""
    folder = Path(folder).expanduser().resolve()  # '.' and '$PWD' alike: a real name
    if os.path.lexists(folder) and not folder.is_dir():
        raise UserError(f"{flag} {folder} is a file, not a folder", fix="give a folder path")
    check_parent(folder, flag)
    probe_writable(folder if folder.is_dir() else folder.parent, folder, flag)
    return folder


def write_files(folder: str | Path, files: Mapping[str, str | bytes],
                executable: Iterable[str] = ()) -> list[Path]:
    """Write `files` ({name: content}) into `folder` all or nothing (see the module's rules).
    Call `prepare_out_dir` first. Returns the paths written, sorted."""
    folder = Path(folder)
    executable = set(executable)
    for name in files:
        if Path(name).name != name or name in ("", ".", "..", MANIFEST):
            raise ValueError(f"not a plain file name: {name!r}")
    if not folder.exists():
        check_parent(folder)
        # A new folder: stage it whole beside its final place, then one rename.
        with writing(folder):
            tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            with writing(folder):
                chmod_like_umask(tmp)
            _write_all(tmp, files, executable, previous={}, shown=folder)
            with writing(folder):
                os.rename(tmp, folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return sorted(folder / n for n in files)
    clash = not_ours(folder, files)
    if clash:
        raise UserError(f"{folder} holds {_shown(clash)}, which autotune did not write",
                        fix="move it out of the folder or write elsewhere: autotune never replaces "
                            "a file it did not write")
    previous = {n: d for n, d in _manifest(folder).items() if n in _ours_unchanged(folder)}
    _write_all(folder, files, executable, previous, shown=folder)
    return sorted(folder / n for n in files)


def _stage(folder: Path, name: str, data: bytes, executable: bool, shown: Path) -> Path:
    """`data` in a new temporary file of `folder`, made for `name`; its OSError a UserError."""
    with writing(shown / name):
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            chmod_like_umask(Path(tmp), executable=executable)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return Path(tmp)


def _write_all(folder: Path, files: Mapping[str, str | bytes], executable: set[str],
               previous: dict[str, str], shown: Path) -> None:
    """Stage every file in `folder`, then rename each into place (`shown`: the folder's name
    in messages, where `folder` is a staging folder)."""
    staged: list[tuple[Path, Path]] = []
    try:
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            staged.append((_stage(folder, name, data, name in executable, shown), folder / name))
        digests = {final.name: _sha256(tmp) for tmp, final in staged}
        manifest = json.dumps({"written_by": "autotune", "files": digests}, indent=2, sort_keys=True)
        staged.append((_stage(folder, MANIFEST, (manifest + "\n").encode(), False, shown), folder / MANIFEST))
        with writing(shown):
            while staged:
                os.replace(*staged[0])
                staged.pop(0)
    finally:  # whatever was not renamed into place (all of it, on a failure while staging)
        for staged_tmp, _ in staged:
            staged_tmp.unlink(missing_ok=True)
    # Files of autotune's previous run into this folder that this run does not write again,
    # still exactly as autotune wrote them (a stale plot, say): those are ours to remove.
    for name in previous.keys() - files.keys():
        (folder / name).unlink(missing_ok=True)


def next_numbered_dir(parent: str | Path, prefix: str) -> Path:
    """The first `parent/PREFIXNNNN` that does not exist yet (parent is created): a fresh
    folder for each run of a command whose output has no name of its own."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    taken = {p.name for p in parent.iterdir()}
    n = 0
    while f"{prefix}{n:04d}" in taken:
        n += 1
    return (parent / f"{prefix}{n:04d}").resolve()


def write_text_atomic(path: Path, text: str, flag: str = "") -> Path:
    """`text` at `path` (umask permissions), or the old file left as it was; a path that
    cannot be written is a UserError naming it."""
    check_parent(path, flag)
    with writing(path, flag):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            chmod_like_umask(Path(tmp))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path
