"""A study survives its trials' faults and its controller's death (real trials, real servers).

The hang and the segfault come from a launch wrapper used through the spec's `launcher.argv`
template (tests/fixtures/study_faulty_launch.py), the way a cluster wrapper would sit there;
the out-of-memory trial is a real allocator failure inside the real worker (a 2 GB data limit
and a micro-batch that needs more).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.run.storage import open_storage
from autotune.search.study import open_study
from tests.fixtures.study_tools import (
    cli_env,
    in_a_terminal,
    processes_under,
    read_until_then_leave,
    run,
    sigterm_and_wait,
    started,
    sweep_argv,
    write_spec,
)

pytestmark = pytest.mark.e2e


def _enqueue(url: str, study: str, micros: list[int]) -> None:
    st = open_study(url, study)
    for m in micros:
        st.enqueue_trial({"micro_batch_size": m})


def _wait_for(pred, timeout_s: float = 120, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_hang_segfault_and_oom_are_recorded_and_the_study_goes_on(tmp_path):
    url = f"sqlite:///{tmp_path}/faults.db"
    # The hang first, under a short timeout; then the rest of the study, same storage, under
    # a timeout a loaded 2-core machine cannot reach by accident.
    spec = write_spec(tmp_path, "faults", [1, 2, 3, 4096], timeout_s=15, faulty_launch=True)
    _enqueue(url, "faults", [2, 3, 4096, 1])  # hang, segfault, out of memory, then a good one
    r = run(sweep_argv(spec, url, 1, tmp_path / "runs"), tmp_path, timeout=300)
    # Its one trial hung: nothing in the study succeeded, so the sweep exits 1 (issue #14).
    assert r.returncode == 1 and "no trial of this study succeeded" in r.stdout, r.stdout + r.stderr
    spec = write_spec(tmp_path, "faults", [1, 2, 3, 4096], timeout_s=300, faulty_launch=True)
    r = run(sweep_argv(spec, url, 3, tmp_path / "runs"), tmp_path, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    done = [t for t in optuna.load_study(study_name="faults", storage=url).trials if t.state.is_finished()]
    assert len(done) == 4
    trials = {t.params["micro_batch_size"]: t for t in done}
    hang, segv, oom, good = trials[2], trials[3], trials[4096], trials[1]
    assert hang.state is TrialState.PRUNED and hang.user_attrs["status"] == "timeout"
    assert "timeout_s=15" in hang.user_attrs["error"]
    assert segv.state is TrialState.FAIL and segv.user_attrs["status"] == "crash"
    assert "signal 11" in segv.user_attrs["error"]
    assert oom.state is TrialState.PRUNED and oom.user_attrs["status"] == "oom", oom.user_attrs
    assert good.state is TrialState.COMPLETE and good.user_attrs["status"] == "ok"
    # Constraints on every path: infeasible for each fault, feasible for the good trial.
    for t in (hang, segv, oom):
        assert t.constraints["feasible"] > 0
    assert good.constraints["feasible"] == 0
    # The template was applied: the wrapper is in the recorded command.
    assert "study_faulty_launch.py" in (tmp_path / "runs/faults/trial_0000/command.json").read_text()
    assert processes_under(tmp_path / "runs") == []


def test_controller_killed_mid_trial_then_resumed(tmp_path, postgres):
    """SIGKILL the controller while a trial runs; a new sweep keeps the finished trial, kills
    the orphaned processes, fails the dead trial and re-runs it as a recorded retry. The new
    sweep's budget (total trials in the study) then stops it."""
    url, study = postgres.url, f"kill{os.getpid()}"
    spec = write_spec(tmp_path, study, [1, 5], faulty_launch=True)
    _enqueue(url, study, [1, 5])  # a good trial, then one that sleeps the first time
    runs = tmp_path / "runs"
    first = subprocess.Popen(sweep_argv(spec, url, 5, runs), cwd=tmp_path, env=cli_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    _wait_for(lambda: (runs / study / "trial_0001" / "launch.json").is_file()
              and (tmp_path / "runs" / study / "slow_once.marker").exists()
              or first.poll() is not None, what="trial 1 to start")
    assert first.poll() is None, first.stdout.read().decode()
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    orphans = processes_under(runs / study / "trial_0001")
    assert orphans, "the killed controller's trial processes should outlive it"

    # 5 = the two enqueued trials, the two baselines (micro 5, the largest, then micro 1), the retry.
    r = run(sweep_argv(spec, url, 5, runs, "--total-trials", "5"), tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "controller pid" in r.stdout and "stopped: the study holds 5 finished trials" in r.stdout
    trials = optuna.load_study(study_name=study, storage=open_storage(url)).trials
    assert all(t.state.is_finished() for t in trials) and len(trials) == 5
    assert trials[0].state is TrialState.COMPLETE and trials[0].user_attrs["status"] == "ok"
    assert trials[1].state is TrialState.FAIL
    assert "died during the trial" in trials[1].user_attrs["error"]
    (retry,) = [t for t in trials if t.system_attrs.get("failed_trial") == 1]
    assert retry.state is TrialState.COMPLETE and retry.user_attrs["retry_of"] == 1
    assert retry.params == trials[1].params
    # The dead trial's config was measured exactly once afterwards (the retry, or the queued
    # baseline with the same config that ran before it, whose result the other reused).
    same = [t for t in trials if t.params == trials[1].params and t.state is TrialState.COMPLETE]
    assert len([t for t in same if "reused_from" not in t.user_attrs]) == 1
    assert processes_under(runs) == []
    # The report names how it ended: lost with its sweep (it showed as "unknown").
    from autotune.report.build import collect

    doc = collect(optuna.load_study(study_name=study, storage=open_storage(url)))
    assert next(t for t in doc["trials"] if t["number"] == 1)["status"] == "lost"
    assert ("FAIL", "lost") in {(g["state"], g["status"]) for g in doc["failures"]}
    for pid in orphans:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_a_killed_controllers_ranks_end_by_themselves(tmp_path):
    """SIGKILL `autotune trial` while its 2 ranks train. They run in a session of their own (so
    that a timeout kills the trial's whole group), and trained on to the trial's end, holding
    the cores (or a GPU) the next sweep measures on; now each rank sees its controller gone
    and ends, and torchrun with it (trials/watchdog.py)."""
    import json
    import sys

    (tmp_path / "c.json").write_text(json.dumps({
        "num_gpus": 2, "launcher": "torchrun", "device": "cpu", "warmup_steps": 1,
        "measure_steps": 100000, "max_measure_steps": 100000, "timeout_s": 600}))
    ctl = subprocess.Popen([sys.executable, "-m", "autotune.cli", "trial", "c.json"], cwd=tmp_path,
                           env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    trial = tmp_path / "autotune_runs" / "single" / "trial_0000"
    # The launcher and its 2 ranks, into their steps (a rank watches a controller it saw alive).
    _wait_for(lambda: len(processes_under(trial)) >= 3 or ctl.poll() is not None,
              what="the trial's ranks to start")
    time.sleep(5)
    assert ctl.poll() is None, "the trial ended before the test could kill its controller"
    os.kill(ctl.pid, signal.SIGKILL)
    ctl.wait()
    try:
        _wait_for(lambda: processes_under(trial) == [], timeout_s=30, what="the ranks to end")
    finally:  # a failure here must not leave them training beside the other tests
        for pid in processes_under(trial):
            os.kill(pid, signal.SIGKILL)
    assert f"the controller (pid {ctl.pid}) is gone" in _read(trial / "stderr.log")


def _read(path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def test_ctrl_c_finishes_the_trial_and_twice_fails_it(tmp_path):
    url = f"sqlite:///{tmp_path}/int.db"
    spec = write_spec(tmp_path, "int", [1, 2], timeout_s=300, faulty_launch=True)
    _enqueue(url, "int", [1, 2])  # a good trial, then one that hangs
    runs = tmp_path / "runs"
    p = subprocess.Popen(sweep_argv(spec, url, 4, runs), cwd=tmp_path, env=cli_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_for(lambda: (runs / "int/trial_0000/launch.json").is_file(), what="trial 0 to start")
    p.send_signal(signal.SIGINT)  # once: trial 0 finishes, then the sweep stops
    out, _ = p.communicate(timeout=200)
    assert p.returncode == 130, out
    assert "interrupted" in out
    trials = optuna.load_study(study_name="int", storage=url).trials
    assert trials[0].state is TrialState.COMPLETE  # finished, then the sweep stopped
    assert all(t.state is TrialState.WAITING for t in trials[1:])  # trial 1 (+ baselines) queued

    p = subprocess.Popen(sweep_argv(spec, url, 4, runs), cwd=tmp_path, env=cli_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_for(lambda: (runs / "int/trial_0001/launch.json").is_file(), what="trial 1 to start")
    hung = processes_under(runs / "int/trial_0001")
    assert hung
    p.send_signal(signal.SIGINT)
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)  # twice: fail the running trial now
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 130, out
    t1 = optuna.load_study(study_name="int", storage=url).trials[1]
    assert t1.state is TrialState.FAIL and t1.user_attrs["status"] == "interrupted"
    assert t1.constraints["feasible"] > 0
    assert processes_under(runs) == []


def _long_trial_sweep(tmp_path, study: str) -> tuple[str, list[str], Path]:
    """(storage, argv, trial 0's folder): a pooled sweep (the default: one rank, no launcher
    template, no memory limit) whose trial 0 measures until it is cut (100,000 steps of the tiny
    GPT take far longer than a test waits)."""
    url = f"sqlite:///{tmp_path}/{study}.db"
    spec = write_spec(tmp_path, study, [1, 2], timeout_s=600,
                      trial={"warmup_steps": 1, "measure_steps": 100_000, "max_measure_steps": 100_000,
                             "timeout_s": 600})
    _enqueue(url, study, [1])
    runs = tmp_path / "runs"
    return url, sweep_argv(spec, url, 2, runs), runs / study / "trial_0000"


def _pool_of(trial: Path) -> tuple[str, list[int]]:
    """(queue folder, rank pids) of the pool running `trial`, once a rank has taken it (its
    fatal log exists: trials/pool.py opens it then)."""
    import json

    from autotune.contract.trial_files import FATAL_LOGS

    _wait_for(lambda: FATAL_LOGS.paths(trial), what="trial 0 to start in its pool")
    command = json.loads((trial / "command.json").read_text())
    queue = command["argv"][command["argv"].index("--queue") + 1]
    ranks = processes_under(queue)
    assert "pool_trial" in command and ranks, command
    return queue, ranks


def _assert_cut_and_queued_again(url: str, study: str, queue: str, ranks: list[int], why: str):
    """The pool is gone (ranks and queue folder), trial 0 failed with `why`, one retry queued."""
    import psutil

    assert not os.path.exists(queue), "the pool's queue folder was left in /tmp"
    left = [pid for pid in ranks if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert left == [], "the pool's ranks outlived the sweep"
    trials = optuna.load_study(study_name=study, storage=url).trials
    cut = trials[0]
    assert cut.state is TrialState.FAIL and cut.user_attrs["status"] == "interrupted", cut.user_attrs
    assert cut.user_attrs["error"].startswith(why), cut.user_attrs
    retry = [t for t in trials if t.system_attrs.get("failed_trial") == 0]
    assert len(retry) == 1 and retry[0].state is TrialState.WAITING, [t.system_attrs for t in trials]
    assert retry[0].params == cut.params
    assert retry[0].constraints == {}, "the retry carries the cut run's infeasible verdict"
    return retry[0]


def test_sigterm_fails_the_trial_ends_its_pool_and_queues_it_again(tmp_path):
    """`kill`, scancel, a Slurm time limit or preemption, `docker stop`: SIGTERM. Before, the
    sweep died at once: the trial stayed RUNNING until a later sweep on this host found it dead
    (and was not queued again until then), and the pool's ranks ended only when their watchdog
    saw the controller gone, seconds later. Now the sweep ends them, fails the trial, queues it
    again and exits 143."""
    url, argv, trial = _long_trial_sweep(tmp_path, "term")
    with started(argv, tmp_path) as p:
        queue, ranks = _pool_of(trial)
        out = sigterm_and_wait(p)
    assert p.returncode == 143, out
    assert "SIGTERM: the running trial was failed and re-queued" in out, out
    # Nothing measured yet: the next step is to resume, not to price under other limits.
    assert "Next: the same `autotune sweep` command again: it resumes the study" in out, out
    assert "--max-usd" not in out, out
    retry = _assert_cut_and_queued_again(url, "term", queue, ranks, "stopped by SIGTERM (kill")
    # The report names the queued retry and its config (before: "queued for the next sweep", "-").
    shown = run([sys.executable, "-m", "autotune.cli", "report", "--study", "term", "--storage", url], tmp_path)
    row = next(ln for ln in shown.stdout.splitlines() if ln.startswith(f"{retry.number} "))
    assert "queued for the next sweep (retries #0)" in row and "1x mb1 ga1 fp32" in row, shown.stdout


def test_a_closed_terminal_fails_the_trial_ends_its_pool_and_queues_it_again(tmp_path):
    """An ssh session that drops under a sweep run in it: the kernel sends SIGHUP, and every
    write to the terminal fails from then on. Before, Python's default ended the sweep at once
    (exit -1): the trial stayed RUNNING, the ranks waited for their watchdog. Now SIGHUP is
    handled as SIGTERM, with the output sent to /dev/null so no failed print cuts the cleanup;
    exit 129."""
    url, argv, trial = _long_trial_sweep(tmp_path, "hup")
    with in_a_terminal(argv, tmp_path) as (p, hang_up):
        queue, ranks = _pool_of(trial)
        hang_up.set()
        p.wait(timeout=60)
    assert p.returncode == 129
    _assert_cut_and_queued_again(url, "hup", queue, ranks, "stopped by SIGHUP (its terminal closed")


def test_under_nohup_a_closed_terminal_leaves_the_sweep_running(tmp_path):
    """`nohup autotune sweep ...` asks for the opposite: SIGHUP stays ignored, the sweep goes
    on (its output in nohup.out) until something else stops it."""
    url, argv, trial = _long_trial_sweep(tmp_path, "nohup")
    with in_a_terminal(["nohup", *argv], tmp_path) as (p, hang_up):
        queue, ranks = _pool_of(trial)
        hang_up.set()
        time.sleep(3)
        assert p.poll() is None, "the sweep ended when its terminal closed, under nohup"
        assert set(ranks) <= set(processes_under(queue)), "the ranks ended with the terminal"
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
    assert p.returncode == 143
    out = (tmp_path / "nohup.out").read_text()
    assert "SIGTERM: the running trial was failed and re-queued" in out, out
    _assert_cut_and_queued_again(url, "nohup", queue, ranks, "stopped by SIGTERM (kill")


def test_a_reader_that_leaves_stops_the_sweep_after_the_trial_it_was_told(tmp_path):
    """`autotune sweep | head`, or a `tee` or `less` that ends: the sweep finds the reader gone
    at its next print, the line of the trial it has just measured. Before, rich's answer (exit 1
    from inside that print) ended the sweep with that trial left RUNNING, its measurement out of
    the report until a later sweep on this host found it dead. Now the trial is kept, the sweep
    stops before the next one, ends its pool and exits 141 (as SIGPIPE would end it), and says
    why where it still can: stderr."""
    import json

    url = f"sqlite:///{tmp_path}/pipe.db"
    spec = write_spec(tmp_path, "pipe", [1, 2, 4])
    _enqueue(url, "pipe", [1, 2, 4])
    runs = tmp_path / "runs"
    # The reader: up to trial 0's line, then gone.
    code, seen, err = read_until_then_leave(sweep_argv(spec, url, 3, runs), tmp_path, r"trial\s+0\s")
    assert code == 141, (seen, err)
    assert "stopped: its output closed (the pipe's reader left" in err, err
    trials = optuna.load_study(study_name="pipe", storage=url).trials
    # Trial 1's line was the print that failed: trial 1 is measured and kept; nothing after it ran.
    assert [t.state for t in trials[:2]] == [TrialState.COMPLETE, TrialState.COMPLETE], \
        [(t.number, t.state, t.user_attrs.get("status")) for t in trials]
    assert all(t.state is TrialState.WAITING for t in trials[2:]), [(t.number, t.state) for t in trials]
    argv = json.loads((runs / "pipe" / "trial_0000" / "command.json").read_text())["argv"]
    queue = argv[argv.index("--queue") + 1]  # the pool's: it ran both trials
    assert not os.path.exists(queue), "the pool's queue folder was left in /tmp"
    assert processes_under(queue) == [] and processes_under(runs) == []


@pytest.mark.parametrize("argv", [["catalog"], ["catalog", "--json"], ["sweep"]], ids=" ".join)
def test_output_into_a_pipe_with_no_reader_exits_141_and_nothing_runs(tmp_path, argv):
    """A pipe whose reader left before the first line: the command exits 141, as SIGPIPE would
    end it, without a traceback (before: exit 1, rich's answer or, for --json, click's); a
    sweep launches nothing."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    url = f"sqlite:///{tmp_path}/none.db"
    if argv == ["sweep"]:
        argv = sweep_argv(write_spec(tmp_path, "none", [1]), url, 2, tmp_path / "runs")[3:]
    try:
        p = subprocess.run([sys.executable, "-m", "autotune.cli", *argv], cwd=tmp_path, env=cli_env(),
                           stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert p.returncode == 141, p.stderr
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr
    if argv[0] == "sweep":
        # The README: "exits 141 ... (the reason on stderr)"; before, a reader gone during the
        # sweep's first lines left it silent.
        assert "stopped: its output closed (the pipe's reader left" in p.stderr, p.stderr
        trials = optuna.load_study(study_name="none", storage=url).trials
        assert not [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.RUNNING)]
        assert not (tmp_path / "runs" / "none").exists() or not list((tmp_path / "runs" / "none").glob("trial_*"))


def test_ctrl_c_under_a_tee_that_ends_with_it_keeps_the_trial(tmp_path):
    """Ctrl-C in a terminal under `autotune sweep | tee log` reaches tee too, which ends: the
    sweep's note ("finishing the running trial") is written into a pipe with no reader, from
    inside the signal handler. Before, that print ended the sweep there (exit 1), the trial it
    was to finish left RUNNING (by hand: /work/notes/s59/ctrlc_tee.sh on d96d205). Now the trial
    finishes and is kept, and the sweep stops with 141."""
    url = f"sqlite:///{tmp_path}/tee.db"
    spec = write_spec(tmp_path, "tee", [1, 2])
    _enqueue(url, "tee", [1, 2])
    runs = tmp_path / "runs"
    p = subprocess.Popen(sweep_argv(spec, url, 3, runs), cwd=tmp_path, env=cli_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    _wait_for(lambda: (runs / "tee/trial_0000/launch.json").is_file(), what="trial 0 to start")
    p.stdout.close()  # tee has ended
    p.send_signal(signal.SIGINT)
    p.wait(timeout=200)
    assert p.returncode == 141
    trials = optuna.load_study(study_name="tee", storage=url).trials
    states = [(t.number, t.state.name) for t in trials]
    assert trials[0].state is TrialState.COMPLETE, states
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.FAIL)], states
