"""A recommended config in words, for the terminal's report and the end of a sweep: its
config and tokens/s (and the runs behind them), and the rate its dollars were priced at.

    config_lines(pick, sure)   # ["2x mb2 ga1 fp32 ckpt:none; 7,776 tokens/s", ...]
    outside_own_runs(7_000.0, [{"tokens_per_s": 7_776.0}])   # "estimate below its run: ..."
    price_line(pick)           # "price: at $0.0446/vCPU-h, priced DATE (aws: AWS c7i.large ...)"
"""

from __future__ import annotations

from typing import Any

from autotune.report.labels import config_summary, price_text


def price_line(option: dict[str, Any]) -> str | None:
    """The rate behind a pick's dollars, its date and source (None: no rate known): a dollar
    figure is only as good as the price it was multiplied by."""
    text = price_text(option)
    return f"price: {text}" if text else None


def tokens_text(pick: dict[str, Any], sure: dict[str, Any] | None) -> str:
    """The pick's tokens/s; the runs beside it where there are several, or where the one run
    differs from the estimate (it is set at the study's level: outside_own_runs)."""
    tps = f"{pick['tokens_per_s']:,.0f} tokens/s" if pick.get("tokens_per_s") else "not measured"
    measured = sorted(r["tokens_per_s"] for r in (sure or {}).get("runs") or [])
    if len(measured) > 1:
        tps += f" estimated from {len(measured)} runs ({measured[0]:,.0f} to {measured[-1]:,.0f})"
    elif measured and pick.get("tokens_per_s") and round(measured[0]) != round(pick["tokens_per_s"]):
        tps += f" estimated from 1 run ({measured[0]:,.0f})"
    return tps


def config_lines(pick: dict[str, Any], sure: dict[str, Any] | None) -> list[str]:
    """The pick's config and tokens/s, and where its estimate lies outside its runs, that."""
    outside = outside_own_runs(pick.get("tokens_per_s"), (sure or {}).get("runs") or [])
    return [f"{config_summary(pick['config'])}; {tokens_text(pick, sure)}", *([outside] if outside else [])]


def outside_own_runs(estimate: float | None, runs: list[dict[str, Any]]) -> str | None:
    """"estimate below both runs: ..." (or "its run") where a config's estimate lies outside its
    own runs, else None.

    The estimate nets out the spells a block of runs shared and sits at the level of all the
    study's repeated runs (autotune.search.estimates), so it can lie outside its own runs; a
    sweep on an Intel machine printed "27,846 tokens/s estimated from 2 runs (29,403 to 29,689)"
    and nothing more."""
    tps = [round(r["tokens_per_s"]) for r in runs]
    if not estimate or not tps:
        return None
    side = "below" if round(estimate) < min(tps) else "above" if round(estimate) > max(tps) else None
    if side is None:
        return None
    which = {1: "its run", 2: "both runs"}.get(len(tps), f"all {len(tps)} runs")
    return f"estimate {side} {which}: set at the level of all the study's repeated runs"
