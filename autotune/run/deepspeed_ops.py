"""DeepSpeed's JIT ops built once, before a sweep's first DeepSpeed trial.

    ok, output = prebuild_deepspeed_ops(DeviceKind.cpu)
"""

from __future__ import annotations

import subprocess
import sys

from autotune.contract import DeviceKind, TrialConfig
from autotune.run.argv import launch_env


def prebuild_deepspeed_ops(device: DeviceKind, offload: bool = True,
                          timeout_s: float = 3600.0) -> tuple[bool, str]:
    """Build DeepSpeed's JIT ops once, in a subprocess, before any DeepSpeed trial: built
    inside a trial, the compile (minutes on a small CPU machine) would count against the
    trial's timeout; when the ops are cached already, this only loads them. `offload=False`
    skips the ops only optimizer offload loads. Returns (ok, what it printed)."""
    env = launch_env(TrialConfig(device=device))
    env["DS_ACCELERATOR"] = "cuda" if device is DeviceKind.cuda else "cpu"
    try:
        argv = [sys.executable, "-m", "trials.prebuild", *([] if offload else ["--no-offload"])]
        p = subprocess.run(argv, env=env, capture_output=True,
                           text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout_s:.0f} s"
    return p.returncode == 0, (p.stdout + p.stderr).strip()[-2000:]
