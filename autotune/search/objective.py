"""The Optuna objective of a sweep: suggest -> prescreen -> reuse or claim -> run -> score.

    objective = make_objective(spec, runs_dir, machine=ms, runner=run_trial_fn, catalog=catalog)
    study.optimize(objective, callbacks=[...])     # autotune.search.sweep.run_sweep does this

How each trial ends:
- ok: COMPLETE with its values; constraints (feasible, budget, deadline) set on every path
  through `trial.set_constraint` (Optuna 5 counts a trial without them as feasible).
- oom / unsupported / nan / timeout: PRUNED, with an infeasible constraint value, so the
  sampler learns where the boundary is (TPE counts pruned trials among the bad ones).
- crash, Ctrl-C, a controller that died: FAIL (not a property of the config); the study goes on.
Everything a trial stores goes through `autotune.record.TrialRecord`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from autotune.contract import (Launcher, TrialConfig, TrialResult, TrialStatus, default_launcher,
                               write_json_atomic)
from autotune.record import LaunchRef, TrialRecord
from autotune.run.launch import TrialRunner
from autotune.run.processes import controller_record, start_ticks
from autotune.search.machine import MachineSpace
from autotune.search.reuse import config_key, reuse_measurement, wait_for_measurement
from autotune.spec import SweepSpec

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


class TrialCrashed(Exception):
    """A trial crashed (not a property of the config): recorded as FAIL, the study goes on."""


def launcher_for(cfg_values: dict[str, Any], spec: SweepSpec) -> Launcher:
    """The spec's launcher, else the default for the config's ZeRO stage."""
    return spec.trial.launcher or default_launcher(cfg_values.get("zero_stage", 0))


def trial_config_for(values: dict[str, Any], spec: SweepSpec, ms: MachineSpace, num_nodes: int,
                     seed: int) -> TrialConfig:
    """The TrialConfig a trial with these suggested values launches on this machine."""
    return TrialConfig(
        workload=spec.workload, seq_len=spec.seq_len, **values, num_nodes=num_nodes,
        launcher=launcher_for(values, spec), device=ms.hardware.device_kind,
        warmup_steps=spec.trial.warmup_steps, measure_steps=spec.trial.measure_steps,
        max_measure_steps=spec.trial.max_measure_steps, min_measure_s=spec.trial.min_measure_s,
        timeout_s=spec.trial.timeout_s,
        threads_per_rank=spec.trial.threads_per_rank, seed=seed,
        device_peak_flops=ms.peak_flops.get(str(getattr(values.get("precision"), "value",
                                                         values.get("precision")))),
    )


def set_constraints(trial, spec: SweepSpec, feasible: bool, usd: float | None = None,
                    hours: float | None = None) -> None:
    """The same constraint names on every path, so the sampler compares like with like."""
    trial.set_constraint("feasible", 0.0 if feasible else INFEASIBLE)
    if spec.budget.max_usd is not None:
        trial.set_constraint("max_usd", usd - spec.budget.max_usd if usd is not None else 0.0)
    if spec.budget.deadline_hours is not None:
        trial.set_constraint("deadline_hours",
                             hours - spec.budget.deadline_hours if hours is not None else 0.0)


def rank_hour_price_usd(spec: SweepSpec, cfg: TrialConfig, catalog) -> float | None:
    """What one rank-hour of this machine costs the search (None: not priced)."""
    if spec.budget.search_price_usd_per_gpu_hour is not None:
        return spec.budget.search_price_usd_per_gpu_hour
    from autotune.search.score import device_type_key

    try:
        prices = [o.price_usd_per_gpu_hour for o in catalog.offers_for(device_type_key(cfg))
                  if getattr(o, "price_usd_per_gpu_hour", None) is not None]
    except Exception:  # unknown GPU type in the catalog: the search is simply not priced
        return None
    if not prices:
        return None
    # On CPU a rank is `threads_per_rank` cores, each billed as a vCPU.
    return min(prices) * (cfg.threads_per_rank if cfg.device.value == "cpu" else 1)


def measured_record(result: TrialResult) -> dict[str, Any]:
    """The summary of a result that reports need, as TrialRecord fields."""
    fields: dict[str, Any] = dict(
        status=result.status.value, tokens_per_s=result.tokens_per_s,
        peak_mem_bytes=result.peak_mem_bytes, peak_mem_source=result.peak_mem_source.value,
        step_time_median_s=result.step_time_median_s, mfu=result.mfu, hfu=result.hfu,
        final_loss=result.final_loss, wall_s=result.wall_s, world_size=result.world_size)
    if not result.ok:
        fields["error"] = f"{result.error_type or ''}: {result.error or ''}"[:1000]
    return fields


def make_objective(spec: SweepSpec, runs_dir: Path, on_trial: Callable[[TrialOutcome], None] | None = None,
                   note: Callable[[str], None] | None = None, machine: MachineSpace | None = None,
                   runner: TrialRunner | None = None, catalog=None):
    """The Optuna objective for this spec on this machine. `runner` runs a trial (default:
    the launcher, through the spec's `launcher` template); `catalog`: the sweep's, loaded once."""
    import optuna

    from autotune.pricing.load import load_catalog
    from autotune.run.launch import launcher_runner, template_argv_builder
    from autotune.search.calibration import MemoryGuard
    from autotune.search.score import device_type_key, score_trial
    from autotune.search.space import suggest

    catalog = catalog if catalog is not None else load_catalog(spec.platforms.catalog)
    ms = machine or MachineSpace.for_spec(spec, catalog)
    hw = ms.hardware
    ls = spec.launcher
    if runner is None:
        runner = launcher_runner(template_argv_builder(ls.argv, per_node=ls.per_node, hosts=ls.hosts,
                                                       rdzv_host=ls.rdzv_host,
                                                       job_name=f"autotune-{spec.study}"))
        # Issue 15 (worker pool): local trials without a launch template share long-lived
        # workers; the caller closes the runner (objective.close()) when the sweep ends.
        if spec.trial.reuse_workers and not ls.argv:
            from autotune.run.pool import pool_runner

            runner = pool_runner(fallback=runner)
    guard = MemoryGuard(hw, spec.memory.limit_bytes_per_rank, spec.memory.safety_margin,
                        enabled=spec.memory.prescreen)

    def objective(trial: "optuna.Trial"):
        TrialRecord.write(trial, controller=controller_record())
        retry_of = trial.study._storage.get_trial_system_attrs(trial._trial_id).get("failed_trial")
        if retry_of is not None:
            TrialRecord.write(trial, retry_of=retry_of)
        values = suggest(trial, ms.restricted, spec.batch.global_batch_samples, ms.full)
        num_nodes = ls.num_nodes[0] if len(ls.num_nodes) == 1 else \
            trial.suggest_categorical("num_nodes", ls.num_nodes)
        cfg = trial_config_for(values, spec, ms, num_nodes, seed=spec.seed + trial.number)
        trial_dir = runs_dir / f"trial_{trial.number:04d}"
        key = config_key(cfg, hw.key())
        TrialRecord.write(trial, config=cfg.model_dump(mode="json"), hardware=hw.key(),
                          machine=hw.model_dump(mode="json"), trial_dir=str(trial_dir.resolve()),
                          config_key=key)
        # Memory prescreen: a config predicted not to fit is not launched (PRUNED, infeasible).
        # A repeat (autotune.search.racing) measures again a config that has run: launched
        # whatever the prescreen thinks now, and never answered by reuse.
        repeat_of = trial.user_attrs.get("repeat_of")
        verdict = guard.prescreen(trial, cfg)
        if not verdict.launch and repeat_of is None:
            result = guard.record_prescreened(trial, verdict)
            if on_trial is not None:
                on_trial(TrialOutcome(trial.number, cfg, result, None, None, None))
            set_constraints(trial, spec, feasible=False)
            raise optuna.TrialPruned(result.error)
        src = wait_for_measurement(trial, key, note, hw) if repeat_of is None else None
        if src is not None:
            result, score = reuse_measurement(trial, src)
            if on_trial is not None:
                on_trial(TrialOutcome(trial.number, cfg, result, score and score.hours,
                                      score and score.usd, score and score.offer,
                                      reused_from=src.number))
            if src.state.name == "COMPLETE":
                return tuple(src.values)
            raise optuna.TrialPruned(f"reused trial {src.number}: {TrialRecord.of(src).status}")

        def on_start(pid: int) -> None:
            # The launcher leads its own process group (pgid = pid): recorded so that a later
            # sweep can kill what this one leaves behind if it dies.
            launch = LaunchRef(pgid=pid, start_ticks=start_ticks(pid))
            TrialRecord.write(trial, launch=launch)
            write_json_atomic(trial_dir / "launch.json", {**launch.model_dump(mode="json"),
                                                          "controller": controller_record().model_dump(mode="json")})

        try:
            result = runner(cfg, trial_dir, on_start=on_start)
        except KeyboardInterrupt:
            TrialRecord.write(trial, status="interrupted",
                              error="interrupted (Ctrl-C); its processes were killed")
            set_constraints(trial, spec, feasible=False)
            raise
        result = guard.after_trial(trial, cfg, verdict, result)  # calibration point; emulated limit
        TrialRecord.write(trial, **measured_record(result))
        gpu_hours = (result.wall_s or 0.0) / 3600.0 * cfg.world_size
        price = rank_hour_price_usd(spec, cfg, catalog)
        TrialRecord.write(trial, search_gpu_hours=gpu_hours,
                          search_usd=None if price is None else gpu_hours * price)
        score = score_trial(result, cfg, spec, catalog, device_type_key(cfg)) if result.ok else None
        outcome = TrialOutcome(trial.number, cfg, result, score and score.hours, score and score.usd,
                               score and score.offer)
        if score is not None:
            TrialRecord.write(trial, score=score.as_dict())
        if on_trial is not None:
            on_trial(outcome)
        if result.status is TrialStatus.crash:
            set_constraints(trial, spec, feasible=False)
            raise TrialCrashed(f"trial {trial.number} crashed: {result.error_type}: {result.error}")
        if not result.ok or score is None:
            set_constraints(trial, spec, feasible=False)
            raise optuna.TrialPruned(f"{result.status.value}: {result.error}")
        set_constraints(trial, spec, feasible=True, usd=score.usd, hours=score.hours)
        return score.hours, score.usd

    objective.close = getattr(runner, "close", lambda: None)  # issue 15: ends the worker pool
    return objective
