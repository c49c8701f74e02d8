"""A sweep from Python (a notebook, a script), and the steps `autotune sweep` shares with it.

    result = autotune.sweep("spec.yaml", trials=4)         # or a dict of spec fields, or None
    result.pick, result.pareto, result.report               # the report's dicts
    result.export("launch/")                                # as `autotune export --pick cheapest`

Everything a sweep can refuse (the spec, the space on this machine, the catalog's offers, the
workload) is checked before the study is touched (`prepare`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from autotune.spec import SweepSpec

if TYPE_CHECKING:
    import optuna

    from autotune.contract import HardwareFingerprint
    from autotune.pricing.catalog import Catalog
    from autotune.search.machine import MachineSpace
    from autotune.search.space import RestrictedSpace


@dataclass
class Session:
    """What a sweep has checked and opened before its first trial."""

    spec: SweepSpec
    machine: "MachineSpace"  # this machine's hardware and space, detected once
    catalog: "Catalog"
    study: "optuna.Study"
    measured_before: int

    @property
    def hardware(self) -> "HardwareFingerprint":
        return self.machine.hardware

    @property
    def restricted(self) -> "RestrictedSpace":
        return self.machine.restricted


def load(spec: str | Path | dict | SweepSpec | None, _keywords: bool = False, **overrides: Any) -> SweepSpec:
    """A spec from a YAML path, a dict of spec fields (relative paths from the current folder),
    a SweepSpec, or None (the built-in example); `overrides` with dotted names
    (`"budget.trials"`) go through the spec's own validation (`_keywords`: they were a call's
    keywords, `budget__trials`, and an error names them so)."""
    from pydantic import ValidationError

    from autotune.errors import UserError, format_validation_error
    from autotune.spec import default_spec, load_spec, resolve_relative_paths

    if spec is None:
        base = default_spec()
    elif isinstance(spec, SweepSpec):
        base = spec
    elif isinstance(spec, dict):
        try:
            base = resolve_relative_paths(SweepSpec.model_validate(spec), Path.cwd())
        except ValidationError as exc:  # "did you mean", as a spec file's typo gets
            raise UserError(format_validation_error("spec", exc, SweepSpec),
                            fix="correct the field as described (every field and its default: "
                                "docs/spec_reference.md)") from None
    else:
        base = load_spec(spec)
    return base.with_keyword_overrides(**overrides) if _keywords else base.with_overrides(**overrides)


def prepare(spec: SweepSpec, runs_dir: str | Path | None = None) -> Session:
    """Check the space on this machine, the catalog's offers, the workload and the runs folder
    RUNS_DIR/STUDY (`runs_dir`; None: not checked), then open (or create) the study and make
    that folder the study's. Raises UserError before touching the study when any is wrong."""
    from autotune.estimate.resolved import remember, write_to_study
    from autotune.pricing.load import load_catalog
    from autotune.record import TrialRecord
    from autotune.run.preflight import check_runs_dir, check_workload, runs_folder_verdict, take_runs_folder
    from autotune.run.storage import DEFAULT_STORAGE
    from autotune.search.identity import check_same_study
    from autotune.search.machine import MachineSpace
    from autotune.search.study import open_study

    catalog = load_catalog(spec.platforms.catalog)
    machine = MachineSpace.for_spec(spec, catalog)  # the space on this machine: refused here if empty
    for name in spec.platforms.offers or []:
        catalog.offer(name)  # a typo fails here, before any trial runs ("did you mean")
    resolved = check_workload(spec)  # a workload that cannot build ends here, not in every trial
    if resolved is not None:  # a family the count does not know: counted as the trials build it
        remember(spec.workload, resolved)
        machine = MachineSpace.for_spec(spec, catalog)  # its heads, which TP degrees must divide
    url = spec.storage or DEFAULT_STORAGE
    # A runs folder that cannot be written, or holds another study's trial folders, ends here:
    # before the storage (a new SQLite file) or a trial is created.
    folder = check_runs_dir(Path(runs_dir), spec.study) if runs_dir is not None else None
    verdict = runs_folder_verdict(folder, spec.study, url) if folder is not None else None
    st = open_study(spec.storage, spec.study, seed=spec.seed)
    check_same_study(st, spec)  # a study resumed with another workload or space ends here
    write_to_study(st, spec.workload, resolved)  # for a report or export in another process
    if folder is not None and verdict is not None:
        take_runs_folder(st, folder, url, verdict)
    # A trial a signal cut (Ctrl-C twice, SIGTERM) ran but measured nothing: not counted.
    before = sum(1 for t in st.get_trials(deepcopy=False)
                 if (rec := TrialRecord.of(t)).launched and rec.status != "interrupted")
    return Session(spec, machine, catalog, st, before)


