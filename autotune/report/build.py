"""Read a study back: every trial, every priced (config, offer) option, the Pareto set of hours
against dollars, the cheapest and the fastest within the limits, and why trials failed.

    doc = collect(study, max_usd=500, deadline_hours=72)   # JSON-able, see autotune/report/schema.py
    print_report(doc, console)                              # autotune.report.terminal

`collect` reads only what the study stores (each trial's `TrialRecord`, constraints, the
sweep's `SweepRecord`), plus a trial's result.json when its folder is on this machine (memory
capacity for the headroom).
"""

from __future__ import annotations

from typing import Any

from autotune.errors import UserError
from autotune.record import SweepRecord, TrialRecord
from autotune.report.capacity import capacity as memory_capacity
from autotune.report.labels import limits_set
from autotune.report.memory_fit import memory_verdicts
from autotune.report.neighbours import interference, interference_note, neighbours
from autotune.report.options import apply_limits, pareto_set, select
from autotune.report.picks import config_options, pick_rows, recommended, run_models
from autotune.report.schema import (
    Counts,
    FailureGroup,
    FailureReason,
    Limits,
    MemoryCheck,
    OptionRow,
    ReportDoc,
    ScalingPoint,
    SearchCost,
    TrialRow,
)

CONFIG_COLUMNS = ("num_gpus", "num_nodes", "micro_batch_size", "grad_accum_steps", "precision",
                  "checkpointing", "zero_stage", "offload", "fsdp", "tp_degree", "seq_len", "launcher",
                  "device", "threads_per_rank", "compile")


# -- Trials -------------------------------------------------------------------------------


def _predicted(rec: TrialRecord) -> tuple[int | None, str | None]:
    """The memory estimate stored before launch (per rank) and how it was made."""
    pre = rec.memory_prescreen
    if pre is not None and pre.predicted_bytes is not None:
        return pre.predicted_bytes, pre.basis
    return None, None


def _measured_per_rank(rec: TrialRecord) -> tuple[int | None, str | None]:
    """The measured peak per rank the memory limit is about (calibration's choice), or the
    peak the worker reported."""
    point = rec.memory_point
    if point is not None and point.measured_bytes:
        return point.measured_bytes, point.measured_source
    if rec.peak_mem_bytes:
        return rec.peak_mem_bytes, rec.peak_mem_source
    return None, None


def _slot_label(rec: TrialRecord) -> str | None:
    s = rec.slot
    if s is None:
        return None
    what = "cores" if s.kind == "cpu" else "gpus"
    return f"{what} {','.join(map(str, s.devices))} (slot {s.index + 1} of {s.side_by_side})"


def _trial_row(t, beside: list[int] | None = None) -> TrialRow:
    rec = TrialRecord.of(t)
    cfg = rec.config or {}
    queued = {**t.system_attrs.get("fixed_params", {}), **t.params} if t.state.name == "WAITING" else {}
    score = rec.score
    capacity, capacity_source = memory_capacity(rec, cfg) if cfg else (None, None)
    used, _ = _measured_per_rank(rec)
    predicted, predicted_basis = _predicted(rec)
    return TrialRow(
        number=t.number,
        state=t.state.name,
        params=dict(t.params),
        config={k: (cfg or queued).get(k) for k in CONFIG_COLUMNS} | (
            {"global_batch_samples": _global_batch(cfg or queued)} if cfg or queued else {}),
        # Failed for its dead controller (recover_dead_trials), even after its run measured: lost.
        status="lost" if rec.leftovers_killed is not None and t.state.name == "FAIL" else rec.status,
        error=rec.error,
        tokens_per_s=rec.tokens_per_s,
        peak_mem_bytes=rec.peak_mem_bytes, peak_mem_source=rec.peak_mem_source,
        mem_before_build_bytes=rec.mem_before_build_bytes,
        predicted_peak_mem_bytes=predicted,
        predicted_basis=predicted_basis,
        mem_capacity_bytes=capacity,
        mem_capacity_source=capacity_source,
        headroom_bytes=(capacity - used) if capacity is not None and used is not None else None,
        mfu=rec.mfu,
        hfu=rec.hfu,
        step_time_median_s=rec.step_time_median_s,
        hours=score.hours if score else None,
        usd=score.usd if score else None,
        offer=score.offer if score else None,
        basis=score.basis if score else None,
        hardware=rec.hardware,
        trial_dir=rec.trial_dir,
        wall_s=rec.wall_s,
        compile_s=rec.compile_seconds(), cpu_huge_pages=rec.cpu_huge_pages,
        constraints=dict(getattr(t, "constraints", None) or {}),
        search_gpu_hours=rec.search_gpu_hours,
        search_usd=rec.search_usd,
        reused_from=rec.reused_from,
        recovered_from=rec.recovered_from,
        held_back_by=rec.held_back_by,
        local_move_from=rec.local_move_from,
        repeat_of=rec.repeat_of,
        retry_of=rec.retry_of if rec.retry_of is not None else (t.system_attrs.get("retry_history") or [None])[-1],
        race_block=rec.race_block,
        slot=_slot_label(rec),
        neighbours=beside or [],
    )


