"""`autotune export`: the chosen configuration as files the real launchers accept.

    autotune export --pick cheapest --out launch/            # within the sweep's budget/deadline
    autotune export --pick 12 --offer lambda-h100-sxm --out launch/ --study llama
    autotune export --pick cheapest --for hf-trainer --out launch/   # Trainer flags + "auto" DeepSpeed JSON
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

import typer

from autotune.cli.catalog import provider_option, region_option
from autotune.cli.common import console, storage_file_option, storage_option
from autotune.contract import Launcher


def register(app: typer.Typer) -> None:
    app.command(name="export")(export)


def export(
    pick: str = typer.Option(..., "--pick",
                             help="cheapest | fastest (the picks `autotune report` names) | a trial number"),
    out: Path = typer.Option(..., "--out", help="folder to write (new, empty or an earlier export's; see --force)"),
    offer: Optional[str] = typer.Option(None, "--offer", help="price on this catalog offer"),
    study: str = typer.Option("default", "--study", help="study name"),
    storage: Optional[str] = storage_option(),
    storage_file: Optional[Path] = storage_file_option(),
    launcher: Optional[Launcher] = typer.Option(
        None, "--launcher", help="launcher of launch.sh (default: the trial's)"),
    max_usd: Optional[float] = typer.Option(
        None, "--max-usd", help="budget in dollars, above 0 (default: the sweep spec's)"),
    deadline_hours: Optional[float] = typer.Option(
        None, "--deadline-hours", help="deadline in hours, above 0 (default: the sweep spec's)"),
    force: bool = typer.Option(
        False, "--force", help="write into an --out folder that holds other files: yours, ones changed since "
                               "autotune wrote them, a report's (they are kept; one under a name the export "
                               "writes is refused)"),
    provider: Optional[list[str]] = provider_option(),
    region: Optional[list[str]] = region_option(),
    target: str = typer.Option(
        "script", "--for",
        help="script: accelerate config, DeepSpeed JSON and launch.sh for your training script; hf-trainer: Trainer "
             "flags and a DeepSpeed JSON with \"auto\""),
    as_json: bool = typer.Option(False, "--json", help="print what was written as one JSON document"),
) -> None:
    """Write accelerate config, DeepSpeed config (ZeRO), launch.sh and the projected bill."""
    from autotune.names import check_study_name
    from autotune.report.build import collect
    from autotune.report.export import BILL_MD, EXPORT_TARGETS, plan_export, write_export
    from autotune.report.export_bill import projected_text
    from autotune.report.files import check_out_path
    from autotune.run.storage import resolve_storage
    from autotune.search.study import open_study

    if target not in EXPORT_TARGETS:
        from autotune.errors import UserError

        raise UserError(f"--for '{target}' is not one of {', '.join(EXPORT_TARGETS)}",
                        fix="e.g. --for hf-trainer (Hugging Face Trainer) or leave it out")
    url = resolve_storage(storage, storage_file)
    st = open_study(url, check_study_name(study), create=False)
    # The path itself before any work; what the folder holds once the files it gets are known
    # (write_export). Nothing is written on a refusal.
    check_out_path(out)
    doc = collect(st, max_usd=max_usd, deadline_hours=deadline_hours, storage_url=url,
                  providers=provider, regions=region)
    trials = {t.number: t for t in st.get_trials(deepcopy=False)}
    plan = plan_export(doc, trials, pick, offer=offer, launcher=launcher, target=target)
    paths = write_export(plan, out, force=force)
    o = plan.option
    if as_json:
        from autotune.cli.common import print_json

        print_json({"study": plan.study, "trial": plan.trial, "pick": plan.pick, "for": plan.target,
                    "launcher": plan.launcher.value, "out": str(out.resolve()),
                    "files": [str(p) for p in paths], "launch": str((out / "launch.sh").resolve()),
                    "option": o, "memory_fit": plan.trial_row.get("memory_fit")})
        return
    con = console()
    where = (f" on {o['offer']}: {projected_text(o)} (from {o['basis_kind']} tokens/s)" if o
             else " (not priced)")
    con.print(f"exported {plan.label}{where}")
    fit = plan.trial_row.get("memory_fit")
    if fit and not fit["headroom"]:  # the long run may not fit: said here, not only in bill.md
        from autotune.report.memory_fit import fit_text
        from autotune.report.schema import MemoryFitRow

        con.print(f"[yellow]little memory headroom:[/] {fit_text(MemoryFitRow(**fit))} (bill.md says "
                  "what would give it some)")
    from autotune.report.out_path import shown_path

    for p in paths:  # as `autotune report --out` lists its files: from here where that is shorter
        con.print(f"  {shown_path(p)}", markup=False, highlight=False)
    con.print(f"run: {shlex.quote(str(out / 'launch.sh'))} train.py ...   (the bill: {out / BILL_MD})")
