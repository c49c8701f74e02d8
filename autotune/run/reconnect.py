"""A database server that goes away for a while (a restart, a failover, a network blip) does not
end a sweep: once a study's storage has been opened, every new connection to it is retried until
the server answers again or `AUTOTUNE_STORAGE_WAIT_S` (default 600) seconds have passed.

    storage = optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True, ...})
    wait_for_server(storage, url)                # autotune.run.storage does this for every RDB URL
    lost = storage_lost_in(exc)                  # the StorageLost behind an error, if any

Why at the connection: a trial takes minutes to hours, and its result reaches the study only at
Optuna's tell. With the server down at that moment, the tell failed and the sweep ended with a
traceback (an Optuna `UnboundLocalError` on top), the measured trial left RUNNING, to be failed
and measured again by a later sweep; the heartbeat thread died on its first failed write, so its
trial looked dead to the other machines for the rest of the run. A connection that is refused
never sent anything, so retrying it is always safe; the pool's pre-ping finds the connections the
restart broke and opens new ones through here. A storage call whose connection the server cut at
a statement is made again whole (the server rolled back the uncommitted transaction); one cut at
its commit stops the sweep (`StorageLost`), since the write may or may not have been applied.

After an outage every machine's heartbeats are old at once, so for one grace period after this
process last found the server gone (a refused connection, or a pooled one the restart broke) it
takes no trial for stale: by then the other machines' heartbeat threads, back within
`MAX_RETRY_S` of the server, have written again, and a trial still silent is one whose machine
is really gone.

Opening a storage is not retried: a wrong host or port fails at once, as a user error. After the
wait the sweep stops with `StorageLost`, one message naming the storage (password hidden), how
long it was unreachable and the driver's reason; the trials recorded before are kept, and the
running one, left RUNNING, is failed by the next sweep on this host, which records its result
from its folder where its run had measured, and queues it again otherwise.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable

from autotune.errors import UserError
from autotune.run.redact import driver_reason, redact_url

WAIT_ENV = "AUTOTUNE_STORAGE_WAIT_S"
DEFAULT_WAIT_S = 600.0
# Seconds between tries: short at first (a restart is back in seconds), then at most this, so
# that a machine is back within a few seconds of its server, before the other machines' sweeps
# look for trials whose heartbeats stopped.
FIRST_RETRY_S = 0.5
MAX_RETRY_S = 5.0


# Times one storage call is made again after a query the server cut (each waits for the server).
CUT_RETRIES = 3
# What becomes of the sweep's trials when it stops for its storage (autotune.run.processes).
AFTER_LOSS = ("The trials recorded before are kept. The next sweep on this host records a trial "
              "whose run had measured from its folder, and queues any other running trial again.")


class StorageLost(RuntimeError):
    """The study's storage stayed unreachable for the whole wait, or broke while committing a
    write (which may or may not have been applied): the sweep cannot go on recording."""


def wait_s_from_env() -> float:
    """`AUTOTUNE_STORAGE_WAIT_S`: seconds to wait for a storage server that went away."""
    given = os.environ.get(WAIT_ENV, "").strip()
    if not given:
        return DEFAULT_WAIT_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise UserError(f"bad {WAIT_ENV}={given!r}",
                        fix=f"give the seconds a sweep waits for its storage server, > 0 (default {DEFAULT_WAIT_S:g})")
    return seconds


def _say(message: str) -> None:
    try:
        print(f"autotune: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed or its reader gone: the wait goes on unsaid
        pass


class _Outage:
    """One engine's view of its server: since when it has been unreachable, and whether the
    wait is over. Shared by the threads that connect (the sweep's and Optuna's heartbeat)."""

    def __init__(self, url: str, wait_s: float, say: Callable[[str], None]):
        self.url, self.wait_s, self.say = url, wait_s, say
        self.lock = threading.Lock()
        self.since: float | None = None  # time.monotonic() of the first refused connection
        self.reason = ""
        self.lost = False
        self.last_seen_gone = float("-inf")  # time.monotonic() the server was last found gone

    def seen_gone(self) -> None:
        self.last_seen_gone = time.monotonic()

    def gone_within(self, seconds: float) -> bool:
        return time.monotonic() - self.last_seen_gone < seconds

    def refused(self, exc: BaseException) -> float:
        """Record a refused connection; the seconds left to wait (raises StorageLost at 0)."""
        with self.lock:
            now = self.last_seen_gone = time.monotonic()
            if self.since is None:
                self.since, self.reason = now, driver_reason(exc, self.url, 300)
                self.say(f"the study's storage {redact_url(self.url)} is unreachable ({self.reason}); "
                         f"waiting up to {self.wait_s:g} s for it ({WAIT_ENV})")
            left = self.since + self.wait_s - now
            if self.lost or left <= 0:
                self.lost = True
                raise StorageLost(
                    f"lost the study's storage {redact_url(self.url)}: unreachable for "
                    f"{now - self.since:.0f} s ({self.reason}). {AFTER_LOSS} To fix: bring the "
                    f"server back, then run the same sweep again ({WAIT_ENV} sets how long a sweep waits)")
            return left

    def cut_at_commit(self, exc: BaseException) -> str:
        return (f"the connection to the study's storage {redact_url(self.url)} broke while a write "
                f"was being committed ({driver_reason(exc, self.url, 300)}): "
                f"whether it was recorded is unknown, so the sweep stopped. {AFTER_LOSS} To fix: "
                "run the same sweep again")

    def answered(self) -> None:
        with self.lock:
            if self.since is not None and not self.lost:
                self.say(f"the study's storage is back after {time.monotonic() - self.since:.0f} s; "
                         "going on")
                self.since = None


def wait_for_server(storage, url: str, wait_s: float | None = None,
                    say: Callable[[str], None] = _say) -> None:
    """Make every new connection of `storage` (an Optuna RDBStorage, opened once already) wait
    out an unreachable server: retried with backoff for up to `wait_s` seconds (None:
    AUTOTUNE_STORAGE_WAIT_S); and hold back stale-trial verdicts for a grace period after it."""
    from sqlalchemy import event

    outage = _Outage(url, wait_s_from_env() if wait_s is None else wait_s, say)

    def do_connect(dialect, _record, cargs: Any, cparams: Any):
        pause = FIRST_RETRY_S
        while True:
            try:
                conn = dialect.connect(*cargs, **cparams)
            except dialect.loaded_dbapi.OperationalError as exc:  # refused, timed out, starting up
                left = outage.refused(exc)
                time.sleep(min(pause, left))
                pause = min(pause * 2, MAX_RETRY_S)
                continue
            outage.answered()
            return conn

    _retry_cut_queries(storage, outage)
    event.listen(storage.engine, "do_connect", do_connect)
    # A pooled connection that failed its pre-ping: the server restarted since it was opened.
    event.listen(storage.engine.pool, "invalidate", lambda *_: outage.seen_gone())
    _hold_back_stale_verdicts(storage, outage)
    _quiet_threads()


def _hold_back_stale_verdicts(storage, outage: _Outage) -> None:
    """Optuna fails as stale (and re-queues) a RUNNING trial whose last heartbeat is older than
    the grace period, asking `_get_stale_trial_ids` (its heartbeat interface); right after an
    outage that is every trial, the other machines' live ones included."""
    find_stale = storage._get_stale_trial_ids
    grace_s = storage.grace_period or 2 * (storage.heartbeat_interval or 0)

    def stale_trial_ids(study_id: int) -> list[int]:
        stale = find_stale(study_id)  # asked first: its own connection may find the server gone
        return [] if outage.gone_within(grace_s) else stale

    storage._get_stale_trial_ids = stale_trial_ids


