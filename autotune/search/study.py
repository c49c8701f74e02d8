"""Create or resume the Optuna study a sweep works on, and its sampler.

    study = open_study("sqlite:///autotune.db", "default")           # created if new
    study = open_study(url, "llama", create=False)                   # UserError if missing

Objectives are (hours to target, dollars), both minimised. Sampler: TPE, multivariate + group
(a small, conditional, mostly categorical space; GPSampler would need torch in the controller
and handles conditional spaces poorly), constant liar so concurrent workers spread out, and a
seed mixed with the process id so they do not propose the same sequence.
"""

from __future__ import annotations

import os
import warnings
from typing import Literal

from autotune.errors import UserError
from autotune.run.storage import DEFAULT_STORAGE, open_storage, redact_url, user_study_names

DIRECTIONS: list[Literal["minimize", "maximize"]] = ["minimize", "minimize"]  # hours to target, dollars
METRIC_NAMES = ["hours_to_target", "usd_to_target"]  # their names in optuna-dashboard


def open_study(storage_url: str | None, study_name: str, seed: int = 0, create: bool = True):
    """The study `study_name` in `storage_url` (created unless `create` is False)."""
    import optuna

    from autotune.estimate.resolved import remember_from_study

    # Our own progress lines say how each trial ended; Optuna's per-trial warnings repeat them.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    # `group=True` and heartbeats are marked experimental; we rely on them knowingly.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    url = storage_url or DEFAULT_STORAGE
    try:
        storage = open_storage(url, must_exist=not create)  # reading never creates a file
    except UserError as exc:
        raise UserError(f"study '{study_name}': {exc.message}", fix=exc.fix) from None
    sampler = make_sampler(seed)
    if not create:
        try:
            study = optuna.load_study(study_name=study_name, storage=storage, sampler=sampler)
        except KeyError:
            names = user_study_names(storage)
            raise UserError(f"no study '{study_name}' in {redact_url(url)}",
                            fix=f"use one of: {', '.join(names) or '(none yet: run autotune sweep)'}") from None
    else:
        try:
            study = optuna.create_study(study_name=study_name, storage=storage, sampler=sampler,
                                        directions=DIRECTIONS, load_if_exists=True)
        except ValueError as exc:  # an existing study of another kind (e.g. single-objective)
            raise UserError(f"study '{study_name}' in {redact_url(url)} is not an autotune study: {exc}",
                            fix="choose another --study name") from None
    # The model a sweep of it resolved with the trials' transformers: a report, an export or
    # another worker counts the same one (autotune.estimate.resolved).
    remember_from_study(study)
    return study


def make_sampler(seed: int, worker: int | None = None):
    """TPE for a sweep. Concurrent workers with one seed would propose the same sequence, so
    the worker's identity (default: the process id) is mixed into the seed."""
    import optuna

    from autotune.search.sampler import MachineSampler

    worker = os.getpid() if worker is None else worker
    seed = (seed * 1_000_003 + worker) % 2**32
    # Wrapped: plain parameter names on every machine, each trial kept to what this machine
    # can run (autotune/search/sampler.py).
    return MachineSampler(optuna.samplers.TPESampler(multivariate=True, group=True, constant_liar=True,
                                                     seed=seed, n_startup_trials=4), seed=seed)


def record_sweep(study, spec) -> None:
    """Store what the report needs from a sweep's spec in the study (`SweepRecord`: limits,
    catalog, offers, target); the latest sweep's spec wins. Called by `autotune sweep`."""
    from pathlib import Path

    from autotune.record import SweepRecord

    catalog = spec.platforms.catalog
    SweepRecord(budget={"max_usd": spec.budget.max_usd, "deadline_hours": spec.budget.deadline_hours,
                        "remeasure_trials": spec.budget.remeasure_trials},
                catalog=str(Path(catalog).resolve()) if catalog else None,
                offers=spec.platforms.offers, target=spec.target.model_dump(mode="json"),
                spec_file=spec.source).write(study)
    try:  # names for the objectives in optuna-dashboard and study.metric_names
        study.set_metric_names(METRIC_NAMES)
    except (AttributeError, ValueError):  # an older Optuna, or a study of other objectives
        pass
