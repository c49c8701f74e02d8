"""What the command modules share: the console and the help texts of shared options.

    console().print("...")            # stdout, no syntax highlighting
    console(stderr=True)
"""

from __future__ import annotations

STORAGE_HELP = "Optuna storage URL (default sqlite:///autotune.db in this folder)"


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)
