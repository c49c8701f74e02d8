"""Each rank's alive marker: written as the rank takes a trial, refreshed with its host RSS peak
while it runs, removed when its own code ends the trial (a result, a handled failure).

    mark_alive(result_path, rank)   # as the rank takes the trial
    clear_alive()                   # as its own code ends it

SIGKILL (the kernel's out-of-memory killer, `kill -9`) runs no code in the process: no
exception to classify, no faulthandler stack. The marker it leaves behind is how the
controller (autotune.run.results) knows which rank died so, its pid and how much host memory it
had reached.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

# How often the marker's RSS peak is refreshed: the figure the controller reports for a killed
# rank is at most this old. One small file write a second costs a step nothing measurable.
REFRESH_S = 1.0

_lock = threading.Lock()
_current: dict = {}


def mark_alive(result_path: Path, rank: int) -> None:
    """Write this rank's marker for the trial of `result_path` (a pool's rank moves its marker
    from trial to trial) and keep its RSS peak fresh from a daemon thread."""
    from autotune.contract.trial_files import ALIVE_MARKERS

    with _lock:
        _current.update(path=ALIVE_MARKERS.path(result_path, rank), rank=rank,
                        started_unix_s=time.time())
        _write_locked()
        if not _current.get("thread"):
            thread = threading.Thread(target=_refresh, name="autotune-alive", daemon=True)
            _current["thread"] = thread
            thread.start()


def clear_alive() -> None:
    """Remove the marker: this rank's own code ended the trial."""
    with _lock:
        path = _current.pop("path", None)
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass


def _refresh() -> None:
    while True:
        time.sleep(REFRESH_S)
        with _lock:
            if _current.get("path") is not None:
                _write_locked()


def _write_locked() -> None:
    """Written in place, not through a temporary file: a kill during the write leaves a torn
    marker (still a marker, its rank in its name), never a stray temporary file."""
    data = {"rank": _current["rank"], "pid": os.getpid(),
            "started_unix_s": _current["started_unix_s"], "seen_unix_s": time.time()}
    peak = vm_hwm_bytes()
    if peak is not None:
        data["host_rss_peak_bytes"] = peak
    try:
        with open(_current["path"], "w") as f:
            f.write(json.dumps(data))
    except OSError:
        pass  # the trial's folder went away (a controller cleaning up): nothing to mark


def vm_hwm_bytes() -> int | None:
    """This process's RSS peak: Linux's VmHWM; None off Linux. Here, not in trials.measure
    (which reads it too), because that module imports torch, which a rank has not loaded yet
    when it takes its trial."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