def _global_batch(cfg: dict[str, Any]) -> int | None:
    try:
        dp = cfg["num_gpus"] * cfg.get("num_nodes", 1) // cfg.get("tp_degree", 1)
        return cfg["micro_batch_size"] * cfg["grad_accum_steps"] * dp
    except (KeyError, TypeError, ZeroDivisionError):
        return None


# -- Summaries ----------------------------------------------------------------------------


def _reason_kind(error: str | None) -> tuple[str, str]:
    """(kind, example): the error type before the first ':' groups trials that failed alike
    (their messages differ in numbers); the first line of the message is the example."""
    text = (error or "").strip()
    if not text:
        return "no reason recorded", ""
    first = text.splitlines()[0]
    kind, sep, _ = first.partition(":")
    kind = kind.strip() if sep and kind.strip() and " " not in kind.strip() else first
    example = first if len(first) <= 300 else first[:297].rsplit(" ", 1)[0] + " ..."
    return kind[:120], example


def _failures(rows: list[TrialRow]) -> list[FailureGroup]:
    groups: dict[tuple[str, str], list[TrialRow]] = {}
    for r in rows:
        if r.state in ("COMPLETE", "RUNNING", "WAITING"):
            continue
        groups.setdefault((r.state, r.status or "unknown"), []).append(r)
    out = []
    for (state, status), members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        reasons: dict[str, tuple[str, list[int]]] = {}
        for r in members:
            kind, example = _reason_kind(r.error)
            reasons.setdefault(kind, (example, []))[1].append(r.number)
        out.append(FailureGroup(
            state=state, status=status, count=len(members), trials=[r.number for r in members],
            reasons=[FailureReason(reason=k, example=ex, count=len(v), trials=v)
                     for k, (ex, v) in sorted(reasons.items(), key=lambda kv: -len(kv[1][1]))]))
    return out


def _memory_checks(frozen, rows: list[TrialRow]) -> list[MemoryCheck]:
    out = []
    for t, r in zip(frozen, rows):
        if r.predicted_peak_mem_bytes is None or r.reused_from is not None:  # one row per measurement
            continue
        measured, source = _measured_per_rank(TrialRecord.of(t))
        ratio = measured / r.predicted_peak_mem_bytes if measured and r.predicted_peak_mem_bytes else None
        out.append(MemoryCheck(trial=r.number, predicted_peak_mem_bytes=r.predicted_peak_mem_bytes,
                               predicted_basis=r.predicted_basis, measured_peak_mem_bytes=measured,
                               measured_source=source, measured_over_predicted=ratio,
                               status=r.status))
    return out


# Scaling efficiency compares trials that differ in GPU count alone: everything a rank runs
# (these columns) the same. Across configs it would credit the GPUs with what precision or
# micro-batch did.
PER_RANK_COLUMNS = tuple(c for c in CONFIG_COLUMNS if c not in ("num_gpus", "num_nodes"))


