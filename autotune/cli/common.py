"""What the command modules share: the console and the options several commands take.

    console().print("...")            # stdout, no syntax highlighting; whole lines in a log file
    console(stderr=True)
    storage: Optional[str] = storage_option()
    storage_file: Optional[Path] = storage_file_option()
    print_json(doc)                   # --json: one document on stdout
"""

from __future__ import annotations

STORAGE_HELP = ("Optuna storage URL (default: $AUTOTUNE_STORAGE, else the spec's, else "
                "sqlite:///autotune.db in this folder); a password here shows in `ps`: prefer "
                "--storage-file or AUTOTUNE_STORAGE")
STORAGE_FILE_HELP = ("read the storage URL from the first line of this file (keeps a password off "
                     "the command line)")


def storage_option():
    import typer

    return typer.Option(None, "--storage", help=STORAGE_HELP)


def storage_file_option():
    import typer

    return typer.Option(None, "--storage-file", help=STORAGE_FILE_HELP, dir_okay=False)


def print_json(doc) -> None:
    """One JSON document on stdout (`--json`): no colours, no wrapping."""
    import json
    import sys

    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")


# The width of output that goes to a file or a pipe with no $COLUMNS (a Slurm job's .out file,
# `autotune sweep | tee sweep.log`). rich would lay it out at 80 columns, and the one-line trial
# and pick lines (autotune.report.labels.clip) would lose their end to an ellipsis: the config's
# ZeRO stage, offload and peak memory, the pick's "how sure". A log keeps every word; this is
# wide enough for the report's widest table with every column (WIDE_COLUMNS, 160) and those lines.
LOG_WIDTH_COLUMNS = 240


def console(stderr: bool = False):
    """A rich console on stdout (or stderr) without syntax highlighting. On a terminal, or
    where $COLUMNS is set, lines fit that width; into a file or a pipe, LOG_WIDTH_COLUMNS."""
    import os

    from rich.console import Console

    con = Console(stderr=stderr, highlight=False)
    # rich takes $COLUMNS only when it is all digits; so does this.
    if not con.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        con.width = LOG_WIDTH_COLUMNS
    return con