def prebuild(session: Session, note: Callable[[str], None]) -> None:
    """DeepSpeed's JIT ops, built once outside any trial's timeout (cached after)."""
    if max(session.restricted.zero_stage) == 0:
        return
    from autotune.contract import Offload
    from autotune.run.launch import prebuild_deepspeed_ops

    # Said before it starts: a first build takes minutes on a small machine, a cached one seconds.
    note("DeepSpeed ops: loading them, or building them once if not cached (minutes), before any trial...")
    ok, log = prebuild_deepspeed_ops(session.hardware.device_kind,
                                     offload=any(o is not Offload.none for o in session.restricted.offload))
    if not ok:
        note(f"DeepSpeed ops did not build: {log.splitlines()[-1] if log else ''}; ZeRO trials will say why")


def run(session: Session, n_trials: int, runs_dir: Path, on_trial=None, note=None):
    """Run the sweep; returns the search's SweepSummary."""
    from autotune.search.study import record_sweep
    from autotune.search.sweep import run_sweep

    record_sweep(session.study, session.spec)  # the report's limits and catalog
    return run_sweep(session.spec, session.study, n_trials, Path(runs_dir) / session.spec.study,
                     on_trial=on_trial, note=note, catalog=session.catalog,
                     machine=session.machine)


@dataclass
class SweepResult:
    """A finished sweep: the report of its study (`report`, as `autotune report --json`), the
    Optuna study itself, and what this run did."""

    study_name: str
    storage: str  # the URL, password hidden
    trials_run: int
    stop_reason: str | None
    interrupted: bool
    report: dict[str, Any]
    study: Any = field(repr=False)

    @property
    def pick(self) -> dict[str, Any] | None:
        """The cheapest (config, offer) within the limits: what `--pick cheapest` exports."""
        return self.report["cheapest"]

    @property
    def fastest(self) -> dict[str, Any] | None:
        return self.report["fastest"]

    @property
    def pareto(self) -> list[dict[str, Any]]:
        """No option of these is both cheaper and faster than another; cheapest first."""
        return self.report["pareto"]

    @property
    def trials(self) -> list[dict[str, Any]]:
        return self.report["trials"]

    def export(self, out: str | Path, pick: str | int = "cheapest", offer: str | None = None,
               target: str = "script", launcher: str | None = None, force: bool = False) -> list[Path]:
        """Write the chosen config's launcher files into `out` (as `autotune export`): `pick`
        cheapest, fastest or a trial number; `target` script or hf-trainer (`--for`); `launcher`
        torchrun, deepspeed or accelerate (default: the trial's)."""
        from autotune.report.export import plan_export, write_export
        from autotune.report.files import EXPORT, prepare_out_dir

        choice = export_launcher(target, launcher)  # before anything is written
        prepare_out_dir(Path(out), force, kind=EXPORT)
        trials = {t.number: t for t in self.study.get_trials(deepcopy=False)}
        plan = plan_export(self.report, trials, str(pick), offer=offer, target=target, launcher=choice)
        return write_export(plan, Path(out), force=force)

    def summary(self, width: int = 80) -> str:
        """The lines `autotune sweep` ends with, as text."""
        import io

        from rich.console import Console

        from autotune.report.terminal import print_summary

        con = Console(width=width, record=True, file=io.StringIO(), highlight=False)
        print_summary(self.report, con, [])
        return con.export_text()

    def __str__(self) -> str:
        return self.summary()


