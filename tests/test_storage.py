"""Storage URLs, redaction, claims and heartbeats, against real SQLite, journal and PostgreSQL."""

from __future__ import annotations

import threading
import time

import optuna
import pytest

from autotune.errors import UserError
from autotune.run.storage import (
    HeartbeatSettings,
    claim,
    claim_owner,
    open_storage,
    redact_text,
    redact_url,
    storage_kind,
    user_study_names,
)


@pytest.mark.parametrize("url, shown", [
    ("postgresql://tuner:s3cret@db:5432/a", "postgresql://tuner:***@db:5432/a"),
    ("postgresql+psycopg2://tuner:p%40ss%2Fw@db/a", "postgresql+psycopg2://tuner:***@db/a"),
    ("mysql+pymysql://u:pw@h/db?charset=utf8&password=other", "mysql+pymysql://u:***@h/db?charset=utf8&password=***"),
    ("sqlite:///autotune.db", "sqlite:///autotune.db"),
    ("postgresql://tuner@db/a", "postgresql://tuner@db/a"),
    # A user name holding '@': SQLAlchemy reads user 'admin@corp', password 'Sup3rSecret'.
    ("postgresql://admin@corp:Sup3rSecret@db/a", "postgresql://admin%40corp:***@db/a"),
    ("postgresql://u:pa#ss:w/rd@db/a", "postgresql://u:***@db/a"),
    ("postgresql://u@db/a?sslmode=require&PASSWORD=hunter22", "postgresql://u@db/a?PASSWORD=***&sslmode=require"),  # SQLAlchemy renders keys sorted
    ("postgresql://:onlysecret@db/a", "postgresql://:***@db/a"),
    # An unencoded '@' in the password: SQLAlchemy would read host "ss#Secret@127.0.0.1".
    # Not clean: everything between '://' and the last '@' is hidden.
    ("postgresql://u:p@ss#Secret@127.0.0.1:1/db", "postgresql://***@127.0.0.1:1/db"),
    ("postgresql://u:pa@ss/x@host/db", "postgresql://***@host/db"),
    ("sqlite:////home/a@b/x.db", "sqlite:////home/a@b/x.db"),  # an '@' in a path is no user info
    # Mistyped schemes, with no '://': everything after a scheme-like start up to the last '@'.
    ("postgresql:/alice:s3cret@127.0.0.1:1/db", "postgresql:/***@127.0.0.1:1/db"),
    ("postgres:alice:s3cret@h/db", "postgres:***@h/db"),
    ("postgresql//alice:s3cret@h/db", "***@h/db"),
    # A journal URL written as a server's, as given or made absolute against the spec's folder.
    ("journal://u:s3cret@/tmp/x/j.log", "journal://***@/tmp/x/j.log"),
    ("journal:///runs/u:s3cret@/tmp/x/j.log", "journal:///runs/***@/tmp/x/j.log"),
    ("journal:///tmp/a@b/j.log", "journal:///tmp/a@b/j.log"),
])
def test_redact_url(url, shown):
    assert redact_url(url) == shown


# Every URL form SQLAlchemy accepts for a password, with the secret SQLAlchemy reads from it.
SECRET_FORMS = [
    ("postgresql://admin@corp:Sup3rSecret@db/a", "Sup3rSecret"),
    ("postgresql://u:pa#ss:w/rd@db/a", "pa#ss:w/rd"),
    ("postgresql://u:p%40ss%2Fw%23rd@db/a", "p@ss/w#rd"),
    ("postgresql+psycopg2://u:s3cr3t@db:5432/a?sslmode=require", "s3cr3t"),
    ("postgresql://u@db/a?password=qu3ry-secret", "qu3ry-secret"),
    ("mysql+pymysql://u:my%20pass@db/a", "my pass"),
]


@pytest.mark.parametrize("url, secret", SECRET_FORMS)
def test_no_form_of_the_password_survives_redaction(url, secret):
    from urllib.parse import quote

    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    assert secret in (parsed.password, *parsed.query.values())  # the case is what SQLAlchemy reads
    shown = redact_url(url)
    text = redact_text(f"could not connect to {url}: password {secret!r} rejected ({quote(secret, safe='')})", url)
    for out in (shown, text):
        for form in {secret, quote(secret, safe=""), quote(secret)}:
            assert form not in out, (url, out)
    assert "***" in shown


