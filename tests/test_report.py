"""The report of a REAL small study (tests/report_study.py: a real `autotune sweep` of 3 tiny
trials): the versioned JSON document, the rich tables, the HTML page and the PNG plots."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autotune.report.options import pareto_set
from autotune.report.schema import REPORT_SCHEMA_VERSION, OptionRow, ReportDoc, report_json_schema
from tests.report_study import TEST_SPOT_OFFER, ddp_study

pytestmark = pytest.mark.e2e

DOCS_SCHEMA = Path(__file__).resolve().parent.parent / "docs" / "report_schema.md"


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return ddp_study(tmp_path_factory)


@pytest.fixture(scope="module")
def doc(study) -> dict:
    p = study.cli("report", "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_sweep_prints_one_line_per_finished_trial(study):
    lines = [ln for ln in study.sweep_stdout.splitlines() if re.match(r"\s+trial\s+\d+\s", ln)]
    # --trials 3 launches three; a proposal of a measured config prints a "reused" line
    assert len([ln for ln in lines if " reused " not in ln]) == 3, study.sweep_stdout


def test_json_report_validates_against_the_documented_schema(doc):
    # The schema shipped in docs/ is exactly the one the models generate ...
    text = DOCS_SCHEMA.read_text()
    shipped = json.loads(text[text.index("```json") + len("```json"):text.rindex("```")])
    assert shipped == json.loads(json.dumps(report_json_schema())), \
        "docs/report_schema.md is stale: regenerate with python -m autotune.report.schema"
    assert f"`schema_version` is `{REPORT_SCHEMA_VERSION}`" in text
    # ... and a real report is valid under it (extra keys are refused by the models).
    parsed = ReportDoc.model_validate(doc)
    assert parsed.schema_version == REPORT_SCHEMA_VERSION == doc["schema_version"]
    bad = json.loads(json.dumps(doc))
    bad["pareto"][0]["dollars"] = 1.0  # a key the schema does not know
    with pytest.raises(ValueError):
        ReportDoc.model_validate(bad)


def test_report_content_is_the_real_measurements(doc, study):
    assert doc["study"] == study.name and doc["counts"]["complete"] == len(doc["trials"])
    ran = [t for t in doc["trials"] if t["reused_from"] is None]
    assert len(ran) == 3
    for t in doc["trials"]:
        assert t["state"] == "COMPLETE" and t["status"] == "ok" and t["tokens_per_s"] > 0
        result = json.loads((Path(t["trial_dir"]) / "result.json").read_text())
        assert t["tokens_per_s"] == pytest.approx(result["tokens_per_s"])
        assert t["peak_mem_bytes"] == result["peak_mem_bytes"]
        cfg = t["config"]
        assert cfg["global_batch_samples"] == cfg["micro_batch_size"] * cfg["grad_accum_steps"] * cfg["num_gpus"]
        # Every dimension that defines a config is in the row (FSDP2 was missing: FSDP2 and DDP
        # configs read alike, and scaling compared across them).
        assert set(cfg) >= {"fsdp", "zero_stage", "offload", "tp_degree", "compile"}
        # memory capacity per rank on CPU: host RAM shared by the ranks
        assert t["headroom_bytes"] == t["mem_capacity_bytes"] - t["peak_mem_bytes"]
    # Every completed trial is priced on every CPU offer of the catalog (two platforms).
    cpu_offers = {"aws-c7i-ondemand", TEST_SPOT_OFFER["name"]}
    for t in ran:
        assert {o["offer"] for o in doc["options"] if o["trial"] == t["number"]} == cpu_offers
    assert {o["trial"] for o in doc["options"]} == {t["number"] for t in ran}  # reused: no option
    assert sorted(o["platform"] for o in doc["per_platform"]) == ["aws/on-demand", "testcloud/spot"]
    for o in doc["options"]:
        assert o["basis_kind"] == "measured" and o["hours"] > 0 and o["usd"] > 0
        assert o["gpu_type"] == "cpu-core" and o["mfu"] is None  # no published CPU peak
        assert o["sensitivity"]["plus_30pct_time_usd"] > o["usd"]
    # The Pareto set is exactly the non-dominated options.
    opts = [OptionRow.model_validate(o) for o in doc["options"]]
    expect = {(o.trial, o.offer) for o in pareto_set(opts)}
    assert {(o["trial"], o["offer"]) for o in doc["pareto"]} == expect
    for p in doc["pareto"]:
        assert not any(o["hours"] <= p["hours"] and o["usd"] <= p["usd"]
                       and (o["hours"] < p["hours"] or o["usd"] < p["usd"]) for o in doc["options"])
    assert doc["cheapest"]["usd"] == min(o["usd"] for o in doc["options"])
    assert doc["fastest"]["hours"] == min(o["hours"] for o in doc["options"])
    assert [s["num_gpus"] for s in doc["scaling"]] == sorted({t["config"]["num_gpus"] for t in doc["trials"]})
    assert doc["scaling"][0]["scaling_efficiency"] == pytest.approx(1.0)
    # predicted (prescreen) vs measured memory, for every launched trial
    assert {m["trial"] for m in doc["memory"]} == {t["number"] for t in ran}
    assert all(m["predicted_peak_mem_bytes"] > 0 and m["measured_peak_mem_bytes"] > 0 for m in doc["memory"])


def test_limits_split_options_into_feasible_and_not(study, doc):
    from autotune.report.build import collect
    from autotune.search.study import open_study

    hours = sorted(o["hours"] for o in doc["options"])
    if hours[0] == hours[-1]:
        pytest.fail("every option has the same hours: cannot split them by a deadline")
    deadline = (hours[0] + hours[-1]) / 2
    limited = collect(open_study(study.storage, study.name, create=False), deadline_hours=deadline)
    assert limited["limits"] == {"max_usd": None, "deadline_hours": deadline, "source": "flags"}
    for o in limited["options"]:
        assert o["feasible"] == (o["hours"] <= deadline) and o["within_deadline"] == o["feasible"]
    assert limited["fastest"]["hours"] <= deadline and limited["cheapest"]["hours"] <= deadline
    assert limited["cheapest"]["usd"] == min(o["usd"] for o in limited["options"] if o["feasible"])
    # the Pareto set ignores the limits; the best per platform keeps to them
    assert {(o["trial"], o["offer"]) for o in limited["pareto"]} == {(o["trial"], o["offer"]) for o in doc["pareto"]}
    assert all(o["feasible"] for o in limited["per_platform"])


def test_limits_no_option_meets_are_named_in_words(study, doc):
    """A deadline alone that no option meets: the note read "(budget None, deadline 0.5 h)"."""
    from autotune.format import fmt_hours
    from autotune.report.build import collect
    from autotune.search.study import open_study

    deadline = min(o["hours"] for o in doc["options"]) / 2
    limited = collect(open_study(study.storage, study.name, create=False), deadline_hours=deadline)
    assert limited["cheapest"] is None
    note = next(n for n in limited["notes"] if n.startswith("no option meets the limits"))
    assert note.startswith(f"no option meets the limits (deadline {fmt_hours(deadline)}): "), note
    assert "None" not in note


def test_the_prices_under_the_dollars_are_dated_and_aged(study, doc):
    """The report says when the prices it used were read, and how old where over 90 days (the
    shipped CPU price is older): in its JSON, on its first lines and at a sweep's end."""
    import datetime as dt
    import io

    from rich.console import Console

    from autotune.pricing.catalog import STALE_AFTER_DAYS
    from autotune.pricing.load import load_catalog
    from autotune.report.terminal import print_summary

    cat = load_catalog(None if doc["catalog"] == "built-in" else doc["catalog"])  # the study's
    offers = {o["offer"] for o in doc["options"]}
    first = min(cat.offer(o).price_date for o in offers)
    age = (dt.date.today() - dt.date.fromisoformat(first)).days
    assert doc["catalog_note"].startswith(f"example prices as of {first}")
    assert (f"{age} days ago, over {STALE_AFTER_DAYS}" in doc["catalog_note"]) == (age > STALE_AFTER_DAYS)
    p = study.cli("report")
    assert f"Prices: {doc['catalog_note']}." in " ".join(p.stdout.split()), p.stdout
    con = Console(width=80, file=io.StringIO(), record=True, highlight=False)
    print_summary(doc, con, [])
    end = con.export_text().splitlines()
    assert all(len(ln) <= 80 for ln in end)
    assert f"Prices: {doc['catalog_note']}." in " ".join(" ".join(end).split())


