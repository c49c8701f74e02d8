"""Files a command writes: nothing of the user's is deleted or overwritten, nothing is half-written.

    folder = prepare_out_dir(Path("report/"), force=False, names=files, kind=REPORT)  # UserError (exit 2) if unsafe
    write_files(folder, {"report.json": text, "report.html": html}, kind=REPORT)
    refuse_changed_page(Path("report.html"), "--html")          # a page changed since autotune wrote it
    write_text_atomic(Path("report.html"), signed_page(html))   # one file: temp name, then rename

The rules, for `report --out`, `export --out`, `trial --out` and `study copy`'s trial folders:
- the manifest `.autotune-files.json` lists each file autotune wrote into the folder, with its
  SHA-256 and the command that wrote it (`kind`); a file is that command's own while it is
  exactly as written. Any other file is the user's: one autotune did not write, one changed
  since, and also another command's (a report's files to `export`, an export's to `report`);
- a new folder is made; an existing one is used only when it is empty or holds nothing but the
  command's own files; any other file needs `--force` (the refusal names whose files they are);
- with `--force` the other files are kept: never replaced, never removed. One under a name the
  command writes is refused, `--force` or not. A command removes only its own files of an
  earlier run that it no longer writes (a stale plot), never another command's;
- a manifest of an older autotune names no command: its unchanged files may be replaced by a
  command that writes their names, and are never removed;
- a single page (`report --html`) carries the SHA-256 of its text in its last line: a page
  changed since (or one without that line) is never replaced;
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
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Mapping

from autotune.errors import UserError
from autotune.paths import check_parent, probe_writable, writing

MANIFEST = ".autotune-files.json"
# The commands (`kind`) whose files a folder's manifest tells apart; every writer names its own.
REPORT = "autotune report --out"
EXPORT = "autotune export"
TRIAL = "autotune trial --out"
SKYPILOT_TASKS = "autotune sweep --skypilot-task"
_PAGE_DIGEST = re.compile(rb"<!-- autotune sha256 ([0-9a-f]{64}) -->\n")


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


def _manifest(folder: Path) -> tuple[dict[str, str], dict[str, str]]:
    """({file name: sha256}, {file name: the command that wrote it}) of what autotune wrote into
    `folder` (({}, {}) if nothing; an older autotune's manifest names no command)."""
    try:
        data = json.loads((folder / MANIFEST).read_text())
        files = {str(k): str(v) for k, v in data.get("files", {}).items()}
        return files, {str(k): str(v) for k, v in data.get("by", {}).items() if str(k) in files}
    except (OSError, ValueError, AttributeError):
        return {}, {}


def _manifest_bytes(files: Mapping[str, str | None], by: Mapping[str, str]) -> bytes:
    return (json.dumps({"written_by": "autotune", "files": files, "by": by}, indent=2, sort_keys=True)
            + "\n").encode()


def note_written(folder: Path, names: Iterable[str], kind: str) -> None:
    """Add files autotune has just written into `folder` by other means (a trial's run) to its
    manifest, as `kind`'s, so that a later --force may replace them and nothing else."""
    files, by = _manifest(folder)
    for name in names:
        if (digest := _sha256(folder / name)) is not None:
            files[name], by[name] = digest, kind
    with writing(folder / MANIFEST):
        tmp = _stage(folder, MANIFEST, _manifest_bytes(files, by), False, folder)
        os.replace(tmp, folder / MANIFEST)


def _unchanged(path: Path, digest: str) -> bool:
    return not path.is_symlink() and path.is_file() and _sha256(path) == digest


def _sorted_out(folder: Path, kind: str) -> tuple[set[str], dict[str, str]]:
    """(own, others): the files of `folder` exactly as autotune wrote them, parted into those
    `kind` may replace (its own and an older manifest's) and the other commands' ({name: command})."""
    files, by = _manifest(folder)
    own: set[str] = set()
    others: dict[str, str] = {}
    for name, digest in files.items():
        if not _unchanged(folder / name, digest):
            continue
        if by.get(name, kind) == kind:
            own.add(name)
        else:
            others[name] = by[name]
    return own, others


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _described(folder: Path, names: list[str], others: Mapping[str, str]) -> str:
    """`names` (files of `folder` that are not the command's own), said by whose they are."""
    recorded, _ = _manifest(folder)
    groups: dict[str, list[str]] = {}
    for name in names:
        if name in others:
            whose = f"written by `{others[name]}`"
        elif name in recorded and (folder / name).is_file():
            whose = "changed since autotune wrote {}"
        else:
            whose = "which autotune did not write"
        groups.setdefault(whose, []).append(name)
    return "; ".join(f"{_shown(group)}, {whose.format('it' if len(group) == 1 else 'them')}"
                     for whose, group in groups.items())


def _refuse_replacing(folder: Path, names: Iterable[str], kind: str, flag: str,
                      force_flag: str | None) -> None:
    """UserError if a file of `names` in `folder` is not `kind`'s own: never replaced."""
    own, others = _sorted_out(folder, kind)
    clash = sorted(n for n in names if os.path.lexists(folder / n) and n not in own)
    if clash:
        one = len(clash) == 1
        raise UserError(
            f"{flag + ' ' if flag else ''}{folder} holds {_described(folder, clash, others)}, and this "
            f"command writes {'that name' if one else 'those names'}",
            fix=f"move {'it' if one else 'them'} out of the folder, or choose another {flag or 'folder'}"
                + (f" ({force_flag} never replaces a file autotune did not write, one changed since it "
                   "did, or another command's)" if force_flag else ""))


def prepare_out_dir(folder: str | Path, force: bool = False, flag: str = "--out",
                    names: Iterable[str] = (), force_flag: str | None = "--force", *, kind: str,
                    reused: Iterable[str] = ()) -> Path:
    """Check that command `kind` may write `names` (and any other of its files) into `folder`
    (see the module's rules); returns it absolute. Nothing is left created or changed here.
    `force_flag`: the command's flag for `force`, named in the fix (None: it has none).
    `reused`: folders the command's earlier run left there and this one reuses as they are (a
    trial's compile cache): not another's files where the manifest records that earlier run."""
    folder = check_out_path(folder, flag)
    if not folder.is_dir():
        return folder
    _refuse_replacing(folder, names, kind, flag, force_flag)
    if not force:
        own, others = _sorted_out(folder, kind)
        mine = own | (set(reused) if own else set())
        other = sorted(p.name for p in folder.iterdir() if p.name not in mine and p.name != MANIFEST)
        if other:
            raise UserError(
                f"{flag} {folder} holds {_described(folder, other, others)}",
                fix=f"choose another {flag} (a new or empty folder), or add {force_flag} to write into it "
                    "beside those files (they are kept)" if force_flag else
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
                executable: Iterable[str] = (), *, kind: str) -> list[Path]:
    """Write `files` ({name: content}) into `folder` all or nothing, as command `kind`'s (see
    the module's rules). Call `prepare_out_dir` first. Returns the paths written, sorted."""
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
            _write_all(tmp, files, executable, kind, ({}, {}), shown=folder)
            with writing(folder):
                os.rename(tmp, folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return sorted(folder / n for n in files)
    _refuse_replacing(folder, files, kind, "", None)
    own, _ = _sorted_out(folder, kind)
    recorded, by = _manifest(folder)
    # Files of this command's previous run into this folder that this run does not write
    # again, still exactly as it wrote them (a stale plot, say): those are its to remove.
    # Every other entry (another command's, an older manifest's, one changed since) stays listed.
    stale = {n for n in own if by.get(n) == kind and n not in files}
    kept = {n: d for n, d in recorded.items() if n not in files and n not in stale}
    _write_all(folder, files, executable, kind, (kept, {n: by[n] for n in kept if n in by}), shown=folder)
    for name in stale:
        (folder / name).unlink(missing_ok=True)
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


def _write_all(folder: Path, files: Mapping[str, str | bytes], executable: set[str], kind: str,
               kept: tuple[dict[str, str], dict[str, str]], shown: Path) -> None:
    """Stage every file in `folder`, then rename each into place, the manifest (`kept`'s
    entries and these files, as `kind`'s) last (`shown`: the folder's name in messages, where
    `folder` is a staging folder)."""
    staged: list[tuple[Path, Path]] = []
    try:
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            staged.append((_stage(folder, name, data, name in executable, shown), folder / name))
        digests = {**kept[0], **{final.name: _sha256(tmp) for tmp, final in staged}}
        by = {**kept[1], **{name: kind for name in files}}
        staged.append((_stage(folder, MANIFEST, _manifest_bytes(digests, by), False, shown), folder / MANIFEST))
        with writing(shown):
            while staged:
                os.replace(*staged[0])
                staged.pop(0)
    finally:  # whatever was not renamed into place (all of it, on a failure while staging)
        for staged_tmp, _ in staged:
            staged_tmp.unlink(missing_ok=True)


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


def signed_page(text: str) -> str:
    """The HTML page `text` with a last line (a comment) holding the SHA-256 of all before it:
    a later write can tell that nobody changed the page since (`refuse_changed_page`)."""
    body = text if text.endswith("\n") else text + "\n"
    return f"{body}<!-- autotune sha256 {hashlib.sha256(body.encode()).hexdigest()} -->\n"


def refuse_changed_page(path: Path, flag: str) -> None:
    """UserError when `path` exists and is not exactly as `signed_page` made it: changed since
    (it may hold the user's edits), or written before pages carried their digest."""
    if not os.path.lexists(path):
        return
    try:
        data = path.read_bytes()
    except OSError:
        data = b""
    cut = data.rfind(b"\n", 0, max(len(data) - 1, 0)) + 1
    found = _PAGE_DIGEST.fullmatch(data[cut:])
    if found is None or hashlib.sha256(data[:cut]).hexdigest().encode() != found.group(1):
        files, by = _manifest(path.parent)
        if path.name in files and _unchanged(path, files[path.name]):  # as `--out` wrote it, untouched
            raise UserError(f"{flag} '{path}' is the page of a report folder (written by "
                            f"`{by.get(path.name, REPORT)} {path.parent}`): {flag} writes a page of its own",
                            fix=f"refresh that folder with `--out {path.parent}`, or give another {flag}")
        raise UserError(f"{flag} '{path}' was changed since autotune wrote it (or an older autotune wrote "
                        "it, without the digest that tells)",
                        fix=f"give another {flag}, or move that page away first (autotune never replaces a "
                            "page that may hold your edits)")
