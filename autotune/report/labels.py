"""Short labels for a config and its memory, shared by every view of a study (terminal,
progress panel, HTML, plots, export).

    config_summary(cfg)        # "2x mb4 ga1 bf16 ckpt:full zero2+off:optimizer tp2"
    zero_summary(cfg), mem_summary(peak, "host_rss", headroom)
    basis_kind("projected from 1 x a100-80gb ...")   # "projected"
    mfu_text(row)              # "MFU 41.0%, HFU 52.3%" or why there is none
    price_text(option)         # "at $2.690/GPU-h, priced DATE (runpod: RunPod spot prices via ...)"
    clip("Pick: #2 on aws-c7i-ondemand  ", prose, 80), outcome_line(outcome, 80)
"""

from __future__ import annotations

from typing import Any, Literal

from autotune.format import fmt_bytes, fmt_pct


def config_summary(cfg: dict[str, Any]) -> str:
    if not cfg or cfg.get("num_gpus") is None:  # a trial queued, not yet proposed: no config
        return "-"
    parts = [f"{cfg['num_gpus']}x", f"mb{cfg['micro_batch_size']}", f"ga{cfg['grad_accum_steps']}",
             str(cfg["precision"]), f"ckpt:{cfg['checkpointing']}"]
    offload = f"+off:{cfg['offload']}" if cfg.get("offload") not in (None, "none") else ""
    if cfg.get("zero_stage"):
        parts.append(f"zero{cfg['zero_stage']}" + offload)
    if cfg.get("fsdp") not in (None, "none"):
        parts.append(f"fsdp:{cfg['fsdp']}" + offload)
    if (cfg.get("tp_degree") or 1) > 1:
        parts.append(f"tp{cfg['tp_degree']}")
    if cfg.get("compile"):
        parts.append("compiled")
    return " ".join(parts)


def zero_summary(cfg: dict[str, Any]) -> str:
    """The sharding column: the ZeRO stage, or FSDP2's mode (its alternative), with offload."""
    off = cfg.get("offload")
    off_text = f" +{off}" if off not in (None, "none") else ""
    if cfg.get("fsdp") not in (None, "none"):
        return f"FSDP2 {cfg['fsdp']}{off_text}"
    if not cfg.get("zero_stage"):
        return "-"
    return f"{cfg['zero_stage']}{off_text}"


def origin_note(row: dict[str, Any]) -> str:
    """' (re-measures #N)' for a deliberate re-measurement of trial N's config, ' (reused #N)'
    for a trial that took trial N's figures, ' (not launched: as #N)' for one held back because
    trial N found its setting unsupported by the workload, ' (recorded from #N's folder)' for one that
    recorded what lost trial N's run had measured, ' (retries #N)' for one that measures again the
    config of trial N, cut short or lost, else "" (a report's trial row)."""
    if row.get("repeat_of") is not None:
        return f" (re-measures #{row['repeat_of']})"
    if row.get("reused_from") is not None:
        return f" (reused #{row['reused_from']})"
    if row.get("held_back_by") is not None:
        return f" (not launched: as #{row['held_back_by']})"
    if row.get("recovered_from") is not None:
        return f" (recorded from #{row['recovered_from']}'s folder)"
    if row.get("retry_of") is not None:
        return f" (retries #{row['retry_of']})"
    return ""


def mem_summary(peak: int | None, source: str | None, headroom: int | None) -> str:
    if not peak:
        return "not measured"
    s = fmt_bytes(peak) + (" rss" if source == "host_rss" else "")
    return s + (f" ({fmt_bytes(headroom)} free)" if headroom is not None else "")


def basis_kind(basis: str | None) -> Literal["measured", "projected", "estimated"]:
    """measured, projected or estimated: how a figure was obtained (every figure says which)."""
    b = (basis or "").lower()
    if b.startswith("measured"):
        return "measured"
    if b.startswith("projected"):
        return "projected"
    return "estimated"


