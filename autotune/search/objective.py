"""The Optuna objective of a sweep, one method per step: suggest -> known_unsupported ->
prescreen -> reuse or claim -> run -> score.

    objective = Objective(ctx, runner=run_trial_fn)     # ctx: autotune.search.context.SweepContext
    study.optimize(objective, callbacks=[...])           # autotune.search.sweep.run_sweep does this
    objective.close()                                    # ends the runner's worker pool

How each trial ends:
- ok: COMPLETE with its values; constraints (feasible, budget, deadline) set on every path
  through `trial.set_constraint` (Optuna 5 counts a trial without them as feasible).
- oom / unsupported / nan / timeout, or held back by the memory prescreen or as a setting the
  workload cannot run (an earlier trial's verdict, `known_unsupported`): PRUNED, with an
  infeasible constraint value, so the sampler learns where the boundary is (TPE counts pruned
  trials among the bad ones).
- crash, Ctrl-C, SIGTERM or SIGHUP, a controller that died: FAIL (not a property of the
  config); the study goes on. A trial cut by SIGTERM or SIGHUP is `cut` here and re-queued by
  the sweep.
Everything a trial stores goes through `autotune.record.TrialRecord`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from autotune.contract import Launcher, TrialConfig, TrialResult, TrialStatus, default_launcher, write_json_atomic
from autotune.contract.trial_files import TrialFiles
from autotune.record import KNOWN_UNSUPPORTED, LaunchRef, TrialRecord
from autotune.run.processes import controller_record, result_left_by, start_ticks
from autotune.run.runner import TrialRunner, as_runner
from autotune.search.calibration import MemoryGuard, Verdict
from autotune.search.interrupt import Terminated, terminated_reason
from autotune.search.machine import MachineSpace
from autotune.search.reuse import config_key, reuse_measurement, wait_for_measurement
from autotune.search.score import rank_hour_price_usd
from autotune.spec import SweepSpec

if TYPE_CHECKING:
    import optuna

    from autotune.search.context import SweepContext

INFEASIBLE = 1.0


@dataclass
class TrialOutcome:
    """How one proposal ended, for the sweep's progress lines."""

    number: int
    config: TrialConfig
    result: TrialResult
    hours: float | None
    usd: float | None
    offer: str | None
    reused_from: int | None = None
    repeat_of: int | None = None  # a deliberate re-measurement of the config trial N measured
    recovered_from: int | None = None  # not launched: what lost trial N's run measured
    launched: bool = True  # False: reused, or held back (memory prescreen, a known unsupported setting)


class TrialCrashed(Exception):
    """A trial crashed (not a property of the config): recorded as FAIL, the study goes on."""


def launcher_for(cfg_values: dict[str, Any], spec: SweepSpec) -> Launcher:
    """The spec's launcher, else the default for the config's ZeRO stage."""
    return spec.trial.launcher or default_launcher(cfg_values.get("zero_stage", 0))


def trial_config_for(values: dict[str, Any], spec: SweepSpec, ms: MachineSpace, num_nodes: int,
                     seed: int) -> TrialConfig:
    """The TrialConfig a trial with these suggested values launches on this machine."""
    precision = values.get("precision")
    cfg = TrialConfig(
        workload=spec.workload, seq_len=spec.seq_len, **values, num_nodes=num_nodes,
        launcher=launcher_for(values, spec), device=ms.hardware.device_kind,
        warmup_steps=spec.trial.warmup_steps, measure_steps=spec.trial.measure_steps,
        max_measure_steps=spec.trial.max_measure_steps, min_measure_s=spec.trial.min_measure_s,
        timeout_s=spec.trial.timeout_s,
        threads_per_rank=spec.trial.threads_per_rank, seed=seed,
        device_peak_flops=ms.peak_flops.get(str(getattr(precision, "value", precision))),
    )
    gb = spec.batch.global_batch_samples
    if gb is not None and cfg.global_batch_samples != gb:  # values suggested for another node count
        raise ValueError(f"{cfg.global_batch_samples} samples per step on {num_nodes} node(s), not the "
                         f"spec's global batch {gb}: suggest the values with num_nodes={num_nodes}")
    return cfg


