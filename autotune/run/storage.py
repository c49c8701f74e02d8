"""Where a study lives: a storage URL -> an Optuna storage, with secrets kept out of every output.

    storage = open_storage("postgresql://tuner:pw@db.lan/autotune")   # RDB storage, heartbeats on
    print(redact_url(url))                       # postgresql://tuner:***@db.lan/autotune

URLs accepted (`--storage` or `storage:` in the spec):
- `sqlite:///autotune.db` (the default, relative to the current folder) or `sqlite:////abs/x.db`:
  one machine. SQLite locks the whole file; do not share it between machines over NFS.
- `postgresql://user:password@host:5432/db` (driver psycopg2) and `mysql+pymysql://...` (install
  the driver yourself): several machines working on one study, through Optuna's RDBStorage.
- `journal:///abs/path/study.log`, `journal://relative/study.log`, or any path ending in `.log`:
  Optuna's append-only journal file (JournalFileBackend); needs no server, works on a shared
  filesystem. It has no heartbeats: a trial whose machine died stays RUNNING until a sweep on the
  same host finds its controller dead (see `autotune.run.processes.recover_dead_trials`).

Heartbeats (RDB storages only): every running trial records a heartbeat each `interval_s`; a
RUNNING trial silent for `grace_s` is marked FAIL by the next sweep that asks for a trial, and
Optuna's `RetryHeartbeatStaleTrialCallback` re-queues it (at most `max_retry` times; the retry
carries `failed_trial` / `retry_history` in its system attributes). Set them with environment
variables AUTOTUNE_HEARTBEAT_S, AUTOTUNE_GRACE_S, AUTOTUNE_MAX_RETRY.

A server that goes away after the storage was opened (a restart, a failover) is waited for, up
to AUTOTUNE_STORAGE_WAIT_S seconds (default 600), so a measured trial still reaches the study
(autotune.run.reconnect).

A password never leaves this module in clear: every message that may hold the URL or a driver's
error text goes through `redact_url` / `redact_text`.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.errors import UserError
from autotune.record import TrialRecord
from autotune.run.claims import CLAIM_PREFIX, claim, claim_owner  # noqa: F401 - re-exported
from autotune.run.reconnect import first_in_chain, wait_for_server, wait_s_from_env
from autotune.run.redact import driver_reason, has_user_info, parse_clean, redact_text, redact_url, url_secrets  # noqa: F401 - re-exported
from autotune.run.sqlite_writes import write_lock_at_begin

DEFAULT_STORAGE = "sqlite:///autotune.db"
# Seconds a driver may take to open a connection: an unreachable server fails fast.
CONNECT_TIMEOUT_S = 10

_RDB_KINDS = {"sqlite": "SQLite", "postgresql": "PostgreSQL", "postgres": "PostgreSQL",
              "mysql": "MySQL", "mariadb": "MariaDB"}
# The Python driver each kind needs, and how to get it.
_DRIVER_FIX = {"psycopg2": "pip install 'autotune-llm[postgres]' (it holds psycopg2-binary)",
               "pymysql": "pip install pymysql",
               "MySQLdb": "pip install pymysql (or mysqlclient)", "mysqlclient": "pip install mysqlclient",
               "psycopg": "pip install 'psycopg[binary]'", "asyncpg": "use postgresql:// (psycopg2)"}


class HeartbeatSettings(BaseModel):
    """How a dead trial is noticed on RDB storages. Defaults suit trials of minutes."""

    model_config = ConfigDict(extra="forbid")

    interval_s: int = Field(default=30, gt=0, description="seconds between heartbeats")
    grace_s: int = Field(default=120, gt=0, description="silence after which a trial is stale")
    max_retry: int = Field(default=1, ge=0, description="re-queues of a stale trial")

    @classmethod
    def from_env(cls) -> "HeartbeatSettings":
        names = {"interval_s": "AUTOTUNE_HEARTBEAT_S", "grace_s": "AUTOTUNE_GRACE_S",
                 "max_retry": "AUTOTUNE_MAX_RETRY"}
        given = {k: os.environ[v] for k, v in names.items() if os.environ.get(v)}
        try:
            return cls.model_validate(given)
        except ValidationError as exc:
            bad = ", ".join(f"{names[str(e['loc'][0])]}={given.get(str(e['loc'][0]))!r}"
                            for e in exc.errors())
            raise UserError(f"bad heartbeat setting {bad}",
                            fix="give whole seconds > 0 (AUTOTUNE_MAX_RETRY >= 0)") from None


STORAGE_ENV = "AUTOTUNE_STORAGE"


def resolve_storage(flag: str | None = None, storage_file: str | Path | None = None,
                    spec_storage: str | None = None) -> str:
    """The storage URL a command uses: `--storage`, else the first line of `--storage-file`,
    else $AUTOTUNE_STORAGE, else the spec's `storage:`, else the default SQLite file.

    The file and the environment variable keep a password off the command line, where `ps`
    and the shell's history would show it for the whole sweep."""
    if flag and storage_file:
        raise UserError("both --storage and --storage-file given",
                        fix="give one: --storage-file keeps the password off the command line")
    if storage_file:
        path = Path(storage_file)
        try:
            lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"cannot read --storage-file '{path}': {type(exc).__name__}",
                            fix="give a readable file whose first line is the storage URL") from None
        if not lines:
            raise UserError(f"--storage-file '{path}' is empty",
                            fix="write the storage URL on its first line")
        return lines[0]
    return flag or os.environ.get(STORAGE_ENV) or spec_storage or DEFAULT_STORAGE


