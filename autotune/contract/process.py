"""Is a process still the one we started? Shared by the controller (a dead controller's trials,
`autotune.run.processes`) and the worker (a pool whose controller died, `trials/pool.py`).
Standard library only; Linux /proc.

    ticks = start_ticks(pid)              # remember it with the pid
    process_alive(pid, ticks)             # False once it ended, or once its pid was reused
"""

from __future__ import annotations

import os


def start_ticks(pid: int) -> int | None:
    """Start time of a process (clock ticks since boot, field 22 of /proc/PID/stat, proc(5)):
    tells a live pid from a reused one. None where /proc cannot say."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def process_alive(pid: int, ticks: int | None) -> bool:
    """Whether `pid` runs and is still the process that started at `ticks` (unknown: yes)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by someone else
    now = start_ticks(pid)
    return ticks is None or now is None or now == ticks