def set_constraints(trial, spec: SweepSpec, feasible: bool, usd: float | None = None,
                    hours: float | None = None) -> None:
    """The same constraint names on every path, so the sampler compares like with like."""
    trial.set_constraint("feasible", 0.0 if feasible else INFEASIBLE)
    if spec.budget.max_usd is not None:
        trial.set_constraint("max_usd", usd - spec.budget.max_usd if usd is not None else 0.0)
    if spec.budget.deadline_hours is not None:
        trial.set_constraint("deadline_hours",
                             hours - spec.budget.deadline_hours if hours is not None else 0.0)


def measured_record(result: TrialResult) -> dict[str, Any]:
    """The summary of a result that reports need, as TrialRecord fields."""
    fields: dict[str, Any] = dict(
        status=result.status.value, tokens_per_s=result.tokens_per_s,
        peak_mem_bytes=result.peak_mem_bytes, peak_mem_source=result.peak_mem_source.value,
        step_time_median_s=result.step_time_median_s, mfu=result.mfu, hfu=result.hfu,
        final_loss=result.final_loss, wall_s=result.wall_s, world_size=result.world_size,
        compile_s=result.compile_s, cpu_huge_pages=result.observations.get("cpu_huge_pages"))
    # In fresh ranks only: a pooled rank holds what its earlier trials left (autotune.search.floor).
    if (result.peak_mem_source.value == "host_rss" and result.memory.host_rss_baseline_bytes
            and "pool" not in result.observations):
        fields["mem_before_build_bytes"] = max(result.memory.host_rss_baseline_bytes)
    if not result.ok:
        fields["error"] = f"{result.error_type or ''}: {result.error or ''}"[:1000]
        if result.observations.get("workload_allows"):
            fields["workload_allows"] = result.observations["workload_allows"]
    return fields


def default_runner(spec: SweepSpec) -> TrialRunner:
    """The launcher, through the spec's `launcher` template; local trials without a template
    share long-lived workers (autotune.run.pool), which `Objective.close` ends, except on CPU
    ranks under a memory limit (`pooled_peaks_differ`)."""
    from autotune.run.launch import launcher_runner, template_argv_builder

    ls = spec.launcher
    runner = launcher_runner(template_argv_builder(ls.argv, per_node=ls.per_node, hosts=ls.hosts,
                                                   rdzv_host=ls.rdzv_host,
                                                   job_name=f"autotune-{spec.study}"))
    if uses_pool(spec):
        from autotune.run.pool import pool_runner

        runner = pool_runner(fallback=runner)
    return runner


def uses_pool(spec: SweepSpec) -> bool:
    """Whether this sweep's local trials share long-lived workers: asked (`reuse_workers`), no
    launcher template, and not CPU ranks under a memory limit (`pooled_peaks_differ`)."""
    return spec.trial.reuse_workers and not spec.launcher.argv and not pooled_peaks_differ(spec)


def pooled_peaks_differ(spec: SweepSpec) -> bool:
    """A memory limit on CPU ranks is checked against each rank's host RSS peak, and a pooled
    rank's RSS keeps what earlier trials' libraries and freed memory left behind, which the long
    run (a fresh process) does not hold: near the limit, pooled peaks would fail configs that
    fit (benchmarks/results/real_limit_default_pooled.json: every 2-rank config of the default sweep
    over a limit that fresh runs of 2 x mb4 stay under). So those trials run in fresh ranks.
    A GPU's allocator peak is reset per trial and is not affected."""
    from autotune.contract import DeviceKind
    from autotune.run.hardware import local_hardware

    return (spec.memory.limit_bytes_per_rank is not None
            and local_hardware().device_kind is DeviceKind.cpu)


