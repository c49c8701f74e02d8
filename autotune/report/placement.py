"""Where the Pareto plots' labels go, in both figures (the PNG, autotune.report.plots, and the
HTML page, autotune.report.figures): which points get a best label and its words, the offsets
tried, the rule that scores a place, and labels of near points joined.

    for key, label in best_labels(doc): text = best_label_text(label, doc[key])
    box_score(box, points, area, taken) == 0            # a free place
"""

from __future__ import annotations

from typing import Any

from autotune.format import fmt_hours, fmt_usd

# Points of the PNG closer than this (display pixels) share one label: their markers (90 pt^2,
# ~9 px across) overlap, and two labels there were drawn over each other ("#2" on "#12").
NEAR_PX = 9.0
Label = tuple[float, float, str]  # (hours, dollars, "#3 #7")


def merge_near(labels: list[Label], to_px, near_px: float = NEAR_PX) -> list[Label]:
    """point_labels with the labels of points within `near_px` of an earlier one (`to_px`:
    (hours, usd) -> display pixels) joined onto that one's: "#2 #12" once, at the first."""
    out: list[tuple[float, float, str, Any]] = []
    for hours, usd, text in labels:
        px = to_px(hours, usd)
        i = next((i for i, (*_, q) in enumerate(out) if abs(q[0] - px[0]) <= near_px and abs(q[1] - px[1]) <= near_px),
                 None)
        if i is None:
            out.append((hours, usd, text, px))
        else:
            h, u, t, q = out[i]
            out[i] = (h, u, " ".join(sorted({*t.split(), *text.split()}, key=lambda n: int(n[1:]))), q)
    return [(h, u, t) for h, u, t, _ in out]


# Where the PNG's cheapest / fastest label may go, in points from its point, in order of
# preference: below right first (no option within limits is cheaper than the cheapest, so below
# it is empty), then the other three corners, then the same corners further out (the arrow still
# names the point). The first that covers no plotted point, stays inside the plot and clears the
# other labels is taken (_place_label). The four near corners alone left a fastest label over a
# neighbour where a slower option sat just below right of it and the plot's edge just left.
LABEL_OFFSETS_PT = tuple((sx * dx, sy * dy) for dx, dy in ((30, 40), (30, 70), (60, 40), (30, 100), (90, 70))
                         for sx, sy in ((1, -1), (1, 1), (-1, -1), (-1, 1)))


def best_labels(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, label) of the points to name; one label when cheapest is also fastest. Each figure
    places them by what they cover: the PNG by _place_label over LABEL_OFFSETS_PT, the HTML by
    autotune.report.figures.best_label_offsets over the same offsets."""
    c, f = doc["cheapest"], doc["fastest"]
    if c and f and (c["trial"], c["offer"]) == (f["trial"], f["offer"]):
        return [("cheapest", "cheapest and fastest")]
    return [("cheapest", "cheapest"), ("fastest", "fastest")]


def best_label_text(label: str, option: dict[str, Any]) -> str:
    """"cheapest: #3 9.0 h, $0.8067": a best label's words, in both figures."""
    return f"{label}: #{option['trial']} {fmt_hours(option['hours'], days_beside=True)}, {fmt_usd(option['usd'])}"


Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels, y up


def box_score(box: Box, points: list, area: Box, taken: list[Box], margin: float = 6.0) -> int:
    """How bad a label's place is: the points it covers (with a marker's `margin`), plus 1000
    if it leaves `area` or overlaps a box in `taken`; 0 is a free place. One rule for every
    label of both figures (_place_label, autotune.report.figures)."""
    x0, y0, x1, y1 = box
    covered = sum(1 for x, y in points if x0 - margin <= x <= x1 + margin and y0 - margin <= y <= y1 + margin)
    out = not (area[0] <= x0 and x1 <= area[2] and area[1] <= y0 and y1 <= area[3])
    clash = any(x0 < t[2] and t[0] < x1 and y0 < t[3] and t[1] < y1 for t in taken)
    return covered + 1000 * (out or clash)
