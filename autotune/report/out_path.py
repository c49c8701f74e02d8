"""The --out folder of `autotune report` as a user names it and reads it back: a name that reads
as a file (report.json) is refused before anything is written, and the files written are
listed by their shortest path.

    refuse_file_name(Path("report.json"))   # UserError (exit 2): --out names a folder; what to write instead
    shown_path(Path.cwd() / "report" / "report.html")   # "report/report.html"
"""

from __future__ import annotations

import os
from pathlib import Path

from autotune.errors import UserError

# Endings of a name meant as one file, not the folder `report --out` fills.
FILE_SUFFIXES = (".json", ".html", ".htm", ".md", ".png", ".svg", ".pdf", ".txt", ".csv")


def refuse_file_name(out: Path, flag: str = "--out") -> None:
    """`out` ends like a file (report.json): the user meant one file, which --out does not
    write; refused with the commands that write that file, and a folder name to use instead."""
    suffix = out.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        return
    name, folder = out.name, out.with_suffix("").name or "report"
    ways = [f"for the folder, --out {folder}/"]
    if suffix == ".json":
        ways.insert(0, f"for the JSON alone, autotune report --json > {name}")
    elif suffix in (".html", ".htm"):
        ways.insert(0, f"for the page alone, --html {name}")
    raise UserError(f"{flag} {out} names a folder (report.html, report.json and the PNG plots go into it), "
                    f"not a {suffix} file; nothing was written", fix="; ".join(ways))


def shown_path(path: Path) -> str:
    """`path` relative to the current folder where that is shorter, else as it is."""
    text = str(path)
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return text
    return rel if len(rel) < len(text) else text
