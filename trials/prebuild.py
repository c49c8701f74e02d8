"""Build DeepSpeed's JIT C++ ops once, before any trial needs them.

    python -m trials.prebuild               # the ops this machine's trials use
    python -m trials.prebuild --no-offload  # not DeepSpeedCPUAdam: the sweep offers no offload
    DS_ACCELERATOR=cpu python -m trials.prebuild

DeepSpeed compiles some ops on first use and caches them in ~/.cache/torch_extensions (or
TORCH_EXTENSIONS_DIR). On CPU every DeepSpeed trial loads its shared-memory all-reduce
(ShareMemCommBuilder) and every offload trial DeepSpeedCPUAdam (CPUAdamBuilder). Built inside
a trial, the compile (minutes on a small CPU machine: docs/benchmarks.md) counts against the
trial's timeout; with a warm cache, loading them is quick. `autotune sweep` runs this once
before a space that offers ZeRO; CI before the tests.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

# The ops a trial can load, per accelerator (trials/engines/deepspeed.py, contract.deepspeed_config):
# every DeepSpeed trial on CPU uses the shared-memory all-reduce; only optimizer offload uses
# DeepSpeedCPUAdam (without offload the config asks for torch's own AdamW). On CUDA, NCCL
# needs no op, so a space without offload builds nothing there.
OPS = {"cpu": ["ShareMemCommBuilder"], "cuda": []}
OFFLOAD_OPS = {"cpu": ["CPUAdamBuilder"], "cuda": ["CPUAdamBuilder"]}


# A build that dies (killed, out of memory) leaves torch's `lock` file in the op's build
# folder, and every later load waits on it forever: a trial would hang to its timeout. A lock
# is stale when it is older than this and no process works in that folder (ninja runs there).
STALE_LOCK_AGE_S = 60.0


def _processes_in(folder: Path) -> list[int]:
    """Pids whose working directory is `folder` (Linux /proc; [] where unreadable)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if Path(os.readlink(proc / "cwd")) == folder:
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def clear_stale_lock(build_dir: Path, now: float | None = None) -> bool:
    """Remove `build_dir/lock` when stale; True when it did."""
    lock = build_dir / "lock"
    try:
        age_s = (time.time() if now is None else now) - lock.stat().st_mtime
    except FileNotFoundError:
        return False
    if age_s < STALE_LOCK_AGE_S or _processes_in(build_dir.resolve()):
        return False
    lock.unlink(missing_ok=True)
    return True


def _build_dir(op_name: str) -> Path | None:
    try:  # private in torch, stable since 1.x; without it the lock check is skipped
        from torch.utils.cpp_extension import _get_build_directory

        return Path(_get_build_directory(op_name, verbose=False))
    except Exception:
        return None


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-offload", action="store_true",
                    help="skip the ops only optimizer offload uses (DeepSpeedCPUAdam)")
    args = ap.parse_args(argv)
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if _has_cuda() else "cpu")
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator().device_name()
    names = OPS.get(accelerator, []) + ([] if args.no_offload else OFFLOAD_OPS.get(accelerator, []))
    for name in names:
        builder = get_accelerator().create_op_builder(name)
        if builder is None or not builder.is_compatible(verbose=False):
            print(f"{name}: not compatible with this machine, skipped")
            continue
        build_dir = _build_dir(builder.name)
        if build_dir is not None and clear_stale_lock(build_dir):
            print(f"{name}: removed a stale build lock left by a build that died ({build_dir / 'lock'})")
        t0 = time.perf_counter()
        builder.load()
        print(f"{name}: ready in {time.perf_counter() - t0:.1f} s")
    return 0


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(main())
