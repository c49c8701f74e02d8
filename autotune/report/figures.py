"""The report's interactive figures (plotly) for the HTML page: the Pareto plot of hours
against dollars, throughput against GPU count, memory per config.

    fig = pareto_figure(doc)        # plotly Figure; the page inlines plotly.js (no network)

`doc` is `autotune.report.build.collect(...)`.
"""

from __future__ import annotations

import html
import math
import textwrap
from typing import Any

from autotune.format import fmt_hours, fmt_usd
from autotune.report.labels import config_summary
from autotune.report.placement import LABEL_OFFSETS_PT, Box, best_label_text, best_labels, box_score, merge_near
from autotune.report.plots import (
    FRONT_COLOUR,
    INFEASIBLE_COLOUR,
    NO_SCALING_TITLE,
    SCALING_TITLE,
    gpus_of,
    mem_label,
    mem_text,
    memory_bars_gib,
    memory_rows,
    not_plotted,
    pareto_axes,
    platform_colours,
    point_labels,
)


def _add_limits(fig, limits: dict[str, Any], ax: dict[str, Any]) -> None:
    """The deadline and the budget as line traces, not shapes: shapes on a log axis take log10
    coordinates, and a trace also gets a legend entry that names the limit."""
    import plotly.graph_objects as go

    (x_lo, x_hi), (y_lo, y_hi) = ax["x"], ax["y"]
    if limits["deadline_hours"] is not None:
        fig.add_trace(go.Scatter(x=[limits["deadline_hours"]] * 2, y=[y_lo, y_hi], mode="lines",
                                 name=f"deadline {fmt_hours(limits['deadline_hours'], days_beside=True)}",
                                 line=dict(color="#D55E00", dash="dash"), hoverinfo="name"))
    if limits["max_usd"] is not None:
        fig.add_trace(go.Scatter(x=[x_lo, x_hi], y=[limits["max_usd"]] * 2, mode="lines",
                                 name=f"budget {fmt_usd(limits['max_usd'])}",
                                 line=dict(color="#D55E00", dash="dashdot"), hoverinfo="name"))


def pareto_figure(doc: dict[str, Any]):
    import plotly.graph_objects as go

    colours = platform_colours(doc)
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
            marker=dict(symbol="circle-open", size=PARETO_RING_PX, color=FRONT_COLOUR, line=dict(width=2)),
            text=[_hover(o) for o in front], hoverinfo="text"))
    ax = pareto_axes(doc)
    (x_lo, x_hi), (y_lo, y_hi) = ax["x"], ax["y"]
    _add_limits(fig, doc["limits"], ax)
    log_x, log_y = ax["log_x"], ax["log_y"]
    # Points within a few pixels of each other (in the assumed plot area) share one label,
    # "#0 #1", as in the PNG: two labels there overlapped.
    width, height = PLOT_AREA_PX
    labels = merge_near(point_labels(doc), lambda h, u: (_px(h, ax["x"], log_x, width), _px(u, ax["y"], log_y, height)))
    if labels:  # every point named by its trial number, on the side free of other points
        # Drawn beside an invisible marker as wide as the Pareto set's ring, so that plotly sets
        # the text off by its radius: a text-only trace put it a few pixels from the point, under
        # the ring of a point of the Pareto set.
        fig.add_trace(go.Scatter(x=[h for h, _, _ in labels], y=[u for _, u, _ in labels], mode="markers+text",
                                 marker=dict(size=PARETO_RING_PX, opacity=0), text=[t for _, _, t in labels],
                                 textposition=text_positions(labels, ax), textfont=dict(size=11, color="#333"),
                                 hoverinfo="skip", showlegend=False))
    for o, text, (dx, dy) in best_label_offsets(doc, ax):
        # Annotations on a log axis take log10 of the value (plotly's convention).
        fig.add_annotation(x=math.log10(o["hours"]) if log_x else o["hours"],
                           y=math.log10(o["usd"]) if log_y else o["usd"], text=text,
                           showarrow=True, arrowhead=2, ax=dx, ay=dy, bgcolor="white", bordercolor="#999")
    sub = not_plotted(doc)
    fig.update_layout(
        title=dict(text="Hours to target vs dollars: each point is one (config, offer), #trial; lower left is better"
                   + (f"<br><sup>{html.escape(sub)}</sup>" if sub else "")),
        xaxis=dict(title="hours to target" + (" (log)" if log_x else ""), type="log" if log_x else "linear",
                   range=_plotly_range(x_lo, x_hi, log_x), ticksuffix=" h"),
        yaxis=dict(title="dollars to target" + (" (log)" if log_y else ""), type="log" if log_y else "linear",
                   range=_plotly_range(y_lo, y_hi, log_y), tickprefix="$"),
        template="plotly_white", height=520, legend=dict(title="platform"),
        margin=dict(l=70, r=30, t=80, b=60))
    return fig


