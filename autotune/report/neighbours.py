"""What ran beside each trial, and what that cost: derived from the study, never stored twice.

    nbrs = neighbours(frozen)              # {trial number: [numbers of trials beside it]}
    rows = interference(frozen, nbrs)      # per config: tokens/s beside others vs alone
    beside_text(doc_row), interference_lines(doc)   # as the terminal and HTML reports show them

Two launched trials are neighbours when they ran on the same host (the slot's host, else the
controller's) and their runs overlapped (Optuna's start and completion times of the trial; for
one that recorded a lost trial's run from its folder, the lost trial's start and the run's wall
time).
A trial that reused a measurement, or that the prescreen held back, ran nothing: it has no
neighbours and is no one's. Trials side by side on disjoint slots still share the host's
memory bandwidth, caches, PCIe and power; the interference says how much that cost.

Interference of a config: the median tokens/s of its runs that had a neighbour over the median
of its runs alone, on the same hardware key (so the same slot size). Only configs measured both
ways have one: `autotune sweep --side-by-side` re-measures its picks alone for this.
"""

from __future__ import annotations

import math
import statistics
from datetime import datetime
from typing import Any

from autotune.record import TrialRecord
from autotune.report.schema import InterferenceRow


def _host(rec: TrialRecord) -> str | None:
    if rec.slot is not None:
        return rec.slot.host
    return rec.controller.host if rec.controller is not None else None


def _interval(t: Any, lost: Any = None, wall_s: float | None = None) -> tuple[float, float] | None:
    """When the trial's run ran: Optuna's start and completion times; for a trial that recorded
    a lost trial's run (`lost`), that trial's start and the run's `wall_s`."""
    if lost is not None and wall_s is not None and lost.datetime_start is not None:
        return lost.datetime_start.timestamp(), lost.datetime_start.timestamp() + wall_s
    start = getattr(t, "datetime_start", None)
    if start is None:
        return None
    end = getattr(t, "datetime_complete", None) or datetime.now(start.tzinfo)
    return start.timestamp(), end.timestamp()


def neighbours(frozen) -> dict[int, list[int]]:
    """For every launched trial, the launched trials on its host whose runs overlapped it."""
    by_number = {t.number: t for t in frozen}
    runs = []
    for t in frozen:
        rec = TrialRecord.of(t)
        span = _interval(t, by_number.get(rec.recovered_from), rec.wall_s)
        host = _host(rec)
        if rec.launched and span is not None and host is not None:
            runs.append((t.number, host, span))
    runs.sort(key=lambda r: r[2][0])
    out: dict[int, list[int]] = {n: [] for n, _, _ in runs}
    for i, (n, host, (s, e)) in enumerate(runs):
        for m, host2, (s2, e2) in runs[i + 1:]:
            if s2 >= e:  # sorted by start: no later run can overlap this one
                break
            if host2 == host and s < e2:
                out[n].append(m)
                out[m].append(n)
    return {n: sorted(v) for n, v in out.items()}


def interference(frozen, nbrs: dict[int, list[int]]) -> list[InterferenceRow]:
    """Per config measured both beside another trial and alone: the throughput ratio."""
    groups: dict[str, tuple[list[Any], list[Any]]] = {}
    for t in frozen:
        rec = TrialRecord.of(t)
        if t.number not in nbrs or rec.status != "ok" or not rec.tokens_per_s or not rec.config_key:
            continue
        beside, alone = groups.setdefault(rec.config_key, ([], []))
        (beside if nbrs[t.number] else alone).append((t.number, rec.tokens_per_s))
    rows = []
    for beside, alone in groups.values():
        if not beside or not alone:
            continue
        tps_beside = statistics.median(v for _, v in beside)
        tps_alone = statistics.median(v for _, v in alone)
        rows.append(InterferenceRow(
            trial=min(n for n, _ in beside + alone), runs_beside=[n for n, _ in beside],
            runs_alone=[n for n, _ in alone], tokens_per_s_beside=tps_beside,
            tokens_per_s_alone=tps_alone, beside_over_alone=tps_beside / tps_alone))
    return sorted(rows, key=lambda r: r.trial)


def interference_note(rows: list[InterferenceRow]) -> str | None:
    """What a reader must know when trials ran side by side and it mattered: a config with a
    run alone compares with one measured only beside others at that advantage."""
    from autotune.search.racing import TOLERANCE

    if not rows:
        return None
    ratio = statistics.median(r.beside_over_alone for r in rows)
    if abs(math.log(ratio)) <= math.log1p(TOLERANCE):
        return None
    return (f"trials ran side by side: beside another trial a config measured {abs(1 - ratio):.0%} "
            f"{'slower' if ratio < 1 else 'faster'} than alone (median of {len(rows)} configs); a "
            "config measured only beside others is compared with the leaders, measured alone too, "
            "at that disadvantage, so the pick can differ from a sweep one at a time")


# -- as the report shows them (terminal and HTML)


def beside_text(r: dict[str, Any]) -> str:
    """'#3, #5' for the trials that ran beside this one; 'alone' for a launched trial without."""
    if r.get("neighbours"):
        return _numbers(r["neighbours"])
    return "alone" if r.get("slot") else "-"


def _numbers(ns: list[int]) -> str:
    return ", ".join(f"#{n}" for n in ns)


def interference_lines(doc: dict[str, Any]) -> list[str]:
    """One line per config measured beside other trials and alone."""
    return [f"interference (config of #{i['trial']}): {100 * (i['beside_over_alone'] - 1):+.0f}% tokens/s "
            f"beside other trials, {i['tokens_per_s_beside']:,.0f} ({_numbers(i['runs_beside'])}) vs "
            f"{i['tokens_per_s_alone']:,.0f} alone ({_numbers(i['runs_alone'])})"
            for i in doc.get("interference") or []]
