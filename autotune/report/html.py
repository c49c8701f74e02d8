"""The report as a self-contained HTML page (plotly, its JS inlined: no network) and PNG plots
(matplotlib, no browser needed).

    write_html(doc, "report.html")          # one file, opens offline
    write_report_dir(doc, "report/")        # report.html, report.json, pareto.png, throughput.png, memory.png

`doc` is `autotune.report.build.collect(...)`. Nothing half-written: files go to a temporary name
next to the target and are renamed into place.
"""

from __future__ import annotations

import html
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from autotune.report.build import config_summary, fmt_bytes, fmt_hours, fmt_pct, fmt_usd, zero_summary

PNG_NAMES = ("pareto.png", "throughput.png", "memory.png")
# Colours a reader can tell apart (Okabe-Ito, colour-blind safe), one per platform.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
INFEASIBLE_COLOUR = "#9a9a9a"
FRONT_COLOUR = "#222222"


def _platform_colours(doc: dict[str, Any]) -> dict[str, str]:
    platforms = sorted({o["platform"] for o in doc["options"]})
    return {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(platforms)}


def _log_axis(values: list[float]) -> bool:
    """Log scale when the points span more than a decade: hours and dollars often do."""
    pos = [v for v in values if v and v > 0]
    return len(pos) > 1 and max(pos) / min(pos) > 10


def _not_plotted(doc: dict[str, Any]) -> str:
    parts = [f"{g['count']} {g['state'].lower()} ({g['status']})" for g in doc["failures"]]
    return ("not plotted (no hours or dollars): " + ", ".join(parts)) if parts else ""


def _hours_text(h: float) -> str:
    """Hours as the axis shows them, with days beside when that reads better."""
    return f"{h:,.1f} h" + (f" ({h / 24:.1f} d)" if h >= 48 else "")


def _label(o: dict[str, Any]) -> str:
    return f"#{o['trial']} {config_summary(o['config'])} on {o['offer']}"


# ---------------------------------------------------------------------------------------
# Plotly figures (for the HTML page)
# ---------------------------------------------------------------------------------------


def pareto_figure(doc: dict[str, Any]):
    import plotly.graph_objects as go

    colours = _platform_colours(doc)
    fig = go.Figure()
    opts = doc["options"]
    for platform, colour in colours.items():
        pts = [o for o in opts if o["platform"] == platform and o["feasible"]]
        if pts:
            fig.add_trace(go.Scatter(
                x=[o["hours"] for o in pts], y=[o["usd"] for o in pts], mode="markers",
                name=platform, marker=dict(color=colour, size=12, line=dict(width=1, color="white")),
                text=[_hover(o) for o in pts], hoverinfo="text"))
    bad = [o for o in opts if not o["feasible"]]
    if bad:
        fig.add_trace(go.Scatter(
            x=[o["hours"] for o in bad], y=[o["usd"] for o in bad], mode="markers",
            name="over budget or deadline", text=[_hover(o) for o in bad], hoverinfo="text",
            marker=dict(symbol="x", size=12, color=INFEASIBLE_COLOUR)))
    front = sorted(doc["pareto"], key=lambda o: o["hours"])
    if front:
        fig.add_trace(go.Scatter(
            x=[o["hours"] for o in front], y=[o["usd"] for o in front], mode="lines+markers",
            name="Pareto set", line=dict(color=FRONT_COLOUR, width=2, dash="dot", shape="hv"),
            marker=dict(symbol="circle-open", size=20, color=FRONT_COLOUR, line=dict(width=2)),
            text=[_hover(o) for o in front], hoverinfo="text"))
    # Limits as line traces, not shapes: shapes on a log axis take log10 coordinates, and
    # a trace also gets a legend entry that names the limit.
    limits = doc["limits"]
    ax = pareto_axes(doc)
    (x_lo, x_hi), (y_lo, y_hi) = ax["x"], ax["y"]
    if limits["deadline_hours"] is not None:
        fig.add_trace(go.Scatter(x=[limits["deadline_hours"]] * 2, y=[y_lo, y_hi], mode="lines",
                                 name=f"deadline {_hours_text(limits['deadline_hours'])}",
                                 line=dict(color="#D55E00", dash="dash"), hoverinfo="name"))
    if limits["max_usd"] is not None:
        fig.add_trace(go.Scatter(x=[x_lo, x_hi], y=[limits["max_usd"]] * 2, mode="lines",
                                 name=f"budget {fmt_usd(limits['max_usd'])}",
                                 line=dict(color="#D55E00", dash="dashdot"), hoverinfo="name"))
    log_x, log_y = ax["log_x"], ax["log_y"]
    for key, label, ay in _best_labels(doc):
        o = doc[key]
        if o:  # annotations on a log axis take log10 of the value (plotly's convention)
            fig.add_annotation(x=math.log10(o["hours"]) if log_x else o["hours"],
                               y=math.log10(o["usd"]) if log_y else o["usd"],
                               text=f"<b>{label}</b>: #{o['trial']} {_hours_text(o['hours'])}, {fmt_usd(o['usd'])}",
                               showarrow=True, arrowhead=2, ax=70, ay=ay, bgcolor="white",
                               bordercolor="#999")
    sub = _not_plotted(doc)
    fig.update_layout(
        title=dict(text="Hours to target vs dollars: each point is one (config, offer); lower left is better"
                   + (f"<br><sup>{html.escape(sub)}</sup>" if sub else "")),
        xaxis=dict(title="hours to target" + (" (log)" if log_x else ""), type="log" if log_x else "linear",
                   range=_plotly_range(x_lo, x_hi, log_x)),
        yaxis=dict(title="dollars to target" + (" (log)" if log_y else ""), type="log" if log_y else "linear",
                   range=_plotly_range(y_lo, y_hi, log_y)),
        template="plotly_white", height=520, legend=dict(title="platform"),
        margin=dict(l=70, r=30, t=80, b=60))
    return fig


