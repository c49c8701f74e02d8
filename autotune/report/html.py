"""The report as a self-contained HTML page (plotly, its JS inlined: no network), and the
report folder (page, JSON, PNG plots).

    write_html(doc, "report.html")          # one file, opens offline
    write_report_dir(doc, "report/")        # report.html, report.json, pareto.png, throughput.png, memory.png

`doc` is `autotune.report.build.collect(...)`. Nothing half-written (autotune.report.files).
"""

from __future__ import annotations

import html
import json
import tempfile
from pathlib import Path
from typing import Any

from autotune.format import fmt_bytes, fmt_hours, fmt_pct, fmt_usd
from autotune.paths import check_parent, probe_writable, refuse_foreign
from autotune.report.figures import memory_figure, pareto_figure, throughput_figure
from autotune.report.files import REPORT, write_files, write_text_atomic
from autotune.report.labels import (
    config_summary,
    mfu_text,
    no_option_text,
    offer_filter_line,
    origin_note,
    zero_summary,
)
from autotune.report.neighbours import beside_text, interference_lines
from autotune.report.pick_text import price_line
from autotune.report.plots import gpus_of, write_pngs

# A table wider than the window scrolls in its own box (display:block; overflow-x:auto): the
# option tables' 20 columns ran past a 1400-pixel window and cut the last column off the page.
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1500px}
h1{margin:0 0 4px 0;font-size:26px} h2{margin-top:32px;font-size:19px;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:14px}.cards{display:flex;gap:16px;margin:18px 0;flex-wrap:wrap}
.card{border:1px solid #ccd;border-radius:8px;padding:12px 18px;min-width:320px;background:#f8f9fc}
.card .big{font-size:24px;font-weight:600}.card .what{color:#555;font-size:13px}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:12px}
table{border-collapse:collapse;font-size:13px;margin:8px 0;display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid #ddd;padding:4px 7px;text-align:right}
th{background:#f0f2f6}td.l,th.l{text-align:left}tr.dim td{color:#999}.note{color:#666;font-size:13px}
td.n{white-space:nowrap}
.tag{display:inline-block;padding:0 6px;border-radius:4px;font-size:12px}
.measured{background:#dff0d8}.projected{background:#fcf8e3}.estimated{background:#f2dede}
"""


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _option_table(rows: list[dict[str, Any]]) -> str:
    head = ("#", "GPU x n", "micro-batch", "accum", "precision", "checkpointing", "ZeRO / offload",
            "TP", "tokens/s", "MFU", "peak mem", "headroom", "hours", "dollars", "+30% time",
            "1 interruption", "offer", "platform", "hours, $ from")
    left = {"GPU x n", "precision", "checkpointing", "ZeRO / offload", "offer", "platform", "hours, $ from"}
    out = ["<table><tr>" + "".join(f"<th class='{'l' if h in left else ''}'>{h}</th>" for h in head) + "</tr>"]
    for o in rows:
        c, s = o["config"], o.get("sensitivity") or {}
        cells = [
            (o["trial"], ""), (f"{o.get('gpu_type') or '?'} x{gpus_of(c)}", "l n"), (c.get("micro_batch_size"), ""),
            (c.get("grad_accum_steps"), ""), (c.get("precision"), "l"), (c.get("checkpointing"), "l"),
            (zero_summary(c), "l"), (c.get("tp_degree"), ""),
            (f"{o['tokens_per_s']:,.0f}" if o.get("tokens_per_s") else "not measured", ""),
            (fmt_pct(o["mfu"]) if o.get("mfu") is not None else "n/a", ""),
            (fmt_bytes(o.get("peak_mem_bytes")) + (" rss" if o.get("peak_mem_source") == "host_rss" else ""), ""),
            (fmt_bytes(o["headroom_bytes"]) if o.get("headroom_bytes") is not None else "not measured", ""),
            (fmt_hours(o["hours"]), ""), (fmt_usd(o["usd"]), ""),
            (_sens(s, "plus_30pct_time"), ""), (_sens(s, "one_interruption"), ""),
            (o["offer"], "l n"), (o["platform"], "l n"),  # names users type: never wrapped
        ]
        # Hours and dollars are projected to the target; the tokens/s under them are what was measured.
        tag = f"<span class='tag {o['basis_kind']}' title='{_e(o['basis'])}'>{o['basis_kind']}</span> tok/s"
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
    side = any(t.get("slot") or t.get("neighbours") for t in rows)  # trials ran side by side
    head = ("#", "state", "status", "config", "tokens/s", "peak mem", "predicted", "hours", "dollars",
            "offer", "reason") + (("slot", "beside") if side else ())
    out = ["<table><tr>" + "".join(f"<th class='l'>{h}</th>" for h in head) + "</tr>"]
    for t in rows:
        status = (t["status"] or "-") + origin_note(t)
        cells: tuple[Any, ...] = (t["number"], t["state"], status, config_summary(t["config"]),
                 f"{t['tokens_per_s']:,.0f}" if t["tokens_per_s"] else "-",
                 fmt_bytes(t["peak_mem_bytes"]) if t["peak_mem_bytes"] else "not measured",
                 fmt_bytes(t["predicted_peak_mem_bytes"]) if t["predicted_peak_mem_bytes"] else "-",
                 fmt_hours(t["hours"]), fmt_usd(t["usd"]), t["offer"] or "-",
                 (t["error"] or "").splitlines()[0][:160] if t["error"] else "")
        if side:
            cells += (t.get("slot") or "-", beside_text(t))
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


def _card(label: str, o: dict[str, Any] | None, limits_text: str, doc: dict[str, Any]) -> str:
    if o is None:  # no option at all (why, in words), or none within the limits
        why = no_option_text(doc) if not doc["options"] else "no option meets the limits"
        return (f"<div class='card'><div class='what'>{label} {limits_text}</div>"
                f"<div class='big'>none</div><div class='what'>{_e(why)}</div></div>")
    return (f"<div class='card'><div class='what'>{label} {limits_text}</div>"
            f"<div class='big'>{fmt_usd(o['usd'])} &middot; {fmt_hours(o['hours'])}</div>"
            f"<div>trial {o['trial']}: {_e(config_summary(o['config']))}</div>"
            f"<div class='what'>{_e(mfu_text(o))}</div>"
            f"<div class='what'>on {_e(o['offer'])} ({_e(o['platform'])}), projected to the target from "
            f"<span class='tag {o['basis_kind']}'>{o['basis_kind']}</span> tokens/s</div>"
            f"<div class='what'>{_e(price_line(o) or 'price: not known')}</div></div>")


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
{c['running']} running &middot; hours and dollars to {_e(doc.get('target') or 'the target')}
&middot; search cost {_e(_search_text(doc))}
&middot; storage {_e(doc['storage'] or '-')} &middot; catalog {_e(doc['catalog'])}
&middot; {_e(doc['catalog_note'] or '')} &middot; report schema v{doc['schema_version']}</div>
{f"<p class='note'>{_e(offer_filter_line(doc['offer_filter']))}</p>" if doc.get('offer_filter') else ''}
<div class='cards'>{_card('Cheapest', doc['cheapest'], limits_text, doc)}
{_card('Fastest', doc['fastest'], limits_text, doc)}</div>
{notes}
{fig_div(pareto_figure(doc), 'pareto')}
<div class='grid'><div>{fig_div(throughput_figure(doc), 'throughput')}</div>
<div>{fig_div(memory_figure(doc), 'memory')}</div></div>
<h2>Pareto set of (config, offer)</h2>
<p class='note'>No option is both cheaper and faster than these. Cheapest first.</p>
{_option_table(doc['pareto'])}
<h2>Best per platform</h2>
{_option_table(doc['per_platform']) if doc['per_platform'] else
 f"<p class='note'>{'none within the limits' if doc['options'] else _e(no_option_text(doc))}</p>"}
<h2>Trials that did not complete</h2>
{_failures_table(doc)}
<h2>Memory: predicted vs measured</h2>
{_memory_table(doc)}
<h2>Every priced option</h2>
{_option_table(doc['options'])}
<h2>Every trial</h2>
{_trials_table(doc['trials'])}
{"".join(f"<p class='note'>{_e(line)}</p>" for line in interference_lines(doc))}
<script type="application/json" id="autotune-report">{doc_json}</script>
"""
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'>{GENERATOR_META}"
            f"<title>autotune: {_e(doc['study'])}</title><style>{_CSS}</style>"
            f"<script type='text/javascript'>{get_plotlyjs()}</script></head>"
            f"<body>{body}</body></html>\n")



# Marks a page as autotune's own: `report --html PATH` replaces only such a file.
GENERATOR_META = "<meta name='generator' content='autotune report'>"


def prepare_html_path(path: str | Path) -> Path:
    """Check that `report --html` may write `path`: a new file or a page autotune wrote, in a
    folder autotune can write. A file of anyone else's is never replaced, as `--force` never
    replaces one in an --out folder (autotune.report.files). Nothing is left written here."""
    from autotune.errors import UserError

    path = Path(path).expanduser().resolve()
    if path.is_dir():
        raise UserError(f"--html {path} is a folder", fix="give a file path, or use --out FOLDER")
    check_parent(path, "--html")
    refuse_foreign(path, GENERATOR_META, "--html", "a report")
    probe_writable(path.parent, path, "--html")
    return path


def write_html(doc: dict[str, Any], path: str | Path) -> Path:
    return write_text_atomic(Path(path), render_html(doc), "--html")


def report_dir_files(doc: dict[str, Any]) -> dict[str, str | bytes]:
    """What `report --out` writes, by name: report.html, report.json and the PNGs."""
    with tempfile.TemporaryDirectory(prefix=".autotune-plots-") as plots:
        write_pngs(doc, Path(plots))
        files: dict[str, str | bytes] = {p.name: p.read_bytes() for p in sorted(Path(plots).iterdir())}
    files["report.json"] = json.dumps(doc, indent=2, default=str) + "\n"
    files["report.html"] = render_html(doc)
    return files


def write_report_dir(doc: dict[str, Any], folder: str | Path) -> Path:
    """report.html, report.json and the PNGs into `folder` (checked by
    `autotune.report.files.prepare_out_dir` first): all or nothing, and nothing else in the
    folder is touched."""
    folder = Path(folder)
    write_files(folder, report_dir_files(doc), kind=REPORT)
    return folder
