"""`autotune report`: a study's Pareto set of (config, offer), the cheapest and fastest within
the limits, failures and memory; as tables, JSON, an HTML page or a folder with plots.

    autotune report --study default [--json]
    autotune report --study default --out report/ --deadline-hours 72 --max-usd 500
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from autotune.cli.catalog import provider_option, region_option
from autotune.cli.common import console, print_json, storage_file_option, storage_option


def register(app: typer.Typer) -> None:
    app.command()(report)


def report(
    study: str = typer.Option("default", help="study name"),
    storage: Optional[str] = storage_option(),
    storage_file: Optional[Path] = storage_file_option(),
    as_json: bool = typer.Option(False, "--json", help="print one JSON document (docs/report_schema.md)"),
    html: Optional[Path] = typer.Option(
        None, "--html", help="write a self-contained HTML page here (a new file, or a page autotune wrote that "
                             "nobody changed since: an edited page is never replaced)"),
    out: Optional[Path] = typer.Option(
        None, "--out", help="write report.html, report.json and PNG plots into this folder (new, empty or an "
                            "earlier report's; see --force)"),
    max_usd: Optional[float] = typer.Option(
        None, "--max-usd", help="budget in dollars, above 0 (default: the sweep spec's)"),
    deadline_hours: Optional[float] = typer.Option(
        None, "--deadline-hours", help="deadline in hours, above 0 (default: the sweep spec's)"),
    provider: Optional[list[str]] = provider_option(),
    region: Optional[list[str]] = region_option(),
    force: bool = typer.Option(
        False, "--force",
        help="write into an --out folder holding other files: yours, ones changed since autotune wrote them, an "
             "export's (they are kept; one under a name the report writes is refused: a file of yours, an edited "
             "report.json included, is never replaced)"),
) -> None:
    """Print a study's Pareto set of (config, offer), the cheapest and fastest within limits, failures."""
    from autotune.errors import require_extra
    from autotune.names import check_study_name
    from autotune.report.build import collect
    from autotune.report.terminal import print_report
    from autotune.run.storage import resolve_storage
    from autotune.search.study import open_study

    if out is not None:  # --out report.json: a file was meant, not a folder of that name
        from autotune.report.out_path import refuse_file_name

        refuse_file_name(out)
    # The optional report packages, checked before any work (nothing half-written).
    if html is not None:
        require_extra(("plotly",), "report", "report --html")
    if out is not None:
        require_extra(("plotly", "matplotlib"), "report", "report --out")
    url = resolve_storage(storage, storage_file)
    doc = collect(open_study(url, check_study_name(study), create=False), max_usd=max_usd,
                  deadline_hours=deadline_hours, storage_url=url, providers=provider, regions=region)
    written = _write(doc, html, out, force) if html is not None or out is not None else []
    if as_json:
        print_json(doc)
    else:
        from autotune.report.out_path import shown_path

        print_report(doc, console())
        if html is not None:
            console().print(f"wrote {html}", markup=False)
        if out is not None:  # each file, as `autotune export` lists its own
            console().print(f"wrote {len(written)} files into {shown_path(written[0].parent)}:", markup=False)
            for p in written:
                console().print(f"  {shown_path(p)}", markup=False)


def _write(doc: dict, html: Optional[Path], out: Optional[Path], force: bool) -> list[Path]:
    """The --html page and the --out folder (autotune.report.files): both targets are checked
    before either is written, so a refusal leaves nothing half-written. The folder's path
    first; what it holds once the names of its files are known. Returns the folder's files
    written (none without --out)."""
    from autotune.report.files import (
        REPORT,
        check_out_path,
        prepare_out_dir,
        refuse_changed_page,
        signed_page,
        write_files,
        write_text_atomic,
    )
    from autotune.report.html import prepare_html_path, render_html, report_dir_files

    html_path = prepare_html_path(html) if html is not None else None
    if html_path is not None:  # a page autotune wrote, but edited since: the user's now
        refuse_changed_page(html_path, "--html")
    out_dir = check_out_path(out) if out is not None else None
    files = report_dir_files(doc) if out_dir is not None else {}
    if out_dir is not None:
        prepare_out_dir(out_dir, force, names=files, kind=REPORT)
    if html_path is not None:
        write_text_atomic(html_path, signed_page(render_html(doc)), "--html")
    return write_files(out_dir, files, kind=REPORT) if out_dir is not None else []