class Objective:
    """One trial of the sweep: `__call__` runs the steps below in order; each step either hands
    the next what it needs or ends the trial (a return value, `optuna.TrialPruned`, or
    `TrialCrashed`)."""

    def __init__(self, ctx: "SweepContext", runner: TrialRunner | None = None,
                 on_trial: Callable[[TrialOutcome], None] | None = None,
                 note: Callable[[str], None] | None = None):
        self.ctx, self.spec = ctx, ctx.spec
        self.runner = as_runner(runner) if runner is not None else default_runner(ctx.spec)
        self.on_trial = on_trial or (lambda outcome: None)
        self.note = note
        self.guard = MemoryGuard(ctx.hardware, ctx.spec.memory.limit_bytes_per_rank,
                                 ctx.spec.memory.safety_margin, enabled=ctx.spec.memory.prescreen)
        self.cut: "optuna.Trial | None" = None  # the trial a SIGTERM or SIGHUP cut short
        self.report_error: Exception | None = None  # on_trial's, raised once its trial is recorded

    def __call__(self, trial: "optuna.Trial") -> tuple[float, float]:
        try:
            self.start(trial)
            cfg = self.suggest(trial)
            self.known_unsupported(trial, cfg)
            verdict = self.prescreen(trial, cfg)
            reused = self.reuse_or_claim(trial, cfg)
            if reused is not None:
                return reused
            result = self.run(trial, cfg, verdict)
            return self.score(trial, cfg, result)
        except Terminated:
            self.cut = trial
            if TrialRecord.of(trial).status is None:  # cut before its launch: no status (not launched)
                TrialRecord.write(trial, error=f"{terminated_reason()} before its launch")
            raise

    def close(self) -> None:
        """End what the runner keeps between trials (the worker pool); safe to call twice."""
        self.runner.close()

    def report(self, outcome: TrialOutcome) -> None:
        """Tell on_trial (the CLI's line, a side-by-side worker's, a caller's own function) what
        the trial did. Its failure (a full disk under the log, a bug in the caller's function)
        must not fail the trial it reports: Optuna would fail a measured trial. The error is
        kept and raised by raise_report_error, an Optuna callback, once the trial is recorded."""
        try:
            self.on_trial(outcome)
        except Exception as exc:
            self.report_error = self.report_error or exc

    def raise_report_error(self, study, frozen) -> None:
        """An Optuna callback: on_trial's error, after the trial it reported was recorded."""
        exc, self.report_error = self.report_error, None
        if exc is not None:
            raise exc

    # -- the steps, in the order a trial takes them
    def start(self, trial: "optuna.Trial") -> None:
        """Record which controller runs the trial, and which failed trial it retries."""
        TrialRecord.write(trial, controller=controller_record())
        retry_of = _frozen(trial).system_attrs.get("failed_trial")
        if retry_of is not None:
            TrialRecord.write(trial, retry_of=retry_of)

    def suggest(self, trial: "optuna.Trial") -> TrialConfig:
        """The config to measure: the sampler's (or a queued) values on this machine."""
        from autotune.search.space import suggest

        ms, ls = self.ctx.machine, self.spec.launcher
        # The nodes first: a fixed global batch is met over all their ranks (the accumulation).
        num_nodes = ls.num_nodes[0] if len(ls.num_nodes) == 1 else \
            trial.suggest_categorical("num_nodes", ls.num_nodes)
        values = suggest(trial, ms.restricted, self.spec.batch.global_batch_samples, ms.full, num_nodes)
        cfg = trial_config_for(values, self.spec, ms, num_nodes, seed=self.spec.seed + trial.number)
        hw = self.ctx.hardware
        TrialRecord.write(trial, config=cfg.model_dump(mode="json"), hardware=hw.key(),
                          machine=hw.model_dump(mode="json"),
                          trial_dir=str(self.trial_dir(trial).resolve()),
                          config_key=config_key(cfg, hw.key()))
        return cfg

    def known_unsupported(self, trial: "optuna.Trial", cfg: TrialConfig) -> None:
        """A setting an earlier trial found the workload itself cannot run (its worker named the
        values it can: a model with no TP plan runs tp_degree 1 only) is not launched again with
        another value: PRUNED as unsupported, at no cost, naming that trial."""
        import optuna
        from optuna.trial import TrialState

        for t in trial.study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)):
            rec = TrialRecord.of(t)
            for setting, allowed in (rec.workload_allows or {}).items():
                value = getattr(getattr(cfg, setting, None), "value", getattr(cfg, setting, None))
                if value is None or value in allowed:
                    continue
                msg = (f"not launched: trial {t.number} found that this workload runs {setting} "
                       f"{' or '.join(map(str, allowed))} only")
                TrialRecord.write(trial, status="unsupported", error=f"{KNOWN_UNSUPPORTED}: {msg}",
                                  held_back_by=t.number)
                result = TrialResult(status=TrialStatus.unsupported, error_type=KNOWN_UNSUPPORTED, error=msg)
                self.report(TrialOutcome(trial.number, cfg, result, None, None, None, launched=False))
                set_constraints(trial, self.spec, feasible=False)
                raise optuna.TrialPruned(msg)

    def prescreen(self, trial: "optuna.Trial", cfg: TrialConfig) -> Verdict:
        """A config predicted not to fit is not launched (PRUNED, infeasible), unless the sweep
        queued it on purpose: a repeat (autotune.search.racing) or a probe of what fits
        (autotune.search.fit), which run whatever the prediction says."""
        import optuna

        from autotune.search.fit import FitModel

        key = config_key(cfg, self.ctx.hardware.key())
        verdict = self.guard.prescreen(
            trial, cfg, lambda c: FitModel.from_study(self.ctx, self.guard).p_fit(c, key))
        if verdict.launch or _on_purpose(trial):
            return verdict
        result = self.guard.record_prescreened(trial, verdict)
        self.report(TrialOutcome(trial.number, cfg, result, None, None, None, launched=False))
        set_constraints(trial, self.spec, feasible=False)
        raise optuna.TrialPruned(result.error)

    def reuse_or_claim(self, trial: "optuna.Trial", cfg: TrialConfig) -> tuple[float, float] | None:
        """None when this trial holds the claim and measures; else the values of the finished
        trial of the same config it reuses (or PRUNED like it). A repeat always measures."""
        import optuna

        if trial.user_attrs.get("repeat_of") is not None:
            return None
        hw = self.ctx.hardware
        src = wait_for_measurement(trial, config_key(cfg, hw.key()), self.note, hw)
        if src is None:
            return None
        result, score = reuse_measurement(trial, src)
        self.report(TrialOutcome(trial.number, cfg, result, score.hours if score else None,
                                   score.usd if score else None, score.offer if score else None,
                                   reused_from=src.number, launched=False))
        if src.state.name == "COMPLETE":
            return src.values[0], src.values[1]
        raise optuna.TrialPruned(f"reused trial {src.number}: {TrialRecord.of(src).status}")

    def run(self, trial: "optuna.Trial", cfg: TrialConfig, verdict: Verdict) -> TrialResult:
        """Launch the trial and wait for its result (or take the result a lost run of this config
        left: `left_by_lost_run`); record what it measured and cost."""
        result = self.left_by_lost_run(trial, cfg) or self.launch(trial, cfg)
        result = self.guard.after_trial(trial, cfg, verdict, result)  # calibration; emulated limit
        TrialRecord.write(trial, **measured_record(result))
        gpu_hours = (result.wall_s or 0.0) / 3600.0 * cfg.world_size
        price = rank_hour_price_usd(self.spec, cfg, self.ctx.catalog, self.ctx.hardware)
        TrialRecord.write(trial, search_gpu_hours=gpu_hours,
                          search_usd=None if price is None else gpu_hours * price)
        return result

    def left_by_lost_run(self, trial: "optuna.Trial", cfg: TrialConfig) -> TrialResult | None:
        """A retry of a lost trial whose run had measured before its controller was lost (killed
        after the launcher finished, or stopped by a lost storage before recording it) records
        that run's result from its folder (autotune.run.processes.result_left_by) instead of
        measuring again: the trial names it (`recovered_from`) and its folder. The latest lost
        trial of the retry chain first (a retry lost before its launch left nothing)."""
        history = _frozen(trial).system_attrs.get("retry_history") or []
        if not history:
            return None
        by_number = {t.number: t for t in trial.study.get_trials(deepcopy=False)}
        key = config_key(cfg, self.ctx.hardware.key())
        for number in reversed(history):
            rec = TrialRecord.of(by_number[number]) if number in by_number else None
            if rec is None or rec.config_key != key:
                continue
            result = result_left_by(rec)
            if result is not None:
                TrialRecord.write(trial, recovered_from=number, trial_dir=rec.trial_dir)
                return result
        return None

    def launch(self, trial: "optuna.Trial", cfg: TrialConfig) -> TrialResult:
        """Launch the trial and wait for its result."""
        trial_dir = self.trial_dir(trial)

        def on_start(pid: int) -> None:
            # The launcher leads its own process group (pgid = pid): recorded so that a later
            # sweep can kill what this one leaves behind if it dies.
            launch = LaunchRef(pgid=pid, start_ticks=start_ticks(pid))
            TrialRecord.write(trial, launch=launch)
            write_json_atomic(TrialFiles(trial_dir).launch, {
                **launch.model_dump(mode="json"),
                "controller": controller_record().model_dump(mode="json")})

        try:
            result = self.runner(cfg, trial_dir, on_start=on_start)
        except KeyboardInterrupt as exc:
            why = terminated_reason() if isinstance(exc, Terminated) else "interrupted (Ctrl-C)"
            TrialRecord.write(trial, status="interrupted", error=f"{why}; its processes were killed")
            set_constraints(trial, self.spec, feasible=False)
            raise
        return result

    def score(self, trial: "optuna.Trial", cfg: TrialConfig, result: TrialResult) -> tuple[float, float]:
        """Hours to target and dollars on the cheapest matching offer; a failed trial is PRUNED
        (a property of the config) or FAIL (a crash)."""
        import optuna

        from autotune.search.score import device_type_key, score_trial

        score = (score_trial(result, cfg, self.spec, self.ctx.catalog, device_type_key(cfg))
                 if result.ok else None)
        if score is not None:
            TrialRecord.write(trial, score=score)
        self.report(TrialOutcome(trial.number, cfg, result, score.hours if score else None,
                                   score.usd if score else None, score.offer if score else None,
                                   repeat_of=trial.user_attrs.get("repeat_of"),
                                   recovered_from=trial.user_attrs.get("recovered_from")))
        if result.status is TrialStatus.crash:
            set_constraints(trial, self.spec, feasible=False)
            raise TrialCrashed(f"trial {trial.number} crashed: {result.error_type}: {result.error}")
        if not result.ok or score is None:
            set_constraints(trial, self.spec, feasible=False)
            raise optuna.TrialPruned(f"{result.status.value}: {result.error}")
        set_constraints(trial, self.spec, feasible=True, usd=score.usd, hours=score.hours)
        return score.hours, score.usd

    def trial_dir(self, trial: "optuna.Trial"):
        return self.ctx.runs_dir / f"trial_{trial.number:04d}"


def _on_purpose(trial: "optuna.Trial") -> bool:
    """Queued by the sweep to be measured whatever the prescreen says."""
    return trial.user_attrs.get("repeat_of") is not None or bool(trial.user_attrs.get("fit_probe"))


def _frozen(trial: "optuna.Trial"):
    """The running trial as Optuna stores it (its system attributes: a retried trial's
    `failed_trial`), through the study's public API."""
    from optuna.trial import TrialState

    running = trial.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    return next(t for t in running if t.number == trial.number)
