"""The live view of a running sweep: trials done / running / pruned / failed, the current best
by cost and by time, and what the search has cost so far.

    progress = SweepProgress(console, study, n_trials=8)
    with progress:                                   # a rich Live panel under the trial lines
        run_sweep(spec, study, 8, runs, on_trial=progress.wrap(on_trial))

The study is read only from the thread that runs the sweep (in `wrap`'s callback), never from
rich's refresh thread: the panel shows the last snapshot plus a clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from autotune.format import fmt_hours, fmt_usd
from autotune.record import TrialRecord
from autotune.report.labels import config_summary

if TYPE_CHECKING:
    from rich.live import Live


@dataclass
class Snapshot:
    complete: int = 0
    pruned: int = 0
    failed: int = 0
    running: int = 0
    cheapest: tuple[int, float, float, str] | None = None  # (trial, usd, hours, config)
    fastest: tuple[int, float, float, str] | None = None
    search_gpu_hours: float = 0.0
    search_usd: float | None = None
    unpriced: bool = False
    finished_here: int = 0
    notes: list[str] = field(default_factory=list)


def snapshot(study, finished: dict[int, str] | None = None) -> Snapshot:
    """Counts and bests from the storage (every machine's trials). `finished` maps trial
    numbers this process has just finished (still RUNNING in storage until the objective
    returns) to how they ended: ok, pruned or failed."""
    finished = finished or {}
    snap = Snapshot()
    for t in study.get_trials(deepcopy=False):
        state = t.state.name
        rec = TrialRecord.of(t)
        if state == "RUNNING" and t.number in finished:
            state = {"ok": "COMPLETE", "failed": "FAIL"}.get(finished[t.number], "PRUNED")
        if state == "COMPLETE":
            snap.complete += 1
        elif state == "PRUNED":
            snap.pruned += 1
        elif state == "FAIL":
            snap.failed += 1
        elif state == "RUNNING":
            snap.running += 1
        if rec.search_usd is not None:
            snap.search_usd = (snap.search_usd or 0.0) + rec.search_usd
        elif rec.search_gpu_hours:
            snap.unpriced = True
        snap.search_gpu_hours += rec.search_gpu_hours or 0.0
        score = rec.score
        if state != "COMPLETE" or score is None or _violates(t):
            continue
        row = (t.number, score.usd, score.hours, config_summary(rec.config or {}))
        if snap.cheapest is None or row[1] < snap.cheapest[1]:
            snap.cheapest = row
        if snap.fastest is None or row[2] < snap.fastest[2]:
            snap.fastest = row
    return snap


def _violates(t) -> bool:
    """A constraint above zero: over the budget or the deadline (Optuna's convention)."""
    return any(v > 0 for v in (getattr(t, "constraints", None) or {}).values())


class SweepProgress:
    """A rich Live panel; `wrap(on_trial)` keeps it current after every finished trial."""

    def __init__(self, console, study, n_trials: int):
        self.console = console
        self.study = study
        self.n_trials = n_trials
        self.t0 = time.monotonic()
        self.finished: dict[int, str] = {}
        self.no_run: set[int] = set()
        self.snap = Snapshot()
        self.current_since = time.monotonic()
        self._live: Live | None = None

    # rich calls this on every refresh (from its own thread): no storage access here.
    def __rich__(self):
        from rich.table import Table

        s = self.snap
        t = Table.grid(padding=(0, 2))
        t.add_column(style="bold")
        t.add_column()
        elapsed = time.monotonic() - self.t0
        free = len(self.no_run)
        launched = len(self.finished) - free
        t.add_row("sweep", f"{launched}/{self.n_trials} trials run here"
                           + (f" (+{free} reused or held back: no run)" if free else "") + ", "
                           f"{_clock(elapsed)} elapsed; current trial running for "
                           f"{_clock(time.monotonic() - self.current_since)}")
        t.add_row("study", f"{s.complete} done, {s.running} running, {s.pruned} pruned, {s.failed} failed")
        t.add_row("cheapest", _best(s.cheapest))
        t.add_row("fastest", _best(s.fastest))
        cost = (f"{fmt_usd(s.search_usd)}" if s.search_usd is not None else "not priced")
        if s.unpriced and s.search_usd is not None:
            cost += " (some trials not priced)"
        t.add_row("search cost", f"{cost} for {s.search_gpu_hours:.3f} rank-hours of trials")
        return t

    def refresh(self) -> None:
        """Re-read the study (call from the sweep's thread only)."""
        try:
            self.snap = snapshot(self.study, self.finished)
        except Exception as exc:  # a storage hiccup must not stop the sweep; say so in the panel
            self.snap.notes = [f"progress not refreshed: {type(exc).__name__}"]

    def wrap(self, on_trial: Callable[[Any], None] | None) -> Callable[[Any], None]:
        def _on_trial(outcome) -> None:
            r = outcome.result
            status = r.status.value
            self.finished[outcome.number] = ("ok" if r.ok and outcome.usd is not None
                                             else "failed" if status == "crash" else "pruned")
            if not outcome.launched:
                self.no_run.add(outcome.number)  # measured nothing: not counted against n_trials
            if on_trial is not None:
                on_trial(outcome)
            self.refresh()
            self.current_since = time.monotonic()
            if self._live is not None:
                self._live.refresh()

        return _on_trial

    def __enter__(self) -> "SweepProgress":
        from rich.live import Live

        self.refresh()
        self.current_since = time.monotonic()
        # On a terminal the panel redraws twice a second; piped output gets the trial lines
        # only (a redrawn panel would be noise in a log file).
        if self.console.is_terminal:
            self._live = Live(self, console=self.console, refresh_per_second=2, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _best(row: tuple[int, float, float, str] | None) -> str:
    if row is None:
        return "no completed trial within the limits yet"
    number, usd, hours, cfg = row
    return f"trial {number}: {fmt_usd(usd)}, {fmt_hours(hours)}  ({cfg})"
