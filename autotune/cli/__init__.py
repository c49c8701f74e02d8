"""The `autotune` command line. No torch import on this path: the CLI starts fast.

    autotune sweep                          # the default example sweep on this machine
    autotune sweep my_sweep.yaml --trials 20 --storage postgresql://... --study llama-8b
    autotune report --study default [--json]
    autotune trial config.json [--json]     # one trial outside any study

User errors print one message (no traceback; `--debug` shows it) and exit with code 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from autotune.cli.catalog import provider_option, region_option
from autotune.errors import EXIT_USER_ERROR, UserError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Pick the cheapest way to reach an LLM training target, by measuring it.")

_STORAGE_HELP = "Optuna storage URL (default sqlite:///autotune.db in this folder)"


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


@app.command()
def sweep(
    spec_file: Optional[Path] = typer.Argument(None, help="sweep spec YAML; none: the built-in example"),
    trials: Optional[int] = typer.Option(None, "--trials", "-n", min=1, help="trials to launch in this invocation (a config already measured is reused, not counted)"),
    storage: Optional[str] = typer.Option(None, help=_STORAGE_HELP),
    study: Optional[str] = typer.Option(None, help="study name (same name again = resume)"),
    space: Optional[str] = typer.Option(None, help="search space name or YAML path"),
    runs_dir: Path = typer.Option(Path("autotune_runs"), help="folder for trial folders"),
    total_trials: Optional[int] = typer.Option(None, min=1, help="stop once the study holds this many finished trials (all machines)"),
    max_gpu_hours: Optional[float] = typer.Option(None, min=0.0, help="stop once trials have used this many GPU-hours (wall time x ranks)"),
    max_search_usd: Optional[float] = typer.Option(None, min=0.0, help="stop once trials have cost this many dollars"),
    patience: Optional[int] = typer.Option(None, min=1, help="stop when the Pareto front has not improved for this many trials"),
) -> None:
    """Run an Optuna study of short real training runs; resumes if the study exists.

    Several machines with the same --storage and --study work on one study. Ctrl-C finishes
    the running trial and stops; Ctrl-C twice fails it at once (exit code 130 either way)."""
    from autotune.spec import default_spec, load_spec

    spec = load_spec(spec_file) if spec_file else default_spec()
    updates = {k: v for k, v in (("storage", storage), ("study", study), ("space", space)) if v}
    spec = spec.model_copy(update=updates)
    budget_flags = {k: v for k, v in (("total_trials", total_trials), ("search_gpu_hours", max_gpu_hours),
                                      ("search_usd", max_search_usd), ("patience_trials", patience))
                    if v is not None}
    if budget_flags:
        spec = spec.model_copy(update={"budget": spec.budget.model_copy(update=budget_flags)})
    n_trials = trials or spec.budget.trials

    from autotune.report.build import collect, config_summary, fmt_bytes, fmt_hours, fmt_usd, print_report
    from autotune.search.sweep import DEFAULT_STORAGE, open_study, redact_url, run_sweep

    # Validate the space and hardware restriction before touching the study.
    from autotune.run.hardware import local_hardware
    from autotune.search.space import capabilities_for, load_space, restrict

    hw = local_hardware()
    n_heads = spec.workload.resolved_shape().n_heads if spec.workload.kind == "gpt" else None
    rs = restrict(load_space(spec.space), capabilities_for(hw, spec.trial.threads_per_rank), n_heads)
    from autotune.pricing.catalog import load_catalog

    catalog = load_catalog(spec.platforms.catalog)
    for name in spec.platforms.offers or []:
        catalog.offer(name)  # a typo fails here, before any trial runs ("did you mean")

    console = _console()
    st = open_study(spec.storage, spec.study, seed=spec.seed)
    from autotune.search.sweep import was_launched

    before = sum(1 for t in st.get_trials(deepcopy=False) if was_launched(t))
    url = redact_url(spec.storage or DEFAULT_STORAGE)
    console.print(f"[bold]autotune sweep[/]: study '{spec.study}' in {url} "
                  f"({before} trials measured so far), {n_trials} more on {hw.device_name} "
                  f"x{hw.device_count}")
    if rs.dropped:
        console.print("  not offered on this machine: " + "; ".join(
            f"{k} {[getattr(v, 'value', v) for v in vs]}" for k, vs in rs.dropped.items()))

    def on_trial(o) -> None:
        r = o.result
        if o.reused_from is not None:
            console.print(f"  trial {o.number:>3}  [cyan]reused[/] trial {o.reused_from} (same config, "
                          f"same hardware): {r.status.value}  {config_summary(o.config.model_dump(mode='json'))}"
                          + (f"  -> {fmt_hours(o.hours)}, {fmt_usd(o.usd)}" if r.ok else ""))
        elif r.ok:
            console.print(f"  trial {o.number:>3}  [green]ok[/]  {config_summary(o.config.model_dump(mode='json'))}"
                          f"  {r.tokens_per_s:,.0f} tok/s  mem {fmt_bytes(r.peak_mem_bytes)}"
                          f"  -> {fmt_hours(o.hours)}, {fmt_usd(o.usd)}  ({r.wall_s:.0f}s)")
        else:
            console.print(f"  trial {o.number:>3}  [yellow]{r.status.value}[/]  "
                          f"{config_summary(o.config.model_dump(mode='json'))}  {r.error_type or ''}: "
                          f"{(r.error or '').splitlines()[0] if r.error else ''}")

    if max(rs.zero_stage) > 0:
        from autotune.run.launch import prebuild_deepspeed_ops

        console.print("  DeepSpeed ops: building once, outside any trial's timeout (cached after)...")
        from autotune.contract import Offload

        ok, out = prebuild_deepspeed_ops(hw.device_kind,
                                         offload=any(o is not Offload.none for o in rs.offload))
        if not ok:
            console.print(f"  [yellow]DeepSpeed ops did not build[/]: {out.splitlines()[-1] if out else ''}; "
                          "ZeRO trials will say why")
    runs = runs_dir / spec.study
    from autotune.report.progress import SweepProgress
    from autotune.report.build import record_spec

    record_spec(st, spec)  # the report's limits and catalog
    progress = SweepProgress(console, st, n_trials)
    with progress:  # live: done / running / pruned / failed, best by cost and time, search cost
        summary = run_sweep(spec, st, n_trials, runs, on_trial=progress.wrap(on_trial),
                            note=lambda msg: console.print(f"  {msg}"))
    if summary.stop_reason:
        console.print(f"stopped: {summary.stop_reason}")
    console.print()
    print_report(collect(st), console)
    if summary.interrupted:
        raise typer.Exit(130)


@app.command()
def report(
    study: str = typer.Option("default", help="study name"),
    storage: Optional[str] = typer.Option(None, help=_STORAGE_HELP),
    as_json: bool = typer.Option(False, "--json", help="print one JSON document (docs/report_schema.md)"),
    html: Optional[Path] = typer.Option(None, "--html", help="write a self-contained HTML page here"),
    out: Optional[Path] = typer.Option(None, "--out", help="write report.html, report.json and PNG plots into this folder"),
    max_usd: Optional[float] = typer.Option(None, "--max-usd", min=0, help="budget (default: the sweep spec's)"),
    deadline_hours: Optional[float] = typer.Option(None, "--deadline-hours", min=0, help="deadline (default: the sweep spec's)"),
    provider: Optional[list[str]] = provider_option(),
    region: Optional[list[str]] = region_option(),
) -> None:
    """Print a study's Pareto set of (config, offer), the cheapest and fastest within limits, failures."""
    from autotune.report.build import collect, print_report
    from autotune.search.sweep import DEFAULT_STORAGE, open_study

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
        print_report(doc, _console())
        for path in ([html] if html else []) + ([out] if out else []):
            _console().print(f"wrote {path}")


