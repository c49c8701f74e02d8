"""How each measured config's runs fit the sweep's memory limit, in the report: notes on
configs that ran out of memory in some run, and each trial row's `memory_fit` (which
`autotune export` writes into bill.md).

    fits = runs_fit(trials)                  # autotune.search.verdict
    notes += memory_verdicts(options, fits, rows)   # and drops the configs whose typical peak
                                                    # is over; sets row.memory_fit
    fit_lines(MemoryFitRow(**row["memory_fit"]), row["config"], note)   # bill.md's memory paragraph
"""

from __future__ import annotations

from typing import Any

from autotune.format import fmt_bytes
from autotune.report.nothing_fits import what_would_fit
from autotune.report.schema import MemoryFitRow, OptionRow, TrialRow


def memory_verdicts(options: list[OptionRow], fits, rows: list[TrialRow]) -> list[str]:
    """A config whose typical peak is over the memory limit is not recommended, even when one
    of its runs fit (`fits`: autotune.search.verdict.runs_fit); one that ran out of memory in some
    run but typically fits is, with a note saying how likely the long run is to fit. Each row
    gets its config's fit (`attach_fits`)."""
    attach_fits(rows, fits)
    notes = []
    for o in options:
        f = fits.get(o.trial)
        if f is None or not f.oom_runs:
            continue
        o.feasible = o.feasible and f.recommendable
        verdict = "under it: still recommended" if f.recommendable else "over it: not recommended"
        note = (f"trial {o.trial}'s config ran out of memory in {f.oom_runs} of {f.runs} runs "
                f"against the limit {fmt_bytes(f.limit_bytes)} (its typical peak is {verdict}); "
                f"one more run fits with {f.p_run:.0%} chance")
        if note not in notes:
            notes.append(note)
    return notes


def attach_fits(rows: list[TrialRow], fits) -> None:
    """Each row's `memory_fit` from its config's RunsFit (`fits`: autotune.search.verdict.runs_fit)."""
    for row in rows:
        f = fits.get(row.number)
        if f is not None:
            row.memory_fit = MemoryFitRow(limit_bytes=f.limit_bytes, runs=f.runs, oom_runs=f.oom_runs,
                                          p_run=f.p_run, headroom=f.headroom)


def fit_text(fit: MemoryFitRow, machine: str | None = None) -> str:
    """How the config's runs met the limit, and the long run's chance to fit under it;
    `machine`, what the limit is where it is the machine's own memory, no smaller limit set
    (a trial row's mem_capacity_source: autotune.report.capacity)."""
    ran = (f"{fit.oom_runs} of this config's {fit.runs} runs ran out of memory under" if fit.oom_runs
           else f"this config's {fit.runs} run{'s' if fit.runs != 1 else ''} peaked under")
    whose = f" (the machine's own: {machine})" if machine else ""
    return (f"{ran} the memory limit {fmt_bytes(fit.limit_bytes)} per rank{whose}; one more run (the long "
            f"run) fits with {fit.p_run:.0%} chance")


def fit_lines(fit: MemoryFitRow, config: dict[str, Any], note: str | None = None,
              machine: str | None = None) -> list[str]:
    """bill.md's memory paragraph: the fit, and where the config lacks headroom, that the long
    run may run out of memory and what would give it some; `note`, the report's headroom note
    on this pick (autotune.report.picks.with_headroom), after it; `machine` as fit_text's."""
    text = f"Memory: {fit_text(fit, machine)}."
    if not fit.headroom:
        text += " **Little headroom**: the long run may run out of memory."
        savers = "; or ".join(what_would_fit(config)[:2])
        if savers not in (note or ""):  # the note names them where no config has headroom
            text += f" To give it some: {savers}."
    if note:
        text += f" The report: {note[0].upper()}{note[1:]}."
    elif not fit.headroom:
        text += " `autotune report` names the best config measured with headroom and what it costs."
    return [text, ""]
