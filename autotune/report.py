"""Read a study back: the trials table, the Pareto front, the best by cost and by time.

    doc = collect(study)          # a JSON-able dict, schema REPORT_SCHEMA_VERSION
    print_report(doc, console)    # rich tables
"""

from __future__ import annotations

from typing import Any

REPORT_SCHEMA_VERSION = 1

CONFIG_COLUMNS = ("num_gpus", "micro_batch_size", "grad_accum_steps", "precision", "checkpointing",
                  "zero_stage", "offload", "tp_degree")


def _trial_row(t) -> dict[str, Any]:
    ua = t.user_attrs
    cfg = ua.get("config") or {}
    score = ua.get("score") or {}
    return {
        "number": t.number,
        "state": t.state.name,
        "params": dict(t.params),
        "config": {k: cfg.get(k) for k in CONFIG_COLUMNS} if cfg else {},
        "status": ua.get("status"),
        "error": ua.get("error"),
        "tokens_per_s": ua.get("tokens_per_s"),
        "peak_mem_bytes": ua.get("peak_mem_bytes"),
        "peak_mem_source": ua.get("peak_mem_source"),
        "mfu": ua.get("mfu"),
        "hours": score.get("hours"),
        "usd": score.get("usd"),
        "offer": score.get("offer"),
        "basis": score.get("basis"),
        "hardware": ua.get("hardware"),
        "trial_dir": ua.get("trial_dir"),
        "wall_s": ua.get("wall_s"),
    }


def collect(study) -> dict[str, Any]:
    from optuna.trial import TrialState

    trials = [_trial_row(t) for t in study.get_trials(deepcopy=False)]
    done = [r for r in trials if r["state"] == TrialState.COMPLETE.name and r["usd"] is not None]
    try:
        pareto_numbers = {t.number for t in study.best_trials}
    except (ValueError, RuntimeError):
        pareto_numbers = set()
    pareto = [r for r in done if r["number"] in pareto_numbers]
    pareto.sort(key=lambda r: r["usd"])
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "study": study.study_name,
        "trials": trials,
        "pareto": pareto,
        "best_by_cost": min(done, key=lambda r: r["usd"], default=None),
        "best_by_time": min(done, key=lambda r: r["hours"], default=None),
    }


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "not measured"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def fmt_hours(h: float | None) -> str:
    if h is None:
        return "-"
    if h < 1:
        return f"{h * 60:.1f} min"
    if h < 48:
        return f"{h:.1f} h"
    return f"{h / 24:.1f} d"


def fmt_usd(x: float | None) -> str:
    return "-" if x is None else (f"${x:,.2f}" if x >= 1 else f"${x:.4f}")


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


def trials_table(rows: list[dict[str, Any]], title: str):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col, just in (("#", "right"), ("state", "left"), ("status", "left"), ("config", "left"),
                      ("tokens/s", "right"), ("peak mem", "right"), ("hours", "right"),
                      ("dollars", "right"), ("offer", "left")):
        table.add_column(col, justify=just)
    for r in rows:
        tps = f"{r['tokens_per_s']:,.0f}" if r["tokens_per_s"] else "-"
        mem = fmt_bytes(r["peak_mem_bytes"]) if r["peak_mem_bytes"] else "-"
        if r["peak_mem_bytes"] and r.get("peak_mem_source") == "host_rss":
            mem += " rss"
        table.add_row(str(r["number"]), r["state"], r["status"] or "-", config_summary(r["config"]),
                      tps, mem, fmt_hours(r["hours"]), fmt_usd(r["usd"]), r["offer"] or "-")
    return table


def print_report(doc: dict[str, Any], console) -> None:
    console.print(trials_table(doc["trials"], f"Study '{doc['study']}': {len(doc['trials'])} trials"))
    failed = [r for r in doc["trials"] if r["status"] not in (None, "ok")]
    for r in failed:
        console.print(f"  trial {r['number']}: [yellow]{r['status']}[/] {r['error'] or ''}".rstrip())
    if doc["pareto"]:
        console.print(trials_table(doc["pareto"], "Pareto front (hours vs dollars), cheapest first"))
    for label, key in (("cheapest", "best_by_cost"), ("fastest", "best_by_time")):
        best = doc[key]
        if best:
            console.print(f"[bold]{label}[/]: trial {best['number']}: {config_summary(best['config'])} -> "
                          f"{fmt_hours(best['hours'])}, {fmt_usd(best['usd'])} on {best['offer']} "
                          f"({best['tokens_per_s']:,.0f} tokens/s, {best['basis']})")
    if not doc["best_by_cost"]:
        console.print("[yellow]no completed trial yet[/]")
