"""A sweep on this machine: recover dead trials, enqueue baselines, then propose, measure and
score trials until `n_trials` have been launched or the search budget says stop.

    study = open_study("sqlite:///autotune.db", "default")          # autotune.search.study
    summary = run_sweep(spec, study, n_trials=8, runs_dir=Path("autotune_runs/default"))
    summary = run_sweep(spec, study, 8, runs, runner=replay)        # another TrialRunner

Several machines, one study: every `autotune sweep` with the same storage and study name joins
it. Each trial records the machine (`hardware`: the key that keeps GPU types apart in scoring
and reports; `machine`: the full fingerprint), so results from different hardware are scored
separately. `n_trials` counts launched trials: a proposal that reuses a measured config
(autotune.search.reuse) or that the memory prescreen holds back (autotune.search.calibration)
measures nothing and costs nothing; a sweep stops early once every config of a listable
space has been tried (autotune.search.strategy).
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from autotune.contract import TrialConfig
from autotune.errors import UserError
from autotune.record import TrialRecord
from autotune.run.launch import TrialRunner
from autotune.run.processes import recover_dead_trials
from autotune.search.budget import RepeatedError, SearchBudget
from autotune.search.machine import MachineSpace
from autotune.search.objective import TrialCrashed, TrialOutcome, make_objective, rank_hour_price_usd
from autotune.search.racing import Racing
from autotune.search.strategy import LOCAL_MOVE_EVERY, MAX_IDLE_PROPOSALS, LocalMoves, enqueue_baselines
from autotune.spec import SweepSpec


@dataclass
class SweepSummary:
    trials_run: int = 0  # launched here: each ran its own measurement
    trials_ok: int = 0  # of those, measured successfully
    proposals: int = 0  # Optuna trials here, including reused and prescreened ones
    stop_reason: str | None = None
    interrupted: bool = False
    recovered: list[int] = field(default_factory=list)
    baselines_enqueued: int = 0


class _Interrupt:
    """First Ctrl-C: finish the running trial, then stop. Second: fail it now (its process
    group is killed by autotune.run.launch) and stop; the study stays consistent either way."""

    def __init__(self, note: Callable[[str], None] | None):
        self.requested = False
        self.note = note
        self.previous: Any = None

    def __enter__(self) -> "_Interrupt":
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        if self.note:
            self.note("Ctrl-C: finishing the running trial, then stopping (Ctrl-C again to stop now)")

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


def remeasure_reserve(spec: SweepSpec, n_trials: int) -> int:
    """How many of this invocation's trials may go to re-measuring (`budget.remeasure_trials`,
    default half: on the DeepSpeed-style space, whose optimum the baselines find and whose
    leading configs lie within 2 runs' noise, half lifted pick accuracy from 38 to 44 of 60
    replays (41 to 44 held out) at --trials 8, and left the 40- and 252-config spaces at 60/60;
    on its truth measured before trials had huge pages and a 2 s window, where one run's sd was
    0.057: git history of docs/benchmarks.md)."""
    if spec.budget.remeasure_trials is not None:
        return min(spec.budget.remeasure_trials, n_trials)
    return n_trials // 2


def _queued(study) -> bool:
    """Trials wait in the queue, or a repeat runs (on any machine of the study): racing waits
    for them rather than queue a second block of the same rivals."""
    from optuna.trial import TrialState

    return bool(study.get_trials(deepcopy=False, states=(TrialState.WAITING,))) or any(
        TrialRecord.of(t).repeat_of is not None
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))


def _race(study, racing: Racing, remaining: int, everything_tried: bool = False) -> bool:
    """Queue a block of repeats when racing wants one now (True)."""
    members = racing.block(study, remaining, everything_tried)
    if members:
        racing.enqueue(study, members)
    return bool(members)


def run_sweep(spec: SweepSpec, study, n_trials: int, runs_dir: Path,
              on_trial: Callable[[TrialOutcome], None] | None = None,
              note: Callable[[str], None] | None = None, runner: TrialRunner | None = None,
              catalog=None, baselines: bool = True) -> SweepSummary:
    """Run up to `n_trials` trials of `study` on this machine, within the spec's budget.

    `runner`: what runs a trial (default: the launcher; a benchmark replay answers from its
    table). `catalog`: the sweep's catalog, loaded once (None: the spec's, loaded here).
    `baselines`: False leaves the first trials to the sampler (to measure what it finds alone)."""
    from autotune.pricing.load import load_catalog

    catalog = catalog if catalog is not None else load_catalog(spec.platforms.catalog)
    ms = MachineSpace.for_spec(spec, catalog)
    summary = SweepSummary()
    summary.recovered = recover_dead_trials(study, note)
    budget = SearchBudget(spec, ms.hardware)
    if spec.budget.search_usd is not None:
        probe = TrialConfig(workload=spec.workload, device=ms.hardware.device_kind,
                            threads_per_rank=spec.trial.threads_per_rank)
        if rank_hour_price_usd(spec, probe, catalog) is None:
            raise UserError("budget.search_usd is set but this machine's hardware has no price "
                            "in the catalog", fix="set budget.search_price_usd_per_gpu_hour")
    summary.stop_reason = budget.exhausted(study)
    if summary.stop_reason:
        return summary
    summary.baselines_enqueued = enqueue_baselines(study, spec, ms) if baselines else 0
    objective = make_objective(spec, runs_dir, on_trial, note, machine=ms, runner=runner,
                               catalog=catalog)

    moves = LocalMoves(spec, ms, seed=spec.seed)
    racing = Racing(ms.hardware, catalog, remeasure_reserve(spec, n_trials),
                    spec.budget.remeasure_trials != 0, spec.budget.max_usd, spec.budget.deadline_hours)
    same_error = RepeatedError()

    with _Interrupt(note) as interrupt:
        idle = 0  # proposals in a row that launched nothing

        def after_trial(st, frozen) -> None:
            nonlocal idle
            summary.proposals += 1
            rec = TrialRecord.of(frozen)
            launched = rec.launched
            if launched:
                summary.trials_run += 1
                summary.trials_ok += rec.status == "ok"
                same_error.add(rec, frozen.number)
                idle = 0
            else:
                idle += 1
            if interrupt.requested:
                summary.stop_reason, summary.interrupted = "interrupted (Ctrl-C)", True
                st.stop()
                return
            reason = budget.exhausted(st) or (None if summary.trials_ok else same_error.verdict())
            if reason is None and summary.trials_run >= n_trials:
                st.stop()
                return
            remaining = budget.trials_left(st, n_trials - summary.trials_run)
            # Re-measure before recommending, within the last trials of the budget. While a
            # block of repeats waits, nothing else is queued: a local move would spend the
            # reserve on a new rival measured once, which the race then has to chase.
            if reason is None and racing.racing_now(remaining):
                if _queued(st) or _race(st, racing, remaining):
                    return
            if reason is None and idle:
                n_all = moves.exhausted(st)
                if n_all is not None and _race(st, racing, remaining, everything_tried=True):
                    return
                if n_all is not None and not _queued(st):  # queued trials (a retry) go first
                    reason = f"every config this machine can run has been tried ({n_all} configs)"
                elif idle >= MAX_IDLE_PROPOSALS:
                    reason = (f"{idle} proposals in a row were configs already tried: the sampler "
                              "has settled; widen the search space to search further")
            if reason:
                summary.stop_reason = reason
                st.stop()
                return
            # Going on: a local move when the proposal measured nothing (a repeat, or held
            # back), and every LOCAL_MOVE_EVERY-th launched trial past the baselines.
            if not launched or (summary.trials_run > summary.baselines_enqueued
                                and summary.trials_run % LOCAL_MOVE_EVERY == 0):
                moves.enqueue_next(st)

        try:
            # n_trials counts launched trials (after_trial stops the study): a reused or
            # prescreened proposal measures nothing and costs nothing.
            study.optimize(objective, n_trials=None, catch=(TrialCrashed,), callbacks=[after_trial])
        except KeyboardInterrupt:
            summary.stop_reason, summary.interrupted = "interrupted (Ctrl-C twice): the running trial was failed", True
        finally:
            objective.close()  # issue 15: stops the worker pool (a no-op for other runners)
    return summary
