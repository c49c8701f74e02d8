"""The report on a terminal: rich tables of the trials, the Pareto set, the best per platform,
failures and memory, then the cheapest and fastest within the limits.

    print_report(collect(study), Console())      # wide tables from WIDE_COLUMNS columns on
"""

from __future__ import annotations

from typing import Any

from autotune.format import fmt_bytes, fmt_hours, fmt_pct, fmt_usd
from autotune.report.labels import config_summary, mem_summary, zero_summary


def options_table(rows: list[dict[str, Any]], title: str, wide: bool = True):
    """The decision table: one row per (config, offer) with everything the issue names.

    `wide`: one column per setting (terminals >= WIDE_COLUMNS); otherwise settings share a cell."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    if wide:
        cols = (("#", "right"), ("GPU x n", "left"), ("mb", "right"), ("ga", "right"),
                ("prec", "left"), ("ckpt", "left"), ("ZeRO", "left"), ("TP", "right"),
                ("tokens/s", "right"), ("MFU", "right"), ("peak mem (free)", "right"),
                ("hours", "right"), ("dollars", "right"), ("+30% time", "right"),
                ("1 interrupt", "right"), ("offer", "left"), ("figures", "left"))
    else:
        cols = (("#", "right"), ("config", "left"), ("tokens/s, MFU", "right"),
                ("peak mem (free)", "right"), ("hours", "right"), ("dollars", "right"),
                ("+30% / 1 interrupt", "right"), ("offer, figures", "left"))
    for col, just in cols:
        table.add_column(col, justify=just, overflow="fold")
    for o in rows:
        c = o["config"]
        s = o.get("sensitivity") or {}
        gpus = f"{o.get('gpu_type') or '?'} x{(c.get('num_gpus') or 0) * (c.get('num_nodes') or 1)}"
        tps = f"{o['tokens_per_s']:,.0f}" if o.get("tokens_per_s") else "not measured"
        mfu = fmt_pct(o.get("mfu")) if o.get("mfu") is not None else "n/a"
        mem = mem_summary(o.get("peak_mem_bytes"), o.get("peak_mem_source"), o.get("headroom_bytes"))
        figures = o["basis_kind"] + ("" if o["feasible"] else " (over limit)")
        style = None if o["feasible"] else "dim"
        if wide:
            table.add_row(
                str(o["trial"]), gpus, str(c.get("micro_batch_size")), str(c.get("grad_accum_steps")),
                str(c.get("precision")), str(c.get("checkpointing")), zero_summary(c),
                str(c.get("tp_degree")), tps, mfu, mem, fmt_hours(o["hours"]), fmt_usd(o["usd"]),
                fmt_usd(s.get("plus_30pct_time_usd")), fmt_usd(s.get("one_interruption_usd")),
                o["offer"], figures, style=style)
        else:
            cfg = (f"{gpus} mb{c.get('micro_batch_size')} ga{c.get('grad_accum_steps')} "
                   f"{c.get('precision')} ckpt:{c.get('checkpointing')} zero:{zero_summary(c)} "
                   f"tp{c.get('tp_degree')}")
            table.add_row(str(o["trial"]), cfg, f"{tps}, MFU {mfu}", mem, fmt_hours(o["hours"]),
                          fmt_usd(o["usd"]),
                          f"{fmt_usd(s.get('plus_30pct_time_usd'))} / {fmt_usd(s.get('one_interruption_usd'))}",
                          f"{o['offer']}, {figures}", style=style)
    return table


WIDE_COLUMNS = 160


def _ended(r: dict[str, Any]) -> str:
    """One word for how a trial ended: its status when it completed, else state: status."""
    if r["state"] == "COMPLETE":
        return r["status"] or "ok"
    return r["state"].lower() + (f": {r['status']}" if r["status"] else "")


def trials_table(rows: list[dict[str, Any]], title: str):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col, just in (("#", "right"), ("ended", "left"), ("config", "left"), ("tokens/s", "right"),
                      ("peak mem", "right"), ("hours", "right"), ("dollars", "right"), ("offer", "left")):
        table.add_column(col, justify=just, overflow="fold")
    for r in rows:
        tps = f"{r['tokens_per_s']:,.0f}" if r["tokens_per_s"] else "-"
        mem = fmt_bytes(r["peak_mem_bytes"]) if r["peak_mem_bytes"] else "-"
        if r["peak_mem_bytes"] and r.get("peak_mem_source") == "host_rss":
            mem += " rss"
        table.add_row(str(r["number"]), _ended(r), config_summary(r["config"]), tps, mem,
                      fmt_hours(r["hours"]), fmt_usd(r["usd"]), r["offer"] or "-")
    return table


def _limits_line(limits: dict[str, Any]) -> str:
    parts = []
    if limits["max_usd"] is not None:
        parts.append(f"budget {fmt_usd(limits['max_usd'])}")
    if limits["deadline_hours"] is not None:
        parts.append(f"deadline {fmt_hours(limits['deadline_hours'])}")
    return ", ".join(parts) + f" (from {limits['source']})" if parts else "no budget or deadline set"


def print_report(doc: dict[str, Any], console) -> None:
    from rich.table import Table

    c = doc["counts"]
    wide = console.width >= WIDE_COLUMNS
    console.print(f"[bold]Study '{doc['study']}'[/]: {c['total']} trials: {c['complete']} complete, "
                  f"{c['pruned']} pruned, {c['failed']} failed, {c['running']} running. "
                  f"Limits: {_limits_line(doc['limits'])}.")
    console.print(trials_table(doc["trials"], f"All trials ({len(doc['trials'])})"))
    if doc["pareto"]:
        console.print(options_table(doc["pareto"], "Pareto set of (config, offer): no option is both "
                                                   "cheaper and faster; cheapest first", wide))
    if doc["per_platform"]:
        console.print(options_table(doc["per_platform"], "Best per platform (cheapest within limits)",
                                    wide))
    if doc["failures"]:
        t = Table(title="Trials that did not complete", title_justify="left")
        for col in ("state", "status", "count", "trials", "reason", "e.g."):
            t.add_column(col, overflow="fold")
        for g in doc["failures"]:
            for i, reason in enumerate(g["reasons"]):
                t.add_row(g["state"] if i == 0 else "", g["status"] if i == 0 else "",
                          str(reason["count"]), ", ".join(map(str, reason["trials"])), reason["reason"],
                          reason["example"])
        console.print(t)
    if doc["memory"]:
        t = Table(title="Memory: predicted (analytic) vs measured peak per rank", title_justify="left")
        for col in ("#", "ended", "predicted", "measured", "source", "measured/predicted", "prediction"):
            t.add_column(col, overflow="fold")
        for m in doc["memory"]:
            ratio = m["measured_over_predicted"]
            t.add_row(str(m["trial"]), m["status"] or "-", fmt_bytes(m["predicted_peak_mem_bytes"]),
                      fmt_bytes(m["measured_peak_mem_bytes"]), m["measured_source"] or "-",
                      f"{ratio:.2f}" if ratio is not None else "-", m["predicted_basis"] or "-")
        console.print(t)
    if len(doc["scaling"]) > 1:
        console.print("scaling (best measured config per GPU count): " + ", ".join(
            f"{s['num_gpus']}x {s['tokens_per_s']:,.0f} tok/s ({100 * s['scaling_efficiency']:.0f}%)"
            for s in doc["scaling"]))
    for label, key in (("cheapest", "cheapest"), ("fastest", "fastest")):
        best = doc[key]
        if best:
            tps = f"{best['tokens_per_s']:,.0f} tokens/s" if best["tokens_per_s"] else "not measured"
            console.print(f"[bold]{label}[/] within limits: trial {best['trial']}: "
                          f"{config_summary(best['config'])} -> {fmt_hours(best['hours'])}, "
                          f"{fmt_usd(best['usd'])} on {best['offer']} ({tps}, {best['basis']})")
            pick = next((p for p in doc.get("picks", []) if p["trial"] == best["trial"]
                         and p["by"] == ("cost" if key == "cheapest" else "time")), None)
            if pick:
                console.print(f"  how sure: {pick['how_sure']}; {len(pick['runs'])} run(s): "
                              + ", ".join(f"{r['tokens_per_s']:,.0f}" for r in pick["runs"])
                              + f" tokens/s (90% interval {pick['tokens_per_s_low']:,.0f}-"
                              f"{pick['tokens_per_s_high']:,.0f})")
    if not doc["options"]:
        console.print("[yellow]no completed trial yet[/]")
    for note in doc["notes"]:
        console.print(f"[dim]note: {note}[/]")
