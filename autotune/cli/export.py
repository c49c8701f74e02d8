"""`autotune export`: the chosen configuration as files the real launchers accept.

    autotune export --pick cheapest --out launch/            # within the sweep's budget/deadline
    autotune export --pick 12 --offer lambda-h100-sxm --out launch/ --study llama
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from autotune.cli.catalog import provider_option, region_option
from autotune.cli.common import console
from autotune.contract import Launcher


def register(app: typer.Typer) -> None:
    app.command(name="export")(export)


def export(
    pick: str = typer.Option(..., "--pick", help="cheapest | fastest | a trial number"),
    out: Path = typer.Option(..., "--out", help="folder to write (must be new or empty; see --force)"),
    offer: Optional[str] = typer.Option(None, "--offer", help="price on this catalog offer"),
    study: str = typer.Option("default", "--study", help="study name"),
    storage: Optional[str] = typer.Option(None, "--storage", help="Optuna storage URL (default sqlite:///autotune.db)"),
    launcher: Optional[Launcher] = typer.Option(None, "--launcher", help="launcher of launch.sh (default: the trial's)"),
    max_usd: Optional[float] = typer.Option(None, "--max-usd", min=0, help="budget (default: the sweep spec's)"),
    deadline_hours: Optional[float] = typer.Option(None, "--deadline-hours", min=0, help="deadline (default: the sweep spec's)"),
    force: bool = typer.Option(False, "--force", help="replace a non-empty --out folder"),
    provider: Optional[list[str]] = provider_option(),
    region: Optional[list[str]] = region_option(),
) -> None:
    """Write accelerate config, DeepSpeed config (ZeRO), launch.sh and the projected bill."""
    from autotune.report.export import BILL_MD, plan_export, write_export
    from autotune.format import fmt_hours, fmt_usd
    from autotune.report.build import collect
    from autotune.run.storage import DEFAULT_STORAGE
    from autotune.search.study import open_study

    st = open_study(storage, study, create=False)
    doc = collect(st, max_usd=max_usd, deadline_hours=deadline_hours, storage_url=storage or DEFAULT_STORAGE,
                  providers=provider, regions=region)
    trials = {t.number: t for t in st.get_trials(deepcopy=False)}
    plan = plan_export(doc, trials, pick, offer=offer, launcher=launcher)
    paths = write_export(plan, out, force=force)
    con = console()
    o = plan.option
    where = (f" on {o['offer']}: {fmt_hours(o['hours'])}, {fmt_usd(o['usd'])} ({o['basis_kind']})" if o else " (not priced)")
    con.print(f"exported trial {plan.trial} ({plan.pick}){where}")
    for p in paths:
        con.print(f"  {p}")
    con.print(f"run: {out / 'launch.sh'} train.py ...   (the bill: {out / BILL_MD})")
