"""What a study measures, stored with it by its first sweep: the workload, sequence length,
target, batch policy and search space. A later sweep of the same study with another of these
is refused before any trial: its trials would be ranked against ones of another training run
(priced to another target, at another sequence length), and export would hand back the old
run's settings. Optuna's sampler fails outright on a dimension whose choices changed.

    check_same_study(study, spec)   # UserError (exit 2) naming what changed; records it the first time

What may change between sweeps of one study: the trial's measurement settings, memory limits,
budget, catalog and offers (the report prices every trial again with the latest).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autotune.errors import UserError
from autotune.spec import SweepSpec

IDENTITY_ATTR = "autotune_identity"


def _workload(spec: SweepSpec) -> dict[str, Any]:
    """The model a trial builds, by what it is rather than where it was read from (a worker on
    another machine reads the same config.json at another path)."""
    wl = spec.workload
    if wl.kind == "gpt":
        return {"kind": "gpt", "shape": wl.resolved_shape().model_dump(mode="json")}
    doc = wl.model_dump(mode="json")
    if wl.kind == "hf" and wl.config_path:
        try:
            doc["config_path"] = json.loads(Path(wl.config_path).read_text())
        except (OSError, ValueError):  # preflight names an unreadable file; keep the path then
            pass
    return doc


def study_identity(spec: SweepSpec) -> dict[str, Any]:
    """The study-defining part of `spec`, as JSON values (what the study stores)."""
    from autotune.search.space_file import load_space

    doc = {"workload": _workload(spec), "seq_len": spec.seq_len,
           "target": spec.target.model_dump(mode="json"), "batch": spec.batch.model_dump(mode="json"),
           "space": load_space(spec.space, spec.source).model_dump(mode="json")}
    return json.loads(json.dumps(doc))  # as stored and read back: lists, not tuples


def _short(value: Any, width: int = 60) -> str:
    text = json.dumps(value, separators=(", ", ": ")) if not isinstance(value, str) else value
    return text if len(text) <= width else text[:width - 1] + "…"


def describe_changes(stored: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """'seq_len 128 -> 256', 'space: micro_batch_size [1, 2] -> [1, 2, 4]': one per change,
    a dict's changed keys one level down."""
    out = []
    for key in now:
        old, new = stored.get(key), now[key]
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            inner = [f"{k} {_short(old.get(k))} -> {_short(new.get(k))}"
                     for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
            out.append(f"{key}: {'; '.join(inner)}")
        else:
            out.append(f"{key} {_short(old)} -> {_short(new)}")
    return out


def check_same_study(study: Any, spec: SweepSpec) -> None:
    """Refuse a sweep of `study` with a spec that measures something else than the study's
    first sweep did; record the identity on a study that has none (a new one, or one an older
    autotune made: its trials cannot be checked, later sweeps are)."""
    now = study_identity(spec)
    stored = study.user_attrs.get(IDENTITY_ATTR)
    if stored is None:
        study.set_user_attr(IDENTITY_ATTR, now)
        return
    changes = describe_changes(stored, now)
    if changes:
        raise UserError(f"study '{study.study_name}' was swept with another spec ({'; '.join(changes)}); "
                        "its trials would be ranked against this spec's",
                        fix="sweep it with the spec it was made with, or give this spec a study of its "
                            "own (--study NAME, or `study:` in the spec)")
