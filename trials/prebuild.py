"""Build DeepSpeed's JIT C++ ops once, before any trial needs them.

    python -m trials.prebuild               # the ops this machine's trials use
    DS_ACCELERATOR=cpu python -m trials.prebuild

DeepSpeed compiles some ops on first use and caches them in ~/.cache/torch_extensions (or
TORCH_EXTENSIONS_DIR). On CPU every DeepSpeed trial loads its shared-memory all-reduce
(ShareMemCommBuilder) and every offload trial DeepSpeedCPUAdam (CPUAdamBuilder). Built inside
a trial, the compile counts against the trial's timeout: measured on the 2-core dev machine
(2026-11-30, machine busy with other jobs) 214 s and 1102 s; with a warm cache, loading
takes about a second. `autotune sweep` runs this once before a space that offers ZeRO; CI before the tests.
"""

from __future__ import annotations

import os
import sys
import time

# The ops a trial can load, per accelerator (trials/engines/deepspeed.py, contract.deepspeed_config).
OPS = {"cpu": ["ShareMemCommBuilder", "CPUAdamBuilder"], "cuda": ["CPUAdamBuilder"]}


def main() -> int:
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if _has_cuda() else "cpu")
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator().device_name()
    for name in OPS.get(accelerator, []):
        builder = get_accelerator().create_op_builder(name)
        if builder is None or not builder.is_compatible(verbose=False):
            print(f"{name}: not compatible with this machine, skipped")
            continue
        t0 = time.perf_counter()
        builder.load()
        print(f"{name}: ready in {time.perf_counter() - t0:.1f} s")
    return 0


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(main())
