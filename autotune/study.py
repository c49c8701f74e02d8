"""Create or resume the Optuna study and run trials: suggest -> launch -> score.

    study = open_study("sqlite:///autotune.db", "default")
    run_sweep(spec, study, n_trials=8, on_trial=print)

Objectives are (hours to target, dollars), both minimised. How each trial ended:
- ok: COMPLETE with its values; constraints (budget, deadline) through `trial.set_constraint`.
- oom / unsupported / nan / timeout: PRUNED, with an infeasible constraint value, so the
  sampler learns where the boundary is (TPE counts pruned trials among the bad ones).
- crash: FAIL (a bug, not a property of the config); the study goes on.
Every trial stores its config, status, error and folder in user attributes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from autotune.contract import Launcher, TrialConfig, TrialResult, TrialStatus
from autotune.errors import UserError
from autotune.spec import SweepSpec

DEFAULT_STORAGE = "sqlite:///autotune.db"
DIRECTIONS = ["minimize", "minimize"]  # hours to target, dollars
INFEASIBLE = 1.0


def redact_url(url: str) -> str:
    """Hide the password of a storage URL: secrets never reach logs or reports."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def _storage(url: str):
    import optuna

    if url.startswith("sqlite:///"):
        db = Path(url[len("sqlite:///"):])
        if db.parent and not db.parent.exists():
            raise UserError(f"storage {url}: folder '{db.parent}' does not exist",
                            fix="create the folder or point --storage elsewhere")
    if "://" not in url:
        raise UserError(f"storage '{redact_url(url)}' is not a URL",
                        fix="use e.g. sqlite:///autotune.db or postgresql://user:pass@host/db")
    try:
        return optuna.storages.RDBStorage(url)
    except Exception as exc:  # bad dialect, unreachable server, wrong password, ...
        raise UserError(f"cannot open storage {redact_url(url)}: {type(exc).__name__}: "
                        f"{redact_url(str(exc).splitlines()[0] if str(exc) else '')}",
                        fix="check the URL, that the server is running and the credentials") from None


def make_sampler(seed: int = 0):
    """The study's sampler (also replayed by scripts/bench_search.py against measured configs)."""
    import optuna

    # TPE with multivariate + group suits a small, conditional, mostly categorical space.
    return optuna.samplers.TPESampler(multivariate=True, group=True, seed=seed,
                                      n_startup_trials=4)


def open_study(storage_url: str | None, study_name: str, seed: int = 0, create: bool = True):
    import optuna

    # Our own progress lines say how each trial ended; Optuna's per-trial warnings repeat them.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    import warnings

    # `group=True` is marked experimental; we rely on it knowingly (conditional space).
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    storage = _storage(storage_url or DEFAULT_STORAGE)
    sampler = make_sampler(seed)
    if not create:
        try:
            return optuna.load_study(study_name=study_name, storage=storage, sampler=sampler)
        except KeyError:
            names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
            raise UserError(f"no study '{study_name}' in {redact_url(storage_url or DEFAULT_STORAGE)}",
                            fix=f"use one of: {', '.join(names) or '(none yet: run autotune sweep)'}") from None
    return optuna.create_study(study_name=study_name, storage=storage, sampler=sampler,
                               directions=DIRECTIONS, load_if_exists=True)


@dataclass
class TrialOutcome:
    number: int
    config: TrialConfig
    result: TrialResult
    hours: float | None
    usd: float | None
    offer: str | None


def launcher_for(cfg_values: dict[str, Any], spec: SweepSpec) -> Launcher:
    if spec.trial.launcher is not None:
        return spec.trial.launcher
    return Launcher.deepspeed if cfg_values.get("zero_stage", 0) > 0 else Launcher.torchrun


def make_objective(spec: SweepSpec, runs_dir: Path, on_trial: Callable[[TrialOutcome], None] | None = None):
    """The Optuna objective for this spec on this machine."""
    import optuna

    from autotune.hardware import local_hardware
    from autotune.launch import run_trial
    from autotune.pricing.catalog import load_catalog
    from autotune.pricing.objective import device_type_key, score_trial
    from autotune.space import capabilities_for, load_space, restrict, suggest

    hw = local_hardware()
    catalog = load_catalog(spec.platforms.catalog)
    space = load_space(spec.space)
    n_heads = spec.workload.resolved_shape().n_heads if spec.workload.kind == "gpt" else None
    restricted = restrict(space, capabilities_for(hw, spec.trial.threads_per_rank), n_heads=n_heads)

    def objective(trial: "optuna.Trial"):
        values = suggest(trial, restricted, spec.batch.global_batch_samples)
        cfg = TrialConfig(
            workload=spec.workload, seq_len=spec.seq_len, **values,
            launcher=launcher_for(values, spec), device=hw.device_kind,
            warmup_steps=spec.trial.warmup_steps, measure_steps=spec.trial.measure_steps,
            max_measure_steps=spec.trial.max_measure_steps, timeout_s=spec.trial.timeout_s,
            threads_per_rank=spec.trial.threads_per_rank, seed=spec.seed + trial.number,
        )
        trial_dir = runs_dir / f"trial_{trial.number:04d}"
        trial.set_user_attr("config", cfg.model_dump(mode="json"))
        trial.set_user_attr("hardware", hw.key())
        trial.set_user_attr("trial_dir", str(trial_dir.resolve()))
        result = run_trial(cfg, trial_dir)
        record_result(trial, result)
        score = score_trial(result, cfg, spec, catalog, device_type_key(cfg)) if result.ok else None
        outcome = TrialOutcome(trial.number, cfg, result, score and score.hours, score and score.usd,
                               score and score.offer)
        if score is not None:
            trial.set_user_attr("score", score.as_dict())
        if on_trial is not None:
            on_trial(outcome)
        if result.status is TrialStatus.crash:
            raise TrialCrashed(f"trial {trial.number} crashed: {result.error_type}: {result.error}")
        if not result.ok or score is None:
            trial.set_constraint("feasible", INFEASIBLE)
            raise optuna.TrialPruned(f"{result.status.value}: {result.error}")
        trial.set_constraint("feasible", 0.0)
        if spec.budget.max_usd is not None:
            trial.set_constraint("max_usd", score.usd - spec.budget.max_usd)
        if spec.budget.deadline_hours is not None:
            trial.set_constraint("deadline_hours", score.hours - spec.budget.deadline_hours)
        return score.hours, score.usd

    return objective


class TrialCrashed(Exception):
    """A trial crashed (not a property of the config): recorded as FAIL, the study goes on."""


def record_result(trial: Any, result: TrialResult) -> None:
    """The summary of a result that reports need, as user attributes (JSON-able)."""
    trial.set_user_attr("status", result.status.value)
    trial.set_user_attr("tokens_per_s", result.tokens_per_s)
    trial.set_user_attr("peak_mem_bytes", result.peak_mem_bytes)
    trial.set_user_attr("peak_mem_source", result.peak_mem_source.value)
    trial.set_user_attr("step_time_median_s", result.step_time_median_s)
    trial.set_user_attr("mfu", result.mfu)
    trial.set_user_attr("final_loss", result.final_loss)
    trial.set_user_attr("wall_s", result.wall_s)
    if not result.ok:
        trial.set_user_attr("error", f"{result.error_type or ''}: {result.error or ''}"[:1000])


def run_sweep(spec: SweepSpec, study, n_trials: int, runs_dir: Path,
              on_trial: Callable[[TrialOutcome], None] | None = None) -> None:
    objective = make_objective(spec, runs_dir, on_trial)
    study.optimize(objective, n_trials=n_trials, catch=(TrialCrashed,))

