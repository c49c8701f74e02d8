"""Errors a user can cause. The CLI prints them without a traceback and exits 2.

    raise UserError("spec.yaml: field `target.tokens` must be > 0", fix="set a positive number")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

EXIT_USER_ERROR = 2


class UserError(Exception):
    """Bad input from a user: a file, a flag, a URL. Message names what is wrong and the fix."""

    def __init__(self, message: str, fix: str | None = None):
        self.message = message
        self.fix = fix
        super().__init__(self.__str__())

    def __str__(self) -> str:
        return f"{self.message}. To fix: {self.fix}" if self.fix else self.message


def format_validation_error(source: str | Path, exc: Any) -> str:
    """Turn a pydantic ValidationError into 'FILE: field `a.b`: message' lines."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
        msg = err.get("msg", "invalid")
        msg = msg.removeprefix("Value error, ")
        lines.append(f"{source}: field `{loc}`: {msg}" if loc else f"{source}: {msg}")
    return "\n".join(lines)


def load_yaml_file(path: str | Path, what: str) -> Any:
    """Read a YAML file a user gave us, turning every failure into a UserError."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise UserError(f"{what} file '{p}' does not exist", fix="check the path")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise UserError(f"{p}: not valid YAML{where}: {getattr(exc, 'problem', exc)}",
                        fix="correct the YAML syntax") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{p}: expected a mapping at the top level, got {type(data).__name__}",
                        fix="write the file as `key: value` lines")
    return data


def require_extra(modules: tuple[str, ...], extra: str, for_what: str) -> None:
    """A UserError naming the pip command when an optional dependency (an extra of
    pyproject.toml) is missing, instead of an ImportError traceback later.

        require_extra(("plotly",), "report", "report --html")"""
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            raise UserError(f"{for_what} needs the Python package '{module}', which is not installed",
                            fix=f"pip install 'autotune-llm[{extra}]' "
                                f"(from a checkout: pip install '.[{extra}]')") from None
