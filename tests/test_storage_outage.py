"""A study's PostgreSQL server that goes away mid-sweep (a restart, a failover): real sweeps on
a real server of their own (tests/pg.py), shut down and started again on the same port.

Before autotune.run.reconnect, a server down at the moment a measured trial was told to the
study ended the sweep with a traceback (Optuna's UnboundLocalError on top of the driver's
"connection refused"), the measured trial left RUNNING."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from urllib.parse import quote

import optuna
import pytest
from optuna.trial import TrialState

import autotune
from autotune.record import TrialRecord
from autotune.run.storage import open_storage
from tests.fixtures.study_tools import cli_env, sweep_argv, write_spec
from tests.pg import PASSWORD, PostgresServer

pytestmark = [pytest.mark.e2e, pytest.mark.postgres,
              # Trials asked here outside Study.optimize, and Optuna's stale check, warn as such.
              pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize",
                                         "ignore::optuna.exceptions.ExperimentalWarning")]

SECRETS = (PASSWORD, quote(PASSWORD, safe=""))


@pytest.fixture
def server(postgres):
    """A server of this test's own (`postgres` only decides whether the binaries must exist):
    stopping the session's would cut off the other tests that use it."""
    own = PostgresServer().start()
    try:
        yield own
    finally:
        own.stop()


def _states(storage, study: str) -> list[tuple[int, str, str | None]]:
    try:
        trials = optuna.load_study(study_name=study, storage=storage).trials
    except KeyError:  # the sweep has not created it yet
        return []
    return [(t.number, t.state.name, TrialRecord.of(t).status) for t in trials]


def test_a_server_restarted_while_a_measured_trial_is_told_loses_nothing(tmp_path, server, capfd, monkeypatch):
    """The server goes down from inside on_trial, which runs before Optuna records the trial,
    and comes back 3 s later: the tell waits for it, the sweep goes on and ends normally, each
    trial recorded as measured; the wait is said on stderr, with the password hidden."""
    monkeypatch.setenv("AUTOTUNE_STORAGE_WAIT_S", "120")
    spec = write_spec(tmp_path, "outage", [1, 2])
    restarted: list[threading.Thread] = []

    def restart_once(outcome) -> None:
        if restarted:
            return
        server.pause()  # returns once the server is down: the tell below cannot slip through

        def later() -> None:
            time.sleep(3)
            server.resume()

        restarted.append(threading.Thread(target=later))
        restarted[0].start()

    result = autotune.sweep(str(spec), trials=2, storage=server.url, runs_dir=tmp_path / "runs",
                            progress=False, on_trial=restart_once)
    restarted[0].join()
    out, err = capfd.readouterr()
    assert result.trials_run == 2, (out, err)
    states = _states(open_storage(server.url), "outage")
    assert [s for s in states if s[1] != "WAITING"] == [(0, "COMPLETE", "ok"), (1, "COMPLETE", "ok")], states
    assert "storage postgresql://autotune:***@127.0.0.1" in err and "is unreachable" in err, err
    assert "is back after" in err, err
    assert "Traceback" not in out + err
    assert not any(s in out + err for s in SECRETS)


def test_a_server_gone_for_longer_than_the_wait_stops_the_sweep_with_one_message(tmp_path, server):
    """Down for longer than AUTOTUNE_STORAGE_WAIT_S while trial 1 runs: one error line naming the
    storage (password hidden) and how to go on, exit 1, no traceback; trial 0, recorded before,
    is kept. With the server back, the same sweep fails the cut trial, queues it again and
    measures it (its one trial: nothing else is queued in a space of 2 configs)."""

    spec = write_spec(tmp_path, "gone", [1, 2])
    env = cli_env(AUTOTUNE_STORAGE_WAIT_S="2")
    argv = sweep_argv(spec, server.url, 3, tmp_path / "runs")
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    storage = open_storage(server.url)
    try:
        deadline = time.monotonic() + 300
        # Once trial 0 is recorded and the next one is RUNNING (asked: its number is taken).
        while not (running := [n for n, state, _ in _states(storage, "gone")[1:] if state == "RUNNING"]):
            assert proc.poll() is None and time.monotonic() < deadline, "the sweep ended before trial 1 ran"
            time.sleep(0.1)
        server.pause()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, (out, err)
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "lost the study's storage postgresql://autotune:***@127.0.0.1" in errors[0], err
    assert re.search(r"unreachable for \d+ s", err) and "run the same sweep again" in err.replace("\n", " "), err
    assert "Traceback" not in out + err and not any(s in out + err for s in SECRETS)

    server.resume()
    kept = _states(storage, "gone")
    (cut,) = running
    assert kept[0] == (0, "COMPLETE", "ok") and kept[cut][1] == "RUNNING", kept
    again = subprocess.run(sweep_argv(spec, server.url, 1, tmp_path / "runs"), cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"trial {cut}: controller pid" in again.stdout and "re-queued" in again.stdout, again.stdout
    trials = optuna.load_study(study_name="gone", storage=storage).trials
    assert trials[cut].state is TrialState.FAIL
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == cut]
    assert retried and retried[0].state is TrialState.COMPLETE, _states(storage, "gone")


