"""bill.md, as `autotune export` writes it: the config in one line, what it measured, and the
projected bill on the chosen offer.

    text = bill_markdown(plan, files=["bill.md", "launch.sh"])
"""

from __future__ import annotations

from typing import Any

from autotune.contract import DeviceKind, Launcher, TrialConfig
from autotune.format import fmt_bytes, fmt_hours, fmt_tokens, fmt_usd
from autotune.report.capacity import SWEEP_LIMIT
from autotune.report.export_plan import BILL_MD, DEEPSPEED_CONFIG, LAUNCH_SCRIPT, ExportPlan
from autotune.report.memory_fit import fit_lines
from autotune.report.optimizer import optimizer_notes
from autotune.report.schema import MemoryFitRow
from autotune.report.sharding import sharding_bill_lines, sharding_label


def config_line(cfg: TrialConfig, launcher: Launcher | None = None) -> str:
    """The config in one line; `launcher`, the export's where it is not the trial's (--launcher)."""
    ran = cfg.launcher.value
    launched = (ran if launcher is None or launcher is cfg.launcher
                else f"{launcher.value} (the trial ran under {ran})")
    return (f"{cfg.num_gpus * cfg.num_nodes} {'CPU rank(s)' if cfg.device is DeviceKind.cpu else 'GPU(s)'}"
            f" on {cfg.num_nodes} node(s), micro-batch {cfg.micro_batch_size} x accumulation "
            f"{cfg.grad_accum_steps} x {cfg.dp_degree} data-parallel = global batch "
            f"{cfg.global_batch_samples} samples ({cfg.global_batch_tokens} tokens), "
            f"{cfg.precision.value}, checkpointing {cfg.checkpointing.value}, "
            f"{sharding_label(cfg)}, TP {cfg.tp_degree}, launcher {launched}")


def bill_line(plan: ExportPlan) -> str:
    o = plan.option
    if o is None:
        return "Not priced: no catalog offer matched this trial's hardware."
    return f"Projected on {o['offer']}: {projected_text(o)} (from {o['basis_kind']} tokens/s; see {BILL_MD})."


def projected_text(o: dict[str, Any]) -> str:
    """'9.4 h, $0.84 to 1B tokens': an option's hours and dollars and what they reach."""
    label = _tokens_label(o)
    return f"{fmt_hours(o['hours'])}, {fmt_usd(o['usd'])}" + (f" to {label}" if label else "")


def _tokens_label(o: dict[str, Any]) -> str | None:
    """'1B tokens': what the bill is projected to (None for an option stored without it)."""
    return f"{fmt_tokens(o['tokens_to_target'])} tokens" if o.get("tokens_to_target") else None


def bill_markdown(plan: ExportPlan, files: list[str]) -> str:
    cfg, o, t = plan.cfg, plan.option, plan.trial_row
    out = [f"# autotune export: study '{plan.study}', {plan.label}", "",
           f"Config: {config_line(cfg, plan.launcher)}.", ""]
    tps = f"{t['tokens_per_s']:,.0f} tokens/s" if t.get("tokens_per_s") else "throughput not measured"
    mem = (f"peak memory {fmt_bytes(t['peak_mem_bytes'])} per rank ({t['peak_mem_source']})"
           if t.get("peak_mem_bytes") else "peak memory not measured")
    out += [f"Measured on {t.get('hardware') or 'unknown hardware'}: {tps}, {mem}.", ""]
    if t.get("memory_fit"):
        fit = MemoryFitRow(**t["memory_fit"])
        own = (t.get("mem_capacity_source") if t.get("mem_capacity_bytes") == fit.limit_bytes
               and t.get("mem_capacity_source") != SWEEP_LIMIT else None)
        out += fit_lines(fit, t["config"], plan.headroom_note, machine=own)
    if o is not None and len(o.get("runs") or []) > 1 and o.get("tokens_per_s"):
        # The bill rests on every run of the config, this trial's among them.
        out += [f"The bill uses {o['tokens_per_s']:,.0f} tokens/s: the estimate over this config's "
                f"{len(o['runs'])} runs (trials {', '.join(map(str, o['runs']))}).", ""]
    if o is None:
        out += ["Not priced: no catalog offer matched this trial's hardware.", ""]
    else:
        s = o.get("sensitivity") or {}
        price = o.get("price_usd_per_gpu_hour")
        out += [f"Projected bill on **{o['offer']}** ({o['platform']}"
                + (f", instance {o['instance']}" if o.get("instance") else "")
                + (f", region {', '.join(o['regions'])}" if o.get("regions") else "")
                + (f", {fmt_usd(price)} per {o.get('price_unit') or 'GPU'}-hour as of {o.get('price_date')}"
                   + (f" ({o['price_source']})" if o.get("price_source") else "") if price is not None else "")
                + "); hours and dollars projected to the target"
                + (f" ({o['target_basis']})" if o.get("target_basis") else "")
                + f" from tokens/s {o['basis']}.", "",
                "| case | hours | dollars |", "|---|---:|---:|",
                f"| to target{f' ({_tokens_label(o)})' if _tokens_label(o) else ''} | "
                f"{fmt_hours(o['hours'])} | {fmt_usd(o['usd'])} |"]
        if s:
            out += [f"| +30% time | {fmt_hours(s.get('plus_30pct_time_hours'))} | "
                    f"{fmt_usd(s.get('plus_30pct_time_usd'))} |",
                    f"| one interruption | {fmt_hours(s.get('one_interruption_hours'))} | "
                    f"{fmt_usd(s.get('one_interruption_usd'))} |"]
        if o.get("usd_worst_case") is not None:
            out.append(f"| worst case (both) | {fmt_hours(o.get('hours_worst_case'))} | "
                       f"{fmt_usd(o['usd_worst_case'])} |")
        out.append("")
        if o.get("breakdown"):
            out += ["Breakdown: " + ", ".join(f"{k} {fmt_usd(v)}" for k, v in o["breakdown"].items()), ""]
    if plan.catalog_note:
        out += [plan.catalog_note[0].upper() + plan.catalog_note[1:] + ".", ""]
    out += ["Files:", ""] + [f"- `{f}`" for f in files] + [""]
    if plan.target == "hf-trainer":
        from autotune.report.hf_trainer import bill_lines

        out += bill_lines(cfg, LAUNCH_SCRIPT, DEEPSPEED_CONFIG, plan.transformers_version)
    else:
        out += ["Activation checkpointing, tensor parallelism and torch.compile are model code: your "
                "script applies them from AUTOTUNE_CHECKPOINTING / AUTOTUNE_TP_DEGREE / AUTOTUNE_COMPILE "
                "(1: compile the model; see launch.sh).", ""]
        out += sharding_bill_lines(cfg) + optimizer_notes(cfg)
    return "\n".join(out)
