"""The environment a rank on CPU runs with: the same for a trial (autotune.run.launch) and for
the long run an export launches (autotune.report.export), so the long run gets the speed the
trial measured.

    env.update(cpu_rank_env(cfg.threads_per_rank))
"""

from __future__ import annotations

from typing import Mapping

# PyTorch's CPU allocator backs large tensors with transparent huge pages when this is set
# (c10 alloc_cpu: 2 MiB-aligned allocations, madvise(MADV_HUGEPAGE); it matters where the
# kernel's THP mode is `madvise`, the common default). Without it a run on CPU settles at a
# speed of its own, which no window length averages out; with it runs are faster and agree
# more closely (docs/benchmarks.md, noise levers). Trials and exported runs set it alike.
CPU_HUGE_PAGES = {"THP_MEM_ALLOC_ENABLE": "1"}


def cpu_rank_env(threads_per_rank: int, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """One CPU "GPU" = one rank with `threads_per_rank` threads (without the thread counts,
    every rank would spawn a thread per core and they would fight for them), no CUDA, and
    huge pages for the allocator unless `environ` (the launching process's environment) sets
    THP_MEM_ALLOC_ENABLE itself: `THP_MEM_ALLOC_ENABLE=0 autotune sweep` measures without."""
    threads = str(threads_per_rank)
    environ = environ or {}
    return {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "CUDA_VISIBLE_DEVICES": "",
            **{k: environ.get(k, v) for k, v in CPU_HUGE_PAGES.items()}}
