"""`autotune sweep`: run (or resume) a study of short real training runs on this machine.

    autotune sweep                          # the default example sweep on this machine
    autotune sweep my_sweep.yaml --trials 20 --storage postgresql://... --study llama-8b
    autotune sweep spec.yaml --max-gpu-hours 4 --patience 8
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from autotune.cli.common import console, storage_file_option, storage_option


def register(app: typer.Typer) -> None:
    app.command()(sweep)


def sweep(
    spec_file: Optional[Path] = typer.Argument(None, help="sweep spec YAML; none: the built-in example"),
    trials: Optional[int] = typer.Option(None, "--trials", "-n", min=1, help="trials to launch in this invocation (a config already measured is reused, not counted)"),
    storage: Optional[str] = storage_option(),
    storage_file: Optional[Path] = storage_file_option(),
    study: Optional[str] = typer.Option(None, help="study name (same name again = resume)"),
    space: Optional[str] = typer.Option(None, help="search space name or YAML path"),
    runs_dir: Path = typer.Option(Path("autotune_runs"), help="folder for trial folders"),
    total_trials: Optional[int] = typer.Option(None, min=1, help="stop once the study holds this many finished trials (all machines)"),
    max_gpu_hours: Optional[float] = typer.Option(None, help="stop once trials have used this many GPU-hours (wall time x ranks; > 0)"),
    max_search_usd: Optional[float] = typer.Option(None, help="stop once trials have cost this many dollars (> 0)"),
    patience: Optional[int] = typer.Option(None, min=1, help="stop when the Pareto front has not improved for this many trials"),
) -> None:
    """Run an Optuna study of short real training runs; resumes if the study exists.

    Several machines with the same --storage and --study work on one study. Ctrl-C finishes
    the running trial and stops; Ctrl-C twice fails it at once (exit code 130 either way)."""
    from autotune.run.storage import resolve_storage
    from autotune.spec import default_spec, load_spec

    spec = load_spec(spec_file) if spec_file else default_spec()
    # Flags go through the spec's own validation: the same rules as the file's fields.
    spec = spec.with_overrides(**{
        "storage": resolve_storage(storage, storage_file, spec.storage), "study": study,
        "space": space, "budget.total_trials": total_trials, "budget.search_gpu_hours": max_gpu_hours,
        "budget.search_usd": max_search_usd, "budget.patience_trials": patience})
    n_trials = trials or spec.budget.trials

    from autotune.format import fmt_bytes, fmt_hours, fmt_usd
    from autotune.record import TrialRecord
    from autotune.report.build import collect
    from autotune.report.labels import config_summary
    from autotune.report.terminal import print_report
    from autotune.run.storage import redact_url
    from autotune.search.study import open_study, record_sweep
    from autotune.search.sweep import run_sweep

    # Validate the space and hardware restriction before touching the study.
    from autotune.run.hardware import local_hardware
    from autotune.search.space import capabilities_for, load_space, restrict

    hw = local_hardware()
    n_heads = spec.workload.resolved_shape().n_heads if spec.workload.kind == "gpt" else None
    rs = restrict(load_space(spec.space), capabilities_for(hw, spec.trial.threads_per_rank), n_heads)
    from autotune.pricing.load import load_catalog

    catalog = load_catalog(spec.platforms.catalog)
    for name in spec.platforms.offers or []:
        catalog.offer(name)  # a typo fails here, before any trial runs ("did you mean")
    from autotune.run.preflight import check_workload

    check_workload(spec)  # a workload that cannot build ends here, not in every trial

    con = console()
    st = open_study(spec.storage, spec.study, seed=spec.seed)
    before = sum(1 for t in st.get_trials(deepcopy=False) if TrialRecord.of(t).launched)
    url = redact_url(spec.storage)
    con.print(f"[bold]autotune sweep[/]: study '{spec.study}' in {url} "
              f"({before} trials measured so far), {n_trials} more on {hw.device_name} "
              f"x{hw.device_count}")
    if rs.dropped:
        con.print("  not offered on this machine: " + "; ".join(
            f"{k} {[getattr(v, 'value', v) for v in vs]}" for k, vs in rs.dropped.items()))

    def on_trial(o) -> None:
        r = o.result
        if o.reused_from is not None:
            con.print(f"  trial {o.number:>3}  [cyan]reused[/] trial {o.reused_from} (same config, "
                      f"same hardware): {r.status.value}  {config_summary(o.config.model_dump(mode='json'))}"
                      + (f"  -> {fmt_hours(o.hours)}, {fmt_usd(o.usd)}" if r.ok else ""))
        elif r.ok:
            con.print(f"  trial {o.number:>3}  [green]ok[/]  {config_summary(o.config.model_dump(mode='json'))}"
                      f"  {r.tokens_per_s:,.0f} tok/s  mem {fmt_bytes(r.peak_mem_bytes)}"
                      f"  -> {fmt_hours(o.hours)}, {fmt_usd(o.usd)}  ({r.wall_s:.0f}s)")
        else:
            con.print(f"  trial {o.number:>3}  [yellow]{r.status.value}[/]  "
                      f"{config_summary(o.config.model_dump(mode='json'))}  {r.error_type or ''}: "
                      f"{(r.error or '').splitlines()[0] if r.error else ''}")

    if max(rs.zero_stage) > 0:
        from autotune.run.launch import prebuild_deepspeed_ops

        con.print("  DeepSpeed ops: building once, outside any trial's timeout (cached after)...")
        from autotune.contract import Offload

        ok, log = prebuild_deepspeed_ops(hw.device_kind,
                                         offload=any(o is not Offload.none for o in rs.offload))
        if not ok:
            con.print(f"  [yellow]DeepSpeed ops did not build[/]: {log.splitlines()[-1] if log else ''}; "
                      "ZeRO trials will say why")
    runs = runs_dir / spec.study
    from autotune.report.progress import SweepProgress

    record_sweep(st, spec)  # the report's limits and catalog
    progress = SweepProgress(con, st, n_trials)
    with progress:  # live: done / running / pruned / failed, best by cost and time, search cost
        summary = run_sweep(spec, st, n_trials, runs, on_trial=progress.wrap(on_trial),
                            note=lambda msg: con.print(f"  {msg}"), catalog=catalog)
    if summary.stop_reason:
        con.print(f"stopped: {summary.stop_reason}")
    con.print()
    doc = collect(st)
    print_report(doc, con)
    if summary.interrupted:
        raise typer.Exit(130)
    if summary.trials_run and not any(t.get("status") == "ok" for t in doc["trials"]):
        # Nothing in the study was measured: there is nothing to recommend, and a script (or
        # CI) must not read this sweep as a success.
        con.print(f"[red]no trial of this study succeeded[/] ({summary.trials_run} launched by this "
                  "sweep); the failures are listed above by error type")
        raise typer.Exit(1)