def test_hours_and_dollars_name_the_target_they_reach(study, doc, tmp_path):
    """'9.4 h, $0.84' is to the spec's target; the report, the sweep's end and the bill say which
    (a new user could not tell): the document's target in words, each option's tokens to it."""
    import io

    import yaml
    from rich.console import Console

    from autotune.pricing.target import TargetSpec, tokens_to_target
    from autotune.report.terminal import print_summary

    target = TargetSpec.model_validate(yaml.safe_load((study.folder / "spec.yaml").read_text())["target"])
    assert doc["target"] == target.describe() == "10M tokens"
    # A tokens target is the same at every global batch (a steps or loss target is not:
    # tests/test_target.py); each option carries what its trial was priced to.
    assert {(o["tokens_to_target"], o["target_basis"]) for o in doc["options"]} == {
        (tokens_to_target(target, 1).tokens, tokens_to_target(target, 1).basis)}
    assert "Hours and dollars are to the target: 10M tokens." in study.cli("report").stdout
    con = Console(width=80, file=io.StringIO(), record=True, highlight=False)
    print_summary(doc, con, [])
    assert "; target 10M tokens; search cost" in con.export_text()
    p = study.cli("export", "--pick", "cheapest", "--out", str(tmp_path / "launch"))
    assert p.returncode == 0, p.stderr
    assert " to 10M tokens (from " in p.stdout
    bill = (tmp_path / "launch" / "bill.md").read_text()
    assert "| to target (10M tokens) |" in bill and "to the target (1e+07 tokens)" in bill


