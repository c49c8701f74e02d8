"""Errors a user can cause. The CLI prints them without a traceback and exits 2.

    raise UserError("spec.yaml: field `target.tokens` must be > 0", fix="set a positive number")
    did_you_mean("h100", ["h200", "h100-sxm", "h100-pcie"])   # " (did you mean 'h100-sxm' or 'h100-pcie'?)"
"""

from __future__ import annotations

import difflib
import re
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
        if not self.fix or all("To fix:" in line for line in self.message.splitlines() or [""]):
            return self.message  # a field's own fix (a validator's message) says more than a generic one
        return f"{self.message.rstrip('.')}. To fix: {self.fix}"


# At most this many names offered when several start with what was typed.
MAX_SUGGESTIONS = 3


def did_you_mean(name: str, choices: list[str], cutoff: float = 0.6) -> str:
    """The hint after an unknown name: "" or " (did you mean 'a' or 'b'?)". The same name in
    other case first; then the names that start with it (a user types "h100" for "h100-sxm",
    which spelling similarity alone ranks below "h200"); then the closest spelling
    (difflib's ratio of at least `cutoff`)."""
    lower = {c.lower(): c for c in choices}
    typed = str(name).lower()
    close = [lower[typed]] if typed in lower else []
    if not close and len(typed) >= 2:
        close = [c for c in choices if c.lower().startswith(typed)][:MAX_SUGGESTIONS]
    if not close:
        close = [lower[c] for c in difflib.get_close_matches(typed, list(lower), n=1, cutoff=cutoff)]
    if not close:
        return ""
    names = [repr(c) for c in close]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    return f" (did you mean {listed}?)"


# pydantic's wording of a missing and of an unknown field, and what a user reads instead.
_PLAIN_WHOLE = {"Field required": "missing: it is required",
                "Extra inputs are not permitted": "not a field here"}


def plain_message(msg: str) -> str:
    """A pydantic error message in words, wherever one reaches a user (a spec file, a flag, a
    Python argument): without "Value error, " (a validator's own message follows it), "Input
    should be ..." read "must be ...", "a valid integer, unable to parse string as an
    integer" said once, and a missing or unknown field called so (_PLAIN_WHOLE)."""
    msg = msg.removeprefix("Value error, ")
    if msg.startswith("Input should be "):
        msg = "must be " + msg.removeprefix("Input should be ")
    msg = msg.split(", unable to parse string as ")[0]
    return _PLAIN_WHOLE.get(msg, msg)


def format_validation_error(source: str | Path, exc: Any, model: Any = None) -> str:
    """Turn a pydantic ValidationError into 'FILE: field `a.b`: message' lines. With `model`
    (the pydantic model validated), an unknown field gets "did you mean 'x'?" when one of the
    fields allowed at that place is close to it."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in _shown_loc(model, tuple(err.get("loc", ()))) if p != "__root__")
        msg = plain_message(err.get("msg", "invalid"))
        if model is not None and err.get("type") == "extra_forbidden" and err.get("loc"):
            msg += _did_you_mean(model, tuple(err["loc"]))
        msg += _did_you_mean_choice(err)
        lines.append(f"{source}: field `{loc}`: {msg}" if loc else f"{source}: {msg}")
    return "\n".join(lines)


def _did_you_mean(model: Any, loc: tuple) -> str:
    """" (did you mean 'seq_len'?)" for the unknown key loc[-1], or "" when nothing is close."""
    unknown = loc[-1]
    if not isinstance(unknown, str):
        return ""
    return did_you_mean(unknown, sorted({n for m in _models_at(model, loc[:-1]) for n in _field_names(m)}))


def _did_you_mean_choice(err: dict) -> str:
    """" (did you mean 'full_shard'?)" for a mistyped choice: an enum or Literal value
    (`fsdp: [full-shard]`, `launcher: torchrn`) or a union's tag (`kind: gtp`), from the
    quoted choices pydantic lists in the error; "" for any other error."""
    ctx = err.get("ctx") or {}
    if err.get("type") in ("enum", "literal_error"):
        typed, expected = err.get("input"), ctx.get("expected", "")
    elif err.get("type") == "union_tag_invalid":
        typed, expected = ctx.get("tag"), ctx.get("expected_tags", "")
    else:
        return ""
    if not isinstance(typed, str) or not isinstance(expected, str):
        return ""
    return did_you_mean(typed, re.findall(r"'([^']*)'", expected))


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and hasattr(tp, "model_fields")


def _field_names(model: Any) -> set[str]:
    """The keys a model accepts: each field's alias, and its name unless only the alias is."""
    by_name = model.model_config.get("populate_by_name") or model.model_config.get("validate_by_name")
    names = set()
    for name, field in model.model_fields.items():
        if field.exclude is True:  # internal (SweepSpec.source): not a key to suggest
            continue
        alias = field.validation_alias if isinstance(field.validation_alias, str) else field.alias
        names.update([alias] if alias else [])
        names.update([name] if not alias or by_name else [])
    return names


