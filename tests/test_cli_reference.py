"""The command-line reference (docs/cli_reference.md) is generated from the Typer commands,
so every flag `--help` documents is documented there too: the committed page matches what
the commands say now (`python scripts/cli_reference.py` rewrites it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("cli_reference", REPO / "scripts" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_cli_reference_is_the_generated_one():
    gen = _generator()
    assert gen.DOC.read_text() == gen.render(), "docs/cli_reference.md is stale: run python scripts/cli_reference.py"


def test_every_command_and_flag_is_on_the_page():
    gen = _generator()
    page = gen.render()

    def walk(path: list[str], cmd) -> None:
        assert f"## `{' '.join(path)}`" in page or hasattr(cmd, "commands"), path
        for p in cmd.params:
            for flag in p.opts if p.param_type_name == "option" else [p.name.upper()]:
                assert f"`{flag}`" in page, (path, flag)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk([*path, name], sub)

    walk(["autotune"], gen.root_command())
    for flag in ("--top", "--to-study", "--checkpoint-gb", "--layers"):  # once only in --help
        assert f"`{flag}`" in page


def test_a_changed_help_makes_the_page_stale():
    gen = _generator()
    root = gen.root_command()
    assert gen.render(root) == gen.DOC.read_text()
    trials = next(p for p in root.commands["sweep"].params if p.name == "trials")
    trials.help = "changed"
    assert gen.render(root) != gen.DOC.read_text()