def test_no_pick_says_how_near_the_options_come_and_points_to_the_report(study, doc):
    """Under limits no option meets, the sweep's end named the limits only, then offered an
    export that fails; now it says how near the cheapest and the fastest come, and the next
    command prices the options under other limits."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from autotune.cli.sweep import next_commands
    from autotune.format import fmt_hours, fmt_usd
    from autotune.report.build import collect
    from autotune.report.terminal import print_summary
    from autotune.search.study import open_study

    fastest_h = min(o["hours"] for o in doc["options"])
    cheapest_usd = min(o["usd"] for o in doc["options"])
    none = collect(open_study(study.storage, study.name, create=False), deadline_hours=fastest_h / 2)
    assert none["cheapest"] is None and none["options"]
    spec = SimpleNamespace(study=study.name, storage=study.storage)
    con = Console(width=200, file=io.StringIO(), record=True, highlight=False)
    print_summary(none, con, next_commands(spec, None, picked=False))
    text = con.export_text()
    soonest = min(doc["options"], key=lambda o: (o["hours"], o["usd"]))
    assert (f"No pick: no option meets the limits: deadline {fmt_hours(fastest_h / 2)} (from flags); "
            f"the soonest option, trial {soonest['trial']} on {soonest['offer']}, takes "
            f"{fmt_hours(fastest_h, days_beside=True)}; raise --deadline-hours to ") in text
    assert "autotune export" not in text
    assert f"Next: autotune report --study {study.name} --storage {study.storage} --max-usd USD " \
           "--deadline-hours HOURS: the options under other limits" in text
    both = collect(open_study(study.storage, study.name, create=False), deadline_hours=fastest_h / 2,
                   max_usd=cheapest_usd / 2)
    con = Console(width=300, file=io.StringIO(), record=True, highlight=False)
    print_summary(both, con, [])
    # neither limit alone lets an option in (the cheapest costs twice the budget, the soonest
    # takes twice the deadline): both figures, and both flags
    text = con.export_text()
    assert f"costs {fmt_usd(cheapest_usd)}" in text and f"takes {fmt_hours(fastest_h, days_beside=True)}" in text
    assert "raise both, e.g. --max-usd " in text and " --deadline-hours " in text


def test_rich_report_names_the_decision(study, doc):
    p = study.cli("report")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "Pareto set of (config, offer)" in out and "Best per platform" in out
    for col in ("GPU x n", "mb", "ga", "prec", "ckpt", "ZeRO", "TP", "tokens/s", "MFU",
                "peak mem (free)", "hours", "dollars", "+30% time", "1 interrupt", "hours, $ from"):
        assert col in out, col
    # Hours and dollars are projected to the target: only the tokens/s under them were measured
    # (the column was "figures: measured", beside the hours and dollars).
    assert "measured tok/s" in out and "figures" not in out
    assert f"cheapest within limits: trial {doc['cheapest']['trial']}" in out
    assert "predicted" in out and "measured" in out  # the memory table


def test_html_page_and_pngs_hold_the_pareto_points(study, doc, tmp_path):
    out = tmp_path / "rep"
    deadline = max(o["hours"] for o in doc["options"]) * 0.999  # the slowest becomes infeasible
    p = study.cli("report", "--out", str(out), "--deadline-hours", repr(deadline))
    assert p.returncode == 0, p.stderr
    assert sorted(f.name for f in out.iterdir()) == [".autotune-files.json", "memory.png", "pareto.png",
                                                      "report.html", "report.json", "throughput.png"]
    rep = json.loads((out / "report.json").read_text())
    html = (out / "report.html").read_text()
    # Self-contained: plotly.js inlined, nothing fetched from a network.
    assert not re.search(r"<script[^>]*\ssrc=", html) and not re.search(r"<link[^>]*\shref=", html)
    assert len(html) > 1_000_000 and "Plotly.newPlot" in html
    # The cheapest's card: its dollars and hours are projected, from measured tokens/s (it read
    # "$0.0123 · 0.5 h ... on aws-c7i-ondemand (aws/on-demand), measured").
    assert "projected to the target from <span class='tag measured'>measured</span> tokens/s" in html
    embedded = json.loads(re.search(r'id="autotune-report">(.*?)</script>', html, re.S).group(1))
    assert embedded["pareto"] == rep["pareto"]
    # The Pareto trace of the plotly figure holds exactly the Pareto points.
    figure = _plotly_figure(html, "pareto")
    front = next(t for t in figure["data"] if t.get("name") == "Pareto set")
    want = sorted((o["hours"], o["usd"]) for o in rep["pareto"])
    assert _flat(sorted(zip(front["x"], front["y"]))) == pytest.approx(_flat(want))
    for platform in {o["platform"] for o in rep["options"] if o["feasible"]}:  # coloured by platform
        trace = next(t for t in figure["data"] if t.get("name") == platform)
        assert sorted(trace["x"]) == sorted(o["hours"] for o in rep["options"]
                                            if o["platform"] == platform and o["feasible"])
    infeasible = next(t for t in figure["data"] if t.get("name") == "over budget or deadline")
    assert len(infeasible["x"]) == sum(not o["feasible"] for o in rep["options"]) >= 1
    assert any(t.get("name", "").startswith("deadline") for t in figure["data"])
    assert _plotly_figure(html, "throughput")["data"] and _plotly_figure(html, "memory")["data"]
    for o in rep["pareto"]:
        assert f"<td>{o['trial']}</td>" in html
    # PNGs: the Pareto points are in the image metadata, and drawn where it says.
    from matplotlib import image
    from PIL import Image

    meta = json.loads(Image.open(out / "pareto.png").text["Description"])
    assert _flat(sorted((m["hours"], m["usd"]) for m in meta["pareto"])) == pytest.approx(_flat(want))
    pixels = image.imread(out / "pareto.png")
    for m in meta["pareto"]:
        x, y = int(round(m["x_px"])), int(round(m["y_px"]))
        patch = pixels[y - 3:y + 4, x - 3:x + 4, :3]
        assert patch.min() < 0.9, f"no marker drawn at the Pareto point {m}"  # not white paper
    for name in ("throughput.png", "memory.png"):
        assert image.imread(out / name).shape[0] > 100
    # The cheapest and fastest labels cover no plotted point (on main the cheapest's box hid
    # the point of the default sweep's trial 3) and stay in the image.
    assert len(meta["points"]) == len(rep["options"]) and meta["best_labels"]
    height, width = pixels.shape[:2]
    for b in meta["best_labels"]:
        x0, y0, x1, y1 = b["box_px"]
        assert 0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height, b
        assert not [q for q in meta["points"] if x0 <= q["x_px"] <= x1 and y0 <= q["y_px"] <= y1], b
    # Nor does a point's "#n" label cover another point (on the README's run "#1" lay under #0's marker).
    for m in meta["labels"]:
        x0, y0, x1, y1 = m["box_px"]
        own = {int(n) for n in m["text"].replace("#", "").split()}
        assert not [q for q in meta["points"] if q["trial"] not in own
                    and x0 <= q["x_px"] <= x1 and y0 <= q["y_px"] <= y1], (m, meta["points"])
    # Log axes (on main: linear unless the points spanned a decade) and every point named by
    # its trial number (on main: the cheapest and the fastest only), in the PNG and the page.
    trials = {o["trial"] for o in rep["options"]}
    assert meta["log_x"] and meta["log_y"]
    assert {int(n) for m in meta["labels"] for n in m["text"].replace("#", "").split()} == trials
    assert figure["layout"]["xaxis"]["type"] == "log" and figure["layout"]["yaxis"]["type"] == "log"
    named = next(t for t in figure["data"] if t.get("mode") == "markers+text")
    texts = named["text"]
    assert {int(n) for t in texts for n in t.replace("#", "").split()} == trials
    assert len(named["textposition"]) == len(texts)  # a side per label (text_positions)


def test_scaling_efficiency_compares_only_trials_that_differ_in_gpu_count():
    """On main a 1-rank fp32 micro-batch 4 trial against a 2-rank bf16 micro-batch 16 one read
    "2x ... 121%": the difference was precision and batch, not the GPUs."""
    from autotune.report.build import _scaling
    from autotune.report.figures import throughput_figure
    from autotune.report.plots import NO_SCALING_TITLE
    from autotune.report.schema import TrialRow

    def row(n, gpus, micro, prec, tps):
        cfg = {"num_gpus": gpus, "num_nodes": 1, "micro_batch_size": micro, "grad_accum_steps": 1,
               "precision": prec, "checkpointing": "none", "zero_stage": 0, "offload": "none",
               "tp_degree": 1, "seq_len": 64, "launcher": "torchrun", "device": "cpu", "threads_per_rank": 1}
        return TrialRow.model_construct(number=n, state="COMPLETE", tokens_per_s=tps, config=cfg, reused_from=None)

    rows = [row(0, 1, 4, "fp32", 1000.0), row(1, 2, 16, "bf16", 2420.0)]
    assert _scaling(rows) == []
    # Wrapped for the half-page figure (in one line it ran past the figure's edge).
    title = throughput_figure({"trials": [], "scaling": []}).layout.title.text
    assert title.replace("<br>", " ") == NO_SCALING_TITLE and max(len(ln) for ln in title.split("<br>")) <= 56
    rows.append(row(2, 2, 4, "fp32", 1800.0))  # the same per-rank config on two ranks
    sc = _scaling(rows)
    assert [(s.num_gpus, s.trial) for s in sc] == [(1, 0), (2, 2)]
    assert sc[1].scaling_efficiency == pytest.approx(0.9)


def test_report_never_cuts_an_offer_name(study, doc):
    """On main, offer names folded mid-word (`aws-c7i-on|demand`) even at 160 columns."""
    offers = {o["offer"] for o in doc["options"]}
    assert len(offers) > 1
    for width in (80, 160):
        p = study.cli("report", env={"COLUMNS": str(width)})
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        assert all(len(ln) <= width for ln in lines), max(lines, key=len)
        words = {w.strip(",();") for ln in lines for w in ln.split()}
        assert offers <= words, (width, offers - words)


def test_labels_of_points_whose_markers_overlap_are_one_label():
    """On the default sweep's report, trials 2 and 12 (19.2 h; $1.71 and $1.72) were drawn
    as "#2" over "#12". Points within NEAR_PX pixels share a label, at the first, numbers in order."""
    from autotune.report.placement import NEAR_PX, merge_near

    labels = [(1.0, 1.0, "#12"), (1.0, 1.0 + NEAR_PX / 200, "#2 #7"), (1.0, 1.0 + NEAR_PX / 50, "#3")]
    assert merge_near(labels, lambda h, u: (100 * h, 100 * u)) == [(1.0, 1.0, "#2 #7 #12"), labels[2]]
    assert merge_near(labels, lambda h, u: (100 * h, 100 * u), near_px=0) == labels


@pytest.fixture
def blank_axes():
    """A drawn 10 x 6 inch figure at 100 dpi with axes 0-100 both ways, and the display pixel
    of (50, 50): where the PNG's label placement is tried."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 6), dpi=100)
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    fig.canvas.draw()
    yield fig, ax, tuple(ax.transData.transform((50, 50)))
    plt.close(fig)


