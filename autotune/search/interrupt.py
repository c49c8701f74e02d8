"""Stopping a sweep. Ctrl-C: the first finishes the running trial, then stops; the second fails
it now. SIGTERM (`kill`, Slurm's scancel, preemption or time limit, `docker stop`): stop now,
as the second Ctrl-C, and put the cut trial back in the queue, since there is only a grace
period (Slurm's KillWait, 30 s by default) before SIGKILL. SIGHUP (the terminal closed: an ssh
session dropped) does the same, unless it is ignored (`nohup`, a service manager): that choice
stays the user's; and output to the hung-up terminal goes to /dev/null from then on, since
every write to it fails. Either way the controller ends the
running trial's processes and the worker pool (its queue folder, DeepSpeed's /dev/shm files)
itself: the ranks' watchdog (trials/watchdog.py) is only the fallback for a controller killed
outright, and under Slurm, which signals the ranks as well, it never ran its cleanup. Used by
autotune.search.sweep around `study.optimize`, by the side-by-side workers for their whole life
and by `autotune trial`. The reader of the sweep's output leaving (`autotune sweep | head`, a
`tee` or `less` that ended) is neither: it shows at the next print, when the trial just
measured is being reported, so that trial is kept and the sweep stops before the next one
(`reader_left`; exit 141, as a process SIGPIPE ends), rather than dying mid-report with its
measured trial left RUNNING.

    with Interrupt(note=print) as interrupt:
        ...                                  # the StopRule reads interrupt.requested
    with termination_raises():
        ...                                  # SIGTERM or SIGHUP raises Terminated here, once
    try:
        print(line, flush=True)
    except BrokenPipeError:
        reader_left(sys.stdout.fileno())     # to /dev/null from now on; the StopRule stops the sweep
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import termios
import threading
from collections.abc import Iterator
from typing import Any, Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
# A shell's code for a process one of them ended: what the CLI and a stopped worker exit with.
EXIT_CODES = tuple(128 + sig for sig in STOP_SIGNALS)
# What a sweep whose output's reader left exits with: a shell's code for a process SIGPIPE ended
# (Python ignores SIGPIPE, so a write fails with EPIPE instead; `yes | head -1` reports 141).
EXIT_OUTPUT_CLOSED = 128 + signal.SIGPIPE
OUTPUT_CLOSED_REASON = ("its output closed (the pipe's reader left: `| head`, or a `tee` or `less` that ended): "
                        "every measured trial is kept; run the same sweep again to go on")


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: every `except KeyboardInterrupt` that kills a trial's processes or
    closes a pool handles it as it handles a second Ctrl-C."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        self.signum = signal.Signals(signum)
        super().__init__(self.signum.name)


_stopped_by: list[signal.Signals] = []  # the first SIGTERM or SIGHUP: the process is on its way out


def terminating() -> bool:
    """Whether this process has had a SIGTERM or SIGHUP (its cleanup is under way)."""
    return bool(_stopped_by)


def _stopping_signal() -> signal.Signals:
    return _stopped_by[0] if _stopped_by else signal.SIGTERM


def stop_signal() -> str:
    """The name of the signal that is stopping this process ("SIGTERM" before any)."""
    return _stopping_signal().name


def terminated_exit_code() -> int:
    """What the process exits with: 128 + the signal, as a shell reports a process it ended."""
    return 128 + _stopping_signal()


def terminated_reason() -> str:
    """What stopped the sweep, for a cut trial's error: Slurm's job when inside one."""
    from autotune.run.slurm import SlurmJobRef

    if stop_signal() == "SIGHUP":
        return "stopped by SIGHUP (its terminal closed, or kill -HUP)"
    job = SlurmJobRef.from_env()
    if job is not None:
        return f"stopped by SIGTERM in Slurm job {job.job_id} (scancel, its time limit or preemption)"
    return "stopped by SIGTERM (kill, a scheduler or a container stopping)"


def _raise_terminated(signum, frame) -> None:
    # Once: a second SIGTERM (Slurm signals every process of the job; an impatient user) must
    # not cut the cleanup the first one started. SIGKILL ends it if it overstays.
    if not _stopped_by:
        _stopped_by.append(signal.Signals(signum))
        # Also on SIGTERM: a side-by-side worker gets it from its parent, whose terminal closed.
        _silence_hung_up_terminal()
        raise Terminated(signum)


def _silence_hung_up_terminal() -> None:
    """Point stdout and stderr at /dev/null where they are a terminal that hung up: each write
    to it fails with EIO, and a failed print must not cut the cleanup short. A terminal still
    open (a `kill -HUP` by hand) and a file or pipe keep the output."""
    for fd in (1, 2):
        try:
            termios.tcgetattr(fd)
        except termios.error as exc:
            if exc.args and exc.args[0] == errno.EIO:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, fd)
                os.close(devnull)


_closed_fds: list[int] = []  # stdout / stderr whose pipe's reader left: /dev/null since


def reader_left(fd: int) -> None:
    """The pipe behind `fd` (1 or 2) lost its reader (a write failed with EPIPE): point it, and
    the other standard stream where it is the same pipe (`2>&1 | head`), at /dev/null, so that
    no later print fails, and remember it: output_closed() then stops a sweep after the trial
    that was being reported (the StopRule)."""
    try:
        broken = os.fstat(fd)
    except OSError:
        broken = None
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for other in (1, 2):
            try:
                same = other == fd or (broken is not None and stat.S_ISFIFO(broken.st_mode)
                                       and os.path.samestat(os.fstat(other), broken))
            except OSError:
                same = False
            if same:
                os.dup2(devnull, other)
                _closed_fds.append(other)
    finally:
        os.close(devnull)


def output_closed() -> bool:
    """Whether this process's stdout or stderr lost its reader (reader_left)."""
    return bool(_closed_fds)


def _handled_signals() -> list[signal.Signals]:
    """SIGTERM always; SIGHUP unless this process was started with it ignored (nohup)."""
    return [sig for sig in STOP_SIGNALS if sig != signal.SIGHUP or signal.getsignal(sig) != signal.SIG_IGN]


@contextlib.contextmanager
def termination_raises() -> Iterator[None]:
    """Within the block SIGTERM, and SIGHUP unless ignored, raise Terminated (main thread only:
    Python runs signal handlers there); the previous handlers are back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_terminated) for sig in _handled_signals()}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Interrupt:
    """First Ctrl-C: finish the running trial, then stop. Second, or SIGTERM / SIGHUP: fail it
    now (its process group is killed by autotune.run.launch or the pool) and stop; the study
    stays consistent either way."""

    def __init__(self, note: Callable[[str], None] | None):
        self.requested = False
        self.note = note
        self.previous: Any = None
        self._termination = termination_raises()

    def __enter__(self) -> "Interrupt":
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
        self._termination.__enter__()
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        if self.note:
            self.note("Ctrl-C: finishing the running trial, then stopping (Ctrl-C again to stop now)")

    def __exit__(self, *exc) -> None:
        self._termination.__exit__(None, None, None)
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
