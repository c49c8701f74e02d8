"""Paths a user gives the commands that write: their problems as one UserError naming the path
and the system's reason, before any work where they can be found (shared by report/export
folders, the catalog import's file, study copy's runs folder and the sweep's runs folder).

    check_parent(Path("out/report.html"), "--html")   # the folder exists; a file in the way is named
    probe_writable(folder, path, "--out")              # a file can be made there (removed at once)
    with writing(path, "--out"): ...                   # an OSError on `path` becomes a UserError
    refuse_foreign(path, MARK, "--html", "a report")   # a file there that autotune did not write
"""

from __future__ import annotations

import errno
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from autotune.errors import UserError

WRITE_FIX = ("choose a path in a folder you can write to (check its permissions, that its file "
             "system is not read-only and has space)")


def existing_ancestor(path: Path) -> Path:
    """`path` itself, or the nearest folder above it, that exists (a broken link counts)."""
    return next((p for p in (path, *path.absolute().parents) if os.path.lexists(p)), Path("/"))


def cannot_write(path: str | Path, exc: OSError, flag: str = "", parent: Path | None = None) -> UserError:
    """The UserError for an OSError met writing the user's `path` (in folder `parent`)."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    parent = Path(path).parent if parent is None else parent
    if exc.errno == errno.ENOENT and parent.is_dir():  # /proc, say: a folder that makes no files
        reason = f"folder '{parent}' takes no new files ({reason})"
    return UserError(f"cannot write {flag + ' ' if flag else ''}'{path}': {reason}", fix=WRITE_FIX)


@contextmanager
def writing(path: str | Path, flag: str = "") -> Iterator[None]:
    """Around file operations on the user's `path` only: their OSError becomes a UserError."""
    try:
        yield
    except OSError as exc:
        raise cannot_write(path, exc, flag) from None


def probe_writable(folder: Path, path: str | Path, flag: str = "") -> None:
    """UserError unless a file can be made in `folder` (to write `path`); the probe is removed."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".autotune-probe.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise cannot_write(path, exc, flag, parent=folder) from None


def check_parent(path: Path, flag: str = "") -> None:
    """UserError unless `path`'s folder exists; a file in the way is called a file."""
    if path.parent.is_dir():
        return
    named = f"{flag} {path}" if flag else str(path)
    above = existing_ancestor(path.parent)
    if not above.is_dir():
        raise UserError(f"'{above}' is a file, not a folder (for {named})",
                        fix="give a path inside a folder, or move that file away")
    raise UserError(f"folder '{path.parent}' does not exist (for {named})",
                    fix="create it first or choose another path")


def refuse_foreign(path: Path, mark: str, flag: str, what: str) -> None:
    """UserError when `path` exists and is not a file autotune wrote: one whose first 4 KiB hold
    `mark` (the tag each single-file writer puts in its output). Folders have a manifest
    instead (autotune.report.files); a file of the user's is never replaced, --force or not."""
    if not path.exists():
        return
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            ours = mark in f.read(4096)
    except OSError:
        ours = False
    if not ours:
        raise UserError(f"{flag} '{path}' exists and is not {what} autotune wrote",
                        fix=f"give another {flag} (autotune never replaces a file it did not write; "
                            "move or delete it yourself if it is not needed)")