def test_the_best_label_takes_the_first_corner_that_covers_no_point(blank_axes):
    """The PNG's cheapest / fastest label goes below right of its point unless that covers a
    plotted point; points placed in three of its four corners leave it the fourth (above left)."""
    from autotune.report.placement import LABEL_OFFSETS_PT
    from autotune.report.plots import BEST_LABEL_STYLE, _place_label

    fig, ax, (x, y) = blank_axes
    pt = 100 / 72  # display pixels per point at 100 dpi
    # Inside the boxes at 30-40 points right / left and 40 points below / above, as placed.
    corners = {"below right": (x + 50 * pt, y - 47 * pt), "above right": (x + 50 * pt, y + 47 * pt),
               "below left": (x - 50 * pt, y - 47 * pt)}
    box = _place_label(fig, ax, (50, 50), "cheapest: #3 9.0 h, $0.8067", LABEL_OFFSETS_PT,
                       list(corners.values()), [], **BEST_LABEL_STYLE)
    assert box[2] < x and box[1] > y, box  # above left
    assert not [c for c in corners.values() if box[0] <= c[0] <= box[2] and box[1] <= c[1] <= box[3]]
    assert len(ax.texts) == 1  # the corners tried and not taken are gone


def test_the_best_label_goes_further_out_when_every_near_corner_covers_a_point(blank_axes):
    """On an Intel machine's default study the fastest label's four near corners each covered
    something (a slower option below right, the plot's edge left) and it was drawn over trial
    0's marker. With a point in each near corner the label now goes further out, covering none."""
    from autotune.report.placement import LABEL_OFFSETS_PT
    from autotune.report.plots import BEST_LABEL_STYLE, _place_label

    fig, ax, (x, y) = blank_axes
    pt = 100 / 72
    near = [(x + sx * 50 * pt, y + sy * 47 * pt) for sx in (1, -1) for sy in (1, -1)]
    box = _place_label(fig, ax, (50, 50), "fastest: #2 0.4 h, $0.0392", LABEL_OFFSETS_PT, near, [],
                       **BEST_LABEL_STYLE)
    assert not [c for c in near if box[0] - 6 <= c[0] <= box[2] + 6 and box[1] - 6 <= c[1] <= box[3] + 6], box
    inside = ax.get_window_extent(fig.canvas.get_renderer())
    assert inside.x0 <= box[0] and box[2] <= inside.x1 and inside.y0 <= box[1] and box[3] <= inside.y1
    assert box[1] < y - 60 * pt, box  # below right, further down: the first further corner
    assert len(ax.texts) == 1


def test_a_points_label_moves_off_a_neighbouring_marker(blank_axes):
    """A point's "#n" label goes above right of it unless a neighbour's marker is there (on the
    README's run, "#1" was drawn under trial 0's marker); then to the next free corner."""
    from autotune.report.plots import _point_labels_png

    fig, ax, (x, y) = blank_axes
    alone = _point_labels_png(fig, ax, [(50.0, 50.0, "#1")], [(x, y)])[0]
    assert alone[0] > x and alone[1] > y  # above right
    neighbour = ax.transData.inverted().transform(((alone[0] + alone[2]) / 2, (alone[1] + alone[3]) / 2))
    boxes = _point_labels_png(fig, ax, [(50.0, 50.0, "#1"), (*neighbour, "#0")],
                              [(x, y), ax.transData.transform(neighbour)])
    nx, ny = ax.transData.transform(neighbour)
    assert not (boxes[0][0] - 6 <= nx <= boxes[0][2] + 6 and boxes[0][1] - 6 <= ny <= boxes[0][3] + 6), boxes
    assert boxes[0][2] < x and boxes[0][1] > y  # above left: the next corner