def _retry_cut_queries(storage, outage: _Outage) -> None:
    """Make each storage call again when the server cut its connection at a statement (a restart
    mid-query): the server rolls back a transaction whose connection died before its commit, so
    the call is repeated whole, on a new connection (which waits for the server). A connection
    cut at the commit itself leaves unknown whether the write was applied: StorageLost."""
    import functools

    def retrying(method):
        @functools.wraps(method)
        def call(*args, **kwargs):
            for attempt in range(CUT_RETRIES + 1):
                try:
                    return method(*args, **kwargs)
                except Exception as exc:  # Optuna wraps SQLAlchemy's error in its own
                    cut = _cut_connection(exc)
                    if cut is None or attempt == CUT_RETRIES:
                        raise
                    outage.seen_gone()
                    if cut.statement is None:  # the commit: applied or not, nobody can say
                        raise StorageLost(outage.cut_at_commit(cut)) from None
            raise AssertionError("unreachable")
        return call

    names = [n for n in dir(type(storage)) if not n.startswith("_") or n == "_get_stale_trial_ids"]
    for name in names:
        method = getattr(storage, name)
        if callable(method) and not isinstance(method, type):
            setattr(storage, name, retrying(method))


def _cut_connection(exc: BaseException | None):
    """The SQLAlchemy error behind `exc` that says the server cut the connection, or None."""
    from sqlalchemy.exc import DBAPIError

    return first_in_chain(exc, lambda e: isinstance(e, DBAPIError) and e.connection_invalidated)


def storage_lost_in(exc: BaseException | None) -> StorageLost | None:
    """The StorageLost among `exc` and the errors it came from (Optuna raises its own errors on
    top of a failed tell), or None."""
    lost = first_in_chain(exc, lambda e: isinstance(e, StorageLost))
    return lost if isinstance(lost, StorageLost) else None


def first_in_chain(exc: BaseException | None, match: Callable[[BaseException], bool]) -> BaseException | None:
    """The first of `exc` and the errors it was raised from or during (`__cause__`, else
    `__context__`) that `match`es, or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if match(exc):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


_quieted = False


def _quiet_threads() -> None:
    """Optuna's heartbeat thread meets StorageLost too; the sweep says it once, so the thread
    ends without printing its own traceback."""
    global _quieted
    if _quieted:
        return
    _quieted = True
    before = threading.excepthook

    def hook(args) -> None:
        if storage_lost_in(args.exc_value) is None:
            before(args)

    threading.excepthook = hook