def test_storage_comes_from_flag_file_environment_or_spec(tmp_path, monkeypatch):
    from autotune.run.storage import DEFAULT_STORAGE, STORAGE_ENV, resolve_storage

    monkeypatch.delenv(STORAGE_ENV, raising=False)
    assert resolve_storage() == DEFAULT_STORAGE
    assert resolve_storage(spec_storage="sqlite:///spec.db") == "sqlite:///spec.db"
    monkeypatch.setenv(STORAGE_ENV, "postgresql://u:pw@db/env")
    assert resolve_storage(spec_storage="sqlite:///spec.db") == "postgresql://u:pw@db/env"
    f = tmp_path / "storage.url"
    f.write_text("\n  postgresql://u:pw@db/file  \n")
    assert resolve_storage(storage_file=f) == "postgresql://u:pw@db/file"
    assert resolve_storage(flag="sqlite:///flag.db") == "sqlite:///flag.db"
    for kwargs, words in [({"flag": "sqlite:///a.db", "storage_file": f}, "both"),
                          ({"storage_file": tmp_path / "missing"}, "cannot read"),
                          ({"storage_file": tmp_path}, "cannot read")]:
        with pytest.raises(UserError) as exc:
            resolve_storage(**kwargs)
        assert words in str(exc.value)


def test_redact_text_removes_what_an_unclear_url_hides_and_the_host_misread_from_it():
    url = "postgresql://u:p@ss#Secret@127.0.0.1:1/db"
    msg = 'could not translate host name "ss#Secret@127.0.0.1" to address; user u:p@ss#Secret'
    assert redact_text(msg, url) == 'could not translate host name "***" to address; user ***'


def test_redact_text_removes_decoded_secret_from_driver_messages():
    url = "postgresql://tuner:p%40ss%2Fword@db/a"
    msg = 'FATAL: password "p@ss/word" rejected for postgresql://tuner:p%40ss%2Fword@db/a'
    out = redact_text(msg, url)
    assert "p@ss/word" not in out and "p%40ss%2Fword" not in out and "***" in out


@pytest.mark.parametrize("url, kind", [
    ("sqlite:///x.db", "sqlite"), ("postgresql://h/db", "postgresql"), ("postgres://h/db", "postgresql"),
    ("mysql+pymysql://h/db", "mysql"), ("journal:///tmp/x.log", "journal"), ("runs/study.log", "journal"),
])
def test_storage_kind(url, kind):
    assert storage_kind(url) == kind


@pytest.mark.parametrize("url, words", [
    ("autotune.db", "not a URL"),
    ("redis://u:topsecret@h/0", "unknown kind"),
    ("postgresql://u:x@topsecret@127.0.0.1/db", "percent-encode"),
    ("sqlite:///no/such/folder/x.db", "does not exist"),
    ("journal:///no/such/folder/x.log", "does not exist"),
    ("mysql://u:topsecret@127.0.0.1/db", "driver"),
    ("postgresql:/u:topsecret@127.0.0.1/db", "not a URL"),
    ("u:topsecret@127.0.0.1/db", "not a URL"),
    ("journal://u:topsecret@/tmp/x.log", "holds no user or password"),
    ("journal:///tmp/u:topsecret@/x.log", "holds no user or password"),
])
def test_bad_urls_are_one_clear_user_error(url, words):
    with pytest.raises(UserError) as exc:
        open_storage(url)
    assert words in str(exc.value) and "To fix" in str(exc.value)
    assert "topsecret" not in str(exc.value)
    if words == "does not exist":  # `study copy` takes its URLs as arguments: the fix names no flag
        assert "--storage" not in str(exc.value)


@pytest.fixture(params=["sqlite", "journal", "postgresql"])
def storage_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/s.db"
    if request.param == "journal":
        return f"journal://{tmp_path}/s.log"
    pg = request.getfixturevalue("postgres")
    db = f"t{time.monotonic_ns()}"  # a fresh database per test on the shared server
    import psycopg2

    from tests.pg import PASSWORD, USER

    conn = psycopg2.connect(host="127.0.0.1", port=pg.port, user=USER, password=PASSWORD, dbname="postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
    conn.close()
    return pg.url.rsplit("/", 1)[0] + "/" + db


def test_claim_is_won_exactly_once_under_contention(storage_url):
    """Eight threads with their own storage connections race for one claim: one wins."""
    storages = [open_storage(storage_url) for _ in range(8)]
    wins: list[int] = []
    barrier = threading.Barrier(len(storages))

    def race(i: int) -> None:
        barrier.wait()
        if claim(storages[i], "study/key/0", {"trial": i}):
            wins.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(storages))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert claim_owner(storages[0], "study/key/0") == {"trial": wins[0]}
    assert claim_owner(storages[0], "study/other/0") is None
    # Claims are bookkeeping, never a study: optuna-dashboard lists every study in a storage,
    # and there is none but the user's (on main each claim was a study `autotune-claim:...`).
    optuna.create_study(study_name="mine", storage=storages[0])
    assert user_study_names(storages[0]) == ["mine"]
    assert [s.study_name for s in optuna.get_all_study_summaries(open_storage(storage_url))] == ["mine"]
    # A claim an earlier version stored as a study still holds (a resumed study keeps its claims).
    old = optuna.create_study(study_name="autotune-claim:study/baselines/x", storage=storages[0])
    old.set_user_attr("trial", 3)
    assert not claim(storages[1], "study/baselines/x", {"trial": 9})
    assert claim_owner(storages[1], "study/baselines/x") == {"trial": 3}


