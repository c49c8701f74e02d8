"""Measurement inside a trial: step timing between device synchronisations, memory peaks.

    timer = StepTimer(device)
    with timer.step():            # synchronises the device before and after
        train_step()
    timer.summary()               # median, p90, CV of the measured steps

Memory: CUDA allocator peaks (allocated / reserved) per rank; on CPU, the host RSS peak of
the rank's process. Each figure is reported with its source (`MemorySource`).
"""

from __future__ import annotations

import resource
import statistics
import time
from contextlib import contextmanager

import torch


def synchronize(device: torch.device) -> None:
    # A CPU-GPU sync point: without it the timer measures kernel launches, not kernels.
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepTimer:
    def __init__(self, device: torch.device):
        self.device = device
        self.times_s: list[float] = []

    @contextmanager
    def step(self):
        synchronize(self.device)
        t0 = time.perf_counter()
        yield
        synchronize(self.device)
        self.times_s.append(time.perf_counter() - t0)

    def reset(self) -> None:
        self.times_s.clear()


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    xs = sorted(values)
    if not xs:
        raise ValueError("no values")
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarize(times_s: list[float]) -> dict[str, float]:
    median = statistics.median(times_s)
    mean = statistics.fmean(times_s)
    cv = statistics.pstdev(times_s) / mean if len(times_s) > 1 and mean > 0 else 0.0
    return {"median_s": median, "p90_s": percentile(times_s, 90), "cv": cv, "mean_s": mean}


def host_rss_peak_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports ru_maxrss in KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def host_rss_now_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return host_rss_peak_bytes()


def cuda_peaks(device: torch.device) -> tuple[int, int]:
    return (int(torch.cuda.max_memory_allocated(device)),
            int(torch.cuda.max_memory_reserved(device)))