def _best_labels(doc: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(key, label, offset) of the points to name; one label when cheapest is also fastest."""
    c, f = doc["cheapest"], doc["fastest"]
    if c and f and (c["trial"], c["offer"]) == (f["trial"], f["offer"]):
        return [("cheapest", "cheapest and fastest", 40)]
    return [("cheapest", "cheapest", 40), ("fastest", "fastest", -40)]


def pareto_axes(doc: dict[str, Any]) -> dict[str, Any]:
    """Scale and range of both axes of the Pareto plot, the limits included, with room around
    the points (x2 either side on a log axis, a quarter of the span on a linear one)."""
    lim = doc["limits"]
    out: dict[str, Any] = {}
    for axis, key, limit in (("x", "hours", lim["deadline_hours"]), ("y", "usd", lim["max_usd"])):
        vals = [o[key] for o in doc["options"] if o[key] > 0] + ([limit] if limit else [])
        log = _log_axis(vals)
        if not vals:
            lo, hi = 0.0, 1.0
        elif log:
            lo, hi = min(vals) / 2, max(vals) * 2
        else:
            lo, hi = min(vals), max(vals)
            span = (hi - lo) or max(abs(hi), 1e-9)
            lo, hi = max(0.0, lo - 0.25 * span), hi + 0.25 * span
        out[axis], out[f"log_{axis}"] = (lo, hi), log
    return out


def _plotly_range(lo: float, hi: float, log: bool) -> list[float]:
    return [math.log10(lo), math.log10(hi)] if log and lo > 0 else [lo, hi]


def _hover(o: dict[str, Any]) -> str:
    tps = f"{o['tokens_per_s']:,.0f} tokens/s" if o.get("tokens_per_s") else "tokens/s not measured"
    return (f"trial {o['trial']}: {html.escape(config_summary(o['config']))}<br>"
            f"{html.escape(o['offer'])} ({html.escape(o['platform'])})<br>"
            f"{_hours_text(o['hours'])}, {fmt_usd(o['usd'])}, {tps}<br>figures: {o['basis_kind']}")


def throughput_figure(doc: dict[str, Any]):
    import plotly.graph_objects as go

    fig = go.Figure()
    done = [t for t in doc["trials"] if t["state"] == "COMPLETE" and t["tokens_per_s"]]
    fig.add_trace(go.Scatter(
        x=[_gpus(t["config"]) for t in done], y=[t["tokens_per_s"] for t in done], mode="markers",
        name="every completed trial", marker=dict(color="#9ab", size=9),
        text=[f"#{t['number']} {html.escape(config_summary(t['config']))}" for t in done], hoverinfo="text+y"))
    sc = doc["scaling"]
    if sc:
        fig.add_trace(go.Scatter(
            x=[s["num_gpus"] for s in sc], y=[s["tokens_per_s"] for s in sc], mode="lines+markers+text",
            name="best per GPU count", line=dict(color="#0072B2", width=3), marker=dict(size=11),
            text=[f"{100 * s['scaling_efficiency']:.0f}%" for s in sc], textposition="top center"))
        n0, per0 = sc[0]["num_gpus"], sc[0]["tokens_per_s_per_gpu"]
        xs = [s["num_gpus"] for s in sc]
        fig.add_trace(go.Scatter(x=xs, y=[per0 * n for n in xs], mode="lines", name=f"linear from {n0} GPU",
                                 line=dict(color="#999", dash="dash")))
    fig.update_layout(
        title="Throughput vs GPU count (labels: scaling efficiency against linear)",
        xaxis=dict(title="GPUs (ranks)", tickmode="array", tickvals=sorted({_gpus(t["config"]) for t in done})),
        yaxis=dict(title="tokens/s (measured)", rangemode="tozero"),
        template="plotly_white", height=420, margin=dict(l=70, r=30, t=60, b=60))
    return fig


def _gpus(cfg: dict[str, Any]) -> int:
    return (cfg.get("num_gpus") or 0) * (cfg.get("num_nodes") or 1)


def _memory_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in doc["trials"] if t["peak_mem_bytes"] or t["predicted_peak_mem_bytes"]]


def _mem_used(t: dict[str, Any]) -> int | None:
    """What was compared with the capacity: the headroom is capacity - used."""
    if t["mem_capacity_bytes"] is not None and t["headroom_bytes"] is not None:
        return t["mem_capacity_bytes"] - t["headroom_bytes"]
    return t["peak_mem_bytes"]


def memory_figure(doc: dict[str, Any]):
    import plotly.graph_objects as go

    rows = _memory_rows(doc)
    labels = [_mem_label(t) for t in rows]
    gib = 1024 ** 3
    used = [(_mem_used(t) or 0) / gib for t in rows]
    free = [(t["headroom_bytes"] or 0) / gib if t["headroom_bytes"] is not None else 0 for t in rows]
    fig = go.Figure()
    # Unmeasured rows (never launched) show their predicted diamond; their words go to hover.
    texts = [_mem_text(t) if t["peak_mem_bytes"] else "" for t in rows]
    hover = [_mem_text(t, long=True) for t in rows]
    fig.add_trace(go.Bar(y=labels, x=used, orientation="h", name="measured peak", marker_color="#D55E00",
                         hovertext=hover, hoverinfo="text"))
    # The figures go right of each stacked bar (the last trace's "outside"), never rotated.
    fig.add_trace(go.Bar(y=labels, x=free, orientation="h", name="headroom (free)", marker_color="#cfe8cf",
                         text=texts, textposition="outside", textangle=0, cliponaxis=False,
                         hovertext=hover, hoverinfo="text"))
    pred = [(lab, t["predicted_peak_mem_bytes"] / gib) for lab, t in zip(labels, rows) if t["predicted_peak_mem_bytes"]]
    if pred:
        fig.add_trace(go.Scatter(y=[p[0] for p in pred], x=[p[1] for p in pred], mode="markers",
                                 name="predicted peak", marker=dict(symbol="diamond", size=12, color="#000")))
    ends = [u + f for u, f in zip(used, free)] + [p[1] for p in pred]
    fig.update_layout(barmode="stack", title="Memory per config: measured peak and headroom per rank",
                      xaxis=dict(title="GiB per rank", range=[0, 2.2 * max(ends + [1e-3])]),
                      template="plotly_white", legend=dict(orientation="h", y=-0.2, yanchor="top"),
                      height=max(300, 140 + 40 * len(rows)), margin=dict(l=260, r=30, t=60, b=110))
    return fig


def _mem_text(t: dict[str, Any], long: bool = False) -> str:
    if not t["peak_mem_bytes"]:
        pred = t["predicted_peak_mem_bytes"]
        return "not measured" + (f" (predicted {fmt_bytes(pred)})" if pred else "")
    s = fmt_bytes(_mem_used(t))
    if t["mem_capacity_bytes"]:
        s += f" of {fmt_bytes(t['mem_capacity_bytes'])}"
        if long:
            s += f" ({t['mem_capacity_source']})"
    return s


def _mem_label(t: dict[str, Any]) -> str:
    ended = "" if t["status"] in (None, "ok") else f" [{t['status']}]"
    return f"#{t['number']} {config_summary(t['config'])}{ended}"


# ---------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1500px}
h1{margin:0 0 4px 0;font-size:26px} h2{margin-top:32px;font-size:19px;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:14px}.cards{display:flex;gap:16px;margin:18px 0;flex-wrap:wrap}
.card{border:1px solid #ccd;border-radius:8px;padding:12px 18px;min-width:320px;background:#f8f9fc}
.card .big{font-size:24px;font-weight:600}.card .what{color:#555;font-size:13px}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:12px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}th,td{border:1px solid #ddd;padding:4px 7px;text-align:right}
th{background:#f0f2f6}td.l,th.l{text-align:left}tr.dim td{color:#999}.note{color:#666;font-size:13px}
.tag{display:inline-block;padding:0 6px;border-radius:4px;font-size:12px}
.measured{background:#dff0d8}.projected{background:#fcf8e3}.estimated{background:#f2dede}
"""


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _option_table(rows: list[dict[str, Any]]) -> str:
    head = ("#", "GPU x n", "micro-batch", "accum", "precision", "checkpointing", "ZeRO / offload",
            "TP", "tokens/s", "MFU", "peak mem", "headroom", "hours", "dollars", "+30% time",
            "1 interruption", "offer", "platform", "figures")
    left = {"GPU x n", "precision", "checkpointing", "ZeRO / offload", "offer", "platform", "figures"}
    out = ["<table><tr>" + "".join(f"<th class='{'l' if h in left else ''}'>{h}</th>" for h in head) + "</tr>"]
    for o in rows:
        c, s = o["config"], o.get("sensitivity") or {}
        cells = [
            (o["trial"], ""), (f"{o.get('gpu_type') or '?'} x{_gpus(c)}", "l"), (c.get("micro_batch_size"), ""),
            (c.get("grad_accum_steps"), ""), (c.get("precision"), "l"), (c.get("checkpointing"), "l"),
            (zero_summary(c), "l"), (c.get("tp_degree"), ""),
            (f"{o['tokens_per_s']:,.0f}" if o.get("tokens_per_s") else "not measured", ""),
            (fmt_pct(o["mfu"]) if o.get("mfu") is not None else "n/a", ""),
            (fmt_bytes(o.get("peak_mem_bytes")) + (" rss" if o.get("peak_mem_source") == "host_rss" else ""), ""),
            (fmt_bytes(o["headroom_bytes"]) if o.get("headroom_bytes") is not None else "not measured", ""),
            (fmt_hours(o["hours"]), ""), (fmt_usd(o["usd"]), ""),
            (_sens(s, "plus_30pct_time"), ""), (_sens(s, "one_interruption"), ""),
            (o["offer"], "l"), (o["platform"], "l"),
        ]
        tag = f"<span class='tag {o['basis_kind']}' title='{_e(o['basis'])}'>{o['basis_kind']}</span>"
        if not o["feasible"]:
            tag += " over limit"
        out.append(f"<tr class='{'' if o['feasible'] else 'dim'}'>"
                   + "".join(f"<td class='{cls}'>{_e(v)}</td>" for v, cls in cells)
                   + f"<td class='l'>{tag}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def _sens(s: dict[str, Any], key: str) -> str:
    usd, hours = s.get(f"{key}_usd"), s.get(f"{key}_hours")
    if usd is None and hours is None:
        return "-"
    return f"{fmt_usd(usd)} / {fmt_hours(hours)}"


def _trials_table(rows: list[dict[str, Any]]) -> str:
    head = ("#", "state", "status", "config", "tokens/s", "peak mem", "predicted", "hours", "dollars",
            "offer", "reason")
    out = ["<table><tr>" + "".join(f"<th class='l'>{h}</th>" for h in head) + "</tr>"]
    for t in rows:
        cells = (t["number"], t["state"], t["status"] or "-", config_summary(t["config"]),
                 f"{t['tokens_per_s']:,.0f}" if t["tokens_per_s"] else "-",
                 fmt_bytes(t["peak_mem_bytes"]) if t["peak_mem_bytes"] else "not measured",
                 fmt_bytes(t["predicted_peak_mem_bytes"]) if t["predicted_peak_mem_bytes"] else "-",
                 fmt_hours(t["hours"]), fmt_usd(t["usd"]), t["offer"] or "-",
                 (t["error"] or "").splitlines()[0][:160] if t["error"] else "")
        out.append("<tr>" + "".join(f"<td class='l'>{_e(v)}</td>" for v in cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _failures_table(doc: dict[str, Any]) -> str:
    if not doc["failures"]:
        return "<p class='note'>Every trial completed.</p>"
    out = ["<table><tr><th class='l'>state</th><th class='l'>status</th><th>count</th>"
           "<th class='l'>trials</th><th class='l'>reason</th><th class='l'>for example</th></tr>"]
    for g in doc["failures"]:
        for r in g["reasons"]:
            out.append(f"<tr><td class='l'>{_e(g['state'])}</td><td class='l'>{_e(g['status'])}</td>"
                       f"<td>{r['count']}</td><td class='l'>{_e(', '.join(map(str, r['trials'])))}</td>"
                       f"<td class='l'>{_e(r['reason'])}</td><td class='l'>{_e(r['example'])}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def _memory_table(doc: dict[str, Any]) -> str:
    if not doc["memory"]:
        return "<p class='note'>No memory predictions stored for these trials.</p>"
    out = ["<table><tr><th>#</th><th class='l'>ended</th><th>predicted</th><th>measured</th>"
           "<th class='l'>source</th><th>measured / predicted</th><th class='l'>prediction</th></tr>"]
    for m in doc["memory"]:
        r = m["measured_over_predicted"]
        out.append(f"<tr><td>{m['trial']}</td><td class='l'>{_e(m['status'] or '-')}</td>"
                   f"<td>{_e(fmt_bytes(m['predicted_peak_mem_bytes']))}</td>"
                   f"<td>{_e(fmt_bytes(m['measured_peak_mem_bytes']))}</td>"
                   f"<td class='l'>{_e(m['measured_source'] or '-')}</td>"
                   f"<td>{'-' if r is None else f'{r:.2f}'}</td>"
                   f"<td class='l'>{_e(m['predicted_basis'] or '-')}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def _search_text(doc: dict[str, Any]) -> str:
    s = doc["search"]
    usd = fmt_usd(s["usd"]) if s["usd"] is not None else "not priced"
    return f"{usd} ({s['gpu_hours']:.3f} rank-hours)"


def _card(label: str, o: dict[str, Any] | None, limits_text: str) -> str:
    if o is None:
        return (f"<div class='card'><div class='what'>{label} {limits_text}</div>"
                "<div class='big'>none</div><div class='what'>no option meets the limits</div></div>")
    return (f"<div class='card'><div class='what'>{label} {limits_text}</div>"
            f"<div class='big'>{fmt_usd(o['usd'])} &middot; {fmt_hours(o['hours'])}</div>"
            f"<div>trial {o['trial']}: {_e(config_summary(o['config']))}</div>"
            f"<div class='what'>on {_e(o['offer'])} ({_e(o['platform'])}), "
            f"<span class='tag {o['basis_kind']}'>{o['basis_kind']}</span></div></div>")


def render_html(doc: dict[str, Any]) -> str:
    """The whole page as one string: plotly.js inlined once, the report JSON embedded."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    def fig_div(fig, div_id: str) -> str:
        return pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                           config={"displaylogo": False, "responsive": True})

    c, lim = doc["counts"], doc["limits"]
    parts = []
    if lim["max_usd"] is not None:
        parts.append(f"budget {fmt_usd(lim['max_usd'])}")
    if lim["deadline_hours"] is not None:
        parts.append(f"deadline {fmt_hours(lim['deadline_hours'])}")
    limits_text = ("within " + " and ".join(parts)) if parts else "(no budget or deadline set)"
    notes = "".join(f"<p class='note'>note: {_e(n)}</p>" for n in doc["notes"])
    # "</" inside a <script> would end it early: escape it in the embedded JSON.
    doc_json = json.dumps(doc, default=str).replace("</", "<\\/")
    body = f"""
<h1>autotune report: study '{_e(doc['study'])}'</h1>
<div class='meta'>{c['total']} trials: {c['complete']} complete, {c['pruned']} pruned, {c['failed']} failed,
{c['running']} running &middot; search cost {_e(_search_text(doc))} &middot; storage {_e(doc['storage'] or '-')} &middot; catalog {_e(doc['catalog'])}
&middot; {_e(doc['catalog_note'] or '')} &middot; report schema v{doc['schema_version']}</div>
<div class='cards'>{_card('Cheapest', doc['cheapest'], limits_text)}{_card('Fastest', doc['fastest'], limits_text)}</div>
{notes}
{fig_div(pareto_figure(doc), 'pareto')}
<div class='grid'><div>{fig_div(throughput_figure(doc), 'throughput')}</div>
<div>{fig_div(memory_figure(doc), 'memory')}</div></div>
<h2>Pareto set of (config, offer)</h2>
<p class='note'>No option is both cheaper and faster than these. Cheapest first.</p>
{_option_table(doc['pareto'])}
<h2>Best per platform</h2>
{_option_table(doc['per_platform']) if doc['per_platform'] else "<p class='note'>none within the limits</p>"}
<h2>Trials that did not complete</h2>
{_failures_table(doc)}
<h2>Memory: predicted vs measured</h2>
{_memory_table(doc)}
<h2>Every priced option</h2>
{_option_table(doc['options'])}
<h2>Every trial</h2>
{_trials_table(doc['trials'])}
<script type="application/json" id="autotune-report">{doc_json}</script>
"""
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
            f"<title>autotune: {_e(doc['study'])}</title><style>{_CSS}</style>"
            f"<script type='text/javascript'>{get_plotlyjs()}</script></head>"
            f"<body>{body}</body></html>\n")


# ---------------------------------------------------------------------------------------
# PNG (matplotlib)
# ---------------------------------------------------------------------------------------


def write_pngs(doc: dict[str, Any], folder: Path) -> dict[str, Any]:
    """pareto.png, throughput.png, memory.png; returns where each Pareto point was drawn
    (pixels from the top-left) and stores the points in the PNG's text metadata."""
    import matplotlib

    matplotlib.use("Agg")  # no display, no browser
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    placed = _png_pareto(doc, folder / "pareto.png", plt)
    _png_throughput(doc, folder / "throughput.png", plt)
    _png_memory(doc, folder / "memory.png", plt)
    return {"pareto_px": placed}


def _png_pareto(doc: dict[str, Any], path: Path, plt) -> list[dict[str, Any]]:
    colours = _platform_colours(doc)
    opts = doc["options"]
    fig, ax = plt.subplots(figsize=(10, 6), dpi=100)
    for platform, colour in colours.items():
        pts = [o for o in opts if o["platform"] == platform and o["feasible"]]
        if pts:
            ax.scatter([o["hours"] for o in pts], [o["usd"] for o in pts], s=90, color=colour,
                       edgecolor="white", zorder=3, label=platform)
    bad = [o for o in opts if not o["feasible"]]
    if bad:
        ax.scatter([o["hours"] for o in bad], [o["usd"] for o in bad], s=80, marker="x",
                   color=INFEASIBLE_COLOUR, zorder=3, label="over budget or deadline")
    front = sorted(doc["pareto"], key=lambda o: o["hours"])
    if front:
        ax.step([o["hours"] for o in front], [o["usd"] for o in front], where="post", color=FRONT_COLOUR,
                linestyle=":", zorder=2)
        ax.scatter([o["hours"] for o in front], [o["usd"] for o in front], s=300, facecolors="none",
                   edgecolors=FRONT_COLOUR, linewidths=2, zorder=4, label="Pareto set")
    lim = doc["limits"]
    if lim["deadline_hours"] is not None:
        ax.axvline(lim["deadline_hours"], color="#D55E00", linestyle="--", label="deadline")
    if lim["max_usd"] is not None:
        ax.axhline(lim["max_usd"], color="#D55E00", linestyle="-.", label="budget")
    axes = pareto_axes(doc)
    if axes["log_x"]:
        ax.set_xscale("log")
    if axes["log_y"]:
        ax.set_yscale("log")
    ax.set_xlim(*axes["x"])
    ax.set_ylim(*axes["y"])
    for key, label, dy in _best_labels(doc):
        o = doc[key]
        if o:
            ax.annotate(f"{label}: #{o['trial']} {_hours_text(o['hours'])}, {fmt_usd(o['usd'])}",
                        (o["hours"], o["usd"]), xytext=(30, dy), textcoords="offset points",
                        arrowprops=dict(arrowstyle="->"), fontsize=9,
                        bbox=dict(boxstyle="round", fc="white", ec="#999"))
    ax.set_xlabel("hours to target")
    ax.set_ylabel("dollars to target")
    sub = _not_plotted(doc)
    ax.set_title("Hours vs dollars: each point one (config, offer); lower left is better"
                 + (f"\n{sub}" if sub else ""), fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    if opts:
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.canvas.draw()
    height = fig.canvas.get_width_height()[1]
    placed = []
    for o in front:
        x_px, y_px = ax.transData.transform((o["hours"], o["usd"]))
        placed.append({"trial": o["trial"], "offer": o["offer"], "hours": o["hours"], "usd": o["usd"],
                       "x_px": float(x_px), "y_px": float(height - y_px)})
    fig.savefig(path, dpi=100, metadata={"Title": f"autotune Pareto: {doc['study']}",
                                        "Description": json.dumps({"pareto": placed})})
    plt.close(fig)
    return placed


def _png_throughput(doc: dict[str, Any], path: Path, plt) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    done = [t for t in doc["trials"] if t["state"] == "COMPLETE" and t["tokens_per_s"]]
    ax.scatter([_gpus(t["config"]) for t in done], [t["tokens_per_s"] for t in done], color="#9ab",
               label="every completed trial", zorder=2)
    sc = doc["scaling"]
    if sc:
        xs = [s["num_gpus"] for s in sc]
        ax.plot(xs, [s["tokens_per_s"] for s in sc], "-o", color="#0072B2", lw=2.5, label="best per GPU count")
        ax.plot(xs, [sc[0]["tokens_per_s_per_gpu"] * n for n in xs], "--", color="#999",
                label=f"linear from {sc[0]['num_gpus']} GPU")
        for s in sc:
            ax.annotate(f"{100 * s['scaling_efficiency']:.0f}%", (s["num_gpus"], s["tokens_per_s"]),
                        xytext=(0, 8), textcoords="offset points", ha="center", fontsize=9)
        ax.set_xticks(sorted({_gpus(t["config"]) for t in done}))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("GPUs (ranks)")
    ax.set_ylabel("tokens/s (measured)")
    ax.set_title("Throughput vs GPU count (labels: scaling efficiency)", fontsize=11)
    ax.grid(True, alpha=0.3)
    if done:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _png_memory(doc: dict[str, Any], path: Path, plt) -> None:
    rows = _memory_rows(doc)
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.9 + 0.45 * len(rows))), dpi=100)
    gib = 1024 ** 3
    labels = [_mem_label(t) for t in rows]
    used = [(_mem_used(t) or 0) / gib for t in rows]
    free = [(t["headroom_bytes"] or 0) / gib for t in rows]
    ax.barh(labels, used, color="#D55E00", label="measured peak")
    ax.barh(labels, free, left=used, color="#cfe8cf", label="headroom (free)")
    for i, t in enumerate(rows):
        right = max(used[i], (t["predicted_peak_mem_bytes"] or 0) / gib)
        ax.annotate(_mem_text(t), (right, i), xytext=(8, 0), textcoords="offset points", va="center",
                    fontsize=8)
        if t["predicted_peak_mem_bytes"]:
            ax.plot(t["predicted_peak_mem_bytes"] / gib, i, "kD", label="predicted peak" if i == 0 else None)
    ax.invert_yaxis()
    ax.set_xlabel("GiB")
    ax.set_title("Memory per config: measured peak and headroom per rank", fontsize=11)
    if rows:
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------
# Writing, all or nothing
# ---------------------------------------------------------------------------------------


def write_html(doc: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    _check_parent(path)
    text = render_html(doc)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_report_dir(doc: dict[str, Any], folder: str | Path) -> Path:
    """report.html, report.json and the PNGs into `folder`, replacing it whole."""
    folder = Path(folder)
    _check_parent(folder)
    from autotune.errors import UserError

    if folder.exists() and not folder.is_dir():
        raise UserError(f"--out {folder} is a file", fix="give a folder path")
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        chmod_like_umask(tmp)
        (tmp / "report.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
        write_pngs(doc, tmp)
        (tmp / "report.html").write_text(render_html(doc), encoding="utf-8")
        replace_dir(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def chmod_like_umask(folder: Path) -> None:
    """mkdtemp makes a 0700 folder; the final one should look like any folder the user makes."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(folder, 0o777 & ~mask)


def replace_dir(new: Path, target: Path) -> None:
    """Put folder `new` at `target`; an existing `target` is moved aside, then removed."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old.{os.getpid()}")
        os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        if old is not None:
            os.rename(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _check_parent(path: Path) -> None:
    from autotune.errors import UserError

    if not path.parent.is_dir():
        raise UserError(f"folder '{path.parent}' does not exist (for {path})",
                        fix="create it first or choose another path")