def _open_at(url: str, barrier, answers) -> None:
    barrier.wait()
    try:
        open_storage(url)
        answers.put("ok")
    except UserError as exc:
        answers.put(exc.message)


def test_sweeps_that_open_a_new_sqlite_file_at_once_all_open_it(tmp_path):
    """Two `autotune sweep` started together on a new SQLite file (one machine, two terminals)
    both create Optuna's tables and stamp its schema version: the loser's insert failed with
    "UNIQUE constraint failed: alembic_version.version_num", and its sweep ended with exit 2
    and a fix saying the file was not a sweep's database or was damaged (about half the time
    with two sweeps). Real processes on real files, released together by a barrier."""
    for round_ in range(3):
        assert _at_once(_open_at, f"sqlite:///{tmp_path}/new{round_}.db", 6) == ["ok"] * 6


def _at_once(target, url: str, n: int) -> list:
    """What `target(url, barrier, answers)` puts, from n forked processes released together."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    barrier, answers = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=target, args=(url, barrier, answers)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    return [answers.get(timeout=5) for _ in procs]


def _ask_queued(url: str, barrier, answers) -> None:
    study = optuna.load_study(study_name="q", storage=open_storage(url))
    barrier.wait()
    answers.put([study.ask().number for _ in range(5)])


def test_sweeps_on_one_sqlite_file_never_take_the_same_queued_trial(tmp_path):
    """Optuna takes a queued trial by reading it WAITING and setting it RUNNING; SQLite ignores
    the FOR UPDATE that should make that atomic, so two sweeps on one SQLite file both took the
    same trial (4 to 6 of 20 here) and both ran it. Real processes asking at once."""
    url = f"sqlite:///{tmp_path}/q.db"
    study = optuna.create_study(study_name="q", storage=open_storage(url))
    for i in range(20):
        study.enqueue_trial({"x": i})
    assert sorted(sum(_at_once(_ask_queued, url, 4), [])) == list(range(20))


def test_heartbeat_fails_and_requeues_a_dead_trial(postgres, monkeypatch):
    """A RUNNING trial whose heartbeat stops (its machine died) is failed by the next worker
    that asks for a trial and re-queued once, with the retry recorded (real PostgreSQL)."""
    storage = open_storage(postgres.url, HeartbeatSettings(interval_s=1, grace_s=2, max_retry=1))
    study = optuna.create_study(study_name=f"hb{time.monotonic_ns()}", storage=storage)
    with pytest.warns(UserWarning, match="Heartbeat"):  # ask() outside optimize(): expected here
        dead = study.ask({"x": optuna.distributions.CategoricalDistribution([1, 2])})
    study._storage.set_trial_user_attr(dead._trial_id, "controller", {"host": "gone", "pid": 1})
    storage.record_heartbeat(dead._trial_id)
    time.sleep(3.5)  # longer than the grace period: the trial is stale
    seen = []
    study.optimize(lambda t: seen.append(t.suggest_categorical("x", [1, 2])) or 0.0, n_trials=1)
    trials = study.get_trials()
    assert trials[0].state is optuna.trial.TrialState.FAIL
    retry = trials[1]
    assert retry.state is optuna.trial.TrialState.COMPLETE
    assert retry.system_attrs["failed_trial"] == 0 and retry.system_attrs["retry_history"] == [0]
    assert retry.params == trials[0].params and seen == [trials[0].params["x"]]
    assert "controller" not in retry.user_attrs  # the dead run's own records are not copied


def test_a_retry_starts_without_the_constraints_of_the_run_it_retries(tmp_path):
    """A trial cut by SIGTERM is failed as infeasible (`feasible` > 0) and queued again. Optuna
    keeps the first value of a constraint, and its retry callback copies every system attribute:
    the retry, measured fine, stayed infeasible (out of the front, the local moves and the
    patience count) and warned that its own value was ignored. Real SQLite study."""
    import warnings

    from autotune.run.storage import retry_callback

    study = optuna.create_study(study_name="cut", storage=open_storage(f"sqlite:///{tmp_path}/s.db"),
                                directions=["minimize", "minimize"])
    with pytest.warns(UserWarning, match="Heartbeat"):  # ask() outside optimize(): expected here
        cut = study.ask({"mb": optuna.distributions.CategoricalDistribution([1, 2])})
    cut.set_constraint("feasible", 1.0)  # as the objective fails a cut trial
    study.tell(cut, state=optuna.trial.TrialState.FAIL)
    retry_callback()(study, study.trials[0])

    def measured_fine(trial) -> tuple[float, float]:
        trial.suggest_categorical("mb", [1, 2])
        trial.set_constraint("feasible", 0.0)
        return 1.0, 2.0

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "The constraint value is ignored ..." was one
        study.optimize(measured_fine, n_trials=1)
    retry = study.trials[1]
    assert retry.system_attrs["failed_trial"] == 0 and retry.params == study.trials[0].params
    assert retry.state is optuna.trial.TrialState.COMPLETE and retry.constraints == {"feasible": 0.0}
    assert study.best_trials == [retry]


def test_heartbeat_settings_from_env(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_S", "5")
    monkeypatch.setenv("AUTOTUNE_GRACE_S", "11")
    assert HeartbeatSettings.from_env() == HeartbeatSettings(interval_s=5, grace_s=11)
    monkeypatch.setenv("AUTOTUNE_GRACE_S", "soon")
    with pytest.raises(UserError, match="AUTOTUNE_GRACE_S"):
        HeartbeatSettings.from_env()


def test_storage_wait_from_env(monkeypatch, tmp_path):
    """AUTOTUNE_STORAGE_WAIT_S: how long a sweep waits for a server that went away
    (tests/test_storage_outage.py); a bad value is refused before any database is opened."""
    from autotune.run.reconnect import DEFAULT_WAIT_S, wait_s_from_env

    monkeypatch.delenv("AUTOTUNE_STORAGE_WAIT_S", raising=False)
    assert wait_s_from_env() == DEFAULT_WAIT_S
    monkeypatch.setenv("AUTOTUNE_STORAGE_WAIT_S", "45.5")
    assert wait_s_from_env() == 45.5
    for bad in ("soon", "0", "-5", "inf", "nan"):
        monkeypatch.setenv("AUTOTUNE_STORAGE_WAIT_S", bad)
        with pytest.raises(UserError, match=f"bad AUTOTUNE_STORAGE_WAIT_S='{bad}'.*To fix"):
            open_storage(f"sqlite:///{tmp_path}/s.db")
    assert not (tmp_path / "s.db").exists()


def test_cli_storage_errors_exit_2_without_secrets(postgres, tmp_path, monkeypatch, capsys):
    """Bad URL, unreachable database, wrong password, unknown study: one line each, exit 2.
    Runs the CLI's real entry point (`autotune.cli.main`) in this process: a subprocess per case
    would spend its time importing."""
    from autotune.cli import main
    from tests.pg import _free_port

    cases = [
        (["report", "--storage", "nosuch://u:Hunter22x@h/db"], "unknown kind"),
        (["report", "--storage", postgres.url_for("Hunter22x", port=_free_port())], "cannot open storage"),
        (["report", "--storage", postgres.url_for("Hunter22x")], "password authentication failed"),
        (["report", "--storage", postgres.url, "--study", "nope"], "no study 'nope'"),
        # Reading never creates the database file (issue #14).
        (["report", "--storage", f"sqlite:///{tmp_path}/empty.db", "--study", "nope"], "study 'nope'"),
    ]
    monkeypatch.setenv("COLUMNS", "300")
    for args, words in cases:
        monkeypatch.setattr("sys.argv", ["autotune", *args])
        with pytest.raises(SystemExit) as exc:
            main()
        out = capsys.readouterr()
        text = out.out + out.err
        assert exc.value.code == 2, (args, text)
        assert words in text, text
        assert "Traceback" not in text and "Hunter22x" not in text
        assert "S3cret" not in text  # tests.pg.PASSWORD, decoded or encoded
        assert len(text.strip().splitlines()) == 1, text
    assert not (tmp_path / "empty.db").exists()  # the report read it: no file left behind


def test_each_value_of_a_repeated_secret_key_is_scrubbed():
    """`?password=A&password=B`: SQLAlchemy reads a tuple; each value is a secret of its own
    (the tuple's repr was scrubbed, so a driver echoing B showed it)."""
    url = "postgresql://u@db/x?password=S3CRETPW&password=S3CRETPW2"
    text = redact_text("invalid sslmode value: \"S3CRETPW2\" (S3CRETPW)", url)
    assert "S3CRETPW" not in text and "S3CRETPW" not in redact_url(url)


def test_a_file_that_is_not_a_sqlite_database_is_named_as_such(tmp_path):
    """sqlite:///spec.yaml (a typo for the study's database): the fix is about the file, not a
    server that is not running."""
    (tmp_path / "spec.yaml").write_text("workload: {kind: gpt}\n")
    for must_exist in (False, True):
        with pytest.raises(UserError) as exc:
            open_storage(f"sqlite:///{tmp_path / 'spec.yaml'}", must_exist=must_exist)
        assert "not a database" in str(exc.value) and "SQLite file a sweep wrote" in str(exc.value)
        assert "server" not in str(exc.value)
    assert (tmp_path / "spec.yaml").read_text() == "workload: {kind: gpt}\n"


def test_a_locked_sqlite_file_is_named_as_locked_not_as_damaged(tmp_path, cli):
    """A sweep's database that another process holds locked (an sqlite3 shell in a transaction):
    the fix said the file was not a sweep's database or was damaged, and to point elsewhere."""
    import sqlite3

    from autotune.search.study import open_study

    db = tmp_path / "study.db"
    open_study(f"sqlite:///{db}", "s1")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        code, out, err = cli("report", "--study", "s1", "--storage", f"sqlite:///{db}")
    finally:
        holder.close()
    assert code == 2, out + err
    assert "database is locked" in err and "another process holds the file locked" in err, err
    assert "damaged" not in err and "Traceback" not in err


def _without_root_file_rights() -> list[str]:
    """The argv prefix that runs a command subject to file permissions: as root (CI's containers)
    every file is writable, so drop the capabilities that override them (util-linux's setpriv)."""
    import os
    import shutil

    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:  # util-linux is essential on Debian: never skipped quietly
        pytest.fail("running as root without setpriv, every file is writable here: install util-linux "
                    "(it holds setpriv), or run the tests as a user who is not root")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


@pytest.mark.parametrize("unwritable", ["sqlite file", "sqlite folder", "journal file"])
def test_a_sweep_refuses_a_storage_it_cannot_write_before_writing_anything(unwritable, tmp_path):
    """A study file (or its folder: SQLite writes its rollback journal there, a journal its lock)
    that this user may read but not write: the sweep ended in a traceback (StorageInternalError,
    or PermissionError on the journal's lock), exit 1, and where only the folder was read-only
    it had already written its runs folder and the folder's owner file. Now one message, exit 2,
    nothing written. The real CLI, without root's right to write any file where tests run as root."""
    import hashlib
    import subprocess
    import sys

    from autotune.search.study import open_study
    from tests.fixtures.study_tools import cli_env, write_spec

    work = tmp_path
    try:
        spec = write_spec(work, "s1", [1])
        store = work / "store"
        store.mkdir()
        path = store / ("study.log" if unwritable == "journal file" else "study.db")
        url = f"journal://{path}" if unwritable == "journal file" else f"sqlite:///{path}"
        open_study(url, "s1")
        path.chmod(0o666 if unwritable == "sqlite folder" else 0o444)
        store.chmod(0o555)
        before = hashlib.sha256(path.read_bytes()).hexdigest()
        listed = sorted(p.name for p in work.iterdir())
        r = subprocess.run([*_without_root_file_rights(), sys.executable, "-m", "autotune.cli", "sweep",
                            str(spec), "--trials", "1", "--storage", url], cwd=work, env=cli_env(),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, r.stdout + r.stderr
        want = f"the folder '{store}'" if unwritable == "sqlite folder" else f"the file '{path}'"
        assert f"{want} is not writable by this user" in r.stderr and "To fix: make the" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert hashlib.sha256(path.read_bytes()).hexdigest() == before
        assert sorted(p.name for p in work.iterdir()) == listed  # no runs folder, no owner file
        assert sorted(p.name for p in store.iterdir()) == sorted([path.name, *(
            [path.name + ".claims"] if (store / (path.name + ".claims")).exists() else [])])
    finally:
        (work / "store").chmod(0o755)  # for pytest's own clean-up