def storage_kind(url: str) -> str:
    """'sqlite', 'postgresql', 'mysql', ... or 'journal'; UserError for anything else, and for
    an RDB URL SQLAlchemy would read otherwise than written (an unencoded '@' in the password)."""
    if url.startswith("journal:") or (url.endswith(".log") and "://" not in url):
        if has_user_info(url):  # the path would carry the password into every message naming it
            raise UserError(f"storage {redact_url(url)}: a journal URL names a file; it holds no user "
                            "or password", fix="write journal:///path/to/study.log (a file every worker "
                                               "can reach), or use a server URL: postgresql://...")
        return "journal"
    parsed = _sqlalchemy_url(url)
    dialect = parsed.get_backend_name().lower()
    if dialect not in _RDB_KINDS:
        raise UserError(f"storage {redact_url(url)}: unknown kind '{parsed.drivername}'",
                        fix="use sqlite:///FILE, postgresql://..., mysql+pymysql://... or "
                            "journal:///FILE.log")
    if parse_clean(url) is None:
        raise UserError(f"storage {redact_url(url)} does not parse cleanly: the user name or "
                        "password holds an unencoded '@', so where the host starts is unclear",
                        fix="percent-encode the user name and password, e.g. "
                            "python3 -c 'import urllib.parse, getpass; "
                            "print(urllib.parse.quote(getpass.getpass(), safe=\"\"))'")
    return "postgresql" if dialect == "postgres" else dialect


def _sqlalchemy_url(url: str):
    """SQLAlchemy's own reading of an RDB URL (`make_url`, as `create_engine` reads it)."""
    from sqlalchemy.engine import make_url

    bad = UserError(f"storage '{redact_url(url)}' is not a URL",
                    fix="use e.g. sqlite:///autotune.db, postgresql://user:pass@host/db "
                        "or journal:///path/study.log")
    if "://" not in url:
        raise bad
    try:
        return make_url(url)
    except Exception:  # noqa: BLE001 - SQLAlchemy's ArgumentError / ValueError on a bad URL
        raise bad from None


def _sqlite_file(url: str) -> str:
    """The database file of a sqlite URL as SQLAlchemy reads it ('' or ':memory:' for none)."""
    return _sqlalchemy_url(url).database or ""


def journal_path(url: str) -> Path:
    if url.startswith("journal://"):
        return Path(url[len("journal://"):])
    if url.startswith("journal:"):
        return Path(url[len("journal:"):])
    return Path(url)


