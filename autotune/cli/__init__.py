"""The `autotune` command line: one module per command group, each with `register(app)`.
No torch import on this path: the CLI starts fast (tests/test_layout.py checks it; the surface
is pinned by tests/test_cli_surface.py).

    autotune sweep                          # autotune.cli.sweep
    autotune report --study default [--json]  # autotune.cli.report
    autotune trial config.json [--json]     # autotune.cli.trial
    autotune estimate | cost | catalog | plan | export | study copy

User errors print one message (no traceback; `--debug` shows it) and exit with code 2.
"""

from __future__ import annotations

import sys

import typer

from autotune.cli.common import console
from autotune.errors import EXIT_USER_ERROR, UserError, plain_message


def _flags_show_no_type() -> None:
    """A flag takes no value, so `--help` shows it none: typer's rich option panel (0.2x) asks
    every option, flags and `--help` included, for its type (`--json <bool>`); its plain help
    leaves it off a flag or count, and so does this. Options that take a value keep theirs."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None:
        return  # a typer without it

    def display_type_rich(self, ctx):
        return None if self.is_flag or self.count else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


def _bad_values_read_plainly() -> None:
    """typer (0.2x) checks an option's value with pydantic and shows pydantic's wording: an enum
    option's bad value read "Invalid value for '--precision': Value error, 'fp9' is not one of
    ...", a range "Input should be greater than or equal to 1". Every such message passes through
    BadParameter.format_message: there it reads as every other message does (plain_message)."""
    bad = getattr(typer, "BadParameter", None)
    shown = getattr(bad, "format_message", None)
    if shown is None:
        return  # a typer without it

    def format_message(self) -> str:
        text = shown(self)
        head, sep, msg = text.partition(": ")
        if not sep:
            return text
        return f"{head}: {plain_message(msg)}"

    bad.format_message = format_message  # type: ignore[union-attr]


_flags_show_no_type()
_bad_values_read_plainly()
# Markdown help: a docstring's paragraph is reflowed to the terminal's width (in typer's "rich"
# mode its own line breaks stayed, each line wrapped again: one-word lines at 80 columns), and
# `code` in it is shown as code.
app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode="markdown",
                  help="Pick the cheapest way to reach an LLM training target, by measuring it.")


def _version(value: bool) -> None:
    if value:
        from autotune import __version__

        console().print(f"autotune {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="print the version and exit")) -> None:
    """Pick the cheapest way to reach an LLM training target, by measuring it."""


def _register_commands() -> None:
    """Commands in the order `--help` lists them. Keep imports inside each command light (no torch)."""
    from autotune.cli import cost, estimate, export, plan, report, study, sweep, trial

    for module in (sweep, report, trial, estimate, study, cost, plan, export):
        module.register(app)


_register_commands()


def main() -> None:
    debug = "--debug" in sys.argv
    if debug:
        sys.argv.remove("--debug")
    try:
        app()
    except UserError as exc:
        if debug:
            raise
        _say_error(exc)
        sys.exit(EXIT_USER_ERROR)
    except KeyboardInterrupt:  # Ctrl-C outside a trial (opening the study, printing)
        console(stderr=True).print("interrupted")
        sys.exit(130)
    except Exception as exc:
        from autotune.run.reconnect import storage_lost_in

        lost = storage_lost_in(exc)
        if lost is None or debug:
            raise
        _say_error(lost)  # not the user's input: the server went away (autotune.run.reconnect)
        sys.exit(1)


def _say_error(exc: Exception) -> None:
    """One line on stderr, no traceback. Escaped: a message may hold brackets
    ("pip install 'autotune-llm[report]'")."""
    from rich.markup import escape

    console(stderr=True).print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
