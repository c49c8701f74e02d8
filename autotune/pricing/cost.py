"""The bill for reaching a training target with one config on one offer.

    tp = Throughput(gpu="h100-sxm", num_gpus=8, tokens_per_s=3.1e4, basis="measured")
    b = compute_bill(offer, tokens=2e10, throughput=tp, job=JobSpec(checkpoint_bytes=1.1e11))
    b.hours, b.usd, b.usd_worst_case, b.breakdown       # breakdown: dollars by term
    bills, skipped = bills_for(catalog, tp, tokens, job)  # every matching offer, cheapest first

What a bill counts, and why:
- compute: the GPUs billed (whole instances: `Offer.placement` rents the cheapest instance that
  holds the job, or enough of the largest; the bill names it, its region and the idle GPUs) for
  the training time, at that instance's price and the offer's granularity (second / minute /
  hour; a monthly rental pays whole months unless `JobSpec.month_rest_used` says the rest of
  the month is used by other work);
- setup hours (billed before training starts), checkpoint writes (size / storage bandwidth),
  storage of dataset + kept checkpoints for the job's duration, egress of the final model
  and of the checkpoints taken home, ingress of the dataset;
- interruptions (spot): the checkpoint interval from Young 1974 / Daly 2006, each
  interruption losing on average half an interval plus the restart time;
- own hardware: purchase amortised over its used hours in its life, plus power.
Sensitivity: every bill is also priced at +30% time, with one extra interruption (a whole
interval lost plus a restart), and with both (the worst case); choices are ranked by the
normal and the worst case, never the best.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from autotune.pricing.catalog import Catalog
from autotune.pricing.offers import HOURS_PER_MONTH, Offer

GB = 1e9  # providers price storage and transfer per GB; we use 1e9 bytes
# "+30% time": our stated sensitivity for a long run slower than its short trial (stragglers,
# data loading, restarts beyond the interruption model); a round figure, not a measurement.
SLOWDOWN_SENSITIVITY = 1.3


# ---------------------------------------------------------------------------------------
# Checkpoint interval (Young 1974, Daly 2006)
# ---------------------------------------------------------------------------------------


def young_interval(write_h: float, mtbf_h: float) -> float:
    """Young 1974: tau = sqrt(2 delta M), delta the checkpoint write time, M the MTBF."""
    return math.sqrt(2.0 * write_h * mtbf_h)


def daly_interval(write_h: float, mtbf_h: float) -> float:
    """Daly 2006 ("A higher order estimate of the optimum checkpoint interval", eq. 37):
    tau = sqrt(2 delta M) [1 + (1/3) sqrt(delta / 2M) + (1/9)(delta / 2M)] - delta, delta < 2M;
    else M. Compute time between checkpoints (the write itself excluded)."""
    if write_h >= 2.0 * mtbf_h:
        return mtbf_h
    r = write_h / (2.0 * mtbf_h)
    return math.sqrt(2.0 * write_h * mtbf_h) * (1.0 + math.sqrt(r) / 3.0 + r / 9.0) - write_h


# ---------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobSpec:
    """What the long run stores and moves, and its checkpoint policy."""

    checkpoint_bytes: float = 0.0     # one full checkpoint (weights + optimizer state)
    dataset_bytes: float = 0.0        # the tokenised dataset, stored for the job and uploaded once
    final_model_bytes: float = 0.0    # downloaded at the end (egress)
    checkpoints_kept: int = 2         # stored at once (rolling)
    egress_checkpoints: int = 0       # checkpoints also downloaded
    checkpoint_interval_hours: float = 1.0  # policy where no interruption rate is known
    month_rest_used: bool = False     # monthly rental: the rest of the month is used elsewhere
    assumptions: tuple[str, ...] = ()  # where the figures above came from, for the report


@dataclass(frozen=True)
class Throughput:
    """Training throughput of one config: measured, projected or estimated (say which)."""

    gpu: str                  # catalog GPU type
    num_gpus: int             # GPUs used (CPU: ranks x threads per rank = vCPUs)
    tokens_per_s: float
    basis: str                # "measured ...", "projected from ...", "estimated ..."
    scaling_efficiency: float | None = None
    config: str = ""          # a short label of the config, for reports


class Infeasible(Exception):
    """This offer cannot finish the job (e.g. interrupted faster than it can checkpoint)."""


# ---------------------------------------------------------------------------------------
# The bill
# ---------------------------------------------------------------------------------------


@dataclass
class Bill:
    offer: str
    provider: str
    pricing: str
    gpu: str
    gpus: int                 # GPUs billed (whole instances)
    gpus_used: int
    nodes: int
    config: str
    tokens: float
    tokens_per_s: float
    throughput_basis: str
    scaling_efficiency: float | None
    hours: float              # wall clock: setup + training + checkpoint writes + interruptions
    training_hours: float     # tokens / tokens_per_s
    gpu_hours: float          # billed GPUs x wall-clock hours
    usd: float
    breakdown: dict[str, float]
    hours_plus_30pct: float
    usd_plus_30pct: float
    hours_extra_interruption: float
    usd_extra_interruption: float
    hours_worst_case: float
    usd_worst_case: float
    checkpoint_interval_hours: float | None  # Young/Daly, where an interruption rate is known
    checkpoint_write_hours: float
    expected_interruptions: float
    price_usd_per_gpu_hour: float  # the effective hourly rate (monthly / 730, own: amortised + power)
    price_date: str
    price_source: str
    notes: list[str] = field(default_factory=list)
    instance: str = ""        # what is rented: the instance type (x `nodes` of them)
    regions: list[str] = field(default_factory=list)  # where these prices hold
    region: str = ""          # the regions in a few words
    idle_gpus: int = 0        # billed but not used by the job (instance sizes)
    inter_node_gb_per_s: float | None = None  # the network assumed between nodes (nodes > 1)
    # What `gpus`, `gpu_hours` and `price_usd_per_gpu_hour` count: a GPU, or on a CPU offer a
    # vCPU (Catalog.unit); a reader of the JSON sees it without the catalog at hand.
    price_unit: str = "GPU"
    rank_usd: int | None = None
    rank_usd_worst_case: int | None = None
    rank_hours: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def report_dict(self) -> dict:
        """The bill in the shape `autotune.report.build` reads (one option of a trial)."""
        d = self.as_dict()
        d.update(gpu_type=self.gpu, basis=self.throughput_basis, sensitivity={
            "plus_30pct_time_hours": self.hours_plus_30pct, "plus_30pct_time_usd": self.usd_plus_30pct,
            "one_interruption_hours": self.hours_extra_interruption,
            "one_interruption_usd": self.usd_extra_interruption})
        return d


@dataclass(frozen=True)
class _Timeline:
    setup_h: float
    work_h: float
    checkpoint_h: float
    interruption_h: float
    wall_h: float
    interval_h: float | None
    write_h: float
    interruptions: float


def _timeline(offer: Offer, nodes: int, work_h: float, job: JobSpec, extra_interruptions: int,
              notes: list[str] | None = None) -> _Timeline:
    write_h = job.checkpoint_bytes / (offer.storage_write_gb_per_s * GB) / 3600.0
    mtbf_node = offer.mtbf_node_hours
    mtbf = mtbf_node / nodes if mtbf_node else None  # any node's interruption stops the job
    if mtbf is not None and write_h > 0:
        interval = daly_interval(write_h, mtbf)
    else:
        interval = job.checkpoint_interval_hours
        if mtbf is not None and notes is not None:
            notes.append(f"checkpoint size unknown: checkpoint every {interval:g} h (policy), "
                         f"write time not priced")
    checkpoint_h = work_h / interval * write_h
    interruption_h, n_int = 0.0, 0.0
    if mtbf is not None:
        lost_h = (interval + write_h) / 2.0 + offer.restart_hours
        if lost_h >= mtbf:
            raise Infeasible(f"{offer.name}: interrupted every {mtbf:.2f} h on average, but each "
                             f"interruption costs {lost_h:.2f} h (lost work + restart)")
        run_h = (work_h + checkpoint_h) / (1.0 - lost_h / mtbf)  # interruptions also hit re-done work
        n_int = run_h / mtbf
        interruption_h = run_h - work_h - checkpoint_h
    # One more interruption than expected: a whole interval lost (worst placement) + a restart.
    interruption_h += extra_interruptions * (interval + write_h + offer.restart_hours)
    n_int += extra_interruptions
    wall = offer.setup_hours + work_h + checkpoint_h + interruption_h
    return _Timeline(offer.setup_hours, work_h, checkpoint_h, interruption_h, wall,
                     interval if mtbf is not None else None, write_h, n_int)


def _round_up(hours: float, unit_h: float) -> float:
    return math.ceil(hours / unit_h - 1e-9) * unit_h


def _dollars(offer: Offer, t: _Timeline, billed_gpus: int, job: JobSpec,
             rate: float | None = None) -> dict[str, float]:
    """Dollar terms of one timeline. Every term is a plain product a person can redo by hand.

    `rate`: $ per billed GPU-hour of the rented instance (default: the offer's)."""
    if offer.pricing == "own":
        assert offer.own is not None
        rate = offer.own.amortised_usd_per_gpu_hour
    elif rate is None:
        rate = offer.usd_per_gpu_hour  # monthly: price / 730 per hour of use
    terms = {
        "compute": t.work_h * billed_gpus * rate,
        "setup": t.setup_h * billed_gpus * rate,
        "checkpoint_writes": t.checkpoint_h * billed_gpus * rate,
        "interruptions": t.interruption_h * billed_gpus * rate,
    }
    if offer.pricing == "own":
        assert offer.own is not None
        terms["power"] = t.wall_h * billed_gpus * offer.own.power_usd_per_gpu_hour
        terms["billing_rounding"] = 0.0
    elif offer.billing == "month":
        billed_h = t.wall_h if job.month_rest_used else _round_up(t.wall_h, HOURS_PER_MONTH)
        terms["billing_rounding"] = (billed_h - t.wall_h) * billed_gpus * rate
    else:
        unit = {"second": 1 / 3600, "minute": 1 / 60, "hour": 1.0}[offer.billing]
        terms["billing_rounding"] = (_round_up(t.wall_h, unit) - t.wall_h) * billed_gpus * rate
    stored_gb = (job.dataset_bytes + job.checkpoints_kept * job.checkpoint_bytes) / GB
    terms["storage"] = stored_gb * offer.storage_usd_per_gb_month * t.wall_h / HOURS_PER_MONTH
    terms["egress"] = ((job.final_model_bytes + job.egress_checkpoints * job.checkpoint_bytes) / GB
                       * offer.egress_usd_per_gb)
    terms["ingress"] = job.dataset_bytes / GB * offer.ingress_usd_per_gb
    return terms


def compute_bill(offer: Offer, tokens: float, throughput: Throughput, job: JobSpec | None = None,
                 price_unit: str = "GPU") -> Bill:
    """The whole bill of one (config, offer, target). Raises Infeasible when it cannot finish.
    `price_unit`: what the offer bills (Catalog.unit of its type: 'vCPU' for a CPU offer)."""
    job = job or JobSpec()
    if throughput.gpu != offer.gpu:
        raise ValueError(f"throughput on {throughput.gpu} priced on a {offer.gpu} offer")
    if throughput.tokens_per_s <= 0 or tokens <= 0:
        raise ValueError("tokens and tokens_per_s must be > 0")
    where = offer.placement(throughput.num_gpus)
    if where is None:
        raise Infeasible(offer.unfit_reason(throughput.num_gpus) or offer.name)
    billed, nodes = where.billed_gpus, where.count
    rate = where.usd_per_gpu_hour  # the instance's own price (monthly: / 730; own: amortised + power)
    work_h = tokens / throughput.tokens_per_s / 3600.0
    notes: list[str] = []

    def priced(work: float, extra: int, keep_notes: bool = False) -> tuple[_Timeline, dict[str, float]]:
        t = _timeline(offer, nodes, work, job, extra, notes if keep_notes else None)
        return t, _dollars(offer, t, billed, job, rate)

    t, terms = priced(work_h, 0, keep_notes=True)
    t30, terms30 = priced(work_h * SLOWDOWN_SENSITIVITY, 0)
    t1, terms1 = priced(work_h, 1)
    tw, termsw = priced(work_h * SLOWDOWN_SENSITIVITY, 1)
    if billed > throughput.num_gpus:
        notes.append(f"{billed - throughput.num_gpus} of {billed} billed GPUs idle: "
                     f"{where.label} is the smallest rental that holds {throughput.num_gpus} "
                     f"(sizes: {', '.join(str(g) for _, g, _ in offer.sizes())})")
    if offer.billing == "month" and not job.month_rest_used and terms["billing_rounding"] > 0:
        notes.append(f"monthly rental: pays {math.ceil(t.wall_h / HOURS_PER_MONTH - 1e-9)} whole "
                     f"month(s) for {t.wall_h:.1f} h (use --month-rest-used if the rest is used)")
    if offer.notes:
        notes.append(offer.notes)
    return Bill(
        offer=offer.name, provider=offer.provider, pricing=offer.pricing, gpu=offer.gpu,
        gpus=billed, gpus_used=throughput.num_gpus, nodes=nodes, config=throughput.config,
        tokens=tokens, tokens_per_s=throughput.tokens_per_s, throughput_basis=throughput.basis,
        scaling_efficiency=throughput.scaling_efficiency,
        hours=t.wall_h, training_hours=work_h, gpu_hours=t.wall_h * billed, usd=sum(terms.values()),
        breakdown=terms,
        hours_plus_30pct=t30.wall_h, usd_plus_30pct=sum(terms30.values()),
        hours_extra_interruption=t1.wall_h, usd_extra_interruption=sum(terms1.values()),
        hours_worst_case=tw.wall_h, usd_worst_case=sum(termsw.values()),
        checkpoint_interval_hours=t.interval_h, checkpoint_write_hours=t.write_h,
        expected_interruptions=t.interruptions,
        price_usd_per_gpu_hour=rate,
        price_date=offer.price_date, price_source=offer.price_source, notes=notes,
        instance=where.instance, regions=list(offer.regions), region=offer.region_label,
        idle_gpus=billed - throughput.num_gpus,
        inter_node_gb_per_s=offer.inter_node_gb_per_s if nodes > 1 else None, price_unit=price_unit,
    )


def rank(bills: list[Bill]) -> list[Bill]:
    """Cheapest first (ties: the better worst case); fills the three rank fields."""
    for key, attr in ((lambda b: (b.usd_worst_case, b.usd), "rank_usd_worst_case"),
                      (lambda b: (b.hours, b.usd), "rank_hours")):
        for i, b in enumerate(sorted(bills, key=key), 1):
            setattr(b, attr, i)
    out = sorted(bills, key=lambda b: (b.usd, b.usd_worst_case))
    for i, b in enumerate(out, 1):
        b.rank_usd = i
    return out


@dataclass(frozen=True)
class Skipped:
    offer: str
    reason: str


def bills_for(catalog: Catalog, throughputs: Throughput | list[Throughput], tokens: float | dict,
              job: JobSpec | None = None, offers: list[str] | None = None) -> tuple[list[Bill], list[Skipped]]:
    """Bills of every matching offer for each throughput, ranked cheapest first.

    `tokens` may be a dict keyed by `Throughput.config` when configs differ in global batch
    (steps and loss targets). `offers` restricts to these names (unknown names: UserError).
    """
    tps = [throughputs] if isinstance(throughputs, Throughput) else list(throughputs)
    if offers:
        for name in offers:
            catalog.offer(name)  # "did you mean" on a typo
    bills: list[Bill] = []
    skipped: list[Skipped] = []
    for tp in tps:
        for o in catalog.offers_for(tp.gpu):
            if offers and o.name not in offers:
                continue
            n_tokens = tokens[tp.config] if isinstance(tokens, dict) else tokens
            try:
                bills.append(compute_bill(o, n_tokens, tp, job, price_unit=catalog.unit(o.gpu)))
            except Infeasible as exc:
                skipped.append(Skipped(o.name, str(exc)))
    return rank(bills), skipped


# ---------------------------------------------------------------------------------------
# Own hardware: break-even against renting
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BreakEven:
    own: str
    other: str
    hours_per_month: float | None
    own_cheaper: str  # "above" | "below" | "never" | "always"
    text: str


def breakeven(own: Offer, other: Offer) -> BreakEven:
    """Monthly GPU-hours at which owning and renting cost the same, per GPU.

    Owning costs F (purchase / life in months, used or not) + e x h (power); an hourly rental
    costs p x h, a monthly one R whatever h is.
    """
    if own.own is None:
        raise ValueError(f"{own.name} is not own hardware")
    f, e = own.own.fixed_usd_per_gpu_month, own.own.power_usd_per_gpu_hour
    if other.pricing == "monthly":
        r = float(other.price_usd_per_gpu_month or 0.0)
        if f >= r:
            return BreakEven(own.name, other.name, None, "never",
                             f"{own.name} never beats {other.name}: ${f:,.0f}/month to own > ${r:,.0f} rent")
        h = (r - f) / e if e > 0 else math.inf
        if h >= HOURS_PER_MONTH:
            return BreakEven(own.name, other.name, None, "always",
                             f"{own.name} is cheaper than {other.name} at any usage")
        return BreakEven(own.name, other.name, h, "below",
                         f"{own.name} is cheaper than {other.name} below {h:,.0f} GPU-hours/month")
    p = other.usd_per_gpu_hour
    if p <= e:
        return BreakEven(own.name, other.name, None, "never",
                         f"{own.name} never beats {other.name}: its power alone costs "
                         f"${e:.3f}/h vs ${p:.3f}/h rent")
    h = f / (p - e)
    if h > HOURS_PER_MONTH:
        return BreakEven(own.name, other.name, None, "never",
                         f"{own.name} would need {h:,.0f} GPU-hours/month (> {HOURS_PER_MONTH:.0f}) "
                         f"to beat {other.name}")
    return BreakEven(own.name, other.name, h, "above",
                     f"{own.name} is cheaper than {other.name} above {h:,.0f} GPU-hours/month "
                     f"({h / HOURS_PER_MONTH:.0%} utilisation)")


def breakevens(catalog: Catalog) -> list[BreakEven]:
    """Each own-hardware offer against each rental / on-demand / spot offer of its GPU type."""
    out = []
    for own in (o for o in catalog.offers if o.pricing == "own"):
        for other in catalog.offers_for(own.gpu):
            if other.pricing != "own":
                out.append(breakeven(own, other))
    return out
