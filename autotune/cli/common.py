"""What the command modules share: the console and the options several commands take.

    console().print("...")            # stdout, no syntax highlighting; whole lines in a log file
    console(stderr=True)
    console(keep_going=True)          # a sweep's: its pipe's reader leaving does not end it mid-trial
    storage: Optional[str] = storage_option()
    storage_file: Optional[Path] = storage_file_option()
    print_json(doc)                   # --json: one document on stdout
    write_stdout(text)                # as it is (a model's own JSON)
"""

from __future__ import annotations

STORAGE_HELP = ("Optuna storage URL (default: $AUTOTUNE_STORAGE, else the spec's, else "
                "sqlite:///autotune.db in this folder); a password here shows in `ps`: prefer "
                "--storage-file or AUTOTUNE_STORAGE")
# The same for a command that reads no spec (report, export, study): no spec to default to.
STORAGE_HELP_NO_SPEC = STORAGE_HELP.replace(", else the spec's", "")
STORAGE_FILE_HELP = ("read the storage URL from the first line of this file (keeps a password off "
                     "the command line)")


def storage_option(spec: bool = False):
    """`spec`: the command reads a sweep spec, whose `storage` is a default too."""
    import typer

    return typer.Option(None, "--storage", help=STORAGE_HELP if spec else STORAGE_HELP_NO_SPEC)


def storage_file_option():
    import typer

    return typer.Option(None, "--storage-file", help=STORAGE_FILE_HELP, dir_okay=False)


def print_json(doc) -> None:
    """One JSON document on stdout (`--json`): no colours, no wrapping."""
    import json

    write_stdout(json.dumps(doc, indent=2, default=str) + "\n")


def write_stdout(text: str) -> None:
    """`text` on stdout as it is. A pipe whose reader has left (`--json | head`): exit 141, as
    SIGPIPE would end the command (click's answer is exit 1, rich's too)."""
    import sys

    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        from autotune.search.interrupt import EXIT_OUTPUT_CLOSED, reader_left

        reader_left(sys.stdout.fileno())
        raise SystemExit(EXIT_OUTPUT_CLOSED) from None


# The width of output that goes to a file or a pipe with no $COLUMNS (a Slurm job's .out file,
# `autotune sweep | tee sweep.log`). rich would lay it out at 80 columns, and the one-line trial
# and pick lines (autotune.report.labels.clip) would lose their end to an ellipsis: the config's
# ZeRO stage, offload and peak memory, the pick's "how sure". A log keeps every word; this is
# wide enough for the report's widest table with every column (WIDE_COLUMNS, 160) and those lines.
LOG_WIDTH_COLUMNS = 240


def console(stderr: bool = False, keep_going: bool = False):
    """A rich console on stdout (or stderr) without syntax highlighting. On a terminal, or
    where $COLUMNS is set, lines fit that width; into a file or a pipe, LOG_WIDTH_COLUMNS.

    Where the pipe's reader has left (`| head`), the output goes to /dev/null from then on
    (autotune.search.interrupt.reader_left) and the command exits 141, as SIGPIPE would end it;
    rich's own choice, exit 1 from inside the print, would end a sweep mid-trial with the
    measured trial left RUNNING. With `keep_going` (the sweep's) the print returns: the sweep's
    StopRule ends it once that trial is recorded."""
    import os

    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            from autotune.search.interrupt import EXIT_OUTPUT_CLOSED, reader_left

            self.quiet = True
            reader_left(self.file.fileno())
            if not keep_going:
                raise SystemExit(EXIT_OUTPUT_CLOSED)

    con = _Console(stderr=stderr, highlight=False)
    # rich takes $COLUMNS only when it is all digits; so does this.
    if not con.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        con.width = LOG_WIDTH_COLUMNS
    return con
