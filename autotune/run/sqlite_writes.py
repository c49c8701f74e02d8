"""Transactions on a SQLite study that take the write lock when they begin, so that two sweeps
on one SQLite file (one machine, two terminals) never take the same queued trial.

    storage = optuna.storages.RDBStorage("sqlite:///autotune.db")
    write_lock_at_begin(storage.engine)        # what autotune.run.storage does for a sweep

Optuna hands a queued trial out by reading it WAITING and setting it RUNNING in one transaction,
with SELECT ... FOR UPDATE, which SQLite ignores; and Python's sqlite3 starts a transaction only
at the first write. Two processes both read the trial WAITING and both set it RUNNING: both run
it (the same trial folder), and the second to finish fails on a finished trial. With `BEGIN
IMMEDIATE` the second waits for the first's commit and then reads the trial RUNNING. SQLite locks
the whole file for any write anyway, and Optuna's transactions are short. Not for a read-only
command: taking the write lock fails on a file it may not write.
"""

from __future__ import annotations


def write_lock_at_begin(engine) -> None:
    """Every transaction of `engine` (a SQLite one) begins with BEGIN IMMEDIATE; connections
    opened before (Optuna's own, to create its tables) are closed, so that all follow it."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _no_driver_begin(dbapi_connection, connection_record) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy's "begin" below emits BEGIN

    @event.listens_for(engine, "begin")
    def _begin_immediate(conn) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()
