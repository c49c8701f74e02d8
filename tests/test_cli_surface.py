"""The public command line, pinned: every command and sub-command with its arguments and
options (flags, defaults, required, multiple). The surface changes on purpose only; after an
intended change, regenerate the pin and review its diff:

    python -c "from tests.test_cli_surface import write_pin; write_pin()"
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any

PINNED = Path(__file__).parent / "data" / "cli_surface.json"


def _default(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_default(v) for v in value]
    return value if value is None or isinstance(value, (str, int, float, bool)) else repr(value)


def _command(cmd) -> dict[str, Any]:
    # Typer's own click objects (typer vendors click): read by duck typing.
    out: dict[str, Any] = {}
    if hasattr(cmd, "commands"):  # a group; its own options too (`autotune catalog --json`)
        out["commands"] = {name: _command(sub) for name, sub in sorted(cmd.commands.items())}
    params = []
    for p in cmd.params:
        ann = p.type_descriptor.annotation
        entry = {"name": p.name, "kind": p.param_type_name,
                 "flags": sorted(p.opts + p.secondary_opts), "required": p.required,
                 "multiple": bool(p.multiple), "default": _default(p.default),
                 "type": getattr(ann, "__name__", str(ann))}
        if isinstance(ann, type) and issubclass(ann, Enum):
            entry["choices"] = [c.value for c in ann]
        for bound in ("min", "max"):
            if getattr(p, bound, None) is not None:
                entry[bound] = getattr(p, bound)
        params.append(entry)
    out["params"] = params
    return out


def current_surface() -> dict[str, Any]:
    import typer.main

    from autotune.cli import app

    return _command(typer.main.get_command(app))


def test_cli_surface_is_pinned():
    assert PINNED.is_file(), "missing pinned CLI surface; run write_pin()"
    assert json.loads(PINNED.read_text()) == json.loads(json.dumps(current_surface()))


def test_the_pin_sees_a_changed_flag():
    # The check can fail: an option renamed on a real command no longer matches the pin.
    surface = current_surface()
    sweep = surface["commands"]["sweep"]["params"]
    trials = next(p for p in sweep if p["name"] == "trials")
    trials["flags"] = ["--n-trials"]
    assert surface != json.loads(PINNED.read_text())


def write_pin() -> None:
    PINNED.parent.mkdir(parents=True, exist_ok=True)
    PINNED.write_text(json.dumps(current_surface(), indent=1, sort_keys=True) + "\n")
