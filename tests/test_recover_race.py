"""Two sweeps starting at once both find a trial whose controller died: the first fails it
and re-queues it; the second, whose view of the study predates that, must pass it by
(autotune.run.processes.recover_dead_trials). Real SQLite storage, a real dead process."""

from __future__ import annotations

import socket
import subprocess
import sys

import optuna
from optuna.trial import TrialState

from autotune.run.processes import recover_dead_trials
from autotune.run.storage import open_storage


def test_a_dead_trial_another_sweep_already_failed_is_passed_by(tmp_path, monkeypatch):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid now names no live process
    study = optuna.create_study(study_name="race", storage=open_storage(f"sqlite:///{tmp_path}/s.db"))
    trial = study.ask()
    trial.set_user_attr("controller", {"host": socket.gethostname(), "pid": gone.pid, "start_ticks": None})
    seen = study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.FAIL))
    assert [t.state for t in seen] == [TrialState.RUNNING]
    # The other sweep fails it first; this one still holds the view from before. The double
    # holds that view still: the race itself, two real Slurm workers, is
    # tests/test_slurm.py's (where it showed once), too rare there to pin the rule.
    study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
    monkeypatch.setattr(study, "get_trials", lambda **_: seen)
    assert recover_dead_trials(study) == []  # raised UpdateFinishedTrialError before
    assert study._storage.get_trial(trial._trial_id).state is TrialState.FAIL
