"""`autotune report`: a study's Pareto set of (config, offer), the cheapest and fastest within
the limits, failures and memory; as tables, JSON, an HTML page or a folder with plots.

    autotune report --study default [--json]
    autotune report --study default --out report/ --deadline-hours 72 --max-usd 500
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from autotune.cli.catalog import provider_option, region_option
from autotune.cli.common import STORAGE_HELP, console


def register(app: typer.Typer) -> None:
    app.command()(report)


def report(
    study: str = typer.Option("default", help="study name"),
    storage: Optional[str] = typer.Option(None, help=STORAGE_HELP),
    as_json: bool = typer.Option(False, "--json", help="print one JSON document (docs/report_schema.md)"),
    html: Optional[Path] = typer.Option(None, "--html", help="write a self-contained HTML page here"),
    out: Optional[Path] = typer.Option(None, "--out", help="write report.html, report.json and PNG plots into this folder"),
    max_usd: Optional[float] = typer.Option(None, "--max-usd", min=0, help="budget (default: the sweep spec's)"),
    deadline_hours: Optional[float] = typer.Option(None, "--deadline-hours", min=0, help="deadline (default: the sweep spec's)"),
    provider: Optional[list[str]] = provider_option(),
    region: Optional[list[str]] = region_option(),
) -> None:
    """Print a study's Pareto set of (config, offer), the cheapest and fastest within limits, failures."""
    from autotune.report.build import collect
    from autotune.report.terminal import print_report
    from autotune.run.storage import DEFAULT_STORAGE
    from autotune.search.study import open_study

    doc = collect(open_study(storage, study, create=False), max_usd=max_usd,
                  deadline_hours=deadline_hours, storage_url=storage or DEFAULT_STORAGE,
                  providers=provider, regions=region)
    if html is not None or out is not None:
        from autotune.report.html import write_html, write_report_dir

        if html is not None:
            write_html(doc, html)
        if out is not None:
            write_report_dir(doc, out)
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    else:
        print_report(doc, console())
        for path in ([html] if html else []) + ([out] if out else []):
            console().print(f"wrote {path}")
