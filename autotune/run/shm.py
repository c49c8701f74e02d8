"""Shared memory a trial's libraries leave behind once its ranks are gone.

    remove_deepspeed_shm(port)   # after each trial (autotune.run.launch.run_trial)
"""

from __future__ import annotations

import os
from pathlib import Path


def remove_deepspeed_shm(port: int, shm_dir: Path = Path("/dev/shm")) -> int:
    """Unlink the shared-memory buffers DeepSpeed's CPU all-reduce created for a trial that
    rendezvoused on `port`, once its ranks are gone. DeepSpeed (v0.19, csrc/cpu/comm/shm.cpp)
    names them deepspeed_allreduce_buffer_{uid}_{addr}_{port}_{rank} and never unlinks them:
    each CPU DeepSpeed trial would keep its buffers' RAM until reboot, and a day of trials
    fills /dev/shm (docs/benchmarks.md, observations recorded once). Returns how many it
    removed."""
    removed = 0
    for path in shm_dir.glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*"):
        try:
            path.unlink()
            removed += 1
        except OSError:
            pass
    return removed
