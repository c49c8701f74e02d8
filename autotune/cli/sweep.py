"""`autotune sweep`: run (or resume) a study of short real training runs on this machine.

    autotune sweep                          # the default example sweep on this machine
    autotune sweep my_sweep.yaml --trials 20 --storage postgresql://... --study llama-8b
    autotune sweep spec.yaml --max-gpu-hours 4 --patience 8
    autotune sweep --trials 1 --json        # the result as one JSON document (progress on stderr)
    autotune sweep spec.yaml --storage-file db-url --slurm-jobs 4 --sbatch-arg=--gres=gpu:4
    autotune sweep spec.yaml --study llama --skypilot-task h100-sxm:8 --skypilot-task h200:8
    autotune sweep spec.yaml --trials 8 --side-by-side 2 --storage journal:///abs/study.log
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from autotune.cli.common import console, storage_file_option, storage_option

# Trial folders go here unless --runs-dir says otherwise (a SkyPilot task forwards another one).
RUNS_DIR = Path("autotune_runs")


def register(app: typer.Typer) -> None:
    app.command()(sweep)


def sweep(
    spec_file: Optional[Path] = typer.Argument(None, help="sweep spec YAML; none: the built-in example"),
    trials: Optional[int] = typer.Option(
        None, "--trials", "-n", min=1,
        help="trials to launch in this invocation (a config already measured is reused, not counted)"),
    storage: Optional[str] = storage_option(spec=True),
    storage_file: Optional[Path] = storage_file_option(),
    study: Optional[str] = typer.Option(None, help="study name (same name again = resume)"),
    space: Optional[str] = typer.Option(None, help="search space name or YAML path"),
    runs_dir: Path = typer.Option(RUNS_DIR, help="folder for trial folders"),
    total_trials: Optional[int] = typer.Option(
        None, min=1, help="stop once the study holds this many finished trials (all machines)"),
    max_gpu_hours: Optional[float] = typer.Option(
        None, help="stop once trials have used this many GPU-hours (wall time x ranks; > 0)"),
    max_search_usd: Optional[float] = typer.Option(None, help="stop once trials have cost this many dollars (> 0)"),
    patience: Optional[int] = typer.Option(
        None, min=1, help="stop when the Pareto front has not improved for this many trials"),
    as_json: bool = typer.Option(
        False, "--json", help="print the result as one JSON document on stdout (progress on stderr)"),
    slurm_jobs: Optional[int] = typer.Option(
        None, "--slurm-jobs", min=1,
        help="submit this many sweep workers as Slurm jobs (sbatch) instead of running here; each runs "
             "--trials trials in its own allocation, detecting its hardware there, into the same study "
             "(PostgreSQL, or a journal file every node sees)"),
    sbatch_args: Optional[list[str]] = typer.Option(
        None, "--sbatch-arg",
        help="an sbatch option for every job of --slurm-jobs, e.g. --sbatch-arg=--gres=gpu:4 (repeat for more)"),
    skypilot_tasks: Optional[list[str]] = typer.Option(
        None, "--skypilot-task",
        help="write a SkyPilot task that runs a sweep worker on GPU[:COUNT] of the catalog (e.g. h100-sxm:8) "
             "into this study, instead of running here (repeat for more types)"),
    tasks_dir: Optional[Path] = typer.Option(None, help="folder for the --skypilot-task files (default: skypilot)"),
    side_by_side: Optional[int] = typer.Option(
        None, "--side-by-side", min=1,
        help="run this many trials at once on disjoint GPUs (CPU: cores), then re-measure the picks alone; "
             "needs a journal or server storage"),
) -> None:
    """Run an Optuna study of short real training runs; resumes if the study exists.

    Several machines with the same --storage and --study work on one study. Ctrl-C finishes
    the running trial and stops; Ctrl-C twice fails it at once (exit code 130 either way);
    SIGTERM (kill, scancel) fails it at once and queues it again (exit code 143); so does
    SIGHUP, its terminal closing (exit 129), unless run under nohup. Output into a pipe
    whose reader left (`| head`): the trial just measured is kept, then it stops (exit 141).
    Ends with the pick, the Pareto set in short and the next command; `autotune report` has
    the rest."""
    from autotune.api.sweep import load, prepare, run
    from autotune.report.build import collect
    from autotune.report.labels import outcome_line
    from autotune.report.progress import SweepProgress
    from autotune.run.storage import resolve_storage
    from autotune.search.interrupt import EXIT_OUTPUT_CLOSED, output_closed

    spec = load(spec_file)
    storage_url = resolve_storage(storage, storage_file, spec.storage)
    # Flags go through the spec's own validation: the same rules as the file's fields.
    spec = spec.with_flags({
        "storage": ("--storage", storage_url), "study": ("--study", study), "space": ("--space", space),
        "budget.total_trials": ("--total-trials", total_trials),
        "budget.search_gpu_hours": ("--max-gpu-hours", max_gpu_hours),
        "budget.search_usd": ("--max-search-usd", max_search_usd),
        "budget.patience_trials": ("--patience", patience)})
    n_trials = trials or spec.budget.trials
    flags = [("--trials", trials), ("--space", space), ("--total-trials", total_trials),
             ("--max-gpu-hours", max_gpu_hours), ("--max-search-usd", max_search_usd), ("--patience", patience)]
    forwarded = [str(w) for flag, value in flags if value is not None for w in (flag, value)]
    if _elsewhere(spec, spec_file, storage_file, runs_dir, as_json, forwarded, slurm_jobs, sbatch_args or [],
                  skypilot_tasks or [], tasks_dir, side_by_side, storage_flag=storage is not None):
        return
    if side_by_side:
        from autotune.api.side_by_side import check

        check(spec, side_by_side)  # storage and room for the slots, before the study is touched
    session = prepare(spec, runs_dir)  # everything checked before the study is touched
    # With --json, stdout holds the document alone. keep_going: a reader that leaves (`| head`)
    # stops the sweep once the trial it was being told about is recorded (the StopRule).
    con = console(stderr=as_json, keep_going=True)
    _header(con, session, storage_url, n_trials)
    if output_closed():  # nothing launched yet: say why where it still can be read, as _exit does
        from autotune.search.interrupt import OUTPUT_CLOSED_REASON

        console(stderr=True).print(f"autotune sweep: stopped: {OUTPUT_CLOSED_REASON}", soft_wrap=True, markup=False)
        raise typer.Exit(EXIT_OUTPUT_CLOSED)
    if side_by_side:  # each worker prints its own trial lines, prefixed with its slot
        summary = _side_by_side(session, n_trials, runs_dir, side_by_side, con, as_json)
    else:
        progress = SweepProgress(con, session.study, n_trials)
        with progress:  # live: done / running / pruned / failed, best by cost and time, search cost
            summary = run(session, n_trials, runs_dir,
                          on_trial=progress.wrap(lambda o: con.print(outcome_line(o, con.width), markup=False,
                                                                     soft_wrap=True)),
                          note=lambda msg: con.print(f"  {msg}", soft_wrap=True))
    if summary.stop_reason:
        con.print(f"stopped: {summary.stop_reason}", soft_wrap=True)
    doc = collect(session.study, storage_url=spec.storage)  # as `autotune report --json` names it
    failed = summary.trials_run and not any(t.get("status") == "ok" for t in doc["trials"])
    _result(con, doc, summary, next_commands(spec, storage_file, picked=doc["cheapest"] is not None,
                                             priced=bool(doc["options"]), interrupted=summary.interrupted),
            as_json)
    _exit(con, summary, failed)


def _exit(con, summary, failed: bool) -> None:
    """The sweep's exit code where it is not 0: stopped by a signal, by its output's reader
    leaving, by Ctrl-C; or nothing of the study measured."""
    from autotune.search.interrupt import EXIT_OUTPUT_CLOSED, OUTPUT_CLOSED_REASON, output_closed, terminated_exit_code

    if summary.terminated:
        raise typer.Exit(terminated_exit_code())
    if output_closed():
        # The lines above went to /dev/null: say why it stopped where it still can be read.
        console(stderr=True).print(f"autotune sweep: stopped: {summary.stop_reason or OUTPUT_CLOSED_REASON}",
                                   soft_wrap=True, markup=False)
        raise typer.Exit(EXIT_OUTPUT_CLOSED)
    if summary.interrupted:
        raise typer.Exit(130)
    if failed:
        # Nothing in the study was measured: there is nothing to recommend, and a script (or
        # CI) must not read this sweep as a success.
        con.print(f"[red]no trial of this study succeeded[/] ({summary.trials_run} launched by this "
                  "sweep); `autotune report` lists the failures by error type")
        raise typer.Exit(1)


def _header(con, session, storage_url: str, n_trials: int) -> None:
    """What the sweep is about to do, where, and what this machine does not offer; then the
    DeepSpeed ops built once."""
    from autotune.api.sweep import prebuild
    from autotune.estimate.workload import model_shape_for
    from autotune.format import fmt_bytes
    from autotune.run.storage import redact_url

    hw, rs, spec = session.hardware, session.restricted, session.spec
    con.print(f"[bold]autotune sweep[/]: study '{spec.study}' in {redact_url(storage_url)} "
              f"({session.measured_before} trials measured so far), {n_trials} more on "
              f"{hw.device_name} x{hw.device_count}", soft_wrap=True)
    if spec.memory.limit_bytes_per_rank:  # as the spec's size was read ("80 GB" is not "80 GiB")
        con.print(f"  memory limit per rank: {fmt_bytes(spec.memory.limit_bytes_per_rank)} "
                  f"({spec.memory.limit_bytes_per_rank:,} bytes)", soft_wrap=True)
    if spec.memory.prescreen and model_shape_for(spec.workload) is None:  # else only each trial's record says so
        why = ("an entry point's model is known only once a trial builds it" if spec.workload.kind == "entry_point"
               else "its config lacks the sizes: hidden_size, num_hidden_layers, num_attention_heads, vocab_size")
        con.print(f"  memory prescreen off: the workload gives no model shape to predict memory from ({why}); "
                  "every config is launched and measured", soft_wrap=True, markup=False)
    for line, text in (("not offered on this machine", rs.dropped_text(machine=True)),
                       ("left out by the model or the space", rs.dropped_text(machine=False))):
        if text:
            con.print(f"  {line}: {text}", soft_wrap=True, markup=False)
    prebuild(session, lambda m: con.print(f"  {m}", soft_wrap=True))


def _result(con, doc: dict, summary, next_lines: list[str], as_json: bool) -> None:
    """The sweep's answer: one JSON document, or the short summary with the next commands."""
    from autotune.report.terminal import print_summary

    if as_json:
        from autotune.cli.common import print_json

        print_json({"sweep": {"trials_run": summary.trials_run, "stop_reason": summary.stop_reason,
                              "interrupted": summary.interrupted,
                              "terminated": summary.terminated, "next": next_lines},
                    "report": doc})
    else:
        con.print()
        print_summary(doc, con, next_lines)