# The diameter of the ring around a point of the Pareto set, pixels; the points' labels sit
# outside it (text_positions).
PARETO_RING_PX = 20
# The HTML Pareto plot's drawing area, assumed for placing labels (the browser lays the page
# out and its width follows the window): about 900 x 380 pixels inside a 520-pixel figure.
PLOT_AREA_PX = (900.0, 380.0)
TEXT_POSITIONS = ("top right", "top left", "bottom right", "bottom left")


def text_positions(labels: list[tuple[float, float, str]], ax: dict[str, Any]) -> list[str]:
    """Each "#3" label's plotly textposition: the first of TEXT_POSITIONS whose text (11-pixel
    font, ~7 pixels a character) covers no other point's marker and stays in the plot area."""
    width, height = PLOT_AREA_PX
    pts = [(_px(h, ax["x"], ax["log_x"], width), _px(u, ax["y"], ax["log_y"], height)) for h, u, _ in labels]
    out = []
    for (x, y), (_, _, text) in zip(pts, labels):
        w, h = 7.0 * len(text) + 4, 14.0
        off = PARETO_RING_PX / 2  # plotly sets the text off by the (invisible) marker's radius
        others = [q for q in pts if q != (x, y)]
        for pos in TEXT_POSITIONS:
            x0 = x + off if pos.endswith("right") else x - off - w
            y0 = y + off if pos.startswith("top") else y - off - h
            if box_score((x0, y0, x0 + w, y0 + h), others, (0.0, 0.0, width, height), []) == 0:
                out.append(pos)
                break
        else:
            out.append(TEXT_POSITIONS[0])
    return out


def _px(value: float, lo_hi: tuple[float, float], log: bool, size: float) -> float:
    """Where `value` lies on an axis of `size` pixels (PLOT_AREA_PX), from its low end."""
    lo, hi = lo_hi
    if log:
        value, lo, hi = math.log10(value), math.log10(lo), math.log10(hi)
    return (value - lo) / ((hi - lo) or 1.0) * size


BestLabel = tuple[dict[str, Any], str, tuple[float, float]]  # option, its HTML text, plotly's (ax, ay)


def best_label_offsets(doc: dict[str, Any], ax: dict[str, Any]) -> list[BestLabel]:
    """(option, text, plotly's (ax, ay) in pixels) of the cheapest / fastest labels: the first of
    the PNG's LABEL_OFFSETS_PT whose box (centred on the arrow's tail, ~7 pixels a character) covers
    no plotted point, stays in the plot area and clears the label placed before it. A fixed place
    (right and below the cheapest, above the fastest) could cover a neighbour, as the PNG's did."""
    width, height = PLOT_AREA_PX
    pts = [(_px(o["hours"], ax["x"], ax["log_x"], width), _px(o["usd"], ax["y"], ax["log_y"], height))
           for o in doc["options"]]
    out: list[BestLabel] = []
    taken: list[Box] = []
    for key, label in best_labels(doc):
        o = doc[key]
        if not o:
            continue
        text = best_label_text(label, o)
        x, y = _px(o["hours"], ax["x"], ax["log_x"], width), _px(o["usd"], ax["y"], ax["log_y"], height)
        w, h = 7.0 * len(text) + 10, 20.0
        best = None
        for dx_pt, dy_pt in LABEL_OFFSETS_PT:
            dx, dy = dx_pt * 100 / 72, dy_pt * 100 / 72  # pixels, as the PNG's at 100 dpi
            cx, cy = x + dx + (w / 2 if dx > 0 else -w / 2), y + dy  # y up here
            box = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
            free = box_score(box, pts, (0.0, 0.0, width, height), taken) == 0
            if best is None or free:  # where no place is free, the first
                best = (cx - x, -dy, box)  # plotly's ay is pixels down
            if free:
                break
        assert best is not None
        taken.append(best[2])
        out.append((o, f"<b>{label}</b>{text[len(label):]}", (best[0], best[1])))
    return out


def _plotly_range(lo: float, hi: float, log: bool) -> list[float]:
    return [math.log10(lo), math.log10(hi)] if log and lo > 0 else [lo, hi]


def _hover(o: dict[str, Any]) -> str:
    tps = f"{o['tokens_per_s']:,.0f} tokens/s" if o.get("tokens_per_s") else "tokens/s not measured"
    return (f"trial {o['trial']}: {html.escape(config_summary(o['config']))}<br>"
            f"{html.escape(o['offer'])} ({html.escape(o['platform'])})<br>"
            f"{fmt_hours(o['hours'], days_beside=True)}, {fmt_usd(o['usd'])}, {tps}<br>figures: {o['basis_kind']}")


