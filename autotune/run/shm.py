"""Shared memory a trial's libraries leave behind once its ranks are gone.

    remove_deepspeed_shm(port)   # after each trial (autotune.run.launch.run_trial)

An exported launch.sh of a CPU DeepSpeed run removes its own the same way
(autotune.report.export_launch).
"""

from __future__ import annotations

import os
from pathlib import Path

SHM_DIR = Path("/dev/shm")


def deepspeed_shm_pattern(uid: int | str, port: int | str) -> str:
    """The glob of the buffers DeepSpeed's CPU all-reduce names for `uid` and rendezvous `port`
    (also written into an exported launch.sh, with shell variables for both)."""
    return f"deepspeed_allreduce_buffer_{uid}_*_{port}_*"


def remove_deepspeed_shm(port: int, shm_dir: Path = SHM_DIR) -> int:
    """Unlink the shared-memory buffers DeepSpeed's CPU all-reduce created for a trial that
    rendezvoused on `port`, once its ranks are gone. DeepSpeed (v0.19, csrc/cpu/comm/shm.cpp)
    names them deepspeed_allreduce_buffer_{uid}_{addr}_{port}_{rank} and never unlinks them:
    each CPU DeepSpeed trial would keep its buffers' RAM until reboot, and a day of trials
    fills /dev/shm (docs/benchmarks.md, observations recorded once). Returns how many it
    removed."""
    removed = 0
    for path in shm_dir.glob(deepspeed_shm_pattern(os.getuid(), port)):
        try:
            path.unlink()
            removed += 1
        except OSError:
            pass
    return removed