def _scaling(rows: list[TrialRow]) -> list[ScalingPoint]:
    """The fastest per-rank config measured at two or more GPU counts, at each count; [] when
    no two measurements differ in GPU count alone."""
    groups: dict[tuple, dict[int, tuple[float, TrialRow]]] = {}  # by GPU count: (tokens/s, row)
    for r in rows:
        tps = r.tokens_per_s
        if r.state != "COMPLETE" or not tps or not r.config.get("num_gpus") or r.reused_from is not None:
            continue
        n = r.config["num_gpus"] * (r.config.get("num_nodes") or 1)
        best = groups.setdefault(tuple(str(r.config.get(k)) for k in PER_RANK_COLUMNS), {})
        if n not in best or tps > best[n][0]:
            best[n] = (tps, r)
    comparable = [g for g in groups.values() if len(g) > 1]
    if not comparable:
        return []
    best = max(comparable, key=lambda g: max(tps for tps, _ in g.values()))
    n0 = min(best)
    per_gpu0 = best[n0][0] / n0
    return [ScalingPoint(num_gpus=n, trial=r.number, tokens_per_s=tps,
                         tokens_per_s_per_gpu=tps / n,
                         scaling_efficiency=(tps / n) / per_gpu0,
                         basis_kind="measured")
            for n, (tps, r) in sorted(best.items())]


def _search_cost(rows: list[TrialRow]) -> SearchCost:
    priced = [r.search_usd for r in rows if r.search_usd is not None]
    unpriced = any(r.search_gpu_hours and r.search_usd is None for r in rows)
    return SearchCost(gpu_hours=sum(r.search_gpu_hours or 0.0 for r in rows),
                      usd=None if unpriced or not priced else sum(priced))


def _counts(rows: list[TrialRow]) -> Counts:
    states = [r.state for r in rows]
    return Counts(total=len(rows), complete=states.count("COMPLETE"), pruned=states.count("PRUNED"),
                  failed=states.count("FAIL"), running=states.count("RUNNING"),
                  waiting=states.count("WAITING"))


def _load_catalog_quietly(path: str | None, notes: list[str]):
    from autotune.pricing.load import load_catalog

    try:
        return load_catalog(path)
    except UserError as exc:
        notes.append(f"catalog not readable ({exc}); offers shown without provider details")
        return None


def _limits(spec: SweepRecord, max_usd: float | None, deadline_hours: float | None) -> Limits:
    """A limit given as a flag wins over the study's (the sweep's spec) for that limit alone:
    --max-usd keeps the spec's deadline and --deadline-hours its budget, as their help says."""
    for flag, v in (("--max-usd", max_usd), ("--deadline-hours", deadline_hours)):
        if v is not None and not v > 0:  # as the spec's budget.max_usd / deadline_hours (gt=0)
            raise UserError(f"{flag} {v:g} must be above 0", fix=f"give a positive {flag}, or leave it out")
    budget = spec.budget
    usd = max_usd if max_usd is not None else budget.get("max_usd")
    hours = deadline_hours if deadline_hours is not None else budget.get("deadline_hours")
    flagged = [f for f, v in (("--max-usd", max_usd), ("--deadline-hours", deadline_hours)) if v is not None]
    stored = [what for what, v, flag in (("budget", usd, max_usd), ("deadline", hours, deadline_hours))
              if v is not None and flag is None]
    if flagged and stored:
        source = f"{' and '.join(flagged)} flag and the study (the sweep's spec) for the {stored[0]}"
    elif flagged:
        source = "flags"
    elif stored:
        source = "study (the sweep's spec)"
    else:
        source = "none"
    return Limits(max_usd=usd, deadline_hours=hours, source=source)


def _empty_notes(options: list[OptionRow], feasible: list[OptionRow], rows: list[TrialRow],
                 limits: Limits) -> list[str]:
    """What the report says when nothing can be recommended, or a figure is missing."""
    from autotune.report.nothing_fits import nothing_fits_note

    notes = []
    fits_note = nothing_fits_note(rows) if not feasible else None
    if fits_note:
        notes.append(fits_note)
    if options and not feasible:  # how near the nearest comes, and the flag that lets it in
        from autotune.report.limits_miss import limits_miss

        figures, fix = limits_miss([o.model_dump(include={"trial", "offer", "usd", "hours"}) for o in options],
                                   limits.max_usd, limits.deadline_hours)
        notes.append(f"no option meets the limits ({limits_set(limits.max_usd, limits.deadline_hours)}): "
                     f"{figures}; {fix}. cheapest and fastest are empty; best_by_cost / best_by_time "
                     "ignore the limits")
    if any(o.sensitivity is None for o in options):
        notes.append("sensitivity (+30% time, one interruption) not available from pricing for "
                     "some options: shown as '-'")
    return notes