@app.command()
def trial(
    config_file: Path = typer.Argument(..., help="TrialConfig JSON"),
    out: Path = typer.Option(Path("autotune_runs/single"), help="trial folder"),
    as_json: bool = typer.Option(False, "--json", help="print the TrialResult JSON"),
) -> None:
    """Run one trial outside any study (the small run before the long one)."""
    from pydantic import ValidationError

    from autotune.contract import TrialConfig
    from autotune.errors import format_validation_error
    from autotune.run.launch import run_trial

    if not config_file.is_file():
        raise UserError(f"config file '{config_file}' does not exist", fix="check the path")
    try:
        cfg = TrialConfig.model_validate_json(config_file.read_text())
    except ValidationError as exc:
        raise UserError(format_validation_error(config_file, exc),
                        fix="see autotune/contract/__init__.py TrialConfig for the fields") from None
    result = run_trial(cfg, out)
    if as_json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        from autotune.report.build import fmt_bytes

        c = _console()
        c.print(f"status: {result.status.value}" + (f" ({result.error_type}: {result.error})" if not result.ok else ""))
        if result.ok:
            r, obs = result, result.observations
            c.print(f"tokens/s: {r.tokens_per_s:,.0f} ({r.tokens_per_s_per_rank:,.0f} per rank, "
                    f"{r.world_size} ranks)  samples/s: {r.samples_per_s:,.1f}")
            c.print(f"step: median {r.step_time_median_s:.4f}s p90 {r.step_time_p90_s:.4f}s "
                    f"cv {r.step_time_cv:.2f} over {r.measured_steps} steps after {r.warmup_steps} warm-up")
            pct = lambda v: "n/a" if v is None else f"{v:.1%}"  # noqa: E731
            c.print(f"MFU {pct(r.mfu)}  HFU {pct(r.hfu)}  FLOPs/token {r.flops_per_token or 0:.3g}"
                    f"  params {r.params or 0:,}")
            c.print(f"peak memory: {fmt_bytes(r.peak_mem_bytes)} ({r.peak_mem_source.value})")
            if "activation_saved_bytes" in obs:
                c.print(f"activations saved for backward: {fmt_bytes(obs['activation_saved_bytes'])} "
                        f"per micro-step ({obs.get('activation_dtype')})")
            gns = "not measured" if r.gradient_noise_scale is None else f"{r.gradient_noise_scale:,.1f} samples"
            c.print(f"gradient noise scale: {gns}")
            c.print(f"final loss: {r.final_loss:.4f}  folder: {out}")
            for note in r.notes:
                c.print(f"  note: {note}")
    if not result.ok:
        raise typer.Exit(1)


def _register_commands() -> None:
    """Commands that live in their own modules: each module has `register(app)`.

    Keep imports inside those `register` functions light (no torch)."""
    from autotune.cli import cost, estimate, export, study

    for register in (estimate.register, study.register, cost.register, export.register):
        register(app)


_register_commands()


def main() -> None:
    debug = "--debug" in sys.argv
    if debug:
        sys.argv.remove("--debug")
    try:
        app()
    except UserError as exc:
        if debug:
            raise
        _console(stderr=True).print(f"[red]error:[/] {exc}", soft_wrap=True)
        sys.exit(EXIT_USER_ERROR)
    except KeyboardInterrupt:  # Ctrl-C outside a trial (opening the study, printing)
        _console(stderr=True).print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