def throughput_figure(doc: dict[str, Any]):
    import plotly.graph_objects as go

    fig = go.Figure()
    done = [t for t in doc["trials"] if t["state"] == "COMPLETE" and t["tokens_per_s"]]
    fig.add_trace(go.Scatter(
        x=[gpus_of(t["config"]) for t in done], y=[t["tokens_per_s"] for t in done], mode="markers",
        name="every completed trial", marker=dict(color="#9ab", size=9),
        text=[f"#{t['number']} {html.escape(config_summary(t['config']))}" for t in done], hoverinfo="text+y"))
    sc = doc["scaling"]
    if sc:
        fig.add_trace(go.Scatter(
            x=[s["num_gpus"] for s in sc], y=[s["tokens_per_s"] for s in sc], mode="lines+markers+text",
            name="one per-rank config, more GPUs", line=dict(color="#0072B2", width=3), marker=dict(size=11),
            text=[f"{100 * s['scaling_efficiency']:.0f}%" for s in sc], textposition="top center"))
        n0, per0 = sc[0]["num_gpus"], sc[0]["tokens_per_s_per_gpu"]
        xs = [s["num_gpus"] for s in sc]
        fig.add_trace(go.Scatter(x=xs, y=[per0 * n for n in xs], mode="lines", name=f"linear from {n0} GPU",
                                 line=dict(color="#999", dash="dash")))
    fig.update_layout(
        # Wrapped: the figure takes half the page, where the one-line title ran past its edge.
        title="<br>".join(textwrap.wrap(SCALING_TITLE if sc else NO_SCALING_TITLE, 56)),
        xaxis=dict(title="GPUs (ranks)", tickmode="array", tickvals=sorted({gpus_of(t["config"]) for t in done})),
        yaxis=dict(title="tokens/s (measured)", rangemode="tozero"),
        template="plotly_white", height=420, margin=dict(l=70, r=30, t=80, b=60))
    return fig


def memory_figure(doc: dict[str, Any]):
    import plotly.graph_objects as go

    rows = memory_rows(doc)
    labels = [mem_label(t) for t in rows]
    gib = 1024 ** 3
    within, over, free = memory_bars_gib(rows)
    used = [w + o for w, o in zip(within, over)]
    fig = go.Figure()
    # Unmeasured rows (never launched) show their predicted diamond; their words go to hover.
    texts = [mem_text(t) if t["peak_mem_bytes"] else "" for t in rows]
    hover = [mem_text(t, long=True) for t in rows]
    fig.add_trace(go.Bar(y=labels, x=within, orientation="h", name="measured peak", marker_color="#D55E00",
                         hovertext=hover, hoverinfo="text"))
    if any(over):
        fig.add_trace(go.Bar(y=labels, x=over, orientation="h", name="measured peak over the limit",
                             marker=dict(color="#7a0000", pattern=dict(shape="/")), hovertext=hover,
                             hoverinfo="text"))
    fig.add_trace(go.Bar(y=labels, x=free, orientation="h", name="headroom (free)", marker_color="#cfe8cf",
                         hovertext=hover, hoverinfo="text"))
    predicted = [(t["predicted_peak_mem_bytes"] or 0) / gib for t in rows]
    pred = [(lab, p) for lab, p in zip(labels, predicted) if p]
    if pred:
        fig.add_trace(go.Scatter(y=[p[0] for p in pred], x=[p[1] for p in pred], mode="markers",
                                 name="predicted peak", marker=dict(symbol="diamond", size=12, color="#000")))
    ends = [max(u + f, p) for u, f, p in zip(used, free, predicted)]
    x_max = 2.2 * max(ends + [1e-3])
    # The figures right of each bar, its headroom and its predicted marker, never rotated: as the
    # bar's "outside" text they began at the bar's end, where a predicted marker near the limit
    # covered their first digits.
    fig.add_trace(go.Scatter(y=labels, x=[e + 0.04 * x_max for e in ends], mode="text", text=texts,
                             textposition="middle right", cliponaxis=False, showlegend=False, hoverinfo="skip"))
    fig.update_layout(barmode="stack", title="Memory per config: measured peak and headroom per rank",
                      xaxis=dict(title="GiB per rank", range=[0, x_max]),
                      yaxis=dict(autorange="reversed"),  # trial 0 on top, as in the PNG and the tables
                      template="plotly_white", legend=dict(orientation="h", y=-0.2, yanchor="top"),
                      height=max(300, 140 + 40 * len(rows)), margin=dict(l=260, r=30, t=60, b=110))
    return fig
