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
measures nothing and costs nothing. What happens after each trial is decided by the rules of
autotune.search.rules, in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from autotune.contract import TrialConfig
from autotune.errors import UserError
from autotune.run.processes import recover_dead_trials
from autotune.run.reconnect import storage_lost_in
from autotune.run.runner import TrialRunner
from autotune.search.budget import SearchBudget
from autotune.search.context import SweepContext
from autotune.search.interrupt import Interrupt, Terminated, stop_signal
from autotune.search.objective import Objective, TrialCrashed, TrialOutcome
from autotune.search.racing import Racing
from autotune.search.rules import (
    ExhaustedRule,
    FitRule,
    MoveRule,
    NewSettingRule,
    OpenVerdictRule,
    RaceRule,
    Stop,
    StopRule,
    SweepLoop,
    SweepState,
)
from autotune.search.score import rank_hour_price_usd
from autotune.search.strategy import LocalMoves, enqueue_baselines
from autotune.spec import SweepSpec


@dataclass
class SweepSummary:
    trials_run: int = 0  # launched here: each ran its own measurement
    trials_ok: int = 0  # of those, measured successfully
    proposals: int = 0  # Optuna trials here, including reused and prescreened ones
    stop_reason: str | None = None
    interrupted: bool = False
    terminated: bool = False  # by SIGTERM or SIGHUP (interrupted too): the cut trial is re-queued
    recovered: list[int] = field(default_factory=list)
    baselines_enqueued: int = 0


def remeasure_reserve(spec: SweepSpec, n_trials: int) -> int:
    """How many of this invocation's trials may go to re-measuring (`budget.remeasure_trials`,
    default half). Half, because where the leading configs lie within a few runs' noise of each
    other the pick is only as good as their repeats, while the baselines and the first moves
    usually reach the region of the optimum early (docs/benchmarks.md, the search section)."""
    if spec.budget.remeasure_trials is not None:
        return min(spec.budget.remeasure_trials, n_trials)
    return n_trials // 2


def requeue_cut(study, cut) -> str:
    """Queue again the trial a SIGTERM or SIGHUP cut short (a preempted or cancelled job's config
    was never measured: the next sweep of the study runs it as a retry of it, after the trials
    queued before it); what to add to the stop reason."""
    from optuna.trial import TrialState

    from autotune.run.storage import retry_callback

    if cut is None:
        return ""
    frozen = study._storage.get_trial(cut._trial_id)
    if frozen.state is not TrialState.FAIL:
        return ""  # it had ended (COMPLETE or PRUNED) before the signal came
    retry_callback()(study, frozen)
    queued = any(t.system_attrs.get("retry_history", [])[-1:] == [frozen.number]
                 for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
    return " and re-queued" if queued else " (not re-queued: it has been retried as often as allowed)"


def check_search_price(ctx: SweepContext) -> None:
    """A search budget in dollars needs a price for this machine's hardware."""
    spec = ctx.spec
    if spec.budget.search_usd is None:
        return
    probe = TrialConfig(workload=spec.workload, device=ctx.hardware.device_kind,
                        threads_per_rank=spec.trial.threads_per_rank)
    if rank_hour_price_usd(spec, probe, ctx.catalog, ctx.hardware) is None:
        raise UserError("budget.search_usd is set but this machine's hardware has no price "
                        "in the catalog", fix="set budget.search_price_usd_per_gpu_hour")


def sweep_rules(ctx: SweepContext, budget: SearchBudget, interrupt: Interrupt, n_trials: int) -> list:
    """The rules of autotune.search.rules, in the order they are asked."""
    spec = ctx.spec
    moves = LocalMoves(ctx, seed=spec.seed)
    racing = Racing(ctx.hardware, ctx.catalog, remeasure_reserve(spec, n_trials),
                    spec.budget.remeasure_trials != 0, spec.budget.max_usd, spec.budget.deadline_hours)
    fit = FitRule(ctx, moves)
    return [StopRule(budget, interrupt), OpenVerdictRule(fit, racing), NewSettingRule(fit, racing),
            RaceRule(racing), fit,
            ExhaustedRule(moves, racing), MoveRule(moves)]


def run_sweep(spec: SweepSpec, study, n_trials: int, runs_dir: Path,
              on_trial: Callable[[TrialOutcome], None] | None = None,
              note: Callable[[str], None] | None = None, runner: TrialRunner | None = None,
              catalog=None, baselines: bool = True, machine=None) -> SweepSummary:
    """Run up to `n_trials` trials of `study` on this machine, within the spec's budget.

    `runner`: what runs a trial (default: the launcher; a benchmark replay answers from its
    table). `catalog`: the sweep's catalog, loaded once (None: the spec's, loaded here).
    `machine`: this machine's MachineSpace when the caller has it. `baselines`: False leaves
    the first trials to the sampler (to measure what it finds alone)."""
    ctx = SweepContext.build(spec, study, runs_dir, catalog=catalog, machine=machine)
    summary = SweepSummary()
    summary.recovered = recover_dead_trials(study, note)
    budget = SearchBudget(spec, ctx.hardware)
    check_search_price(ctx)
    summary.stop_reason = budget.exhausted(study)
    if summary.stop_reason:
        return summary
    summary.baselines_enqueued = enqueue_baselines(ctx) if baselines else 0
    objective = Objective(ctx, runner=runner, on_trial=on_trial, note=note)
    state = SweepState(n_trials=n_trials, baselines_enqueued=summary.baselines_enqueued)
    with Interrupt(note) as interrupt:
        loop = SweepLoop(sweep_rules(ctx, budget, interrupt, n_trials), state)
        try:
            # n_trials counts launched trials (the StopRule stops the study): a reused or
            # prescreened proposal measures nothing and costs nothing.
            # raise_report_error first: an error of on_trial ends the sweep, its trial recorded.
            study.optimize(objective, n_trials=None, catch=(TrialCrashed,),
                           callbacks=[objective.raise_report_error, loop])
        except Terminated:
            summary.terminated = True
            loop.stop = Stop(f"{stop_signal()}: the running trial was failed{requeue_cut(study, objective.cut)}",
                             interrupted=True)
        except KeyboardInterrupt:
            loop.stop = Stop("interrupted (Ctrl-C twice): the running trial was failed", interrupted=True)
        except Exception as exc:  # a failed tell surfaces as Optuna's own error on top of ours
            lost = storage_lost_in(exc)
            if lost is None:
                raise
            raise lost from None
        finally:
            objective.close()
    summary.trials_run, summary.trials_ok, summary.proposals = state.trials_run, state.trials_ok, state.proposals
    if loop.stop is not None:
        summary.stop_reason, summary.interrupted = loop.stop.reason, loop.stop.interrupted
    return summary
