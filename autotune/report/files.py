"""Files a command writes: nothing of the user's is deleted or overwritten, nothing is half-written.

    folder = prepare_out_dir(Path("report/"), force=False)      # UserError (exit 2) if unsafe
    write_files(folder, {"report.json": text, "report.html": html}, executable={"launch.sh"})
    write_text_atomic(Path("report.html"), text)                # one file: temp name, then rename

The rules, for `report --out`, `export --out`, `trial --out` and `study copy`'s trial folders:
- a new folder is made; an existing one is used only when it is empty or holds nothing but
  files autotune wrote there earlier and nobody changed since (listed, with their SHA-256, in
  its manifest `.autotune-files.json`); anything else needs `--force`;
- with `--force`, autotune replaces only the files it writes now, and removes only files of its
  own earlier run that are still exactly as it wrote them; every other file stays;
- every file is written to a temporary name first and renamed into place once all are written,
  so a failure leaves the old files (a new folder is staged whole and renamed into place);
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


def _ours_unchanged(folder: Path) -> set[str]:
    """Entries of `folder` that autotune wrote and nobody changed since."""
    return {name for name, digest in _manifest(folder).items()
            if (folder / name).is_file() and _sha256(folder / name) == digest}


def prepare_out_dir(folder: str | Path, force: bool = False, flag: str = "--out") -> Path:
    """Check that autotune may write into `folder` (see the module's rules); returns it
    absolute. Nothing is created or changed here."""
    folder = Path(folder).expanduser().resolve()  # '.' and '$PWD' alike: a real name
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{flag} {folder} is a file", fix="give a folder path")
    if not folder.parent.is_dir():
        raise UserError(f"{flag} {folder}: folder '{folder.parent}' does not exist",
                        fix="create it first or choose another path")
    if folder.is_dir() and not force:
        ours = _ours_unchanged(folder) | {MANIFEST}
        foreign = sorted(p.name for p in folder.iterdir() if p.name not in ours)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise UserError(
                f"{flag} {folder} holds files autotune did not write ({shown})",
                fix="choose a new or empty folder, or add --force to write autotune's files into "
                    "it (other files are kept)")
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
        # A new folder: stage it whole beside its final place, then one rename.
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            chmod_like_umask(tmp)
            _write_all(tmp, files, executable, previous={})
            os.rename(tmp, folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return sorted(folder / n for n in files)
    previous = {n: d for n, d in _manifest(folder).items() if n in _ours_unchanged(folder)}
    _write_all(folder, files, executable, previous)
    return sorted(folder / n for n in files)


def _write_all(folder: Path, files: Mapping[str, str | bytes], executable: set[str],
               previous: dict[str, str]) -> None:
    staged: list[tuple[Path, Path]] = []
    try:
        for name, content in files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
            staged.append((Path(tmp), folder / name))
            with os.fdopen(fd, "wb") as f:
                f.write(content.encode() if isinstance(content, str) else content)
            chmod_like_umask(Path(tmp), executable=name in executable)
        digests = {final.name: _sha256(tmp) for tmp, final in staged}
        manifest = json.dumps({"written_by": "autotune", "files": digests}, indent=2, sort_keys=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{MANIFEST}.", dir=folder)
        staged.append((Path(tmp), folder / MANIFEST))
        with os.fdopen(fd, "w") as f:
            f.write(manifest + "\n")
        chmod_like_umask(Path(tmp))
    except BaseException:
        for staged_tmp, _ in staged:
            staged_tmp.unlink(missing_ok=True)
        raise
    for staged_tmp, final in staged:
        os.replace(staged_tmp, final)
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


def write_text_atomic(path: Path, text: str) -> Path:
    """`text` at `path` (umask permissions), or the old file left as it was."""
    check_parent(path)
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


def check_parent(path: Path) -> None:
    if not path.parent.is_dir():
        raise UserError(f"folder '{path.parent}' does not exist (for {path})",
                        fix="create it first or choose another path")
