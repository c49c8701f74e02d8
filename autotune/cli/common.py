"""What the command modules share: the console and the options several commands take.

    console().print("...")            # stdout, no syntax highlighting
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


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)