def test_the_html_pages_point_labels_take_the_side_free_of_other_points():
    """The plotly page names each point above right of it, unless another point lies there or
    the text would leave the plot: then the next free side (the page's plot area assumed)."""
    from autotune.report.figures import PLOT_AREA_PX, text_positions

    ax = {"x": (1.0, 100.0), "y": (1.0, 100.0), "log_x": False, "log_y": False}
    per_px = 99.0 / PLOT_AREA_PX[0], 99.0 / PLOT_AREA_PX[1]
    alone = [(50.0, 50.0, "#1")]
    assert text_positions(alone, ax) == ["top right"]
    # A neighbour 15 px right and 10 px up of #1: on #1's "top right" text.
    near = alone + [(50.0 + 15 * per_px[0], 50.0 + 10 * per_px[1], "#0")]
    assert text_positions(near, ax)[0] == "top left"
    # At the plot's right edge the text goes left.
    assert text_positions([(100.0, 50.0, "#12")], ax) == ["top left"]


def test_every_png_text_lies_inside_its_figure(doc, tmp_path, monkeypatch):
    """On the default sweep's report, the throughput plot's title (no scaling) ran past the
    7-inch figure and the memory plot's past its right edge (long FSDP + offload + TP labels
    push the bars right); the GPU axis had ticks at 1.2 and 1.4 GPUs. Every title, label and
    annotation of the three PNGs now lies inside its figure, and the GPU ticks are whole."""
    import copy

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from autotune.report.plots import write_pngs

    outside: list[tuple[str, str]] = []  # (figure title, text) of each text out of its figure
    gpu_ticks: list[float] = []

    def check_then_close(fig=None):
        renderer = fig.canvas.get_renderer()
        page = fig.bbox
        for ax in fig.axes:
            title = ax.get_title("center") + ax.get_title("right")
            (x_lo, x_hi), (y_lo, y_hi) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
            ticks = [t for t in ax.get_xticklabels() if x_lo <= t.get_position()[0] <= x_hi] + \
                [t for t in ax.get_yticklabels() if y_lo <= t.get_position()[1] <= y_hi]  # those shown
            for t in [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts, *ticks]:
                box = t.get_window_extent(renderer)
                if t.get_text() and t.get_visible() and not (page.x0 - 1 <= box.x0 and box.x1 <= page.x1 + 1
                                                             and page.y0 - 1 <= box.y0 and box.y1 <= page.y1 + 1):
                    outside.append((title, t.get_text()))
            if ax.get_xlabel().startswith("GPUs"):
                gpu_ticks.extend(ax.get_xticks())
        close(fig)
        checked.append(fig)

    close, checked = plt.close, []
    monkeypatch.setattr(plt, "close", check_then_close)
    wide = copy.deepcopy({**doc, "scaling": []})
    for t in wide["trials"]:  # labels as long as the default space's longest
        t["config"].update(fsdp="shard_grad_op", offload="optimizer_params", tp_degree=2)
    write_pngs(wide, tmp_path)
    assert len(checked) == 3 and outside == []
    assert gpu_ticks and all(float(x).is_integer() for x in gpu_ticks), gpu_ticks


def test_a_report_into_a_file_keeps_whole_lines(study):
    """Into a file or a pipe with no $COLUMNS (a Slurm job's .out file, `| tee log`), rich
    laid output out at 80 columns: the report dropped its per-setting columns and cut its prose
    with an ellipsis. Now it is laid out at LOG_WIDTH_COLUMNS, as if COLUMNS said so."""
    from autotune.cli.common import LOG_WIDTH_COLUMNS

    log = study.cli("report", env={"COLUMNS": None})
    wide = study.cli("report", env={"COLUMNS": str(LOG_WIDTH_COLUMNS)})
    narrow = study.cli("report", env={"COLUMNS": "80"})
    assert log.returncode == wide.returncode == narrow.returncode == 0, log.stderr
    assert log.stdout == wide.stdout != narrow.stdout
    assert "…" in narrow.stdout and "…" not in log.stdout
    assert max(len(ln) for ln in log.stdout.splitlines()) > 80


def test_report_into_a_missing_folder_is_a_user_error_and_writes_nothing(doc, tmp_path):
    from autotune.errors import UserError
    from autotune.report.files import REPORT, prepare_out_dir
    from autotune.report.html import prepare_html_path

    with pytest.raises(UserError, match="does not exist"):
        prepare_html_path(tmp_path / "missing" / "r.html")
    with pytest.raises(UserError, match="does not exist"):
        prepare_out_dir(tmp_path / "missing" / "rep", kind=REPORT)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError, match="is a file"):
        prepare_out_dir(tmp_path / "afile", kind=REPORT)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # no temporary leftovers


def _flat(points) -> list[float]:
    return [v for p in points for v in p]


def _plotly_figure(html: str, div_id: str) -> dict:
    """The data plotly was given for the figure in <div id=div_id>: Plotly.newPlot(id, data, ...)."""
    m = re.search(r'Plotly\.newPlot\(\s*"' + div_id + r'",\s*', html)
    assert m, f"no plotly figure {div_id}"
    decoder = json.JSONDecoder()
    data, end = decoder.raw_decode(html, m.end())
    layout, _ = decoder.raw_decode(html, html.index("{", end))
    return {"data": data, "layout": layout}


