"""Writing a report's or an export's files all or nothing: into a temporary name next to the
target, then renamed into place, so a reader never sees half a folder or half a page.

    write_text_atomic(Path("report.html"), text)
    replace_dir(tmp_folder, Path("launch/"))      # the old folder moved aside, then removed
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> Path:
    """`text` at `path`, or the old file left as it was."""
    check_parent(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def chmod_like_umask(folder: Path) -> None:
    """mkdtemp makes a 0700 folder; the final one should look like any folder the user makes."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(folder, 0o777 & ~mask)


def replace_dir(new: Path, target: Path) -> None:
    """Put folder `new` at `target`; an existing `target` is moved aside, then removed."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old.{os.getpid()}")
        os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        if old is not None:
            os.rename(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def check_parent(path: Path) -> None:
    from autotune.errors import UserError

    if not path.parent.is_dir():
        raise UserError(f"folder '{path.parent}' does not exist (for {path})",
                        fix="create it first or choose another path")