def open_storage(url: str | None, heartbeat: HeartbeatSettings | None = None,
                 must_exist: bool = False):
    """An Optuna storage for `url` (None: the default SQLite file). UserError if unusable.

    `must_exist`: for commands that only read (report, export, study status, the source of a
    copy): a SQLite or journal file that does not exist is an error, not a new empty file left
    behind; and a database without Optuna's tables (someone's app.db, an empty file, a server
    database no sweep wrote) is an error too, read but never written: no table is created."""
    url = url or DEFAULT_STORAGE
    kind = storage_kind(url)
    if must_exist:
        _check_exists(url)
    else:
        _check_writable(url)
    if kind == "journal":
        path = journal_path(url)
        if not path.name:
            raise UserError(f"storage {redact_url(url)}: no file name", fix="use journal:///path/study.log")
        if not path.parent.is_dir():
            raise UserError(f"storage {redact_url(url)}: folder '{path.parent}' does not exist",
                            fix="create the folder, or give a storage URL whose folder exists")
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        try:
            return JournalStorage(JournalFileBackend(str(path)))
        except Exception as exc:  # unreadable / corrupt journal
            raise UserError(f"cannot open journal {path}: {type(exc).__name__}: {exc}",
                            fix="check the file is an Optuna journal and writable") from None
    if kind == "sqlite":
        db = _sqlite_file(url)
        if db and db != ":memory:" and not Path(db).parent.is_dir():
            raise UserError(f"storage {redact_url(url)}: folder '{Path(db).parent}' does not exist",
                            fix="create the folder, or give a storage URL whose folder exists")
    hb = heartbeat or HeartbeatSettings.from_env()
    wait_s = wait_s_from_env()  # a bad value is refused before anything is opened
    given, url = url, _with_installed_driver(url)
    engine_kwargs: dict[str, Any] = {}
    if kind in ("postgresql", "mysql", "mariadb"):
        # Long trials leave pooled connections idle; ping before use so a server-side timeout
        # does not fail the tell() at the end of a 20-minute trial.
        engine_kwargs = {"pool_pre_ping": True,
                         "connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}}
    try:
        if must_exist:
            _check_optuna_tables(url, given, engine_kwargs)
        storage = _rdb_storage(url, engine_kwargs, hb, create_tables=not must_exist)
        if kind == "sqlite" and not must_exist and storage_file(given):  # two sweeps on one file
            write_lock_at_begin(storage.engine)
        if kind != "sqlite":  # a server: wait out a restart or a failover (autotune.run.reconnect)
            wait_for_server(storage, given, wait_s)
        return storage
    except UserError:
        raise
    except Exception as exc:  # unreachable server, wrong password, missing database, ...
        missing = _missing_module(exc)
        if missing:
            raise UserError(f"storage {redact_url(given)}: the Python driver '{missing}' for "
                            f"{_RDB_KINDS.get(kind, kind)} is not installed",
                            fix=_DRIVER_FIX.get(missing, f"pip install {missing}")) from None
        reason = driver_reason(exc, given)
        raise UserError(f"cannot open storage {redact_url(given)}: {reason}", fix=_open_fix(kind, reason)) from None


def _open_fix(kind: str, reason: str) -> str:
    """The fix for a storage the driver could not open, by what the driver said."""
    if kind != "sqlite":
        return "check the URL, that the server is running and reachable, and the credentials"
    if "database is locked" in reason:
        return ("another process holds the file locked (an open sqlite3 shell or database browser in a "
                "transaction, a backup): end it and run again")
    return "point the URL at the SQLite file a sweep wrote (this file is not one, or is damaged), or at a new file"


def _check_writable(url: str) -> None:
    """A sweep writes its SQLite or journal file and, beside it, SQLite's rollback journal or the
    journal's lock file and claims: an unwritable one is refused before anything is written
    (as root, only a read-only file system refuses)."""
    path = storage_file(url)
    if path is None:
        return
    for what, target, mode in (("file", path, os.W_OK), ("folder", path.parent, os.W_OK | os.X_OK)):
        if target.exists() and not os.access(target, mode):
            raise UserError(f"storage {redact_url(url)}: the {what} '{target}' is not writable by this user "
                            "(a sweep writes its trials into the file, and files beside it into its folder)",
                            fix=f"make the {what} writable (chmod u+w), or use a storage you can write "
                                "(autotune study copy SRC DST --study NAME copies a study there)")


def storage_file(url: str) -> Path | None:
    """The file a journal or SQLite storage lives in; None for a server, or SQLite in memory."""
    kind = storage_kind(url)
    if kind == "journal":
        return journal_path(url)
    if kind == "sqlite":
        db = _sqlite_file(url)
        return Path(db) if db and db != ":memory:" and not db.startswith("file:") else None
    return None


def _check_exists(url: str) -> None:
    path = storage_file(url)
    if path is not None and not path.is_file():
        raise UserError(f"no study storage at '{path}' ({redact_url(url)})",
                        fix="run autotune sweep first, or point --storage (or AUTOTUNE_STORAGE) at "
                            "the study's database")


# Tables every Optuna RDB storage holds; a database lacking them was not written by a sweep.
_OPTUNA_TABLES = ("studies", "trials", "version_info", "alembic_version")


class NoOptunaTables(UserError):
    """A database without any of Optuna's tables: it holds no study (a read-only command's
    error; a sweep would create the tables)."""


def _check_optuna_tables(url: str, given: str, engine_kwargs: dict[str, Any]) -> None:
    """UserError unless the database at `url` holds Optuna's tables. Only reads the catalog
    (SQLite's schema, the server's information schema): the database is left as it was."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, **engine_kwargs)
    try:
        with engine.connect() as conn:
            tables = set(sqlalchemy.inspect(conn).get_table_names())
    finally:
        engine.dispose()
    missing = [t for t in _OPTUNA_TABLES if t not in tables]
    if len(missing) == len(_OPTUNA_TABLES):
        raise NoOptunaTables(f"storage {redact_url(given)} holds no autotune study (no Optuna tables)",
                        fix="point --storage (or AUTOTUNE_STORAGE) at the database autotune sweep "
                            "wrote")
    if missing:
        raise UserError(f"storage {redact_url(given)} is not a whole Optuna database (no table "
                        f"{', '.join(missing)})",
                        fix="point --storage (or AUTOTUNE_STORAGE) at the database autotune sweep "
                            "wrote")


def _rdb_storage(url: str, engine_kwargs: dict[str, Any], hb: HeartbeatSettings, attempts: int = 4,
                 create_tables: bool = True):
    """Optuna's RDBStorage; `create_tables=False` (read-only commands) creates no table."""
    import time

    import optuna

    for attempt in range(attempts):
        try:
            with warnings.catch_warnings():
                # Heartbeats are marked experimental in Optuna; autotune relies on them knowingly.
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    url, engine_kwargs=engine_kwargs, heartbeat_interval=hb.interval_s,
                    grace_period=hb.grace_s, heartbeat_stale_trial_callback=retry_callback(hb),
                    skip_table_creation=not create_tables)
        except Exception as exc:
            # Two sweeps opening a fresh database at once both create Optuna's tables and
            # stamp its schema version; the loser fails with "already exists" (a unique
            # violation in PostgreSQL's catalog) or, on SQLite, "UNIQUE constraint failed:
            # alembic_version". The tables are there now: open again.
            if attempt + 1 == attempts or not _lost_creation_race(exc):
                raise
            time.sleep(0.5 + attempt)
    raise AssertionError("unreachable")