def _types_in(tp: Any) -> list:
    """The types an annotation may hold: Annotated unwrapped, a Union or `X | None` split."""
    import types
    import typing

    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _types_in(typing.get_args(tp)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [t for a in typing.get_args(tp) for t in _types_in(a)]
    return [tp]


def _models_at(model: Any, path: tuple) -> list:
    """The pydantic models a validation error's `loc` prefix leads to from `model`: by field
    name or alias, through a union's tag (`workload.gpt`: the member whose Literal field is
    'gpt', or named so), and through a list's index or a dict's key."""
    import typing

    current = [model]
    for part in path:
        nxt = []
        for tp in current:
            if _is_model(tp):
                field = next((f for n, f in tp.model_fields.items() if part in (n, f.alias)), None)
                if field is not None:
                    nxt += _types_in(field.annotation)
                elif part == tp.__name__ or part in _literals(tp):
                    nxt.append(tp)  # a union member's tag: the same model, one step on
            elif typing.get_origin(tp) in (list, tuple, set, frozenset, dict) and typing.get_args(tp):
                nxt += _types_in(typing.get_args(tp)[-1])
        current = nxt
    return [t for t in current if _is_model(t)]


def _shown_loc(model: Any, loc: tuple) -> tuple:
    """`loc` as the file spells it: without a union's tag, which pydantic puts in (a spec's
    `workload: {kind: gpt, bogus: 1}` errs at `workload.gpt.bogus`; the file has no `gpt` key)."""
    if model is None:
        return loc
    return tuple(part for i, part in enumerate(loc)
                 if not any(_is_model(tp) and part not in tp.model_fields and
                            (part == tp.__name__ or part in _literals(tp))
                            for tp in _models_at(model, loc[:i])))


def _literals(model: Any) -> set:
    """Every value of the model's Literal fields (a discriminated union's tags)."""
    import typing

    return {v for f in model.model_fields.values() if typing.get_origin(f.annotation) is typing.Literal
            for v in typing.get_args(f.annotation)}


def read_text_file(path: str | Path, what: str, fix: str = "check the path") -> str:
    """The text of a file a user gave us, read as UTF-8 (a byte-order mark is dropped); a
    missing path (`fix`), a folder, an unreadable file or one that is not UTF-8 text (UTF-16,
    Latin-1, binary) is a UserError naming it.

        read_text_file("spec.yaml", "spec")   # "spec.yaml: not UTF-8 text (...)" if it is not"""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{what} file '{p}' is a folder, not a file",
                        fix=f"give the path of the {what} file itself, not of the folder holding it")
    if not p.is_file():
        raise UserError(f"{what} file '{p}' does not exist", fix=fix)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {what} file '{p}': {exc.strerror or exc}",
                        fix="check the file's permissions") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        utf16 = data[:2] in (b"\xff\xfe", b"\xfe\xff")
        why = ("it starts with a UTF-16 byte-order mark" if utf16
               else f"byte 0x{exc.object[exc.start]:02x} at offset {exc.start + len(data) - len(exc.object)}")
        raise UserError(f"{p}: not UTF-8 text ({why})",
                        fix=f"save the {what} file as UTF-8 (e.g. `iconv -f {'UTF-16' if utf16 else 'LATIN1'} "
                            f"-t UTF-8 '{p}' > new-file`), or give the right file") from None


def load_yaml_file(path: str | Path, what: str, empty_fix: str | None = None) -> Any:
    """Read a YAML file a user gave us, turning every failure into a UserError. An empty file
    (or one of comments only) reads as {}, or, given `empty_fix`, is refused with that fix: a
    file of all defaults is a mistake for some kinds (a catalog with no offers)."""
    import yaml

    p = Path(path)
    text = read_text_file(p, what)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise UserError(f"{p}: not valid YAML{where}: {getattr(exc, 'problem', exc)}",
                        fix="correct the YAML syntax") from None
    if data is None and empty_fix is not None:
        raise UserError(f"{what} file '{p}' is empty (no `key: value` line)", fix=empty_fix)
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
