"""Names a user gives that become folder names or shell words: one rule for each.

    study_name("llama-8b")        # returns it; ValueError with the fix for "../x", "a/b", ""
    check_study_name(name, "--study")   # the same as a UserError (exit 2), naming the flag
    catalog_name("lambda-h100-8x")      # offer and GPU names in a catalog

A study's name is the folder its trials run in (`autotune_runs/STUDY/`), so it may not climb
out of the runs folder, be absolute, or alias another name (`x`, `x/`, `./x`).
"""

from __future__ import annotations

import re

from autotune.errors import UserError

# Letters, digits, '.', '_', '-'; starts with a letter or digit (so never '.', '..' or a
# hidden folder); at most 100 characters (one path component on every filesystem).
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def study_name(name: str) -> str:
    if not isinstance(name, str) or not _SAFE.fullmatch(name) or ".." in name:
        raise ValueError(
            f"study name {name!r} is not allowed: it names the study's folder, so it takes "
            "letters, digits, '.', '_' and '-' only, starts with a letter or digit, has no '..', "
            "and is at most 100 characters (e.g. llama-8b_run2)")
    return name


def check_study_name(name: str, where: str = "--study") -> str:
    """`study_name` for a command-line value: a UserError naming the flag."""
    try:
        return study_name(name)
    except ValueError as exc:
        raise UserError(f"{where}: {exc}", fix="choose a name like llama-8b_run2") from None


def catalog_name(name: str) -> str:
    """Offer and GPU type names: they appear in exported shell scripts and are typed as
    `--offer NAME` / `--gpu NAME`, so the same safe set as study names."""
    if not isinstance(name, str) or not _SAFE.fullmatch(name):
        raise ValueError(f"name {name!r} is not allowed: use letters, digits, '.', '_' and '-' "
                         "only, starting with a letter or digit (e.g. lambda-h100-8x)")
    return name
