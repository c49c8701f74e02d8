"""Quotes: one measured (or stated-MFU) throughput, priced on every matching offer at every
GPU count and GPU type asked for. Used by `autotune cost` and `autotune plan`.

    base = BasePoint(gpu="a100-80gb", num_gpus=1, tokens_per_s=3200.0, tokens_per_gpu_step=8192)
    bills, skipped = quote(catalog, base, run_counts=[8, 16], gpu_types=["a100-80gb"],
                           comm=CommModel(params=1.3e9), tokens_for=lambda n: 2e10, job=JobSpec())
    explain(bills)        # why the cheapest is not the fastest, in sentences

Every throughput says where it came from: "measured ..." at the measured count and type
(measured wins), "projected from ..." elsewhere (autotune/estimate/scaling.py), "estimated
..." when it comes from a stated MFU and the analytic FLOPs alone (planning).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from autotune.errors import UserError
from autotune.estimate.compute import FP8_SPEEDUP_OVER_BF16, FP8_SPEEDUP_SOURCE
from autotune.estimate.scaling import CommModel, Measured, comm_s, fit_step_model, link_for, project, project_gpu_type
from autotune.format import fmt_gpu_hours
from autotune.pricing.catalog import Catalog
from autotune.pricing.cost import Bill, Infeasible, JobSpec, Skipped, Throughput, compute_bill, rank
from autotune.pricing.offers import Offer


@dataclass(frozen=True)
class BasePoint:
    """Where the throughput comes from: a measurement, or a stated MFU (planning)."""

    gpu: str                          # catalog GPU type it was measured / is stated on
    num_gpus: int
    tokens_per_s: float | None = None  # measured; None = estimated from `mfu`
    mfu: float | None = None           # measured MFU (to move to other GPU types) or stated
    tokens_per_gpu_step: float | None = None  # micro-batch x seq x accumulation, per GPU
    flops_per_token: float | None = None
    precision: str = "bf16"

    @property
    def measured(self) -> bool:
        return self.tokens_per_s is not None


def _need(value, what: str, fix: str):
    if value is None:
        raise UserError(f"cannot project without {what}", fix=fix)
    return value


def throughput_on(catalog: Catalog, base: BasePoint, offer: Offer, n: int,
                  comm: CommModel | None) -> Throughput:
    """Tokens/s of `n` GPUs of the offer's type, with its basis."""
    gt, base_gt = catalog.gpu_type(offer.gpu), catalog.gpu_type(base.gpu)
    label = f"{n}x {offer.gpu}"
    if base.measured:
        assert base.tokens_per_s is not None
        if offer.gpu == base.gpu and n == base.num_gpus:
            return Throughput(offer.gpu, n, base.tokens_per_s,
                              f"measured: {base.tokens_per_s:,.0f} tok/s at {n} {base.gpu}", 1.0, label)
        if base_gt.device_class != gt.device_class:
            raise Infeasible(f"{offer.name}: a {base_gt.device_class.upper()} measurement is not "
                             f"projected onto {gt.device_class.upper()} offers")
        comm = _need(comm, "the parameter count", "give --params N (the model's parameters)")
        w = _need(base.tokens_per_gpu_step, "the batch per optimizer step",
                  "give --global-batch-tokens (tokens per optimizer step at --gpus)")
        fit = fit_step_model([Measured(base.num_gpus, base.tokens_per_s, w)], comm,
                             link_for(base_gt))
        if offer.gpu != base.gpu:
            mfu = base.mfu
            if mfu is None and base.flops_per_token:
                peak = base_gt.peak_flops(base.precision)
                if peak:
                    mfu = base.tokens_per_s * base.flops_per_token / (base.num_gpus * peak)
            mfu = _need(mfu, f"an MFU measured on {base.gpu}",
                        f"give --params (with a sourced {base.precision} peak for {base.gpu})")
            fit = project_gpu_type(fit, mfu, base_gt, gt, base.precision, base.gpu, offer.gpu)
        p = project(fit, n, comm, link_for(gt, offer))
        return Throughput(offer.gpu, n, p.tokens_per_s, p.basis, p.scaling_efficiency, label)
    # Planning: a stated MFU on the analytic FLOPs.
    mfu = _need(base.mfu, "a measured tokens/s or a stated MFU", "give --tokens-per-s or --mfu")
    fpt = _need(base.flops_per_token, "FLOPs per token", "give --params N")
    if gt.device_class != "gpu":
        raise Infeasible(f"{offer.name}: no dense peak for {offer.gpu}: MFU-based planning is for GPUs")
    peak = gt.peak_flops(base.precision)
    if not peak:
        raise Infeasible(f"{offer.name}: no sourced {base.precision} peak for {offer.gpu}")
    per_gpu = mfu * peak / fpt
    basis = (f"estimated: MFU {mfu:.0%} (stated) of {offer.gpu} {base.precision} peak "
             f"{peak / 1e12:g} TFLOPS at {fpt:.3g} FLOPs/token")
    if base.precision == "fp8":
        # The stated fraction of the fp8 peak (twice bf16's) is the user's to state; say what fp8
        # training reaches, which `autotune plan` uses, so that the two can be told apart.
        basis += (f" (fp8 training measures about {FP8_SPEEDUP_OVER_BF16:g}x bf16's tokens/s, not the 2x of "
                  f"the peaks: {FP8_SPEEDUP_SOURCE}; `autotune plan` plans fp8 so)")
    if n == 1 or comm is None or base.tokens_per_gpu_step is None:
        if n > 1:
            raise UserError("cannot estimate communication for several GPUs without the batch",
                            fix="give --global-batch-tokens and --params")
        return Throughput(offer.gpu, n, per_gpu, basis, 1.0, label)
    compute = base.tokens_per_gpu_step / per_gpu
    c = comm_s(comm, link_for(gt, offer), n)
    if c is None:
        raise Infeasible(f"{offer.name}: no bandwidth for {n} GPUs")
    step = compute + c  # overlap assumed none: the pessimistic case, stated below
    return Throughput(offer.gpu, n, n * base.tokens_per_gpu_step / step,
                      basis + f"; ZeRO-{comm.zero_stage} ring collectives over {link_for(gt, offer).label}, "
                              f"overlap assumed none", compute / step, label)


