"""Write docs/cli_reference.md from the command line itself: every command and sub-command
with its arguments and options (flags, type, default, help), as `--help` shows them.

    python scripts/cli_reference.py            # rewrite docs/cli_reference.md
    python scripts/cli_reference.py --check    # exit 1 when the committed file is stale

The help texts live on the Typer options; this page is only their rendering, so a flag that
`--help` documents is documented here too, and changes in one place.
tests/test_cli_reference.py runs --check.
"""

from __future__ import annotations

import sys
import typing
from enum import Enum
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import doc_page  # noqa: E402

DOC = REPO / "docs" / "cli_reference.md"
HEAD = """# Command-line reference

Every `autotune` command with its arguments and options, generated from the command line
itself by `scripts/cli_reference.py` (`--help` on any command prints the same). The sweep
spec's fields are in [spec_reference.md](spec_reference.md). A wrong flag or value exits
with code 2 and one message saying what to fix.
"""


def _cell(text: str) -> str:
    """Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _type_name(p) -> str:
    ann = p.type_descriptor.annotation
    if typing.get_origin(ann) in (list, tuple):  # a repeatable option: its values' type
        ann = typing.get_args(ann)[0]
    if isinstance(ann, type) and issubclass(ann, Enum):
        return " \\| ".join(str(c.value) for c in ann)
    name = getattr(ann, "__name__", None) or str(ann)
    if getattr(p, "is_flag", False):
        return "flag"
    return {"Path": "path", "str": "text", "int": "integer", "float": "number"}.get(name, name)


def _default(p) -> str:
    value = p.default
    if getattr(p, "is_flag", False) or value is None or value == () or value == []:
        return ""
    if isinstance(value, Enum):
        value = value.value
    return f"`{value}`"


def _flags(p) -> str:
    if p.param_type_name == "argument":
        return f"`{p.name.upper()}`" + ("" if p.required else " (optional)")
    flags = ", ".join(f"`{f}`" for f in [*p.opts, *p.secondary_opts])
    bounds = [f"{b} {getattr(p, b)}" for b in ("min", "max") if getattr(p, b, None) is not None]
    extra = [*bounds] + (["repeatable"] if getattr(p, "multiple", False) else []) + (
        ["required"] if p.required else [])
    return flags + (f" ({', '.join(extra)})" if extra else "")


def _command_section(path: list[str], cmd) -> list[str]:
    lines = [f"## `{' '.join(path)}`", ""]
    if cmd.help:
        lines += [cmd.help.strip(), ""]
    params = [p for p in cmd.params if not getattr(p, "hidden", False)]
    if params:
        lines += ["| argument / option | type | default | what it does |", "|---|---|---|---|"]
        lines += [f"| {_flags(p)} | {_type_name(p)} | {_default(p)} | {_cell(getattr(p, 'help', None) or '')} |"
                  for p in params]
        lines.append("")
    return lines


def _walk(path: list[str], cmd) -> list[str]:
    """A command's section, then its sub-commands' in the order `--help` lists them."""
    if not hasattr(cmd, "commands"):
        return _command_section(path, cmd)
    lines = _command_section(path, cmd) if len(path) > 1 or cmd.params else []
    for name in cmd.list_commands(None):
        lines += _walk([*path, name], cmd.commands[name])
    return lines


def root_command():
    """The `autotune` command as click sees it (Typer builds it anew on each call)."""
    import typer.main

    from autotune.cli import app

    return typer.main.get_command(app)


def render(root=None) -> str:
    body = _walk(["autotune"], root if root is not None else root_command())
    return HEAD + "\n" + "\n".join(body).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    return doc_page.main(DOC, render, __doc__, "scripts/cli_reference.py", argv)


if __name__ == "__main__":
    sys.exit(main())