def export_launcher(target: str, launcher: str | None):
    """`SweepResult.export`'s `launcher` as a Launcher, after a UserError for a `target` or
    `launcher` it does not know (as `autotune export` refuses them): an unknown target wrote a
    script export, an unknown launcher raised a bare ValueError."""
    from autotune.contract import Launcher
    from autotune.errors import UserError, did_you_mean
    from autotune.report.export import EXPORT_TARGETS

    if target not in EXPORT_TARGETS:
        raise UserError(f"target={target!r} is not one of {', '.join(EXPORT_TARGETS)}"
                        f"{did_you_mean(str(target), list(EXPORT_TARGETS))}",
                        fix="e.g. target='hf-trainer' (Hugging Face Trainer) or leave it out (script)")
    if launcher is None:
        return None
    names = [x.value for x in Launcher]
    if launcher not in names:
        raise UserError(f"launcher={launcher!r} is not one of {', '.join(names)}{did_you_mean(str(launcher), names)}",
                        fix="pick one of them, or leave it out for the trial's own launcher")
    return Launcher(launcher)


def sweep(spec: str | Path | dict | SweepSpec | None = None, *, trials: int | None = None,
          study: str | None = None, storage: str | None = None, space: str | None = None,
          runs_dir: str | Path = "autotune_runs", progress: bool = True,
          on_trial: Callable[[Any], None] | None = None, **overrides: Any) -> SweepResult:
    """Run (or resume) a sweep and return its result. `spec`: a YAML path, a dict of spec
    fields, a SweepSpec or None (the built-in example); `trials`: trials to launch in this call
    (None: the spec's `budget.trials`), as `--trials`; `overrides`: more spec fields by dotted
    name with "." written "__" (`budget__max_usd=500`). `progress` prints one line per trial;
    `on_trial(outcome)` is called after each. Bad input raises `autotune.errors.UserError`."""
    from autotune.report.build import collect
    from autotune.run.storage import redact_url, resolve_storage

    check_trials(trials)  # before the study or its storage is created
    check_keywords(overrides)
    fields = {k.replace("__", "."): v for k, v in overrides.items()}
    sp = load(spec, True, study=study, space=space, **fields)
    sp = sp.with_overrides(storage=resolve_storage(storage, None, sp.storage))  # as the CLI: $AUTOTUNE_STORAGE
    session = prepare(sp, runs_dir)
    say = print if progress else (lambda *_: None)
    prebuild(session, lambda m: say(f"  {m}"))

    def trial_done(o) -> None:
        if progress:
            from autotune.report.labels import outcome_line

            say(outcome_line(o, 10_000))
        if on_trial is not None:
            on_trial(o)

    summary = run(session, sp.budget.trials if trials is None else trials, Path(runs_dir), on_trial=trial_done,
                  note=lambda m: say(f"  {m}"))
    # storage_url: the report names its storage as `autotune report --json` does (password hidden).
    return SweepResult(sp.study, redact_url(sp.storage or ""), summary.trials_run, summary.stop_reason,
                       summary.interrupted, collect(session.study, storage_url=sp.storage), session.study)


def check_keywords(overrides: dict[str, Any]) -> None:
    """UserError for a keyword of `sweep` that is neither its own nor a spec field: `trails=2`
    was taken for a spec field and answered "did you mean 'trial'?" (the spec's section)."""
    import inspect

    from autotune.errors import UserError, did_you_mean

    own = [p for p in inspect.signature(sweep).parameters if p not in ("spec", "overrides")]
    fields = list(SweepSpec.model_fields)
    for key in overrides:
        top = key.split("__", 1)[0]
        if top not in fields:
            raise UserError(f"sweep() got the keyword {key!r}, neither one of its own ({', '.join(own)}) "
                            f"nor a spec field{did_you_mean(top, own + fields)}",
                            fix="correct it; a spec field goes by its dotted name with '__' for the dot, "
                                "e.g. budget__max_usd=500")


def check_trials(trials: Any) -> None:
    """UserError unless `trials` is None (the spec's `budget.trials`) or a whole number >= 1, as
    `--trials` takes: 0 ran the spec's budget and a negative count still launched a trial."""
    from autotune.errors import UserError

    if trials is None:
        return
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise UserError(f"trials={trials!r} is not a count of trials to launch",
                        fix="give trials=1 or more, or leave it out (None) for the spec's budget.trials")