def test_no_trial_is_taken_for_stale_in_the_grace_period_after_an_outage(server, monkeypatch):
    """A server away for longer than the heartbeat's grace leaves every RUNNING trial's last
    heartbeat old, the live ones of other machines included; a sweep back first would fail and
    re-queue them all (Optuna's stale-trial check). For one grace period after this process found
    the server gone, it takes none for stale; a trial still silent after that is failed."""
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", "1")
    monkeypatch.setenv("AUTOTUNE_GRACE_S", "2")
    storage = open_storage(server.url)
    study = optuna.create_study(study_name="stale", storage=storage)
    trial = study.ask()  # another machine's trial, its heartbeat written before the outage
    storage.record_heartbeat(trial._trial_id)

    server.pause()
    time.sleep(3)  # longer than the grace period: the heartbeat is stale when the server is back
    server.resume()
    optuna.storages.fail_stale_trials(study)  # the first connection finds the pooled one broken
    assert study.trials[0].state is TrialState.RUNNING

    time.sleep(2.5)  # a whole grace period after the outage, and still no heartbeat
    optuna.storages.fail_stale_trials(study)
    assert study.trials[0].state is TrialState.FAIL


def _kill_own_connection_once(server, engine, event_name: str) -> list[str]:
    """Terminate (from the server side, as a restart does) the connection the engine is about to
    use, once, at `event_name` ("before_cursor_execute": mid-call, before the commit; "commit":
    at the commit itself). Returns the statements seen cut (one)."""
    from sqlalchemy import event

    cut: list[str] = []

    def kill(conn, *args) -> None:
        if cut:
            return
        cut.append(args[1] if event_name == "before_cursor_execute" else "COMMIT")
        pid = conn.connection.dbapi_connection.get_backend_pid()
        admin = server.connect()
        with admin.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
        admin.close()
        time.sleep(0.2)  # the backend is gone before the statement is sent

    event.listen(engine, event_name, kill)
    return cut


def test_a_query_the_server_cuts_before_its_commit_is_made_again(server):
    """A restart mid-query (here: the server terminates the very connection a write is using,
    before its commit): the server rolled that transaction back, so the call is made again, on a
    new connection, and the write is there once."""
    storage = open_storage(server.url)
    study = optuna.create_study(study_name="cut", storage=storage)
    trial = study.ask()
    cut = _kill_own_connection_once(server, storage.engine, "before_cursor_execute")
    storage.set_trial_user_attr(trial._trial_id, "seen", 1)
    assert cut, "the connection was not cut"
    assert storage.get_trial(trial._trial_id).user_attrs == {"seen": 1}


def test_a_connection_cut_at_the_commit_stops_with_one_message(server):
    """Cut at the commit itself, the write may or may not have been applied: not made again,
    but one StorageLost that says so, the password hidden."""
    from autotune.run.reconnect import StorageLost

    storage = open_storage(server.url)
    study = optuna.create_study(study_name="cut", storage=storage)
    trial = study.ask()
    cut = _kill_own_connection_once(server, storage.engine, "commit")
    with pytest.raises(StorageLost, match="broke while a write was being committed") as lost:
        storage.set_trial_user_attr(trial._trial_id, "seen", 1)
    assert cut and not any(s in str(lost.value) for s in SECRETS)
    assert "postgresql://autotune:***@127.0.0.1" in str(lost.value)


def test_a_trial_measured_before_the_storage_was_lost_is_recorded_by_the_next_sweep(tmp_path, server):
    """The server goes down right after trial 1's run measured (from on_trial, before Optuna
    records the trial) and stays down past a 2 s wait: the sweep stops with StorageLost, trial 1
    left RUNNING. With the server back, the next sweep fails trial 1 and its retry records the
    run's result from trial 1's folder instead of measuring the config again."""
    import sys

    from autotune.contract import TrialResult

    spec, runs = write_spec(tmp_path, "lost", [1, 2, 4]), tmp_path / "runs"
    pidfile = server.root / "data" / "postmaster.pid"
    script = ("import os, signal, sys, time, autotune\n"
              "from autotune.run.reconnect import StorageLost\n"
              "def down(o):\n"
              "    if o.number != 1: return\n"
              "    pidfile = sys.argv[4]\n"
              "    os.kill(int(open(pidfile).read().split()[0]), signal.SIGINT)\n"
              "    while os.path.exists(pidfile): time.sleep(0.05)\n"
              "try:\n"
              "    autotune.sweep(sys.argv[1], trials=3, storage=sys.argv[2], runs_dir=sys.argv[3], on_trial=down)\n"
              "except StorageLost as exc:\n"
              "    sys.exit(f'lost: {exc}')\n")
    env = cli_env(AUTOTUNE_STORAGE_WAIT_S="2")
    first = subprocess.run([sys.executable, "-c", script, str(spec), server.url, str(runs), str(pidfile)],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 1 and "lost: " in first.stderr, first.stdout + first.stderr
    server.proc.wait(timeout=30)
    server.resume()
    storage = open_storage(server.url)
    assert _states(storage, "lost")[1][1] == "RUNNING"
    measured = TrialResult.read(runs / "lost" / "trial_0001" / "result.json")

    again = subprocess.run(sweep_argv(spec, server.url, 1, runs), cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "whose run had measured" in again.stdout, again.stdout
    trials = optuna.load_study(study_name="lost", storage=storage).trials
    (retry,) = [t for t in trials if t.system_attrs.get("failed_trial") == 1]
    rec = TrialRecord.of(retry)
    assert retry.state is TrialState.COMPLETE and rec.recovered_from == 1
    assert rec.tokens_per_s == measured.tokens_per_s
    assert not (runs / "lost" / f"trial_{retry.number:04d}").exists()
    assert not any(s in first.stdout + first.stderr + again.stdout + again.stderr for s in SECRETS)
