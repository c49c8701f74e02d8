"""The report's plots as PNG files (matplotlib, no browser needed), and what they share with
the HTML page's interactive figures (autotune.report.figures): colours, axes, labels.

    write_pngs(doc, Path("report/"))      # pareto.png, throughput.png, memory.png
    pareto_axes(doc)                       # scale and range of the Pareto plot's axes

`doc` is `autotune.report.build.collect(...)`.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from autotune.format import fmt_bytes
from autotune.report.labels import config_summary, no_option_text
from autotune.report.placement import (
    LABEL_OFFSETS_PT,
    NEAR_PX,
    Label,
    best_label_text,
    best_labels,
    box_score,
    merge_near,
)

PNG_NAMES = ("pareto.png", "throughput.png", "memory.png")
SCALING_TITLE = "Throughput vs GPU count (labels: scaling efficiency of one per-rank config)"
NO_SCALING_TITLE = ("Throughput vs GPU count (no scaling efficiency: no two trials differ in GPU "
                    "count alone)")
# Colours a reader can tell apart (Okabe-Ito, colour-blind safe), one per platform.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
INFEASIBLE_COLOUR = "#9a9a9a"
FRONT_COLOUR = "#222222"


def platform_colours(doc: dict[str, Any]) -> dict[str, str]:
    platforms = sorted({o["platform"] for o in doc["options"]})
    return {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(platforms)}


def _log_axis(values: list[float]) -> bool:
    """Log scale whenever every value is positive: hours and dollars span decades (one slow
    config squashes the rest on a linear axis), and equal ratios read as equal distances."""
    return bool(values) and all(v > 0 for v in values)


def point_labels(doc: dict[str, Any]) -> list[tuple[float, float, str]]:
    """(hours, dollars, "#3 #7"): every plotted point named by its trial number; points that
    coincide (one config on several offers at one price, or reused trials) share a label."""
    groups: dict[tuple[float, float], list[int]] = {}
    for o in doc["options"]:
        if o["hours"] > 0 and o["usd"] > 0:
            key = (float(f"{o['hours']:.3g}"), float(f"{o['usd']:.3g}"))
            if o["trial"] not in groups.setdefault(key, []):
                groups[key].append(o["trial"])
    return [(h, u, " ".join(f"#{n}" for n in sorted(ns))) for (h, u), ns in groups.items()]


def not_plotted(doc: dict[str, Any]) -> str:
    """What the Pareto plot leaves out: the trials with no hours or dollars, and where no
    option is left at all (none completed, or none on the offers asked for), why."""
    parts = [f"{g['count']} {g['state'].lower()} ({g['status']})" for g in doc["failures"]]
    text = ("not plotted (no hours or dollars): " + ", ".join(parts)) if parts else ""
    return "; ".join(filter(None, [no_option_text(doc) if not doc["options"] else "", text]))


BEST_LABEL_STYLE: dict[str, Any] = dict(arrowprops=dict(arrowstyle="->"), fontsize=9, zorder=6,
                                        bbox=dict(boxstyle="round", fc="white", ec="#999"))
# Where a point's "#3" label may go, in points from it: above right first, then the other corners.
POINT_LABEL_OFFSETS_PT = ((5, 4), (-5, 4), (5, -4), (-5, -4))
POINT_LABEL_STYLE: dict[str, Any] = dict(fontsize=8, color="#333", zorder=5)


def pareto_axes(doc: dict[str, Any]) -> dict[str, Any]:
    """Scale and range of both axes of the Pareto plot, the limits included, with room around
    the points (x1.6 either side on a log axis, a quarter of the span on a linear one)."""
    lim = doc["limits"]
    out: dict[str, Any] = {}
    for axis, key, limit in (("x", "hours", lim["deadline_hours"]), ("y", "usd", lim["max_usd"])):
        vals = [o[key] for o in doc["options"] if o[key] > 0] + ([limit] if limit else [])
        log = _log_axis(vals)
        if not vals:
            lo, hi = 0.0, 1.0
        elif log:
            lo, hi = min(vals) / 1.6, max(vals) * 1.6
        else:
            lo, hi = min(vals), max(vals)
            span = (hi - lo) or max(abs(hi), 1e-9)
            lo, hi = max(0.0, lo - 0.25 * span), hi + 0.25 * span
        out[axis], out[f"log_{axis}"] = (lo, hi), log
    return out


def gpus_of(cfg: dict[str, Any]) -> int:
    return (cfg.get("num_gpus") or 0) * (cfg.get("num_nodes") or 1)


def memory_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in doc["trials"] if t["peak_mem_bytes"] or t["predicted_peak_mem_bytes"]]


def mem_used(t: dict[str, Any]) -> int | None:
    """What was compared with the capacity: the headroom is capacity - used."""
    if t["mem_capacity_bytes"] is not None and t["headroom_bytes"] is not None:
        return t["mem_capacity_bytes"] - t["headroom_bytes"]
    return t["peak_mem_bytes"]


def memory_bars_gib(rows: list[dict[str, Any]]) -> tuple[list[float], list[float], list[float]]:
    """(peak up to the limit, peak over the limit, headroom) of each memory row, in GiB, none
    negative. A run over its limit (an OOM: negative headroom) shows the part over it as such:
    drawn as "headroom" from its peak, it went leftwards (PNG) or left of zero (HTML) and read
    as free memory."""
    gib = 1024 ** 3
    used = [(mem_used(t) or 0) / gib for t in rows]
    cap = [(t["mem_capacity_bytes"] or 0) / gib for t in rows]
    within = [min(u, c) if c else u for u, c in zip(used, cap)]
    over = [u - c if c and u > c else 0.0 for u, c in zip(used, cap)]
    free = [max((t["headroom_bytes"] or 0) / gib, 0.0) for t in rows]
    return within, over, free


def mem_text(t: dict[str, Any], long: bool = False) -> str:
    if not t["peak_mem_bytes"]:
        pred = t["predicted_peak_mem_bytes"]
        return "not measured" + (f" (predicted {fmt_bytes(pred)})" if pred else "")
    s = fmt_bytes(mem_used(t))
    if t["mem_capacity_bytes"]:
        s += f" of {fmt_bytes(t['mem_capacity_bytes'])}"
        if long:
            s += f" ({t['mem_capacity_source']})"
    return s


def mem_label(t: dict[str, Any]) -> str:
    ended = "" if t["status"] in (None, "ok") else f" [{t['status']}]"
    return f"#{t['number']} {config_summary(t['config'])}{ended}"



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


def _set_pareto_axes(ax, axes: dict[str, Any]) -> None:
    """Log axes where the figures span decades, with plain tick labels; the plot's ranges."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for log, axis, text in ((axes["log_x"], ax.xaxis, lambda v, _: f"{v:g} h"),
                            (axes["log_y"], ax.yaxis, lambda v, _: f"${v:,.4g}")):
        if log:  # plain figures at 1, 2, 5 x 10^k, not 10^k notation
            (ax.set_xscale if axis is ax.xaxis else ax.set_yscale)("log")
            axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FuncFormatter(text))
            axis.set_minor_formatter(NullFormatter())
    ax.set_xlim(*axes["x"])
    ax.set_ylim(*axes["y"])


