"""The report on a terminal: the short answer at the end of a sweep, and `autotune report`'s
tables of the trials, the Pareto set, the best per platform, failures and memory.

    print_summary(collect(study), Console(), next_commands)   # end of `autotune sweep`: ~20 lines
    print_report(collect(study), Console())                   # wide tables from WIDE_COLUMNS columns on

Names users type (offers, GPU types) are never folded or cut, at any width: prose around them
is shortened with an ellipsis instead (`fit_table`, `clip`).
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any, cast

from autotune.format import fmt_bytes, fmt_hours, fmt_pct, fmt_usd, fmt_usd_range
from autotune.report.labels import (
    clip,
    config_summary,
    mem_summary,
    mfu_text,
    no_option_text,
    offer_filter_line,
    origin_note,
    zero_summary,
)
from autotune.report.neighbours import beside_text, interference_lines
from autotune.report.nothing_fits import NOTHING_FITS
from autotune.report.pick_text import config_lines, outside_own_runs, price_line
from autotune.report.picks import headroom_note_start

if TYPE_CHECKING:
    from rich.console import JustifyMethod

WIDE_COLUMNS = 160
NAME, TEXT, LINE = "name", "text", "line"  # LINE: text kept to one line, ellipsised
PARETO_ROWS = 5  # the Pareto set in short at the end of a sweep; the rest: autotune report
MIN_TEXT = 8  # narrowest a text column gets before the text columns merge into one


def fit_table(title: str | None, columns: list[tuple[str, str, str]], rows: list[list[str]],
              width: int, row_styles: list[str | None] | None = None):
    """A rich Table within `width` whose `NAME` columns are as wide as their longest value and
    never wrap; `TEXT` columns share the rest, wrapped at spaces, a word too long ellipsised.
    When the text columns get under `MIN_TEXT` each, they become one column of "header value"
    pairs.

    `columns`: (header, NAME | TEXT, justify)."""
    from rich import box
    from rich.table import Table

    def natural(i: int) -> int:
        return max([len(r[i]) for r in rows] + [len(columns[i][0])])

    texts = [i for i, c in enumerate(columns) if c[1] != NAME]
    fixed = sum(natural(i) for i, c in enumerate(columns) if c[1] == NAME)
    room = width - fixed - 3 * (len(columns) - 1)  # a divider and two spaces between columns
    if texts and room < MIN_TEXT * len(texts) and len(texts) > 1:  # one text column, "a; b; c"
        first = texts[0]
        heads = [columns[i][0] for i in texts]
        columns = [c for i, c in enumerate(columns) if i not in texts[1:]]
        columns[first] = ("details", TEXT, "left")
        rows = [[("; ".join(f"{h} {r[i]}" for h, i in zip(heads, texts) if r[i] not in ("", "-"))
                  if j == first else v) for j, v in enumerate(r) if j not in texts[1:]] for r in rows]
        return fit_table(title, columns, rows, width, row_styles)
    want: dict[int, int] = {}  # narrow columns whole, the wide ones share what is left
    pending = sorted(texts, key=natural)
    while pending:
        share = room // len(pending)
        if natural(pending[0]) > share:
            want.update({i: max(MIN_TEXT, share) for i in pending})
            break
        want[pending[0]] = natural(pending[0])
        room -= want[pending.pop(0)]
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for i, (head, kind, justify) in enumerate(columns):
        if kind == NAME:
            table.add_column(head, justify=cast("JustifyMethod", justify), no_wrap=True, width=natural(i))
        else:
            table.add_column(head, justify=cast("JustifyMethod", justify), overflow="ellipsis", width=want[i],
                             no_wrap=kind == LINE)
    for i, r in enumerate(rows):
        table.add_row(*r, style=(row_styles or [None] * len(rows))[i])
    return table


def options_table(rows: list[dict[str, Any]], title: str, width: int):
    """The decision table: one row per (config, offer), one column per setting from
    WIDE_COLUMNS on; narrower, the settings share a cell."""
    wide, out = width >= WIDE_COLUMNS, []
    for o in rows:
        c, s = o["config"], o.get("sensitivity") or {}
        gpus = f"{o.get('gpu_type') or '?'} x{(c.get('num_gpus') or 0) * (c.get('num_nodes') or 1)}"
        tps = f"{o['tokens_per_s']:,.0f}" if o.get("tokens_per_s") else "not measured"
        mfu = fmt_pct(o.get("mfu")) if o.get("mfu") is not None else "n/a"
        mem = mem_summary(o.get("peak_mem_bytes"), o.get("peak_mem_source"), o.get("headroom_bytes"))
        # The hours and dollars are projected to the target from tokens/s measured (or projected, estimated).
        figures = f"{o['basis_kind']} tok/s" + ("" if o["feasible"] else " (over limit)")
        money = [fmt_hours(o["hours"]), fmt_usd(o["usd"])]
        if wide:
            out.append([str(o["trial"]), o["offer"], gpus, str(c.get("micro_batch_size")),
                        str(c.get("grad_accum_steps")), str(c.get("precision")), str(c.get("checkpointing")),
                        zero_summary(c), str(c.get("tp_degree")), tps, mfu, mem, *money,
                        fmt_usd(s.get("plus_30pct_time_usd")), fmt_usd(s.get("one_interruption_usd")), figures])
        else:
            cfg = (f"{config_summary(c)}, {tps} tok/s, MFU {mfu}, {mem}, +30% "
                   f"{fmt_usd(s.get('plus_30pct_time_usd'))}, 1 interrupt "
                   f"{fmt_usd(s.get('one_interruption_usd'))}, {figures}")
            out.append([str(o["trial"]), o["offer"], o.get("gpu_type") or "?", *money, cfg])
    if wide:
        cols = [("#", NAME, "right"), ("offer", NAME, "left"), ("GPU x n", NAME, "left"), ("mb", TEXT, "right"),
                ("ga", TEXT, "right"), ("prec", TEXT, "left"), ("ckpt", TEXT, "left"), ("ZeRO", TEXT, "left"),
                ("TP", TEXT, "right"), ("tokens/s", TEXT, "right"), ("MFU", TEXT, "right"),
                ("peak mem (free)", TEXT, "right"), ("hours", NAME, "right"), ("dollars", NAME, "right"),
                ("+30% time", TEXT, "right"), ("1 interrupt", TEXT, "right"), ("hours, $ from", TEXT, "left")]
    else:
        cols = [("#", NAME, "right"), ("offer", NAME, "left"), ("GPU", NAME, "left"), ("hours", NAME, "right"),
                ("dollars", NAME, "right"), ("config, tokens/s, memory, risk", TEXT, "left")]
    if wide and sum(max([len(h)] + [len(r[i]) for r in out]) + 3 for i, (h, _, _) in enumerate(cols)) > width + 3:
        return options_table(rows, title, WIDE_COLUMNS - 1)  # one column per setting does not fit
    return fit_table(title, cols, out, width, [None if o["feasible"] else "dim" for o in rows])


def _ended(r: dict[str, Any]) -> str:
    """How a trial ended: its status when it completed, else state: status; and whose config
    it measured again or reused (`labels.origin_note`)."""
    if r["state"] == "WAITING":  # queued by a sweep (its baselines, a re-measurement)
        return "queued for the next sweep" + origin_note(r)
    ended = (r["status"] or "ok") if r["state"] == "COMPLETE" else (
        r["state"].lower() + (f": {r['status']}" if r["status"] else ""))
    return ended + origin_note(r)


def trials_table(rows: list[dict[str, Any]], title: str, width: int):
    out = []
    # Side by side (autotune sweep --side-by-side): where each trial ran and what ran beside it.
    side = any(r.get("slot") or r.get("neighbours") for r in rows)
    for r in rows:
        mem = fmt_bytes(r["peak_mem_bytes"]) if r["peak_mem_bytes"] else "-"
        if r["peak_mem_bytes"] and r.get("peak_mem_source") == "host_rss":
            mem += " rss"
        tps = f"{r['tokens_per_s']:,.0f}" if r["tokens_per_s"] else "-"
        if r.get("compile_s") is not None:
            tps += f" +{r['compile_s']:.0f}s compile"
        out.append([str(r["number"]), r["offer"] or "-", fmt_hours(r["hours"]), fmt_usd(r["usd"]),
                    _ended(r), config_summary(r["config"]), tps, mem]
                   + ([r.get("slot") or "-", beside_text(r)] if side else []))
    cols = [("#", NAME, "right"), ("offer", NAME, "left"), ("hours", NAME, "right"),
            ("dollars", NAME, "right"), ("ended", TEXT, "left"), ("config", TEXT, "left"),
            ("tokens/s", TEXT, "right"), ("peak mem", TEXT, "right")]
    if side:
        cols += [("slot", TEXT, "left"), ("beside", TEXT, "left")]
    return fit_table(title, cols, out, width)


def _note_lines(doc: dict[str, Any], width: int, starts: tuple[str, ...],
                style: str | None = None) -> list[tuple[str, str | None]]:
    """The report's notes that begin with one of `starts`, wrapped at `width` under the line
    they explain (config keys stay whole): where nothing fits, the closest config and what
    would make it fit (autotune.report.nothing_fits); a pick's memory headroom
    (autotune.report.picks.with_headroom)."""
    return [(text, style) for note in doc["notes"] if note.startswith(starts)
            for text in textwrap.wrap(note, width, initial_indent="  ", subsequent_indent="  ",
                                      break_on_hyphens=False)]


def _limits_line(limits: dict[str, Any]) -> str:
    parts = []
    if limits["max_usd"] is not None:
        parts.append(f"budget {fmt_usd(limits['max_usd'])}")
    if limits["deadline_hours"] is not None:
        parts.append(f"deadline {fmt_hours(limits['deadline_hours'])}")
    return ", ".join(parts) + f" (from {limits['source']})" if parts else "no budget or deadline set"


def _tail_lines(doc: dict[str, Any], width: int) -> list[tuple[str, str | None]]:
    """The sweep's end after the Pareto set: the trials that did not complete, and the dates
    of the prices under the dollars (how old, where they are old), whole at `width`."""
    out: list[tuple[str, str | None]] = []
    if doc["failures"]:
        n = sum(g["count"] for g in doc["failures"])
        out.append((clip("", f"{n} trial(s) did not complete: " + ", ".join(
            f"{g['count']} {g['status']}" for g in doc["failures"]), width), "yellow"))
    note = doc.get("catalog_note")
    if note and doc["options"]:
        style = "yellow" if "out of date" in note else None
        out += [(text, style) for text in textwrap.wrap(f"Prices: {note}.", width, subsequent_indent="  ")]
    return out


def _no_pick_text(doc: dict[str, Any]) -> str:
    """Why nothing is recommended; under limits, how near the nearest options come to them and
    the flag values that let one in (autotune.report.limits_miss, as the report's note says)."""
    from autotune.report.limits_miss import limits_miss

    options, limits = doc["options"], doc["limits"]
    if not options:
        return no_option_text(doc)
    figures, fix = limits_miss(options, limits["max_usd"], limits["deadline_hours"])
    return f"no option meets the limits: {_limits_line(limits)}; {figures}; {fix}"


def scaling_line(doc: dict[str, Any]) -> str | None:
    """Scaling efficiency of one config over GPU counts (build.py keeps only such trials)."""
    sc = doc["scaling"]
    if len(sc) < 2:
        return None
    per_rank = config_summary(doc_trial(doc, sc[0]['trial'])['config']).split(' ', 1)[-1]
    return (f"scaling, same per-rank config ({per_rank}): "
            + ", ".join(f"{s['num_gpus']}x {s['tokens_per_s']:,.0f} tok/s ({100 * s['scaling_efficiency']:.0f}%, "
                        f"#{s['trial']})" for s in sc))


def doc_trial(doc: dict[str, Any], number: int) -> dict[str, Any]:
    return next(t for t in doc["trials"] if t["number"] == number)


def _print_best(doc: dict[str, Any], console) -> None:
    """The cheapest and the fastest within the limits: config, hours, dollars, the rate behind
    them, and how sure the pick is."""
    for label, key in (("cheapest", "cheapest"), ("fastest", "fastest")):
        best = doc[key]
        if best:
            tps = f"{best['tokens_per_s']:,.0f} tokens/s" if best["tokens_per_s"] else "not measured"
            console.print(f"[bold]{label}[/] within limits: trial {best['trial']}: "
                          f"{config_summary(best['config'])} -> {fmt_hours(best['hours'])}, "
                          f"{fmt_usd(best['usd'])} on {best['offer']} ({tps}, {mfu_text(best)}, {best['basis']})")
            price = price_line(best)
            if price:
                console.print(f"  {price}", markup=False)
            pick = next((p for p in doc.get("picks", []) if p["trial"] == best["trial"]
                         and p["by"] == ("cost" if key == "cheapest" else "time")), None)
            if pick:
                console.print(f"  how sure: {pick['how_sure']}; {len(pick['runs'])} run(s): "
                              + ", ".join(f"{r['tokens_per_s']:,.0f}" for r in pick["runs"])
                              + f" tokens/s (90% interval {pick['tokens_per_s_low']:,.0f}-"
                              f"{pick['tokens_per_s_high']:,.0f})")
                outside = outside_own_runs(pick["tokens_per_s"], pick["runs"])
                if outside:
                    console.print(f"  {outside}", markup=False)


def print_report(doc: dict[str, Any], console) -> None:
    c = doc["counts"]
    width = console.width
    console.print(f"[bold]Study '{doc['study']}'[/]: {c['total']} trials: {c['complete']} complete, "
                  f"{c['pruned']} pruned, {c['failed']} failed, {c['running']} running. "
                  f"Limits: {_limits_line(doc['limits'])}.")
    if doc.get("target"):
        console.print(f"Hours and dollars are to the target: {doc['target']}.", markup=False)
    if doc.get("catalog_note"):
        console.print(f"Prices: {doc['catalog_note']}.", markup=False)
    if doc.get("offer_filter"):
        console.print(f"Offers: {offer_filter_line(doc['offer_filter'])}.", markup=False)
    console.print(trials_table(doc["trials"], f"All trials ({len(doc['trials'])})", width))
    if doc["pareto"]:
        console.print(options_table(doc["pareto"], "Pareto set of (config, offer): no option is both "
                                                   "cheaper and faster; cheapest first", width))
    if doc["per_platform"]:
        console.print(options_table(doc["per_platform"], "Best per platform (cheapest within limits)", width))
    if doc["failures"]:
        rows = [[g["state"] if i == 0 else "", g["status"] if i == 0 else "", str(r["count"]),
                 ", ".join(map(str, r["trials"])), r["reason"], r["example"]]
                for g in doc["failures"] for i, r in enumerate(g["reasons"])]
        console.print(fit_table("Trials that did not complete", [
            ("state", NAME, "left"), ("status", NAME, "left"), ("count", NAME, "right"),
            ("trials", TEXT, "left"), ("reason", TEXT, "left"), ("e.g.", LINE, "left")], rows, width))
    if doc["memory"]:
        rows = [[str(m["trial"]), m["status"] or "-", fmt_bytes(m["predicted_peak_mem_bytes"]),
                 fmt_bytes(m["measured_peak_mem_bytes"]), m["measured_source"] or "-",
                 f"{m['measured_over_predicted']:.2f}" if m["measured_over_predicted"] is not None else "-",
                 m["predicted_basis"] or "-"] for m in doc["memory"]]
        console.print(fit_table("Memory: predicted (analytic) vs measured peak per rank", [
            ("#", NAME, "right"), ("ended", TEXT, "left"), ("predicted", TEXT, "right"),
            ("measured", TEXT, "right"), ("source", TEXT, "left"), ("measured/predicted", TEXT, "right"),
            ("prediction", LINE, "left")], rows, width))
    line = scaling_line(doc)
    if line:
        console.print(line, markup=False)
    for line in interference_lines(doc):
        console.print(line, markup=False)
    _print_best(doc, console)
    if not doc["options"]:
        console.print(no_option_text(doc), style="yellow", markup=False)
    for note in doc["notes"]:  # as text: a note's "[full]" is no markup tag
        console.print(f"note: {note}", style="dim", markup=False)


def _pick_lines(doc: dict[str, Any], pick: dict[str, Any], width: int) -> list[tuple[str, str | None]]:
    """The pick by cost in a few lines (hours, dollars and how sure; its config; the fastest),
    then the notes on its memory headroom."""
    lines: list[tuple[str, str | None]] = []
    # The pick's interval over its runs, where the study has re-measured it (doc["picks"]).
    sure = next((r for r in doc.get("picks") or [] if r.get("by") == "cost"
                 and (r.get("trial"), r.get("offer")) == (pick["trial"], pick["offer"])), None)
    interval = (f" (90%: {fmt_usd_range(sure['value_low'], sure['value_high'])})"
                if sure and sure.get("value_low") is not None else "")
    lines.append((clip(f"Pick: trial {pick['trial']} on {pick['offer']}", ", cheapest within limits",
                       width), "bold"))
    # The hours and dollars are projected to the target; only the tokens/s behind them are
    # measured (or projected from another GPU type, or estimated), so the line says which.
    lines.append((clip(f"  {fmt_hours(pick['hours'])}, {fmt_usd(pick['usd'])}{interval}",
                       f", from {pick['basis_kind']} tokens/s", width), "bold"))
    price = price_line(pick)
    if price:
        lines.append((clip("  ", price, width), None))
    if sure and sure.get("how_sure"):
        lines.append((clip("  ", sure["how_sure"], width), None))
    lines.extend((clip("  ", text, width), None) for text in config_lines(pick, sure))
    lines.append((clip("  ", mfu_text(pick), width), None))
    fast = doc["fastest"]
    differs = bool(fast) and (fast["trial"], fast["offer"]) != (pick["trial"], pick["offer"])
    if differs:
        lines.append((clip(f"Fastest: trial {fast['trial']} on {fast['offer']}: ",
                           f"{fmt_hours(fast['hours'])}, {fmt_usd(fast['usd'])}", width), None))
    else:
        lines.append(("Fastest: the same.", None))
    # The headroom note on the pick by cost, and by time where the fastest is another config.
    starts = (headroom_note_start("cost"),) + ((headroom_note_start("time"),) if differs else ())
    lines += _note_lines(doc, width, starts, "yellow")
    return lines


def print_summary(doc: dict[str, Any], console, next_commands: list[str]) -> None:
    """The end of a sweep, in about 20 lines at any width: the pick with its hours and
    dollars, the Pareto set in short, and the commands that go on from here."""
    from rich.text import Text

    width = console.width
    lines: list[tuple[str, str | None]] = []  # (text, style)
    c, s = doc["counts"], doc["search"]
    cost = fmt_usd(s["usd"]) if s["usd"] is not None else "not priced"
    states = ", ".join(f"{c[k]} {'queued' if k == 'waiting' else k}"
                       for k in ("complete", "pruned", "failed", "running", "waiting") if c.get(k))
    # What the hours and dollars below are projected to (none shown for a study swept before
    # the target was stored).
    target = f"target {doc['target']}; " if doc.get("target") else ""
    lines.append((clip("", f"Study '{doc['study']}': {c['total']} trials ({states or 'none yet'}); "
                       f"{target}search cost {cost}.", width), None))
    pick = doc["cheapest"]
    if pick is None:
        lines.append((clip("", f"No pick: {_no_pick_text(doc)}.", width), "yellow"))
        lines += _note_lines(doc, width, (NOTHING_FITS,))
    else:
        lines += _pick_lines(doc, pick, width)
    front = doc["pareto"]
    if front:
        lines.append((clip("", f"Pareto set ({len(front)} of {len(doc['options'])} options; hours, dollars, offer, "
                           "config):", width), None))
        for o in front[:PARETO_ROWS]:
            keep = f"  #{o['trial']:<3} {fmt_hours(o['hours']):>8} {fmt_usd(o['usd']):>10}  {o['offer']}  "
            lines.append((clip(keep, config_summary(o["config"]), width), "dim" if not o["feasible"] else None))
        if len(front) > PARETO_ROWS:
            lines.append((f"  ... {len(front) - PARETO_ROWS} more: autotune report", None))
    if len(doc["scaling"]) > 1:
        lines.append((clip("", "Scaling (same per-rank config, more GPUs): " + ", ".join(
            f"{s['num_gpus']}x {100 * s['scaling_efficiency']:.0f}% #{s['trial']}" for s in doc["scaling"]),
            width), None))
    for text in interference_lines(doc):
        lines.append((clip("", text, width), None))
    lines += _tail_lines(doc, width)
    for cmd in next_commands:
        lines.append((cmd, None))
    for text, style in lines:
        console.print(Text(text, style=style or ""), soft_wrap=True)