def quote(catalog: Catalog, base: BasePoint, run_counts: list[int], gpu_types: list[str],
          comm: CommModel | None, tokens_for: Callable[[int], float], job: JobSpec,
          offers: list[str] | None = None) -> tuple[list[Bill], list[Skipped]]:
    """Bills for every (offer of `gpu_types`, count in `run_counts`), cheapest first."""
    for name in offers or []:
        catalog.offer(name)  # "did you mean" on a typo
    bills: list[Bill] = []
    skipped: list[Skipped] = []
    for o in catalog.offers:
        if o.gpu not in gpu_types or (offers and o.name not in offers):
            continue
        for n in run_counts:
            try:
                if o.placement(n) is None:
                    raise Infeasible(o.unfit_reason(n) or o.name)
                tp = throughput_on(catalog, base, o, n, comm)
                bills.append(compute_bill(o, tokens_for(n), tp, job, price_unit=catalog.unit(o.gpu)))
            except Infeasible as exc:
                skipped.append(Skipped(o.name, str(exc)))
    return rank(bills), skipped


# ---------------------------------------------------------------------------------------
# Explaining a ranking
# ---------------------------------------------------------------------------------------


def explain(bills: list[Bill]) -> list[str]:
    """Why the cheapest is not the fastest (when it is not): GPU-hours and scaling efficiency,
    in the unit each is billed in (Bill.price_unit: a CPU offer's vCPU-hours)."""
    if not bills:
        return []
    cheapest = min(bills, key=lambda b: (b.usd, b.usd_worst_case))
    fastest = min(bills, key=lambda b: (b.hours, b.usd))
    worst_safe = min(bills, key=lambda b: (b.usd_worst_case, b.usd))

    def desc(b: Bill) -> str:
        eff = f", scaling efficiency {b.scaling_efficiency:.0%}" if b.scaling_efficiency is not None else ""
        cfg = f" [{b.config}]" if b.config else ""
        return (f"{b.offer}{cfg}: {b.gpus_used} {b.price_unit}(s), {b.hours:,.1f} h, "
                f"{fmt_gpu_hours(b.gpu_hours)} {b.price_unit}-hours"
                f"{eff}, ${b.usd:,.2f} (worst case ${b.usd_worst_case:,.2f})")

    lines = [f"cheapest: {desc(cheapest)}"]
    if fastest is not cheapest:
        lines.append(f"fastest:  {desc(fastest)}")
        parts = []
        if fastest.gpu_hours > cheapest.gpu_hours * 1.005:
            part = (f"{fmt_gpu_hours(fastest.gpu_hours)} {fastest.price_unit}-hours against "
                    f"{fmt_gpu_hours(cheapest.gpu_hours)}")
            if (fastest.scaling_efficiency is not None and cheapest.scaling_efficiency is not None
                    and fastest.gpus_used != cheapest.gpus_used):
                u = fastest.price_unit
                part += (f" (at {fastest.gpus_used} {u}s each {u} delivers {fastest.scaling_efficiency:.0%} "
                         f"of its base throughput, at {cheapest.gpus_used} {u}s "
                         f"{cheapest.scaling_efficiency:.0%}: lower scaling efficiency)")
            parts.append(part)
        if fastest.price_usd_per_gpu_hour > cheapest.price_usd_per_gpu_hour * 1.005:
            parts.append(f"${fastest.price_usd_per_gpu_hour:.3f} against "
                         f"${cheapest.price_usd_per_gpu_hour:.3f} per {cheapest.price_unit}-hour")
        lines.append(f"the fastest finishes {cheapest.hours / fastest.hours:.2f}x sooner but costs "
                     f"{fastest.usd / cheapest.usd:.2f}x more: "
                     + (" and ".join(parts) if parts else "its other terms (storage, egress, rounding)"))
    else:
        lines.append("the cheapest is also the fastest")
    if worst_safe is not cheapest:
        lines.append(f"best worst case (+30% time and one more interruption): {desc(worst_safe)}")
    return lines