def test_live_progress_panel_reads_the_study(study, doc):
    import io

    from rich.console import Console

    from autotune.report.progress import SweepProgress, snapshot
    from autotune.search.study import open_study

    st = open_study(study.storage, study.name, create=False)
    snap = snapshot(st)
    assert (snap.complete, snap.running, snap.pruned, snap.failed) == (len(doc["trials"]), 0, 0, 0)
    # the best by cost and by time among the stored scores (the sweep's cheapest offer per trial)
    scores = {t["number"]: (t["usd"], t["hours"]) for t in doc["trials"]}
    assert scores[snap.cheapest[0]][0] == min(v[0] for v in scores.values())
    assert scores[snap.fastest[0]][1] == min(v[1] for v in scores.values())
    assert snap.search_usd == pytest.approx(doc["search"]["usd"]) and snap.search_usd > 0
    # a trial this process just finished still reads RUNNING in storage: counted as it ended
    assert snapshot(st, finished={2: "pruned"}).complete == len(doc["trials"])  # stored COMPLETE wins
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160)
    progress = SweepProgress(console, st, n_trials=3)
    progress.refresh()
    console.print(progress)
    text = buf.getvalue()
    assert f"{len(doc['trials'])} done, 0 running, 0 pruned, 0 failed" in text
    assert f"trial {snap.cheapest[0]}:" in text and "search cost" in text


def test_report_and_export_filter_by_provider_and_region(study, tmp_path):
    p = study.cli("report", "--json", "--provider", TEST_SPOT_OFFER["provider"])
    assert p.returncode == 0, p.stderr
    options = json.loads(p.stdout)["options"]
    assert options and {o["offer"] for o in options} == {TEST_SPOT_OFFER["name"]}
    # The shipped CPU offer is priced for us-east-1; the test offer states no region.
    p = study.cli("report", "--json", "--region", "us-east-1")
    assert p.returncode == 0, p.stderr
    options = json.loads(p.stdout)["options"]
    assert options and {(o["offer"], tuple(o["regions"])) for o in options} == {("aws-c7i-ondemand", ("us-east-1",))}
    assert all(o["instance"] for o in options)
    p = study.cli("report", "--provider", "testclod")
    assert p.returncode == 2 and "did you mean 'testcloud'" in p.stderr and "Traceback" not in p.stderr
    out = tmp_path / "launch"
    p = study.cli("export", "--pick", "cheapest", "--out", str(out), "--provider", "aws")
    assert p.returncode == 0, p.stderr
    bill = next(out.glob("*.md")).read_text()
    # Hours and dollars are projected to the target; the tokens/s under them were measured.
    assert "(from measured tokens/s)" in p.stdout.splitlines()[0], p.stdout
    assert "hours and dollars projected to the target (1e+07 tokens) from tokens/s measured (" in bill, bill
    assert "**aws-c7i-ondemand**" in bill and "region us-east-1" in bill and "instance " in bill
    # An offer typed wrong: one message naming the offer it may be, and no folder written.
    typo = tmp_path / "typo"
    p = study.cli("export", "--pick", "cheapest", "--out", str(typo), "--offer", "aws-c7i-ondemnd")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "--offer 'aws-c7i-ondemnd': no completed trial is priced on it (did you mean 'aws-c7i-ondemand'?)" in p.stderr
    assert not typo.exists()


def test_a_provider_with_no_offer_for_the_trials_says_so_not_that_no_trial_completed(study, doc, tmp_path):
    """--provider runpod sells no CPU core: the report said "no completed trial yet" (terminal)
    and "no option meets the limits" (HTML, with no limit set), nothing said it was narrowed,
    and its price note dated every offer of the catalog (AWS P5's 2025 prices among them)."""
    p = study.cli("report", "--json", "--provider", "runpod")
    assert p.returncode == 0, p.stderr
    narrowed = json.loads(p.stdout)
    assert narrowed["options"] == [] and narrowed["counts"]["complete"] == doc["counts"]["complete"] > 0
    assert narrowed["offer_filter"] == {"providers": ["runpod"], "regions": [],
                                        "options_left_out": len(doc["options"])}
    assert doc["offer_filter"] is None
    # The prices under the dollars shown (the trials' own offers), not the whole catalog's.
    assert "2025-06-01" not in narrowed["catalog_note"], narrowed["catalog_note"]
    p = study.cli("report", "--provider", "runpod", "--html", str(tmp_path / "r.html"))
    assert p.returncode == 0, p.stderr
    assert "no completed trial yet" not in p.stdout
    assert f"no completed trial is priced on an offer of --provider runpod ({len(doc['options'])} " in p.stdout
    assert "Offers: only offers of --provider runpod" in p.stdout
    page = (tmp_path / "r.html").read_text()
    assert "no option meets the limits" not in page and "none within the limits" not in page
    assert "no completed trial is priced on an offer of --provider runpod" in page
    # Narrowed to offers that price some options: the terminal and the page say how many it left out.
    p = study.cli("report", "--region", "us-east-1")
    left_out = sum(o["offer"] != "aws-c7i-ondemand" for o in doc["options"])
    assert p.returncode == 0 and f"only offers of --region 'us-east-1' ({left_out} priced option(s)" in p.stdout


def test_sweep_summary_fits_80_columns_and_shows_the_picks_interval(doc):
    """The end of a sweep: at most ~25 lines at 80 columns, every offer name whole; with a
    re-measured pick (doc["picks"], the search's), its 90% interval and how sure it is."""
    import io

    from rich.console import Console

    from autotune.report.terminal import print_summary

    def lines(d) -> list[str]:
        con = Console(width=80, file=io.StringIO(), record=True, highlight=False)
        print_summary(d, con, ["Next: autotune export --pick cheapest --out launch/"])
        return con.export_text().splitlines()

    # Without re-measurements of the pick (doc["picks"] empty) no interval is claimed.
    plain = lines({**doc, "picks": []})
    assert len(plain) <= 25 and all(len(ln) <= 80 for ln in plain), plain
    pick = doc["cheapest"]
    assert f"Pick: trial {pick['trial']} on {pick['offer']}, cheapest within limits" in plain
    # Only the interval's own wording: the scaling line prints efficiencies such as "2x 90% #0",
    # which a CI run measured once (it failed there on a bare "90%").
    assert "(90%:" not in "\n".join(plain) and "90% interval" not in "\n".join(plain)
    # The study's own picks (its sweep re-measured the leader): shown as they are, still 80 columns.
    real = lines(doc)
    assert len(real) <= 25 and all(len(ln) <= 80 for ln in real), real
    sure = {"by": "cost", "trial": pick["trial"], "offer": pick["offer"], "value_low": pick["usd"] * 0.9,
            "value_high": pick["usd"] * 1.1, "how_sure": "cheaper than trial 1 by 4% ± 2% (3 runs each)"}
    shown = "\n".join(lines({**doc, "picks": [sure]}))
    from autotune.format import fmt_usd_range

    assert f"(90%: {fmt_usd_range(sure['value_low'], sure['value_high'])})" in shown
    assert "cheaper than trial 1 by 4%" in shown


