"""`budget.patience_trials` (`autotune sweep --patience N`) stops the sweep once this machine's
Pareto front has gone N finished trials without gaining a point (autotune.search.budget).

The sweep's other budget flags have an end-to-end test (tests/test_sweep_e2e.py); the patience
stop is checked here on a real Optuna study holding finished trials as a sweep records them
(hardware key, machine, constraints), without running any: what counts as an improvement
(a feasible, non-dominated point of this machine) is the whole rule."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from autotune.contract import HardwareFingerprint
from autotune.search.budget import SearchBudget
from autotune.search.study import DIRECTIONS
from autotune.spec import SweepSpec

HW = HardwareFingerprint(cpu_model="test-cpu", cpu_count=2)
OTHER = HW.model_copy(update=dict(cpu_count=64))  # another machine of the same CPU model


def _add(study: optuna.Study, hours: float | None, usd: float | None, feasible: bool = True,
         hw: HardwareFingerprint = HW, state: TrialState = TrialState.COMPLETE) -> None:
    """A finished trial as the sweep stores it: values (hours, dollars) to the target, its
    hardware, and the constraint every path sets (autotune.search.objective.set_constraints)."""
    study.add_trial(optuna.trial.create_trial(
        state=state, values=None if hours is None else [hours, usd], distributions={}, params={},
        user_attrs={"status": "ok" if state is TrialState.COMPLETE else "error", "hardware": hw.key(),
                    "machine": hw.model_dump(mode="json")},
        constraints={"feasible": 0.0 if feasible else 1.0}))


def _budget(patience: int | None) -> SearchBudget:
    # Through the flag, as `autotune sweep --patience N` sets the spec's field.
    spec = SweepSpec().with_flags({"budget.patience_trials": ("--patience", patience)})
    return SearchBudget(spec, HW)


def test_patience_stops_once_the_front_has_not_improved_for_that_many_finished_trials():
    study = optuna.create_study(directions=DIRECTIONS)
    _add(study, 2.0, 2.0)                        # the front's first point
    _add(study, 3.0, 3.0)                        # dominated: 1 trial without improvement
    _add(study, 1.0, 1.0, feasible=False)        # better, but over a limit: 2
    _add(study, 0.5, 0.5, hw=OTHER)              # another machine's: not counted at all
    _add(study, None, None, state=TrialState.FAIL)  # a failed trial is a finished one: 3
    assert _budget(4).exhausted(study) is None
    assert _budget(None).exhausted(study) is None  # no patience: never this stop
    reason = _budget(3).exhausted(study)
    assert reason is not None
    assert reason == (f"the Pareto front on {HW.kind_key()} has not improved for 3 trials "
                      "(budget.patience_trials = 3)")
    # A point no earlier one dominates (faster, dearer) improves the front: the count restarts.
    _add(study, 1.5, 2.5)
    assert _budget(1).exhausted(study) is None
    _add(study, 1.5, 2.5)                        # the same point again adds nothing
    assert _budget(1).exhausted(study) is not None and _budget(2).exhausted(study) is None
