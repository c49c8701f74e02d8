"""What `autotune plan` lets a config fill of a GPU: its memory, or the spec's smaller
`memory.limit_bytes_per_rank`, less the plan's headroom or the spec's `memory.safety_margin`
where that keeps more (the sweep's prescreen would not launch a config over it).

    capacity(gpu_memory, spec.memory.limit_bytes_per_rank) * usable(spec.memory)
"""

from __future__ import annotations

from autotune.format import fmt_bytes
from autotune.spec import MemorySpec

# Headroom kept below the GPU's memory for what the analytic model does not count without a
# calibration on real hardware (CUDA context, allocator fragmentation).
MEMORY_MARGIN = 0.10


def capacity(gpu_memory: int, limit: int | None) -> int:
    """What one rank may use: the GPU's memory, or the spec's smaller limit per rank."""
    return min(gpu_memory, limit) if limit else gpu_memory


def usable(memory: MemorySpec) -> float:
    """The share of that capacity a config may fill: the headroom for what the analytic model
    leaves out, or the spec's fixed margin (under limit / (1 + safety_margin), the sweep's rule:
    autotune.search.calibration.MemoryGuard.fits_under) where it keeps more."""
    return min(1 - MEMORY_MARGIN, 1 / (1 + (memory.safety_margin or 0.0)))


def margin_counts(memory: MemorySpec) -> bool:
    """Whether the spec's safety_margin keeps more headroom than the plan's own."""
    return usable(memory) < 1 - MEMORY_MARGIN


def spec_memory(memory: MemorySpec, exact: bool = False) -> str:
    """The spec's memory settings that keep configs out, as the plan's notes name them."""
    limit, parts = memory.limit_bytes_per_rank, []
    if limit:
        parts.append(f"memory.limit_bytes_per_rank {fmt_bytes(limit)}" + (f" ({limit:,} bytes)" if exact else ""))
    if margin_counts(memory):
        parts.append(f"memory.safety_margin {memory.safety_margin:g}")
    return " and ".join(parts)


def spec_fix(memory: MemorySpec) -> str:
    """How to let more configs in where the spec's memory settings kept them out."""
    return "".join(f", or {verb} memory.{name}" for verb, name, on in (
        ("raise", "limit_bytes_per_rank", bool(memory.limit_bytes_per_rank)),
        ("lower", "safety_margin", margin_counts(memory))) if on)