def test_an_estimate_outside_its_own_runs_says_why(doc):
    """The estimate sits at the level of all the study's repeated runs (autotune.search.
    estimates._level_shift), so it can lie outside the pick's own runs: a sweep on an Intel
    machine ended "27,846 tokens/s estimated from 2 runs (29,403 to 29,689)" and nothing more.
    The sweep's end now says so on a line of its own, whole at 80 columns; inside, nothing."""
    import io

    from rich.console import Console

    from autotune.report.terminal import outside_own_runs, print_summary

    runs = [{"tokens_per_s": 29_403.0}, {"tokens_per_s": 29_689.0}]
    assert outside_own_runs(27_846.0, runs) == \
        "estimate below both runs: set at the level of all the study's repeated runs"
    assert outside_own_runs(31_000.0, [*runs, {"tokens_per_s": 30_000.0}]).startswith("estimate above all 3 runs")
    assert outside_own_runs(29_500.0, runs) is None and outside_own_runs(27_846.0, []) is None
    # One run too (the README's demo ended "30,066 tokens/s" for a config whose one run measured
    # 30,785, and said nothing of it).
    assert outside_own_runs(30_066.0, [{"tokens_per_s": 30_785.0}]).startswith("estimate below its run:")
    assert outside_own_runs(30_785.2, [{"tokens_per_s": 30_785.0}]) is None

    pick = doc["cheapest"]
    tps = pick["tokens_per_s"]

    def summary(own: list[float]) -> list[str]:
        sure = {"by": "cost", "trial": pick["trial"], "offer": pick["offer"], "how_sure": "x",
                "runs": [{"tokens_per_s": t} for t in own]}
        con = Console(width=80, file=io.StringIO(), record=True, highlight=False)
        print_summary({**doc, "picks": [sure]}, con, [])
        return con.export_text().splitlines()

    one = summary([tps * 1.05])
    assert f"{tps:,.0f} tokens/s estimated from 1 run ({tps * 1.05:,.0f})" in "\n".join(one), one
    assert "  estimate below its run: set at the level of all the study's repeated runs" in one, one
    below = summary([tps * 1.05, tps * 1.07])
    assert "  estimate below both runs: set at the level of all the study's repeated runs" in below, below
    assert not [ln for ln in summary([tps * 0.95, tps * 1.05]) if "estimate " in ln and "runs:" in ln]


def test_the_memory_png_shows_a_run_over_its_limit_as_over_and_its_legend_covers_no_bar(doc, tmp_path, monkeypatch):
    """An OOM's headroom is negative: drawn as "headroom (free)" leftwards from its peak, the part
    over the limit read as free memory (seen on a sweep under a limit on an Intel machine), and the
    legend, inside the plot at lower right, covered the last bar and its figure. Now the part
    over the limit is its own bar, starting at the limit; no bar is negative; the legend lies
    outside the plot."""
    import copy

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from autotune.report.plots import memory_rows, write_pngs

    tight = copy.deepcopy(doc)
    rows = memory_rows(tight)
    assert len(rows) >= 2
    for t in rows:
        t["mem_capacity_bytes"] = int(t["peak_mem_bytes"] * 1.1)
        t["headroom_bytes"] = t["mem_capacity_bytes"] - t["peak_mem_bytes"]
    oom = rows[0]
    oom["mem_capacity_bytes"] = int(oom["peak_mem_bytes"] * 0.9)
    oom["headroom_bytes"] = oom["mem_capacity_bytes"] - oom["peak_mem_bytes"]
    seen = {}

    def keep_then_close(fig=None):
        if fig.axes and fig.axes[0].get_xlabel() == "GiB":
            ax = fig.axes[0]
            renderer = fig.canvas.get_renderer()
            seen["bars"] = {c.get_label(): [(p.get_x(), p.get_width()) for p in c.patches] for c in ax.containers}
            seen["legend"] = fig.legends[0].get_window_extent(renderer)
            seen["axes"] = ax.get_window_extent(renderer)
        close(fig)

    close = plt.close
    monkeypatch.setattr(plt, "close", keep_then_close)
    write_pngs(tight, tmp_path)
    gib = 1024 ** 3
    bars = seen["bars"]
    assert all(w >= 0 for bs in bars.values() for _, w in bs), bars
    over = bars["measured peak over the limit"]
    assert over[0] == pytest.approx((oom["mem_capacity_bytes"] / gib, -oom["headroom_bytes"] / gib))
    assert all(w == 0 for _, w in over[1:])
    assert bars["headroom (free)"][0][1] == 0 and bars["measured peak"][0][1] == pytest.approx(over[0][0])
    assert seen["legend"].y1 <= seen["axes"].y0, (seen["legend"], seen["axes"])  # under the plot
    # The HTML page's figure stacks the same three bars (plotly drew the negative headroom left of 0).
    from autotune.report.figures import memory_figure

    traces = {t.name: list(t.x) for t in memory_figure(tight).data if t.type == "bar"}
    assert all(x >= 0 for xs in traces.values() for x in xs), traces
    assert traces["measured peak over the limit"][0] == pytest.approx(over[0][1])
    # Its figures lie right of each bar's end and of its predicted marker (the bar's "outside" text
    # began at the bar's end, where a marker near the limit covered the first digits).
    figure = memory_figure(tight)
    text = next(t for t in figure.data if t.type == "scatter" and t.mode == "text")
    ends = [sum(xs[i] for xs in traces.values()) for i in range(len(rows))]
    for x, end, t in zip(text.x, ends, rows):
        assert x > max(end, (t["predicted_peak_mem_bytes"] or 0) / gib), (x, end, t["predicted_peak_mem_bytes"])


