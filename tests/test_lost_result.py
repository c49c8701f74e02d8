"""A trial whose run measured, but whose controller was lost before the study recorded it (killed
in between, or stopped by a storage that went away), is recorded by its retry from the trial's
folder, not measured again (autotune.run.processes.result_left_by; autotune.search.objective
Objective.left_by_lost_run). The folder must prove to be that run's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.contract import TrialConfig, TrialResult, TrialStatus
from autotune.contract.trial_files import TrialFiles
from autotune.record import ControllerRef, LaunchRef, TrialRecord
from autotune.run.processes import result_left_by
from tests.fixtures.study_tools import cli_env, run, sweep_argv, write_spec


@pytest.mark.e2e
def test_a_run_measured_before_its_controller_died_is_recorded_not_measured_again(tmp_path):
    """The controller dies (os._exit from the API's on_trial) right after trial 1's run measured,
    before Optuna records the trial. The next sweep fails trial 1 saying its run had measured,
    and its retry records that run's result from trial 1's folder: same tokens/s, no launch, no
    folder of its own; it does not count against the new sweep's --trials."""
    url, runs = f"sqlite:///{tmp_path}/lost.db", tmp_path / "runs"
    spec = write_spec(tmp_path, "lost", [1, 2, 4])
    script = ("import os, sys, autotune\n"
              "autotune.sweep(sys.argv[1], trials=3, storage=sys.argv[2], runs_dir=sys.argv[3],\n"
              "               on_trial=lambda o: os._exit(9) if o.number == 1 else None)\n")
    first = subprocess.run([sys.executable, "-c", script, str(spec), url, str(runs)], cwd=tmp_path,
                           env=cli_env(), capture_output=True, text=True, timeout=300)
    assert first.returncode == 9, first.stdout + first.stderr
    lost_dir = (runs / "lost" / "trial_0001").resolve()
    measured = TrialResult.read(lost_dir / "result.json")
    assert measured.status is TrialStatus.ok and measured.wall_s, measured

    again = run(sweep_argv(spec, url, 1, runs), tmp_path, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "trial 1: controller pid" in again.stdout, again.stdout
    assert "ended before recording the trial, whose run had measured" in again.stdout, again.stdout
    trials = optuna.load_study(study_name="lost", storage=url).trials
    assert trials[1].state is TrialState.FAIL
    assert not TrialRecord.of(trials[1]).launched  # its run is the retry's: counted once
    (retry,) = [t for t in trials if t.system_attrs.get("failed_trial") == 1]
    rec = TrialRecord.of(retry)
    assert retry.state is TrialState.COMPLETE and rec.recovered_from == 1 and rec.status == "ok"
    assert rec.tokens_per_s == measured.tokens_per_s and rec.wall_s == measured.wall_s
    assert rec.trial_dir == str(lost_dir) and rec.search_gpu_hours == pytest.approx(measured.wall_s / 3600)
    assert not (runs / "lost" / f"trial_{retry.number:04d}").exists()  # nothing launched for it
    assert f"trial {retry.number:>3}  from #1's folder: ok" in again.stdout, again.stdout
    # --trials 1 counts this sweep's own launches: one more trial ran, in a folder of its own.
    launched = [t for t in trials if t.number > 1 and TrialRecord.of(t).launched
                and TrialRecord.of(t).recovered_from is None]
    assert len(launched) == 1 and (runs / "lost" / f"trial_{launched[0].number:04d}" / "result.json").is_file()

    from autotune.report.build import collect
    from autotune.report.labels import origin_note

    rows = {t["number"]: t for t in collect(optuna.load_study(study_name="lost", storage=url))["trials"]}
    assert rows[retry.number]["recovered_from"] == 1
    assert origin_note(rows[retry.number]) == " (recorded from #1's folder)"
    assert rows[1]["status"] == "lost"  # FAIL, though its run wrote an ok result before the controller went


# -- which folders prove to be the lost run's (real files; no process involved)

def _lost_run(tmp_path: Path, **result: object) -> TrialRecord:
    """A trial's folder as a run leaves it (config.json, launch.json, result.json) and the
    record the trial stored."""
    cfg = TrialConfig(micro_batch_size=2)
    files = TrialFiles(tmp_path)
    cfg.write(files.config)
    ctl = ControllerRef(host="node-a", pid=4242, start_ticks=17)
    launch = LaunchRef(pgid=5151, start_ticks=99)
    files.launch.write_text(json.dumps({**launch.model_dump(mode="json"),
                                        "controller": ctl.model_dump(mode="json")}))
    fields = {"status": TrialStatus.ok, "tokens_per_s": 1234.5, "wall_s": 9.5, **result}
    TrialResult(**fields).write(files.result)
    return TrialRecord(config=cfg.model_dump(mode="json"), controller=ctl, launch=launch,
                       trial_dir=str(tmp_path))


def test_the_lost_runs_own_folder_gives_its_result(tmp_path):
    got = result_left_by(_lost_run(tmp_path))
    assert got is not None and got.tokens_per_s == 1234.5 and got.wall_s == 9.5 and not got.notes


def test_a_run_its_controller_never_timed_takes_wall_s_from_the_folder_and_says_so(tmp_path):
    rec = _lost_run(tmp_path, wall_s=None)
    files = TrialFiles(tmp_path)
    os.utime(files.launch, (1000.0, 1000.0))
    os.utime(files.result, (1042.0, 1042.0))
    got = result_left_by(rec)
    assert got is not None and got.wall_s == pytest.approx(42.0)
    assert any("file times" in n for n in got.notes), got.notes


@pytest.mark.parametrize("change", ["another controller", "another launch", "another config",
                                    "a failed run", "no result", "no launch file", "garbage"])
def test_a_folder_that_is_not_the_lost_runs_gives_nothing(tmp_path, change):
    rec = _lost_run(tmp_path)
    files = TrialFiles(tmp_path)
    launch = json.loads(files.launch.read_text())
    if change == "another controller":  # a later run in the same folder (another study, same runs dir)
        files.launch.write_text(json.dumps({**launch, "controller": {**launch["controller"], "pid": 1}}))
    elif change == "another launch":
        files.launch.write_text(json.dumps({**launch, "pgid": 1}))
    elif change == "another config":
        TrialConfig(micro_batch_size=4).write(files.config)
    elif change == "a failed run":
        TrialResult(status=TrialStatus.oom, error="out of memory").write(files.result)
    elif change == "no result":
        files.result.unlink()
    elif change == "no launch file":
        files.launch.unlink()
    else:
        files.launch.write_text("[1, 2]")
    assert result_left_by(rec) is None
