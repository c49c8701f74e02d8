"""What ran beside each trial, and the interference (autotune.report.neighbours), on trials
whose run times and records are given: the times a real side-by-side sweep produces are
checked in tests/test_side_by_side_e2e.py."""

from __future__ import annotations

from datetime import datetime, timedelta

from optuna.distributions import IntDistribution
from optuna.trial import TrialState, create_trial

from autotune.record import TrialRecord
from autotune.report.neighbours import interference, neighbours

T0 = datetime(2026, 12, 1, 12, 0, 0)


def _trial(number: int, start_s: float, end_s: float, host: str = "node1", key: str = "a",
           tps: float = 100.0, **fields):
    attrs = TrialRecord.attrs(status="ok", tokens_per_s=tps, config_key=key,
                              controller={"host": host, "pid": 1}, **fields)
    t = create_trial(state=TrialState.COMPLETE, values=[1.0, 1.0], params={"m": 1},
                     distributions={"m": IntDistribution(1, 2)}, user_attrs=attrs)
    t.number = number
    t.datetime_start, t.datetime_complete = T0 + timedelta(seconds=start_s), T0 + timedelta(seconds=end_s)
    return t


def test_overlapping_runs_on_one_host_are_neighbours_and_nothing_else_is():
    trials = [
        _trial(0, 0, 10),
        _trial(1, 5, 12),            # overlaps 0
        _trial(2, 12, 20),           # starts as 1 ends: not an overlap
        _trial(3, 0, 30, host="node2"),  # another host: no one's neighbour
        _trial(4, 6, 8, reused_from=0),  # reused a measurement: ran nothing
    ]
    assert neighbours(trials) == {0: [1], 1: [0], 2: [], 3: []}


def test_interference_is_the_median_beside_over_the_median_alone_per_config():
    trials = [
        _trial(0, 0, 10, tps=80.0),         # config a, beside 1
        _trial(1, 0, 10, key="b", tps=50.0),  # config b, beside 0, never alone: no row
        _trial(2, 20, 30, tps=100.0),       # config a alone
        _trial(3, 40, 50, tps=110.0),       # config a alone
    ]
    rows = interference(trials, neighbours(trials))
    assert len(rows) == 1
    r = rows[0]
    assert (r.trial, r.runs_beside, r.runs_alone) == (0, [0], [2, 3])
    assert r.tokens_per_s_alone == 105.0 and abs(r.beside_over_alone - 80.0 / 105.0) < 1e-12


def test_records_written_before_slots_existed_still_read():
    # An old study: no slot attribute; a slot written now reads back typed.
    old = TrialRecord.from_attrs({"status": "ok", "tokens_per_s": 1.0})
    assert old.slot is None
    rec = TrialRecord.from_attrs(TrialRecord.attrs(slot={"host": "n", "kind": "cpu", "devices": [1],
                                                         "index": 1, "side_by_side": 2}))
    assert rec.slot.devices == [1] and "slot" not in TrialRecord(**{"slot": rec.slot}).measurement()


def test_a_trial_still_running_is_no_ones_neighbour_yet():
    # No status yet: its measurement is not in; the report lists it once it ends.
    running = _trial(1, 5, 12)
    running.user_attrs = {k: v for k, v in running.user_attrs.items() if k != "status"}
    assert neighbours([_trial(0, 0, 10), running]) == {0: []}


def test_the_report_notes_an_interference_beyond_the_tolerance_and_not_within():
    from autotune.report.neighbours import interference_note

    slow = [_trial(0, 0, 10, tps=80.0), _trial(1, 0, 10, key="b"), _trial(2, 20, 30, tps=100.0)]
    note = interference_note(interference(slow, neighbours(slow)))
    assert note is not None and "20% slower" in note
    same = [_trial(0, 0, 10, tps=99.0), _trial(1, 0, 10, key="b"), _trial(2, 20, 30, tps=100.0)]
    assert interference_note(interference(same, neighbours(same))) is None
    assert interference_note([]) is None


def test_a_run_recorded_from_a_lost_trials_folder_ran_when_the_lost_trial_did():
    """Trial 3 recorded lost trial 1's run (autotune.search.objective.left_by_lost_run) long after
    it ran: its run overlapped trial 0 (trial 1's start plus the run's 8 s), not trial 2, which
    ran as trial 3 was recorded. The lost trial itself is no one's neighbour: its run is 3's."""
    lost = _trial(1, 2, 60, leftovers_killed=0)  # failed by the sweep that found its controller dead
    trials = [_trial(0, 0, 10), lost, _trial(2, 100, 110), _trial(3, 105, 106, recovered_from=1, wall_s=8.0)]
    assert neighbours(trials) == {0: [3], 2: [], 3: [0]}
