"""Short labels for a config and its memory, shared by every view of a study (terminal,
progress panel, HTML, plots, export).

    config_summary(cfg)        # "2x mb4 ga1 bf16 ckpt:full zero2+off:optimizer tp2"
    zero_summary(cfg), mem_summary(peak, "host_rss", headroom)
    basis_kind("projected from 1 x a100-80gb ...")   # "projected"
"""

from __future__ import annotations

from typing import Any

from autotune.format import fmt_bytes


def config_summary(cfg: dict[str, Any]) -> str:
    if not cfg:
        return "-"
    parts = [f"{cfg['num_gpus']}x", f"mb{cfg['micro_batch_size']}", f"ga{cfg['grad_accum_steps']}",
             str(cfg["precision"]), f"ckpt:{cfg['checkpointing']}"]
    if cfg.get("zero_stage"):
        parts.append(f"zero{cfg['zero_stage']}" + (f"+off:{cfg['offload']}" if cfg.get("offload") not in (None, "none") else ""))
    if (cfg.get("tp_degree") or 1) > 1:
        parts.append(f"tp{cfg['tp_degree']}")
    return " ".join(parts)


def zero_summary(cfg: dict[str, Any]) -> str:
    if not cfg.get("zero_stage"):
        return "-"
    off = cfg.get("offload")
    return f"{cfg['zero_stage']}" + (f" +{off}" if off not in (None, "none") else "")


def mem_summary(peak: int | None, source: str | None, headroom: int | None) -> str:
    if not peak:
        return "not measured"
    s = fmt_bytes(peak) + (" rss" if source == "host_rss" else "")
    return s + (f" ({fmt_bytes(headroom)} free)" if headroom is not None else "")


def basis_kind(basis: str | None) -> str:
    """measured, projected or estimated: how a figure was obtained (every figure says which)."""
    b = (basis or "").lower()
    if b.startswith("measured"):
        return "measured"
    if b.startswith("projected"):
        return "projected"
    return "estimated"
