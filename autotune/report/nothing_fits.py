"""When no config fits the memory limit: which came closest, and what would make it fit.

    note = nothing_fits_note(rows)     # rows: the report's TrialRows; None when something fit
"""

from __future__ import annotations

from autotune.format import fmt_bytes
from autotune.report.schema import TrialRow


def _closest(rows: list[TrialRow]) -> tuple[TrialRow, int, str] | None:
    """The out-of-memory (or held-back) trial whose peak came nearest its capacity: measured
    peaks first, predictions only when nothing was measured."""
    measured = [(r, r.peak_mem_bytes, "measured") for r in rows
                if r.status == "oom" and r.peak_mem_bytes and r.mem_capacity_bytes]
    predicted = [(r, r.predicted_peak_mem_bytes, "predicted") for r in rows
                 if r.status == "prescreened" and r.predicted_peak_mem_bytes and r.mem_capacity_bytes]
    pool = measured or predicted
    if not pool:
        return None
    return min(pool, key=lambda p: p[1] / (p[0].mem_capacity_bytes or 1))


def what_would_fit(config: dict) -> list[str]:
    """Memory savers this config does not use yet, most effective first."""
    out = []
    if (config.get("micro_batch_size") or 1) > 1:
        out.append(f"a micro-batch below {config['micro_batch_size']} (add it to the space)")
    if config.get("checkpointing") in (None, "none", "selective"):
        out.append("activation checkpointing (checkpointing: [full])")
    if (config.get("zero_stage") or 0) < 3 and config.get("fsdp") in (None, "none"):
        out.append("sharded states: ZeRO-3 or FSDP2 (zero_stage: [3] or fsdp: [full])")
    if config.get("offload") in (None, "none"):
        out.append("CPU offload of optimizer states (offload: [optimizer], with ZeRO 1-3)")
    out.append("more GPUs per trial, or a GPU with more memory")
    return out


def nothing_fits_note(rows: list[TrialRow]) -> str | None:
    if any(r.status == "ok" for r in rows):
        return None
    found = _closest(rows)
    if found is None:
        return None
    row, peak, how = found
    capacity = row.mem_capacity_bytes or 1  # set on every row _closest keeps
    over = peak / capacity - 1
    return (f"no config fits the memory limit: the closest was trial {row.number} "
            f"({', '.join(f'{k}={v}' for k, v in row.config.items() if v is not None)}), {how} "
            f"peak {fmt_bytes(peak)} per rank against {fmt_bytes(capacity)} "
            f"({over:+.0%}). To make it fit: " + "; ".join(what_would_fit(row.config)))