def _lost_creation_race(exc: BaseException) -> bool:
    text = str(exc)
    return "already exists" in text or "UNIQUE constraint failed: alembic_version" in text


# A bare `postgresql://` or `mysql://` means SQLAlchemy's default driver for that database,
# which varies by SQLAlchemy version; take the first of these that is installed.
_DRIVERS = {"postgresql": ("psycopg2", "psycopg"), "postgres": ("psycopg2", "psycopg"),
            "mysql": ("pymysql", "MySQLdb"), "mariadb": ("pymysql", "MySQLdb")}
_DIALECT_DRIVER = {"MySQLdb": "mysqldb"}


def _with_installed_driver(url: str) -> str:
    import importlib.util

    parsed = _sqlalchemy_url(url)
    dialect = parsed.drivername.lower()
    if "+" in dialect or dialect not in _DRIVERS:
        return url
    for mod in _DRIVERS[dialect]:
        if importlib.util.find_spec(mod) is not None:
            dialect = "postgresql" if dialect == "postgres" else dialect
            drivername = f"{dialect}+{_DIALECT_DRIVER.get(mod, mod)}"
            return parsed.set(drivername=drivername).render_as_string(hide_password=False)
    return url


def _missing_module(exc: BaseException) -> str | None:
    missing = first_in_chain(exc, lambda e: isinstance(e, ModuleNotFoundError))
    if not isinstance(missing, ModuleNotFoundError):
        return None
    return (missing.name or "").split(".")[0] or None


def retry_callback(hb: HeartbeatSettings | None = None):
    """Optuna's retry of a stale trial, minus the dead run's own attributes (its controller,
    process group, claim, error) and its constraints, which would otherwise be copied into the
    retry: a cut trial is failed as infeasible, and Optuna keeps the first value of a constraint,
    so a retry that then measured fine stayed infeasible (left out of the front, the local moves
    and the patience count) and warned that its own value was ignored."""
    import copy

    import optuna

    hb = hb or HeartbeatSettings.from_env()

    class _Retry(optuna.storages.RetryHeartbeatStaleTrialCallback):
        def __call__(self, study, trial) -> None:
            trial = copy.deepcopy(trial)
            trial.user_attrs = {k: v for k, v in trial.user_attrs.items() if k in TrialRecord.KEPT_ON_RETRY}
            trial.system_attrs = {k: v for k, v in trial.system_attrs.items() if not _is_constraint(k)}
            super().__call__(study, trial)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return _Retry(max_retry=hb.max_retry)


def _is_constraint(system_attr: str) -> bool:
    # Optuna's keys: "constraints:NAME" (trial.set_constraint), "constraints" (a constraints_func).
    return system_attr == "constraints" or system_attr.startswith("constraints:")


def user_study_names(storage) -> list[str]:
    import optuna

    return sorted(s.study_name for s in optuna.get_all_study_summaries(storage)
                  if not s.study_name.startswith(CLAIM_PREFIX))
