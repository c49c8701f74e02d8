"""`budget.remeasure_trials: 0` ("never re-measure") holds under `autotune sweep --side-by-side`:
no alone phase (it re-measures, and beyond its reserve too), every trial of --trials runs side
by side, none more, and the sweep says once what the figures then are. The real sweep is in
tests/test_side_by_side_e2e.py."""

from __future__ import annotations

import json
import types
from pathlib import Path

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


class _Worker:
    """Stands in for a slot worker's process: done at once, its summary written as the real one
    writes it (what it would have launched: its share, and the alone reserve it was given)."""

    def __init__(self, summary_file: Path, trials: int, alone):
        self.summary_file, self.returncode, self.trials, self.alone = summary_file, 0, trials, alone
        summary_file.write_text(json.dumps({"trials_run": trials, "stop_reason": None}))

    def wait(self):
        return 0

    def poll(self):
        return 0


def _run(monkeypatch, tmp_path, remeasure: int | None, n_trials: int = 6):
    """run_side_by_side as the CLI calls it, two CPU slots, the workers' processes stood in for."""
    started: list[_Worker] = []

    def start(spec, work, slot, count, trials, runs_dir, stdout, alone=None):
        started.append(_Worker(work / f"summary_{slot.index}.json", trials, alone))
        return started[-1]

    slots = [Slot(0, DeviceKind.cpu, (0,)), Slot(1, DeviceKind.cpu, (1,))]
    monkeypatch.setattr(side_by_side, "check", lambda spec, count: slots)
    monkeypatch.setattr(side_by_side, "_start", start)
    notes: list[str] = []
    summary = side_by_side.run_side_by_side(types.SimpleNamespace(spec=_spec(remeasure)), n_trials,
                                            tmp_path, 2, note=notes.append)
    return summary, started, notes


def test_side_by_side_with_remeasure_zero_launches_trials_and_no_alone_phase(monkeypatch, tmp_path):
    summary, started, notes = _run(monkeypatch, tmp_path, 0)
    assert sorted(w.trials for w in started) == [3, 3] and all(w.alone is None for w in started)
    assert summary.trials_run == 6 and summary.remeasured == [] and summary.alone == []
    assert len(notes) == 1, notes  # said once
    assert "all 6 trials together, none measured again alone (budget.remeasure_trials: 0)" in notes[0]
    assert "slower by the interference than the long run alone" in notes[0]


def test_side_by_side_keeps_its_alone_phase_otherwise(monkeypatch, tmp_path):
    _, started, notes = _run(monkeypatch, tmp_path, None)
    first = next(w for w in started if w.alone)
    assert first.alone[0] == 3 and sum(w.trials for w in started) == 3
    assert notes == [notes[0]] and "3 trials together, then 3 alone" in notes[0]


def test_the_alone_phase_with_no_reserve_runs_nothing(monkeypatch):
    """Not even the pick beyond the reserve: here a pick (trial 0) with no run alone yet, which
    the phase would otherwise measure again."""
    from autotune.api import alone

    monkeypatch.setattr(alone, "leaders_without_alone_run", lambda study, k, picks_only=False: [0])
    monkeypatch.setattr(alone, "enqueue_repeats", lambda study, firsts: None)
    monkeypatch.setattr(alone, "config_key", lambda study, n: f"config of #{n}")
    monkeypatch.setattr(alone, "waiting", lambda study: 1)
    ran: list[int] = []

    def run(spec, n):
        ran.append(n)
        return {"trials_run": n}

    out = alone_phase(_spec(0), None, 0, run, note=lambda m: None, hw=None, catalog=None)
    assert ran == [] and out["runs"] == [] and out["remeasured"] == []
    assert alone_phase(_spec(None), None, 1, run, note=lambda m: None, hw=None, catalog=None)["remeasured"] == [0]
    assert ran == [1]  # the stand-ins do make it run where there is a reserve
