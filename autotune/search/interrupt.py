"""Ctrl-C during a sweep: the first finishes the running trial, then stops; the second fails it
now. Used by autotune.search.sweep around `study.optimize`.

    with Interrupt(note=print) as interrupt:
        ...                                  # the StopRule reads interrupt.requested
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable


class Interrupt:
    """First Ctrl-C: finish the running trial, then stop. Second: fail it now (its process
    group is killed by autotune.run.launch) and stop; the study stays consistent either way."""

    def __init__(self, note: Callable[[str], None] | None):
        self.requested = False
        self.note = note
        self.previous: Any = None

    def __enter__(self) -> "Interrupt":
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        if self.note:
            self.note("Ctrl-C: finishing the running trial, then stopping (Ctrl-C again to stop now)")

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