def _elsewhere(spec, spec_file, storage_file, runs_dir, as_json: bool, forwarded: list[str],
               slurm_jobs: Optional[int], sbatch_args: list[str], skypilot_tasks: list[str],
               tasks_dir: Optional[Path], side_by_side: Optional[int], storage_flag: bool) -> bool:
    """Sweep workers that run elsewhere (Slurm jobs, SkyPilot tasks) with the flags that shape
    the search passed on; True when that is what was asked (nothing is detected or measured
    here then). A flag the workers would not get is refused before anything is written."""
    from autotune.cli.common import print_json
    from autotune.errors import UserError

    for given, needs in ((sbatch_args, "--slurm-jobs" if slurm_jobs is None else None),
                         (tasks_dir, "--skypilot-task" if not skypilot_tasks else None)):
        if given and needs:
            flag = "--sbatch-arg" if given is sbatch_args else "--tasks-dir"
            raise UserError(f"{flag} given without {needs}", fix=f"add {needs}, or drop {flag}")
    if slurm_jobs is not None and skypilot_tasks:
        raise UserError("--slurm-jobs and --skypilot-task given together", fix="give one per command")
    if side_by_side and slurm_jobs is not None:
        raise UserError("--side-by-side and --slurm-jobs given together: a Slurm job runs one trial at a time",
                        fix="drop --side-by-side; give each job its cores or GPUs (--sbatch-arg) and submit "
                            "more jobs: --slurm-jobs N")
    if side_by_side and skypilot_tasks:
        raise UserError("--side-by-side and --skypilot-task given together: a SkyPilot task runs one trial "
                        "at a time", fix="drop --side-by-side; for more trials at once launch more tasks "
                                         "(another --skypilot-task, or `sky launch -c NAME` a task again)")
    if slurm_jobs is not None:
        from autotune.cli import sweep_slurm

        result = sweep_slurm.submit_workers(spec, spec_file, storage_file, runs_dir, slurm_jobs,
                                            sbatch_args, forwarded, storage_flag=storage_flag)
        if as_json:
            print_json({"slurm": result})
        else:
            console().print(sweep_slurm.describe(result), soft_wrap=True, markup=False)
        return True
    if skypilot_tasks:
        from autotune.cli import sweep_skypilot

        if storage_flag or storage_file is not None:  # a task file is synced and kept: no secret in it
            flag = "--storage" if storage_flag else "--storage-file"
            raise UserError(f"{flag} given with --skypilot-task: a task never holds the storage URL (it "
                            "would be written into the task and synced to the cloud node)",
                            fix=f"drop {flag} and give the URL at launch: AUTOTUNE_STORAGE=... "
                                "sky launch --secret AUTOTUNE_STORAGE <task file>")
        if runs_dir != RUNS_DIR:  # where the worker keeps its trial folders, on the cloud node
            forwarded = [*forwarded, "--runs-dir", str(runs_dir)]
        paths = sweep_skypilot.write(spec, spec_file, skypilot_tasks, tasks_dir or Path("skypilot"), forwarded)
        console(stderr=as_json).print(sweep_skypilot.describe(paths), soft_wrap=True, markup=False)
        if as_json:
            print_json({"skypilot_tasks": [str(p) for p in paths]})
        return True
    return False


