"""Stopping a sweep. Ctrl-C: the first finishes the running trial, then stops; the second fails
it now. SIGTERM (`kill`, Slurm's scancel, preemption or time limit, `docker stop`): stop now,
as the second Ctrl-C, and put the cut trial back in the queue, since there is only a grace
period (Slurm's KillWait, 30 s by default) before SIGKILL. Either way the controller ends the
running trial's processes and the worker pool (its queue folder, DeepSpeed's /dev/shm files)
itself: the ranks' watchdog (trials/watchdog.py) is only the fallback for a controller killed
outright, and under Slurm, which signals the ranks as well, it never ran its cleanup. Used by
autotune.search.sweep around `study.optimize`, by the side-by-side workers for their whole life
and by `autotune trial`.

    with Interrupt(note=print) as interrupt:
        ...                                  # the StopRule reads interrupt.requested
    with sigterm_raises():
        ...                                  # SIGTERM raises Terminated here, once
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any, Callable

EXIT_TERMINATED = 128 + signal.SIGTERM  # a shell's code for a process SIGTERM ended


class Terminated(KeyboardInterrupt):
    """SIGTERM: every `except KeyboardInterrupt` that kills a trial's processes or closes a pool
    handles it as it handles a second Ctrl-C."""

    def __init__(self) -> None:
        super().__init__("SIGTERM")


_terminating = threading.Event()  # set by the first SIGTERM: the process is on its way out


def terminating() -> bool:
    """Whether this process has had a SIGTERM (its cleanup is under way)."""
    return _terminating.is_set()


def terminated_reason() -> str:
    """What stopped the sweep, for a cut trial's error: Slurm's job when inside one."""
    from autotune.run.slurm import SlurmJobRef

    job = SlurmJobRef.from_env()
    if job is not None:
        return f"stopped by SIGTERM in Slurm job {job.job_id} (scancel, its time limit or preemption)"
    return "stopped by SIGTERM (kill, a scheduler or a container stopping)"


def _raise_terminated(signum, frame) -> None:
    # Once: a second SIGTERM (Slurm signals every process of the job; an impatient user) must
    # not cut the cleanup the first one started. SIGKILL ends it if it overstays.
    if not _terminating.is_set():
        _terminating.set()
        raise Terminated()


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block SIGTERM raises Terminated (main thread only: Python runs signal
    handlers there); the previous handler is back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Interrupt:
    """First Ctrl-C: finish the running trial, then stop. Second, or SIGTERM: fail it now (its
    process group is killed by autotune.run.launch or the pool) and stop; the study stays
    consistent either way."""

    def __init__(self, note: Callable[[str], None] | None):
        self.requested = False
        self.note = note
        self.previous: Any = None
        self._sigterm = sigterm_raises()

    def __enter__(self) -> "Interrupt":
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
        self._sigterm.__enter__()
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        if self.note:
            self.note("Ctrl-C: finishing the running trial, then stopping (Ctrl-C again to stop now)")

    def __exit__(self, *exc) -> None:
        self._sigterm.__exit__(None, None, None)
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
