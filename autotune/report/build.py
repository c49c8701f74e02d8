"""Read a study back: every trial, every priced (config, offer) option, the Pareto set of hours
against dollars, the cheapest and the fastest within the limits, and why trials failed.

    doc = collect(study, max_usd=500, deadline_hours=72)   # JSON-able, see report_schema.py
    print_report(doc, console)                              # rich tables

`collect` reads only what the study stores (user attributes, constraints), plus a trial's
result.json when its folder is on this machine (memory capacity for the headroom).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from autotune.report.schema import (
    REPORT_SCHEMA_VERSION,
    Counts,
    FailureGroup,
    FailureReason,
    Limits,
    MemoryCheck,
    OptionRow,
    ReportDoc,
    ScalingPoint,
    SearchCost,
    Sensitivity,
    TrialRow,
)

__all__ = ["REPORT_SCHEMA_VERSION", "collect", "build_report", "print_report", "config_summary",
           "fmt_bytes", "fmt_hours", "fmt_usd", "SPEC_ATTR", "record_spec"]

# Study user attribute where `autotune sweep` records the limits and the catalog it used.
SPEC_ATTR = "autotune_spec"

CONFIG_COLUMNS = ("num_gpus", "num_nodes", "micro_batch_size", "grad_accum_steps", "precision",
                  "checkpointing", "zero_stage", "offload", "tp_degree", "seq_len", "launcher",
                  "device", "threads_per_rank")


def record_spec(study, spec) -> None:
    """Store what the report needs from a sweep's spec in the study: the limits and catalog.

    Called by `autotune sweep`; the latest sweep's spec wins. The storage URL is not stored
    (it may hold a password)."""
    catalog = spec.platforms.catalog
    study.set_user_attr(SPEC_ATTR, {
        "budget": {"max_usd": spec.budget.max_usd, "deadline_hours": spec.budget.deadline_hours},
        "catalog": str(Path(catalog).resolve()) if catalog else None,
        "offers": spec.platforms.offers,
        "target": spec.target.model_dump(mode="json"),
        "spec_file": spec.source,
    })
    try:  # names for the objectives in optuna-dashboard and study.metric_names
        study.set_metric_names(["hours_to_target", "usd_to_target"])
    except (AttributeError, ValueError):  # an older Optuna, or a study of other objectives
        pass


# ---------------------------------------------------------------------------------------
# Trials
# ---------------------------------------------------------------------------------------


def _basis_kind(basis: str | None) -> str:
    b = (basis or "").lower()
    if b.startswith("measured"):
        return "measured"
    if b.startswith("projected"):
        return "projected"
    return "estimated"


def _predicted(ua: dict[str, Any]) -> tuple[int | None, str | None]:
    """The memory estimate stored before launch (per rank) and how it was made."""
    pre = ua.get("memory_prescreen")
    if isinstance(pre, dict) and isinstance(pre.get("predicted_bytes"), (int, float)):
        return int(pre["predicted_bytes"]), pre.get("basis")
    for key in ("predicted_peak_mem_bytes", "estimated_peak_mem_bytes"):
        if isinstance(ua.get(key), (int, float)):
            return int(ua[key]), None
    return None, None


def _measured_per_rank(ua: dict[str, Any]) -> tuple[int | None, str | None]:
    """The measured peak per rank the memory limit is about (calibration's choice), or the
    peak the worker reported."""
    point = ua.get("memory_point")
    if isinstance(point, dict) and point.get("measured_bytes"):
        return int(point["measured_bytes"]), point.get("measured_source")
    if ua.get("peak_mem_bytes"):
        return int(ua["peak_mem_bytes"]), ua.get("peak_mem_source")
    return None, None


def _capacity(ua: dict[str, Any], cfg: dict[str, Any]) -> tuple[int | None, str | None]:
    """Memory one rank may use, and what that is: the study's per-rank limit when the sweep
    stored one; else the GPU's memory, or on CPU the host's RAM shared by the ranks."""
    pre = ua.get("memory_prescreen")
    if isinstance(pre, dict) and pre.get("limit_bytes"):
        return int(pre["limit_bytes"]), "per-rank limit of the sweep"
    hw = ua.get("machine")
    if not isinstance(hw, dict):
        hw = _result_hardware(ua)
    ranks = max(1, int(cfg.get("num_gpus") or 1))
    if hw.get("device_kind") == "cuda" and hw.get("device_memory_bytes"):
        return int(hw["device_memory_bytes"]), f"device memory ({hw.get('device_name', '')})"
    host_mem = hw.get("host_memory_bytes")
    if host_mem is None and hw.get("hostname") and hw.get("hostname") == socket.gethostname():
        import psutil  # the trial ran on this very host: its RAM is ours to read

        host_mem = int(psutil.virtual_memory().total)
    if host_mem:
        return int(host_mem) // ranks, f"host RAM / {ranks} rank(s)"
    return None, None


def _result_hardware(ua: dict[str, Any]) -> dict[str, Any]:
    """The hardware block of the trial's result.json, when its folder is on this machine."""
    folder = ua.get("trial_dir")
    if not folder:
        return {}
    try:
        return json.loads((Path(folder) / "result.json").read_text()).get("hardware") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def _trial_row(t) -> TrialRow:
    ua = t.user_attrs
    cfg = ua.get("config") or {}
    score = ua.get("score") or {}
    capacity, capacity_source = _capacity(ua, cfg) if cfg else (None, None)
    used, _ = _measured_per_rank(ua)
    predicted, predicted_basis = _predicted(ua)
    return TrialRow(
        number=t.number,
        state=t.state.name,
        params=dict(t.params),
        config={k: cfg.get(k) for k in CONFIG_COLUMNS} | (
            {"global_batch_samples": _global_batch(cfg)} if cfg else {}),
        status=ua.get("status"),
        error=ua.get("error") or ua.get("reason"),
        tokens_per_s=ua.get("tokens_per_s"),
        peak_mem_bytes=ua.get("peak_mem_bytes"),
        peak_mem_source=ua.get("peak_mem_source"),
        predicted_peak_mem_bytes=predicted,
        predicted_basis=predicted_basis,
        mem_capacity_bytes=capacity,
        mem_capacity_source=capacity_source,
        headroom_bytes=(capacity - used) if capacity is not None and used is not None else None,
        mfu=ua.get("mfu"),
        step_time_median_s=ua.get("step_time_median_s"),
        hours=score.get("hours"),
        usd=score.get("usd"),
        offer=score.get("offer"),
        basis=score.get("basis"),
        hardware=ua.get("hardware"),
        trial_dir=ua.get("trial_dir"),
        wall_s=ua.get("wall_s"),
        constraints=dict(getattr(t, "constraints", None) or {}),
        search_gpu_hours=ua.get("search_gpu_hours"),
        search_usd=ua.get("search_usd"),
        reused_from=ua.get("reused_from"),
        local_move_from=ua.get("local_move_from"),
    )


def _global_batch(cfg: dict[str, Any]) -> int | None:
    try:
        dp = cfg["num_gpus"] * cfg.get("num_nodes", 1) // cfg.get("tp_degree", 1)
        return cfg["micro_batch_size"] * cfg["grad_accum_steps"] * dp
    except (KeyError, TypeError, ZeroDivisionError):
        return None


# ---------------------------------------------------------------------------------------
# Options: (config, offer) pairs
# ---------------------------------------------------------------------------------------


def _offer_info(catalog, name: str | None) -> dict[str, Any]:
    if catalog is None or name is None:
        return {}
    for o in catalog.offers:
        if o.name == name:
            price = o.price_usd_per_gpu_hour
            if hasattr(o, "usd_per_gpu_hour"):  # monthly / owned offers: the hourly equivalent
                try:
                    price = o.usd_per_gpu_hour()
                except (TypeError, ValueError, ZeroDivisionError):
                    pass
            return {"provider": o.provider, "pricing": o.pricing, "gpu_type": o.gpu,
                    "price_usd_per_gpu_hour": price, "price_date": o.price_date,
                    "regions": list(getattr(o, "regions", []))}
    return {}


def _catalog_note(catalog) -> str | None:
    if catalog is None:
        return None
    if hasattr(catalog, "price_note"):
        return catalog.price_note()
    return f"example prices as of {catalog.date}; check your provider"


def _bills_for_trial(ft, catalog) -> list[dict[str, Any]] | None:
    """Every matching offer's bill for a completed trial, when `autotune.pricing` offers it.

    Returns None when pricing has no such function: the report then shows the cheapest-offer
    score the sweep stored, one option per trial."""
    try:
        from autotune.pricing import cost  # noqa: F401
    except ImportError:
        return None
    fn = getattr(cost, "bills_for_trial", None)
    if fn is None:
        return None
    return fn(ft, catalog)


def _options_for(ft, row: TrialRow, catalog) -> list[OptionRow]:
    if row.state != "COMPLETE":
        return []
    bills = _bills_for_trial(ft, catalog)
    if bills is None:
        if row.hours is None or row.usd is None or row.offer is None:
            return []
        score = ft.user_attrs.get("score") or {}
        bills = [{"offer": row.offer, "hours": row.hours, "usd": row.usd, "basis": row.basis,
                  "gpu_hours": score.get("gpu_hours")}]
    out = []
    for b in bills:
        info = _offer_info(catalog, b["offer"])
        sens = b.get("sensitivity")
        provider, pricing = b.get("provider", info.get("provider")), b.get("pricing", info.get("pricing"))
        out.append(OptionRow(
            trial=row.number, config=row.config, offer=b["offer"], provider=provider, pricing=pricing,
            regions=b.get("regions", info.get("regions")) or [], instance=b.get("instance"),
            platform=f"{provider or '?'}/{pricing or '?'}",
            gpu_type=b.get("gpu_type", info.get("gpu_type")),
            price_usd_per_gpu_hour=b.get("price_usd_per_gpu_hour", info.get("price_usd_per_gpu_hour")),
            price_date=b.get("price_date", info.get("price_date")),
            hours=float(b["hours"]), usd=float(b["usd"]), gpu_hours=b.get("gpu_hours"),
            basis=b.get("basis") or "measured", basis_kind=_basis_kind(b.get("basis") or "measured"),
            tokens_per_s=row.tokens_per_s, mfu=row.mfu, peak_mem_bytes=row.peak_mem_bytes,
            peak_mem_source=row.peak_mem_source, headroom_bytes=row.headroom_bytes,
            sensitivity=Sensitivity(**{k: sens.get(k) for k in Sensitivity.model_fields})
            if isinstance(sens, dict) else None,
            usd_worst_case=b.get("usd_worst_case"), hours_worst_case=b.get("hours_worst_case"),
            breakdown=b.get("breakdown") if isinstance(b.get("breakdown"), dict) else None,
            within_budget=None, within_deadline=None, feasible=True, pareto=False,
        ))
    return out


def pareto_front(options: list[OptionRow]) -> list[OptionRow]:
    """Options that no other option beats on both hours and dollars, cheapest first."""
    front = []
    for o in options:
        dominated = any(
            (p.hours <= o.hours and p.usd <= o.usd) and (p.hours < o.hours or p.usd < o.usd)
            for p in options)
        if not dominated:
            front.append(o)
    return sorted(front, key=lambda o: (o.usd, o.hours))


def _apply_limits(options: list[OptionRow], limits: Limits) -> None:
    for o in options:
        o.within_budget = None if limits.max_usd is None else o.usd <= limits.max_usd
        o.within_deadline = None if limits.deadline_hours is None else o.hours <= limits.deadline_hours
        o.feasible = o.within_budget is not False and o.within_deadline is not False


# ---------------------------------------------------------------------------------------
# Summaries
# ---------------------------------------------------------------------------------------


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
        measured, source = _measured_per_rank(t.user_attrs)
        ratio = measured / r.predicted_peak_mem_bytes if measured and r.predicted_peak_mem_bytes else None
        out.append(MemoryCheck(trial=r.number, predicted_peak_mem_bytes=r.predicted_peak_mem_bytes,
                               predicted_basis=r.predicted_basis, measured_peak_mem_bytes=measured,
                               measured_source=source, measured_over_predicted=ratio,
                               status=r.status))
    return out


def _scaling(rows: list[TrialRow]) -> list[ScalingPoint]:
    best: dict[int, TrialRow] = {}
    for r in rows:
        if r.state != "COMPLETE" or not r.tokens_per_s or not r.config.get("num_gpus"):
            continue
        n = r.config["num_gpus"] * (r.config.get("num_nodes") or 1)
        if n not in best or r.tokens_per_s > best[n].tokens_per_s:
            best[n] = r
    if not best:
        return []
    n0 = min(best)
    per_gpu0 = best[n0].tokens_per_s / n0
    return [ScalingPoint(num_gpus=n, trial=r.number, tokens_per_s=r.tokens_per_s,
                         tokens_per_s_per_gpu=r.tokens_per_s / n,
                         scaling_efficiency=(r.tokens_per_s / n) / per_gpu0,
                         basis_kind="measured")
            for n, r in sorted(best.items())]


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
    from autotune.errors import UserError
    from autotune.pricing.catalog import load_catalog

    try:
        return load_catalog(path)
    except UserError as exc:
        notes.append(f"catalog not readable ({exc}); offers shown without provider details")
        return None


def _select(options: list[OptionRow], catalog, providers: list[str] | None,
            regions: list[str] | None) -> list[OptionRow]:
    """Options on offers of these providers, in these regions (--provider / --region)."""
    from autotune.pricing.catalog import check_names, matches

    for asked, values, flag, what in ((providers, [o.provider or "" for o in options], "--provider", "provider"),
                                      (regions, [r for o in options for r in o.regions], "--region", "region")):
        if asked:
            known = getattr(catalog, f"{what}s")() if catalog is not None else sorted(set(values) - {""})
            check_names(asked, known, flag, what)
    kept = [o for o in options if (not providers or matches(o.provider or "", providers))
            and (not regions or any(matches(r, regions) for r in o.regions))]
    if regions:  # an offer spanning regions names only the ones asked for
        kept = [o.model_copy(update={"regions": [r for r in o.regions if matches(r, regions)]}) for o in kept]
    return kept


def build_report(study, max_usd: float | None = None, deadline_hours: float | None = None,
                 storage_url: str | None = None, providers: list[str] | None = None,
                 regions: list[str] | None = None) -> ReportDoc:
    """The whole report as a validated `ReportDoc`. Limits given here win over the study's."""
    from autotune.search.sweep import redact_url

    spec = dict(study.user_attrs.get(SPEC_ATTR) or {})
    budget = spec.get("budget") or {}
    if max_usd is not None or deadline_hours is not None:
        limits = Limits(max_usd=max_usd, deadline_hours=deadline_hours, source="flags")
    elif budget.get("max_usd") is not None or budget.get("deadline_hours") is not None:
        limits = Limits(max_usd=budget.get("max_usd"), deadline_hours=budget.get("deadline_hours"),
                        source="study (the sweep's spec)")
    else:
        limits = Limits(max_usd=None, deadline_hours=None, source="none")

    notes: list[str] = []
    catalog = _load_catalog_quietly(spec.get("catalog"), notes)
    frozen = study.get_trials(deepcopy=False)
    rows = [_trial_row(t) for t in frozen]
    # A reused trial repeats its source's measurement: the option belongs to the source alone.
    options = [o for ft, r in zip(frozen, rows) if r.reused_from is None for o in _options_for(ft, r, catalog)]
    if providers or regions:
        options = _select(options, catalog, providers, regions)
    _apply_limits(options, limits)
    front = pareto_front(options)
    front_keys = {(o.trial, o.offer) for o in front}
    for o in options:
        o.pareto = (o.trial, o.offer) in front_keys
    feasible = [o for o in options if o.feasible]

    per_platform: dict[str, OptionRow] = {}
    for o in sorted(feasible, key=lambda o: (o.usd, o.hours)):
        per_platform.setdefault(o.platform, o)

    if options and not feasible:
        notes.append("no option meets the limits "
                     f"(budget {limits.max_usd}, deadline {limits.deadline_hours} h): "
                     "cheapest and fastest are empty; best_by_cost / best_by_time ignore the limits")
    if any(o.sensitivity is None for o in options):
        notes.append("sensitivity (+30% time, one interruption) not available from pricing for "
                     "some options: shown as '-'")
    return ReportDoc(
        study=study.study_name,
        storage=redact_url(storage_url) if storage_url else None,
        catalog=spec.get("catalog") or "built-in",
        catalog_note=_catalog_note(catalog),
        limits=limits,
        counts=_counts(rows),
        search=_search_cost(rows),
        trials=rows,
        options=options,
        pareto=front,
        cheapest=min(feasible, key=lambda o: (o.usd, o.hours), default=None),
        fastest=min(feasible, key=lambda o: (o.hours, o.usd), default=None),
        best_by_cost=min(options, key=lambda o: (o.usd, o.hours), default=None),
        best_by_time=min(options, key=lambda o: (o.hours, o.usd), default=None),
        per_platform=sorted(per_platform.values(), key=lambda o: o.platform),
        failures=_failures(rows),
        memory=_memory_checks(frozen, rows),
        scaling=_scaling(rows),
        notes=notes,
    )


def collect(study, max_usd: float | None = None, deadline_hours: float | None = None,
            storage_url: str | None = None, providers: list[str] | None = None,
            regions: list[str] | None = None) -> dict[str, Any]:
    """The report as a JSON-able dict (schema: `autotune.report.schema.ReportDoc`)."""
    return build_report(study, max_usd, deadline_hours, storage_url, providers,
                        regions).model_dump(mode="json")


# ---------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------


def fmt_bytes(n: int | float | None) -> str:
    if n is None:
        return "not measured"
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1024
    return str(n)


def fmt_hours(h: float | None) -> str:
    if h is None:
        return "-"
    if h < 1:
        return f"{h * 60:.1f} min"
    if h < 48:
        return f"{h:.1f} h"
    return f"{h / 24:.1f} d"


def fmt_usd(x: float | None) -> str:
    return "-" if x is None else (f"${x:,.2f}" if x >= 1 else f"${x:.4f}")


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def config_summary(cfg: dict[str, Any]) -> str:
    if not cfg:
        return "-"
    parts = [f"{cfg['num_gpus']}x", f"mb{cfg['micro_batch_size']}", f"ga{cfg['grad_accum_steps']}",
             str(cfg["precision"]), f"ckpt:{cfg['checkpointing']}"]
    if cfg.get("zero_stage"):
        parts.append(f"zero{cfg['zero_stage']}" + (f"+off:{cfg['offload']}" if cfg.get("offload") not in (None, "none") else ""))
    if (cfg.get("tp_degree") or 1) > 1:
        parts.append(f"tp{cfg['tp_degree']}")
    return " ".join(parts)


def zero_summary(cfg: dict[str, Any]) -> str:
    if not cfg.get("zero_stage"):
        return "-"
    off = cfg.get("offload")
    return f"{cfg['zero_stage']}" + (f" +{off}" if off not in (None, "none") else "")


def mem_summary(peak: int | None, source: str | None, headroom: int | None) -> str:
    if not peak:
        return "not measured"
    s = fmt_bytes(peak) + (" rss" if source == "host_rss" else "")
    return s + (f" ({fmt_bytes(headroom)} free)" if headroom is not None else "")


def options_table(rows: list[dict[str, Any]], title: str, wide: bool = True):
    """The decision table: one row per (config, offer) with everything the issue names.

    `wide`: one column per setting (terminals >= WIDE_COLUMNS); otherwise settings share a cell."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    if wide:
        cols = (("#", "right"), ("GPU x n", "left"), ("mb", "right"), ("ga", "right"),
                ("prec", "left"), ("ckpt", "left"), ("ZeRO", "left"), ("TP", "right"),
                ("tokens/s", "right"), ("MFU", "right"), ("peak mem (free)", "right"),
                ("hours", "right"), ("dollars", "right"), ("+30% time", "right"),
                ("1 interrupt", "right"), ("offer", "left"), ("figures", "left"))
    else:
        cols = (("#", "right"), ("config", "left"), ("tokens/s, MFU", "right"),
                ("peak mem (free)", "right"), ("hours", "right"), ("dollars", "right"),
                ("+30% / 1 interrupt", "right"), ("offer, figures", "left"))
    for col, just in cols:
        table.add_column(col, justify=just, overflow="fold")
    for o in rows:
        c = o["config"]
        s = o.get("sensitivity") or {}
        gpus = f"{o.get('gpu_type') or '?'} x{(c.get('num_gpus') or 0) * (c.get('num_nodes') or 1)}"
        tps = f"{o['tokens_per_s']:,.0f}" if o.get("tokens_per_s") else "not measured"
        mfu = fmt_pct(o.get("mfu")) if o.get("mfu") is not None else "n/a"
        mem = mem_summary(o.get("peak_mem_bytes"), o.get("peak_mem_source"), o.get("headroom_bytes"))
        figures = o["basis_kind"] + ("" if o["feasible"] else " (over limit)")
        style = None if o["feasible"] else "dim"
        if wide:
            table.add_row(
                str(o["trial"]), gpus, str(c.get("micro_batch_size")), str(c.get("grad_accum_steps")),
                str(c.get("precision")), str(c.get("checkpointing")), zero_summary(c),
                str(c.get("tp_degree")), tps, mfu, mem, fmt_hours(o["hours"]), fmt_usd(o["usd"]),
                fmt_usd(s.get("plus_30pct_time_usd")), fmt_usd(s.get("one_interruption_usd")),
                o["offer"], figures, style=style)
        else:
            cfg = (f"{gpus} mb{c.get('micro_batch_size')} ga{c.get('grad_accum_steps')} "
                   f"{c.get('precision')} ckpt:{c.get('checkpointing')} zero:{zero_summary(c)} "
                   f"tp{c.get('tp_degree')}")
            table.add_row(str(o["trial"]), cfg, f"{tps}, MFU {mfu}", mem, fmt_hours(o["hours"]),
                          fmt_usd(o["usd"]),
                          f"{fmt_usd(s.get('plus_30pct_time_usd'))} / {fmt_usd(s.get('one_interruption_usd'))}",
                          f"{o['offer']}, {figures}", style=style)
    return table


WIDE_COLUMNS = 160


def _ended(r: dict[str, Any]) -> str:
    """One word for how a trial ended: its status when it completed, else state: status."""
    if r["state"] == "COMPLETE":
        return r["status"] or "ok"
    return r["state"].lower() + (f": {r['status']}" if r["status"] else "")


def trials_table(rows: list[dict[str, Any]], title: str):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col, just in (("#", "right"), ("ended", "left"), ("config", "left"), ("tokens/s", "right"),
                      ("peak mem", "right"), ("hours", "right"), ("dollars", "right"), ("offer", "left")):
        table.add_column(col, justify=just, overflow="fold")
    for r in rows:
        tps = f"{r['tokens_per_s']:,.0f}" if r["tokens_per_s"] else "-"
        mem = fmt_bytes(r["peak_mem_bytes"]) if r["peak_mem_bytes"] else "-"
        if r["peak_mem_bytes"] and r.get("peak_mem_source") == "host_rss":
            mem += " rss"
        table.add_row(str(r["number"]), _ended(r), config_summary(r["config"]), tps, mem,
                      fmt_hours(r["hours"]), fmt_usd(r["usd"]), r["offer"] or "-")
    return table


def _limits_line(limits: dict[str, Any]) -> str:
    parts = []
    if limits["max_usd"] is not None:
        parts.append(f"budget {fmt_usd(limits['max_usd'])}")
    if limits["deadline_hours"] is not None:
        parts.append(f"deadline {fmt_hours(limits['deadline_hours'])}")
    return ", ".join(parts) + f" (from {limits['source']})" if parts else "no budget or deadline set"


def print_report(doc: dict[str, Any], console) -> None:
    from rich.table import Table

    c = doc["counts"]
    wide = console.width >= WIDE_COLUMNS
    console.print(f"[bold]Study '{doc['study']}'[/]: {c['total']} trials: {c['complete']} complete, "
                  f"{c['pruned']} pruned, {c['failed']} failed, {c['running']} running. "
                  f"Limits: {_limits_line(doc['limits'])}.")
    console.print(trials_table(doc["trials"], f"All trials ({len(doc['trials'])})"))
    if doc["pareto"]:
        console.print(options_table(doc["pareto"], "Pareto set of (config, offer): no option is both "
                                                   "cheaper and faster; cheapest first", wide))
    if doc["per_platform"]:
        console.print(options_table(doc["per_platform"], "Best per platform (cheapest within limits)",
                                    wide))
    if doc["failures"]:
        t = Table(title="Trials that did not complete", title_justify="left")
        for col in ("state", "status", "count", "trials", "reason", "e.g."):
            t.add_column(col, overflow="fold")
        for g in doc["failures"]:
            for i, reason in enumerate(g["reasons"]):
                t.add_row(g["state"] if i == 0 else "", g["status"] if i == 0 else "",
                          str(reason["count"]), ", ".join(map(str, reason["trials"])), reason["reason"],
                          reason["example"])
        console.print(t)
    if doc["memory"]:
        t = Table(title="Memory: predicted (analytic) vs measured peak per rank", title_justify="left")
        for col in ("#", "ended", "predicted", "measured", "source", "measured/predicted", "prediction"):
            t.add_column(col, overflow="fold")
        for m in doc["memory"]:
            ratio = m["measured_over_predicted"]
            t.add_row(str(m["trial"]), m["status"] or "-", fmt_bytes(m["predicted_peak_mem_bytes"]),
                      fmt_bytes(m["measured_peak_mem_bytes"]), m["measured_source"] or "-",
                      f"{ratio:.2f}" if ratio is not None else "-", m["predicted_basis"] or "-")
        console.print(t)
    if len(doc["scaling"]) > 1:
        console.print("scaling (best measured config per GPU count): " + ", ".join(
            f"{s['num_gpus']}x {s['tokens_per_s']:,.0f} tok/s ({100 * s['scaling_efficiency']:.0f}%)"
            for s in doc["scaling"]))
    for label, key in (("cheapest", "cheapest"), ("fastest", "fastest")):
        best = doc[key]
        if best:
            tps = f"{best['tokens_per_s']:,.0f} tokens/s" if best["tokens_per_s"] else "not measured"
            console.print(f"[bold]{label}[/] within limits: trial {best['trial']}: "
                          f"{config_summary(best['config'])} -> {fmt_hours(best['hours'])}, "
                          f"{fmt_usd(best['usd'])} on {best['offer']} ({tps}, {best['basis']})")
    if not doc["options"]:
        console.print("[yellow]no completed trial yet[/]")
    for note in doc["notes"]:
        console.print(f"[dim]note: {note}[/]")