def _png_pareto(doc: dict[str, Any], path: Path, plt) -> list[dict[str, Any]]:
    colours = platform_colours(doc)
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
    _set_pareto_axes(ax, axes)
    ax.set_xlabel("hours to target" + (" (log)" if axes["log_x"] else ""))
    ax.set_ylabel("dollars to target" + (" (log)" if axes["log_y"] else ""))
    sub = not_plotted(doc)
    ax.set_title("Hours vs dollars: each point one (config, offer), #trial; lower left is better"
                 + "".join(f"\n{line}" for line in textwrap.wrap(sub, 120)), fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    if opts:
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.canvas.draw()
    height = fig.canvas.get_width_height()[1]
    points_px = [ax.transData.transform((o["hours"], o["usd"])) for o in opts]
    named = merge_near(point_labels(doc), lambda h, u: ax.transData.transform((h, u)))
    label_boxes = _point_labels_png(fig, ax, named, points_px)
    boxes = _best_labels_png(fig, ax, doc, points_px, label_boxes)
    placed = []
    for o in front:
        x_px, y_px = ax.transData.transform((o["hours"], o["usd"]))
        placed.append({"trial": o["trial"], "offer": o["offer"], "hours": o["hours"], "usd": o["usd"],
                       "x_px": float(x_px), "y_px": float(height - y_px)})
    labels = [{"hours": h, "usd": u, "text": t, "box_px": _top_left(b, height)}
              for (h, u, t), b in zip(named, label_boxes)]
    # Pixels from the top-left, as "pareto": every plotted option, and the best labels' boxes.
    points = [{"trial": o["trial"], "x_px": float(x), "y_px": float(height - y)} for o, (x, y) in zip(opts, points_px)]
    best = [{"key": b["key"], "box_px": _top_left(b["box"], height)} for b in boxes]
    fig.savefig(path, dpi=100, metadata={"Title": f"autotune Pareto: {doc['study']}", "Description": json.dumps(
        {"pareto": placed, "labels": labels, "points": points, "best_labels": best,
         "log_x": axes["log_x"], "log_y": axes["log_y"]})})
    plt.close(fig)
    return placed


def _top_left(box: tuple[float, ...], height: float) -> list[float]:
    """A display box (x0, y0, x1, y1; y up) in image pixels from the top left (y down)."""
    return [box[0], height - box[3], box[2], height - box[1]]


def _point_labels_png(fig, ax, named: list[Label], points_px) -> list[tuple[float, ...]]:
    """Each point's "#3" label at the first of POINT_LABEL_OFFSETS_PT that covers no other
    point's marker and no label placed before it; returns their boxes (display pixels)."""
    boxes: list[tuple[float, ...]] = []
    for hours, usd, text in named:
        x, y = ax.transData.transform((hours, usd))
        others = [q for q in points_px if abs(q[0] - x) > NEAR_PX or abs(q[1] - y) > NEAR_PX]
        boxes.append(_place_label(fig, ax, (hours, usd), text, POINT_LABEL_OFFSETS_PT, others, boxes,
                                  **POINT_LABEL_STYLE))
    return boxes


def _best_labels_png(fig, ax, doc: dict[str, Any], points_px, label_boxes) -> list[dict[str, Any]]:
    """The cheapest and fastest labels (best_labels), each placed by _place_label clear of the
    points, the points' labels and each other; returns [{"key", "box": display pixels}]."""
    boxes: list[dict[str, Any]] = []
    for key, label in best_labels(doc):
        o = doc[key]
        if o:
            text = best_label_text(label, o)
            box = _place_label(fig, ax, (o["hours"], o["usd"]), text, LABEL_OFFSETS_PT, points_px,
                               [*label_boxes, *(b["box"] for b in boxes)], **BEST_LABEL_STYLE)
            boxes.append({"key": key, "box": box})
    return boxes


def _place_label(fig, ax, xy: tuple[float, float], text: str, offsets, points_px, taken,
                 **style) -> tuple[float, ...]:
    """Annotate `xy` with `text` at the first of `offsets` (points; the text leans away from
    the point) whose box covers none of `points_px` (display pixels, with a marker's radius of
    margin), lies inside the axes and clears the boxes in `taken`; where none does, at the one
    that covers the fewest. Returns the box (x0, y0, x1, y1, display pixels)."""
    renderer = fig.canvas.get_renderer()
    e = ax.get_window_extent(renderer)
    inside = (e.x0, e.y0, e.x1, e.y1)
    best = None
    for dx, dy in offsets:
        a = ax.annotate(text, xy, xytext=(dx, dy), textcoords="offset points", ha="left" if dx > 0 else "right",
                        va="top" if dy < 0 else "bottom", **style)
        a.draw(renderer)  # lays the box out around the text (savefig draws everything again)
        patch = a.get_bbox_patch()
        b = (patch if patch is not None else a).get_window_extent(renderer)
        box = (b.x0, b.y0, b.x1, b.y1)
        score = box_score(box, points_px, inside, taken)
        if best is None or score < best[0]:
            if best is not None:
                best[1].remove()
            best = (score, a, box)
        else:
            a.remove()
        if score == 0:
            break
    assert best is not None
    return best[2]


def _png_throughput(doc: dict[str, Any], path: Path, plt) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    done = [t for t in doc["trials"] if t["state"] == "COMPLETE" and t["tokens_per_s"]]
    ax.scatter([gpus_of(t["config"]) for t in done], [t["tokens_per_s"] for t in done], color="#9ab",
               label="every completed trial", zorder=2)
    sc = doc["scaling"]
    if sc:
        xs = [s["num_gpus"] for s in sc]
        ax.plot(xs, [s["tokens_per_s"] for s in sc], "-o", color="#0072B2", lw=2.5,
                label="one per-rank config, more GPUs")
        ax.plot(xs, [sc[0]["tokens_per_s_per_gpu"] * n for n in xs], "--", color="#999",
                label=f"linear from {sc[0]['num_gpus']} GPU")
        for s in sc:
            ax.annotate(f"{100 * s['scaling_efficiency']:.0f}%", (s["num_gpus"], s["tokens_per_s"]),
                        xytext=(0, 8), textcoords="offset points", ha="center", fontsize=9)
    if done:  # GPU counts are whole: no tick at 1.2 GPUs
        ax.set_xticks(sorted({gpus_of(t["config"]) for t in done}))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("GPUs (ranks)")
    ax.set_ylabel("tokens/s (measured)")
    # Wrapped: the title without scaling ran past the 7-inch figure's right edge.
    ax.set_title("\n".join(textwrap.wrap(SCALING_TITLE if sc else NO_SCALING_TITLE, 80)), fontsize=11)
    ax.grid(True, alpha=0.3)
    if done:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _png_memory(doc: dict[str, Any], path: Path, plt) -> None:
    rows = memory_rows(doc)
    labels = [mem_label(t) for t in rows]
    # Wider with longer config labels (~0.075 inch a character at this size), so that the bars
    # keep about 5 inches; the labels of FSDP, offload and TP configs run to 70+ characters.
    width_in = max(9.0, 5.0 + 0.075 * max((len(label) for label in labels), default=0))
    # Constrained layout, so that the legend goes under the plot: inside it ("lower right") it
    # covered the last bar and its figure wherever the bars fill the width (a sweep under a limit).
    fig, ax = plt.subplots(figsize=(width_in, max(3.0, 1.3 + 0.45 * len(rows))), dpi=100, layout="constrained")
    gib = 1024 ** 3
    within, over, free = memory_bars_gib(rows)
    used = [w + o for w, o in zip(within, over)]
    ax.barh(labels, within, color="#D55E00", label="measured peak")
    if any(over):
        ax.barh(labels, over, left=within, color="#7a0000", hatch="///", edgecolor="white",
                label="measured peak over the limit")
    ax.barh(labels, free, left=used, color="#cfe8cf", label="headroom (free)")
    for i, t in enumerate(rows):
        # Right of the bar, its headroom and the predicted marker: on the headroom it was hard to
        # read, and the marker sat on its first figure.
        right = max(used[i] + free[i], (t["predicted_peak_mem_bytes"] or 0) / gib)
        ax.annotate(mem_text(t), (right, i), xytext=(10, 0), textcoords="offset points", va="center",
                    fontsize=8, annotation_clip=False)
        if t["predicted_peak_mem_bytes"]:
            ax.plot(t["predicted_peak_mem_bytes"] / gib, i, "kD", label="predicted peak" if i == 0 else None)
    ax.invert_yaxis()
    ax.set_xlabel("GiB")
    # At the bars' right edge, extending left over the labels: centred over the bars, it ran
    # past the figure's right edge where the labels are long.
    ax.set_title("Memory per config: measured peak and headroom per rank", fontsize=11, loc="right")
    if rows:
        fig.legend(fontsize=8, loc="outside lower center", ncols=4)
    fig.savefig(path, dpi=100)
    plt.close(fig)