def test_the_html_pages_best_labels_take_a_place_that_covers_no_point():
    """The HTML page's cheapest / fastest labels sat at a fixed place (right and below the
    cheapest, above the fastest), so a neighbour there was hidden, as the PNG's label hid trial
    0 on an Intel machine. Each now takes the first of the PNG's offsets whose box (in the
    page's assumed plot area) covers no point, stays inside and clears the other label."""
    from autotune.report.figures import PLOT_AREA_PX, best_label_offsets
    from autotune.report.placement import LABEL_OFFSETS_PT

    ax = {"x": (0.0, 100.0), "y": (0.0, 100.0), "log_x": False, "log_y": False}
    sx, sy = PLOT_AREA_PX[0] / 100, PLOT_AREA_PX[1] / 100  # pixels per unit

    def option(trial: int, hours: float, usd: float) -> dict:
        return {"trial": trial, "offer": "o", "hours": hours, "usd": usd}

    cheap, fast = option(1, 40.0, 40.0), option(2, 20.0, 80.0)
    alone = {"options": [cheap, fast], "cheapest": cheap, "fastest": fast}
    first = LABEL_OFFSETS_PT[0][1] * 100 / 72  # below: plotly's ay is pixels down
    placed = best_label_offsets(alone, ax)
    assert [o["trial"] for o, _, _ in placed] == [1, 2]
    assert placed[0][1].startswith("<b>cheapest</b>: #1 ") and placed[0][2][1] == pytest.approx(-first)
    # A neighbour right under the cheapest label's first place: the label moves, covering nothing.
    (dx, dy) = placed[0][2]
    under = option(3, 40.0 + dx / sx, 40.0 - dy / sy)
    crowded = best_label_offsets({**alone, "options": [cheap, fast, under]}, ax)
    (dx2, dy2) = crowded[0][2]
    assert (dx2, dy2) != (dx, dy)
    w = 7.0 * len(re.sub("<[^>]+>", "", crowded[0][1])) + 10  # the box's width, as placed
    cx, cy = 40.0 * sx + dx2, 40.0 * sy - dy2
    qx, qy = under["hours"] * sx, under["usd"] * sy
    assert not (abs(qx - cx) <= w / 2 + 6 and abs(qy - cy) <= 10 + 6), (crowded[0][2], (qx, qy))


def test_the_html_pages_near_points_share_one_label(doc):
    """Two configs a hair apart (the README's sweep: trials 0 and 1 at 8.2 h, $0.7355 and
    $0.7279) drew "#0" and "#1" over each other on the HTML page; the PNG joined them already
    (merge_near). The page now shows one label, "#0 #1", as the PNG does."""
    import copy

    from autotune.report.figures import pareto_figure

    near = copy.deepcopy(doc)
    first = near["options"][0]
    twin = {**copy.deepcopy(first), "trial": 999, "usd": first["usd"] * 1.005}
    near["options"].append(twin)
    texts = [t for t in pareto_figure(near).data if t.mode == "markers+text"][0].text
    assert any(f"#{first['trial']}" in t.split() and "#999" in t.split() for t in texts), texts
    assert not any(t == "#999" for t in texts), texts
    # Each label is set off from its point by the radius of the Pareto set's ring (a text-only
    # trace drew "#0" under the ring of the README page's pick): an invisible marker as wide.
    figure = pareto_figure(near)
    named = next(t for t in figure.data if t.mode == "markers+text")
    ring = next(t for t in figure.data if t.name == "Pareto set")
    assert named.marker.size == ring.marker.size and named.marker.opacity == 0


def test_a_note_prints_as_written(doc):
    """Notes are text, not rich markup: the nothing-fits note's "(checkpointing: [full])" printed
    as "(checkpointing: )" before."""
    import io

    from rich.console import Console

    from autotune.report.terminal import print_report

    con = Console(width=200, file=io.StringIO(), record=True)
    print_report({**doc, "notes": ["add it to the space (checkpointing: [full]; offload: [optimizer])"]}, con)
    assert "note: add it to the space (checkpointing: [full]; offload: [optimizer])" in con.export_text()


def test_the_sweep_summary_gives_the_headroom_note_of_each_pick_it_names(doc):
    """A tight pick's note (autotune.report.picks.with_headroom) under the pick at a sweep's
    end: by cost always; by time only where the fastest is another config, which the summary
    names on its own line. Other notes stay in `autotune report`."""
    import io

    from rich.console import Console

    from autotune.report.terminal import print_summary

    pick = doc["cheapest"]
    by_cost = f"by cost, trial {pick['trial']} is recommended though its runs peaked within their spread"
    by_time = "by time, trial 99 is recommended though its runs peaked within their spread"
    other = "a note for the full report only"

    def shown(fastest) -> str:
        con = Console(width=80, file=io.StringIO(), record=True)
        print_summary({**doc, "fastest": fastest, "notes": [other, by_cost, by_time]}, con, [])
        return " ".join(con.export_text().split())

    same = shown(pick)
    assert by_cost in same and by_time not in same and other not in same
    differs = shown({**pick, "trial": 99})
    assert "Fastest: trial 99" in differs and by_cost in differs and by_time in differs


def test_a_trial_held_back_says_so_in_its_progress_line():
    """A proposal the memory prescreen held back ran nothing: its line said "oom", as a trial
    that ran out of memory does."""
    from autotune.contract import TrialConfig, TrialResult, TrialStatus
    from autotune.report.labels import outcome_line
    from autotune.search.objective import TrialOutcome

    held = TrialResult(status=TrialStatus.oom, error_type="PredictedOOM",
                       error="not launched: predicted peak 402.2 MiB per rank against the limit 143.1 MiB")
    line = outcome_line(TrialOutcome(number=1, config=TrialConfig(), result=held, hours=None, usd=None,
                                     offer=None, launched=False), 200)
    assert line.startswith("  trial   1  held back  1x mb") and "PredictedOOM: not launched: predicted" in line
    ran = outcome_line(TrialOutcome(number=2, config=TrialConfig(), result=held.model_copy(
        update={"error_type": "OverMemoryLimit", "error": "measured peak 435.9 MiB"}), hours=None, usd=None,
        offer=None), 200)
    assert ran.startswith("  trial   2  oom  1x mb")