def _target_text(spec: SweepRecord) -> str | None:
    """The stored target in words; None for a study swept before the spec stored it."""
    from autotune.pricing.target import TargetSpec

    if not spec.target:
        return None
    try:
        return TargetSpec.model_validate(spec.target).describe()
    except ValueError:  # a target an older autotune stored in another shape: not guessed at
        return None


def _price_note(catalog, options: list[OptionRow], rows: list[TrialRow]) -> str | None:
    """The dates of every price under the dollars shown: the options', and the trials' (each the
    sweep's offer, which a --provider / --region may leave out of the options)."""
    shown = {o.offer for o in options} | {r.offer for r in rows if r.offer}
    return catalog.price_note(shown or None, with_age=True) if catalog is not None else None


def build_report(study, max_usd: float | None = None, deadline_hours: float | None = None,
                 storage_url: str | None = None, providers: list[str] | None = None,
                 regions: list[str] | None = None) -> ReportDoc:
    """The whole report as a validated `ReportDoc`. Limits given here win over the study's."""
    from autotune.run.processes import gone_notes
    from autotune.run.storage import redact_url

    spec = SweepRecord.of(study)
    limits = _limits(spec, max_usd, deadline_hours)
    notes: list[str] = []
    catalog = _load_catalog_quietly(spec.catalog, notes)
    frozen = study.get_trials(deepcopy=False)
    nbrs = neighbours(frozen)
    rows = [_trial_row(t, nbrs.get(t.number)) for t in frozen]
    # One option set per config: its runs merged, a reused trial's options are its source's.
    models = run_models(frozen)
    options = config_options(frozen, rows, catalog, models)
    options, offer_filter = select(options, catalog, providers, regions) if providers or regions else (options, None)
    apply_limits(options, limits)
    from autotune.search.verdict import runs_fit

    fits = runs_fit(frozen)
    notes += memory_verdicts(options, fits, rows)
    front = pareto_set(options)
    front_keys = {(o.trial, o.offer) for o in front}
    for o in options:
        o.pareto = (o.trial, o.offer) in front_keys
    feasible = [o for o in options if o.feasible]

    per_platform: dict[str, OptionRow] = {}
    for o in sorted(feasible, key=lambda o: (o.usd, o.hours)):
        per_platform.setdefault(o.platform, o)
    notes += _empty_notes(options, feasible, rows, limits) + gone_notes(frozen)
    interfered = interference(frozen, nbrs)
    notes += [n for n in (interference_note(interfered),) if n]
    cheapest, fastest, pick_notes = recommended(feasible, fits)
    notes += pick_notes
    return ReportDoc(
        study=study.study_name,
        storage=redact_url(storage_url) if storage_url else None,
        catalog=spec.catalog or "built-in",
        catalog_note=_price_note(catalog, options, rows),
        target=_target_text(spec),
        limits=limits,
        offer_filter=offer_filter,
        counts=_counts(rows),
        search=_search_cost(rows),
        trials=rows,
        options=options,
        pareto=front,
        cheapest=cheapest,
        fastest=fastest,
        best_by_cost=min(options, key=lambda o: (o.usd, o.hours), default=None),
        best_by_time=min(options, key=lambda o: (o.hours, o.usd), default=None),
        per_platform=sorted(per_platform.values(), key=lambda o: o.platform),
        picks=pick_rows(cheapest, fastest, feasible, models, spec.remeasures),
        failures=_failures(rows),
        memory=_memory_checks(frozen, rows),
        scaling=_scaling(rows),
        interference=interfered,
        notes=notes,
    )


def collect(study, max_usd: float | None = None, deadline_hours: float | None = None,
            storage_url: str | None = None, providers: list[str] | None = None,
            regions: list[str] | None = None) -> dict[str, Any]:
    """The report as a JSON-able dict (schema: `autotune.report.schema.ReportDoc`)."""
    return build_report(study, max_usd, deadline_hours, storage_url, providers,
                        regions).model_dump(mode="json")