def _side_by_side(session, n_trials: int, runs_dir: Path, count: int, con, as_json: bool):
    import sys

    from autotune.api.side_by_side import run_side_by_side
    from autotune.search.study import record_sweep

    record_sweep(session.study, session.spec)
    summary = run_side_by_side(session, n_trials, runs_dir, count,
                               note=lambda m: con.print(f"  {m}", soft_wrap=True, markup=False),
                               stdout=sys.stderr if as_json else None)
    if summary.workers and all("exit_code" in w for w in summary.workers):
        con.print(f"[red]every sweep worker failed[/]: {summary.stop_reason}; their lines above say why",
                  soft_wrap=True)
        raise typer.Exit(1)
    return summary


def next_commands(spec, storage_file: Optional[Path], picked: bool = True, priced: bool = True,
                  interrupted: bool = False) -> list[str]:
    """The commands that go on from this sweep, with the study and storage that find it
    (never a password: a URL holding one is named through --storage-file or the variable).
    Without a pick (`picked` False) there is nothing to export: the report prices the options
    under the limits given to it instead. Without any option (`priced` False: no trial ran
    through) other limits change nothing: an interrupted sweep is resumed; otherwise the report
    says what failed."""
    from shlex import quote  # a line to paste: a path or URL with a space or a '$' stays one word

    from autotune.run.storage import STORAGE_ENV, redact_url, resolve_storage

    where = "" if spec.study == "default" else f" --study {quote(spec.study)}"
    url = spec.storage
    if url != resolve_storage(None, None):  # what export / report find without flags
        if storage_file is not None:
            where += f" --storage-file {quote(str(storage_file))}"
        elif redact_url(url) != url:
            where += f" (with {STORAGE_ENV} set to this sweep's storage)"
        else:
            where += f" --storage {quote(url)}"
    more = f"More: autotune report{where} (--out report/: HTML and plots)"
    if not priced:
        if interrupted:
            return ["Next: the same `autotune sweep` command again: it resumes the study, its queued "
                    "trials first", more]
        return [more]
    if not picked:
        at, _, env = where.partition(" (with ")
        return [f"Next: autotune report{at} --max-usd USD --deadline-hours HOURS"
                + (f" (with {env}" if env else "") + ": the options under other limits", more]
    return [f"Next: autotune export --pick cheapest --out launch/{where}", more]
