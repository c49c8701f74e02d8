"""Is a process still the one we started? Shared by the controller (a dead controller's trials,
`autotune.run.processes`) and the worker (a pool whose controller died, `trials/pool.py`).
Through psutil, a dependency of both.

    ticks = start_ticks(pid)              # remember it with the pid
    process_alive(pid, ticks)             # False once it ended, or once its pid was reused
"""

from __future__ import annotations

import os
import socket
from typing import NamedTuple

import psutil

# Clock ticks per second: start times are kept in ticks since boot, the unit of
# /proc/PID/stat's start time (proc(5)), so records written by earlier versions compare equal.
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def start_ticks(pid: int) -> int | None:
    """Start time of a process in clock ticks since boot: tells a live pid from a reused one.
    None where it cannot be read (no such process, no permission)."""
    for _ in range(3):
        try:
            boot_s = psutil.boot_time()
            created_s = psutil.Process(pid).create_time()
            # psutil adds the boot time (wall clock) to the kernel's start time since boot;
            # read around it so a clock step between the two reads cannot shift the result.
            if psutil.boot_time() != boot_s:
                continue
        except (psutil.Error, OSError):
            return None
        return round((created_s - boot_s) * _TICKS_PER_S)
    return None


def process_alive(pid: int, ticks: int | None) -> bool:
    """Whether `pid` runs and is still the process that started at `ticks` (unknown: yes).
    A zombie (ended, not yet reaped by its parent) counts as ended."""
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.NoSuchProcess:
        return False
    except (psutil.AccessDenied, OSError):
        pass  # alive, owned by someone else
    now = start_ticks(pid)
    return ticks is None or now is None or now == ticks


# The environment variable that names a trial's controller to its ranks (trials/watchdog.py).
CONTROLLER_ENV = "AUTOTUNE_CONTROLLER"


class ControllerId(NamedTuple):
    host: str
    pid: int
    start_ticks: int | None


def controller_env_value(pid: int | None = None) -> str:
    """'HOST:PID:TICKS' for this process (or `pid`): what launch_env puts in CONTROLLER_ENV."""
    pid = os.getpid() if pid is None else pid
    ticks = start_ticks(pid)
    return f"{socket.gethostname()}:{pid}:{'' if ticks is None else ticks}"


def parse_controller(value: str) -> ControllerId | None:
    """CONTROLLER_ENV's value read back; None when it is unset or not in that form."""
    parts = value.rsplit(":", 2)
    if len(parts) != 3 or not parts[0] or not parts[1].isdigit() or not (parts[2].isdigit() or parts[2] == ""):
        return None
    return ControllerId(parts[0], int(parts[1]), int(parts[2]) if parts[2] else None)
