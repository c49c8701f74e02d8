"""`budget.remeasure_trials: 0` ("never re-measure") holds under `autotune sweep --side-by-side`:
no alone phase (it re-measures, and beyond its reserve too), every trial of --trials runs side
by side, none more, and the sweep says once what the figures then are. The real sweep is in
tests/test_side_by_side_e2e.py."""

from __future__ import annotations

from autotune.api import side_by_side
from autotune.api.alone import alone_phase
from autotune.contract import DeviceKind
from autotune.run.slots import Slot


def _spec(remeasure: int | None):
    from autotune.api.sweep import load

    return load(None).with_overrides(**{"budget.remeasure_trials": remeasure})


def test_the_alone_reserve_is_none_when_the_user_said_never():
    assert side_by_side.alone_reserve(_spec(0), 8, 2) == 0
    assert side_by_side.alone_reserve(_spec(None), 8, 2) == 4  # half, as a sweep one at a time
    assert side_by_side.alone_reserve(_spec(2), 8, 2) == 2
    assert side_by_side.alone_reserve(_spec(None), 2, 2) == 0  # no trial left after one each
    assert side_by_side.alone_reserve(_spec(None), 8, 1) == 0  # one worker: a sweep one at a time


def test_the_plan_note_says_once_what_the_figures_are_without_an_alone_phase():
    slots = [Slot(0, DeviceKind.cpu, (0,)), Slot(1, DeviceKind.cpu, (1,))]
    never = side_by_side.plan_note(_spec(0), 6, 2, slots, side_by_side.alone_reserve(_spec(0), 6, 2))
    assert "all 6 trials together, none measured again alone (budget.remeasure_trials: 0)" in never
    assert "slower by the interference than the long run alone" in never
    usual = side_by_side.plan_note(_spec(None), 6, 2, slots, side_by_side.alone_reserve(_spec(None), 6, 2))
    assert "3 trials together, then 3 alone" in usual


def test_the_alone_phase_with_no_reserve_runs_nothing():
    """Not even a pick beyond the reserve (a real study holding one measured trial, never run
    alone): `run` is never called."""
    import optuna

    from autotune.search.study import DIRECTIONS

    study = optuna.create_study(directions=DIRECTIONS)
    study.add_trial(optuna.trial.create_trial(values=[1.0, 1.0]))

    def run(spec, n):
        raise AssertionError(f"the alone phase launched {n} trial(s) with no reserve")

    out = alone_phase(_spec(0), study, 0, run, note=lambda m: None, hw=None, catalog=None)
    assert out["runs"] == [] and out["remeasured"] == []
