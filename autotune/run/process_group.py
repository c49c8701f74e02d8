"""A launched trial's process group: alive or not, and killed whole (SIGTERM, a grace period,
then SIGKILL), so that no rank outlives its trial.

    proc = subprocess.Popen(argv, start_new_session=True)   # the launcher leads its own group
    kill_group(proc)                                        # on timeout, Ctrl-C, or a failure
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

KILL_GRACE_S = 5.0


def kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the whole process group, then SIGKILL whatever is left after a grace period."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < deadline:
        proc.poll()  # reap the launcher, so a zombie does not count as alive
        if not group_alive(proc.pid):
            break
        time.sleep(0.1)
    else:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