def outcome_line(o, width: int) -> str:
    """One line per finished trial while a sweep runs (a `TrialOutcome`): the figures first,
    the config after them, shortened with an ellipsis to `width`."""
    from autotune.format import fmt_hours, fmt_usd

    r, cfg = o.result, config_summary(o.config.model_dump(mode="json"))
    money = f"  {fmt_hours(o.hours)}, {fmt_usd(o.usd)}" if r.ok and o.hours is not None else ""
    # A re-measurement says whose config it measures again: the same config twice in the
    # progress is the race between rivals within noise, not a search going round in circles.
    again = f"re-measures #{o.repeat_of}: " if o.repeat_of is not None else ""
    if o.recovered_from is not None:  # measured by a run its controller lost: recorded, not launched
        again = f"{again}from #{o.recovered_from}'s folder: "
    if o.reused_from is not None:
        keep, prose = f"  trial {o.number:>3}  reused #{o.reused_from}: {r.status.value}{money}  ", cfg
    elif r.ok:
        keep = (f"  trial {o.number:>3}  {again}ok{money}  {r.tokens_per_s:,.0f} tok/s  "
                f"({r.wall_s or 0:.0f}s)  ")
        prose = f"{cfg}  mem {fmt_bytes(r.peak_mem_bytes)}"
    else:
        first = (r.error or "").splitlines()[0] if r.error else ""
        # Not launched (the memory prescreen, a setting the workload cannot run): its result
        # says oom or unsupported, but nothing ran out of memory or failed here.
        word = "held back" if not o.launched and o.recovered_from is None else r.status.value
        keep = f"  trial {o.number:>3}  {again}{word}  "
        prose = f"{cfg}  {r.error_type or ''}: {first}"
    return clip(keep, prose, width)


def clip(keep: str, prose: str, width: int) -> str:
    """`keep` (it holds names: never cut) then `prose`, shortened with an ellipsis to `width`."""
    room = width - len(keep)
    if len(prose) <= room:
        return keep + prose
    return keep + (prose[:max(room - 1, 0)].rstrip() + "…" if room > 1 else "")


def price_text(row: dict[str, Any]) -> str | None:
    """The rate behind an option's or a bill's dollars, its date, provider and source (the
    source last: a line cut short keeps the rate and date): "at $0.0446/vCPU-h, priced
    <its price_date> (aws: AWS c7i.large on-demand, ...)". None: no rate known."""
    rate = row.get("price_usd_per_gpu_hour")
    if rate is None:
        return None
    out = (f"at ${rate:.3f}" if rate >= 0.1 else f"at ${rate:.4f}") + f"/{row.get('price_unit') or 'GPU'}-h"
    out += f", priced {row['price_date']}" if row.get("price_date") else ", price date unknown"
    source = ": ".join(str(x) for x in (row.get("provider"), row.get("price_source")) if x)
    return out + (f" ({source})" if source else "")


def mfu_text(row: dict[str, Any]) -> str:
    """MFU (and HFU) of a trial or option, or why there is none: never a guessed figure."""
    if row.get("mfu") is not None:
        return f"MFU {fmt_pct(row['mfu'])}" + (f", HFU {fmt_pct(row['hfu'])}" if row.get("hfu") is not None else "")
    if (row.get("config") or {}).get("device") == "cpu":
        return "MFU not computed: no peak for a CPU"
    return "MFU not computed: no catalog peak for this device"



def filter_flags(f: dict[str, Any]) -> str:
    """The flags a report was narrowed by (its `offer_filter`): "--provider aws --region 'us-*'"."""
    return " ".join([*(f"--provider {p}" for p in f["providers"]), *(f"--region '{r}'" for r in f["regions"])])


def offer_filter_line(f: dict[str, Any]) -> str:
    """What a report narrowed to some offers says under its title."""
    return (f"only offers of {filter_flags(f)} ({f['options_left_out']} priced option(s) on other offers "
            "left out; a trial's own row keeps the offer its sweep priced it on)")


def no_option_text(doc: dict[str, Any]) -> str:
    """Why a report holds no priced option: no trial completed yet, none is priced on the
    offers it was narrowed to (--provider / --region), or none has a price."""
    f = doc.get("offer_filter")
    if not doc["counts"]["complete"]:
        return "no completed trial yet"
    if f:
        return (f"no completed trial is priced on an offer of {filter_flags(f)} ({f['options_left_out']} "
                "priced option(s) on other offers: leave out those flags to see them)")
    return "no completed trial is priced on an offer of the catalog (see the notes)"


def limits_set(max_usd: float | None, deadline_hours: float | None) -> str:
    """The limits that are set, in words: "budget $500.00, deadline 72.0 h" (never "budget None")."""
    from autotune.format import fmt_hours, fmt_usd

    parts = [f"budget {fmt_usd(max_usd)}" if max_usd is not None else "",
             f"deadline {fmt_hours(deadline_hours)}" if deadline_hours is not None else ""]
    return ", ".join(p for p in parts if p)
