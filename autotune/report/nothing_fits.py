"""When no config fits the memory limit: which came closest, and what would make it fit.

    note = nothing_fits_note(rows)     # rows: the report's TrialRows; None when something fit

What would make it fit is what the study's own trials leave open: a memory saver the closest
config lacks is suggested only while no trial that used it was measured over the limit (those
are named instead), and on CPU ranks a limit below what the ranks held before the model was
even built is said to be out of every config's reach (autotune.search.floor).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from autotune.format import fmt_bytes
from autotune.report.labels import config_summary
from autotune.report.schema import TrialRow
from autotune.search.floor import held_before_build, runtime_over_limit

Config = dict[str, Any]


def _mb(cfg: Config) -> int:
    return cfg.get("micro_batch_size") or 1


def _sharded(cfg: Config) -> bool:
    return (cfg.get("zero_stage") or 0) >= 3 or cfg.get("fsdp") not in (None, "none")


@dataclass(frozen=True)
class Saver:
    name: str  # as the "tried" list names it
    advice: Callable[[Config], str]  # what to add to the space, for this config
    lacks: Callable[[Config], bool]  # the config does not use it yet
    uses: Callable[[Config, Config], bool]  # (a trial's config, the closest one's)


# Most effective first.
SAVERS = (
    Saver("a smaller micro-batch",
          lambda c: f"a micro-batch below {_mb(c)} (add it to the space)",
          lambda c: _mb(c) > 1, lambda c, ref: _mb(c) < _mb(ref)),
    Saver("full activation checkpointing",
          lambda c: "activation checkpointing (checkpointing: [full])",
          lambda c: c.get("checkpointing") in (None, "none", "selective"),
          lambda c, ref: c.get("checkpointing") == "full"),
    Saver("ZeRO-3 or FSDP2",
          lambda c: "sharded states: ZeRO-3 or FSDP2 (zero_stage: [3] or fsdp: [full_shard])",
          lambda c: not _sharded(c), lambda c, ref: _sharded(c)),
    Saver("CPU offload",
          lambda c: "CPU offload of optimizer states (offload: [optimizer], with ZeRO 1-3)",
          lambda c: c.get("offload") in (None, "none"), lambda c, ref: c.get("offload") not in (None, "none")),
)
MORE_MEMORY = "more GPUs per trial, or a GPU with more memory"
NOTHING_FITS = "no config fits the memory limit"


def what_would_fit(config: Config) -> list[str]:
    """Memory savers this config does not use yet, most effective first."""
    return [s.advice(config) for s in SAVERS if s.lacks(config)] + [MORE_MEMORY]


def _over(rows: list[TrialRow]) -> list[TrialRow]:
    """Trials measured over their memory capacity."""
    return [r for r in rows if r.status == "oom" and r.peak_mem_bytes and r.mem_capacity_bytes]


def _closest(rows: list[TrialRow]) -> tuple[TrialRow, int, str] | None:
    """The out-of-memory (or held-back) trial whose peak came nearest its capacity: measured
    peaks first, predictions only when nothing was measured."""
    measured = [(r, r.peak_mem_bytes or 0, "measured") for r in _over(rows)]
    predicted = [(r, r.predicted_peak_mem_bytes, "predicted") for r in rows
                 if r.status == "prescreened" and r.predicted_peak_mem_bytes and r.mem_capacity_bytes]
    pool = measured or predicted
    if not pool:
        return None
    return min(pool, key=lambda p: p[1] / (p[0].mem_capacity_bytes or 1))


def _savers(rows: list[TrialRow], closest: TrialRow) -> tuple[list[str], list[str]]:
    """(advice on savers no trial has tried yet, "saver (trial N: peak)" for those tried and over)."""
    todo, tried = [], []
    for saver in SAVERS:
        if not saver.lacks(closest.config):
            continue
        # At a micro-batch no larger: a saver over the limit at a larger one says nothing here.
        users = [r for r in _over(rows) if saver.uses(r.config, closest.config)
                 and _mb(r.config) <= _mb(closest.config)]
        if users:
            best = min(users, key=lambda r: (r.peak_mem_bytes or 0) / (r.mem_capacity_bytes or 1))
            tried.append(f"{saver.name} (trial {best.number}: {fmt_bytes(best.peak_mem_bytes or 0)})")
        else:
            todo.append(saver.advice(closest.config))
    return todo + [MORE_MEMORY], tried


def nothing_fits_note(rows: list[TrialRow]) -> str | None:
    if any(r.status == "ok" for r in rows):
        return None
    found = _closest(rows)
    if found is None:
        return None
    row, peak, how = found
    capacity = row.mem_capacity_bytes or 1  # set on every row _closest keeps
    text = (f"{NOTHING_FITS}: the closest was trial {row.number} "
            f"({config_summary(row.config)}), {how} peak {fmt_bytes(peak)} per rank against "
            f"{fmt_bytes(capacity)} ({peak / capacity - 1:+.0%}).")
    floor = runtime_over_limit([(r.number, r.config, r.mem_before_build_bytes) for r in rows
                                if r.hardware == row.hardware], capacity)
    if floor:
        return f"{text} No config can fit: {held_before_build(*floor)}."
    todo, tried = _savers(rows, row)
    text += " To make it fit: " + "; ".join(todo) + "."
    if tried:
        text += " Tried, and over the limit too: " + ", ".join(tried) + "."
    return text
