"""The study's objective: a measured trial -> (hours to target, dollars) on the cheapest offer.

    score = score_trial(result, cfg, spec, catalog, gpu_type="cpu-core")   # or "" = from hardware
    bills, skipped = expand_trial(result, cfg, spec, catalog, gpu_type)    # every matching offer
    bills = reprice(record.score, catalog, tokens_per_s)   # stored inputs, priced again

A pure function of (result, offer, target): the tokens to target come from the spec's target
at the trial's global batch (a loss target uses the trial's measured gradient noise scale),
the throughput is the trial's measurement, and the full bill (storage, egress,
interruptions, billing granularity) is `autotune.pricing.cost`. The objective is the
cheapest matching offer's bill, among those within the deadline when one is set.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from autotune.contract import HardwareFingerprint, TrialConfig, TrialResult
from autotune.pricing.catalog import Catalog
from autotune.pricing.cost import Bill, JobSpec, Skipped, Throughput, bills_for
from autotune.pricing.target import tokens_to_target
from autotune.record import ScoreRecord
from autotune.spec import SweepSpec

# Bytes per parameter of a full training checkpoint with AdamW: fp32 master weights (4) +
# two fp32 moments (8), plus the 16-bit model copy (2) under mixed precision (ZeRO paper's
# K = 12 optimizer bytes). SGD with momentum keeps 4 + 4.
_CKPT_BYTES_PER_PARAM = {("adamw", True): 14, ("adamw", False): 12, ("sgd", True): 10, ("sgd", False): 8}
# The tokenised dataset as uint16 token ids (vocabularies under 65,536 tokens).
DATASET_BYTES_PER_TOKEN = 2


# What a completed trial scores: the record it stores (one declaration of its fields).
Score = ScoreRecord


def device_type_key(cfg: TrialConfig) -> str:
    """Catalog GPU type of a trial run on this machine (CPU ranks price as CPU cores).

    "" on CUDA: `score_trial` then matches the result's device name against the catalog."""
    return "cpu-core" if cfg.device.value == "cpu" else ""


def rank_hour_price_usd(spec: SweepSpec, cfg: TrialConfig, catalog,
                        hardware: HardwareFingerprint) -> float | None:
    """What one rank-hour of this machine costs the search (None: not priced): the spec's
    price, else the catalog's cheapest offer for this hardware (CPU ranks as CPU cores, a GPU
    by the name its driver reports, as a trial's bills match it: score.trial_pricing)."""
    if spec.budget.search_price_usd_per_gpu_hour is not None:
        return spec.budget.search_price_usd_per_gpu_hour
    gpu = device_type_key(cfg) or catalog.match_device(hardware.device_name or "") or ""
    try:
        prices = [o.price_usd_per_gpu_hour for o in catalog.offers_for(gpu)
                  if getattr(o, "price_usd_per_gpu_hour", None) is not None]
    except Exception:  # unknown GPU type in the catalog: the search is simply not priced
        return None
    if not prices:
        return None
    # On CPU a rank is `threads_per_rank` cores, each billed as a vCPU.
    return min(prices) * (cfg.threads_per_rank if cfg.device.value == "cpu" else 1)


def job_for(cfg: TrialConfig, params: int | None, tokens: float, dataset_tokens: float | None) -> JobSpec:
    """What the long run of a trial's config stores and moves (stated assumptions)."""
    return job_from_model(params, cfg.precision.value != "fp32", cfg.optimizer, tokens, dataset_tokens)


def job_from_model(params: float | None, mixed_precision: bool, optimizer: str, tokens: float,
                   dataset_tokens: float | None) -> JobSpec:
    """Checkpoint, final-model and dataset sizes from the model size and the target."""
    notes = []
    per_param = _CKPT_BYTES_PER_PARAM.get((optimizer, mixed_precision), 14 if mixed_precision else 12)
    if params:
        ckpt = params * per_param
        final = params * (2 if mixed_precision else 4)
        notes.append(f"checkpoint {per_param} B/param ({optimizer}, "
                     f"{'mixed precision' if mixed_precision else 'fp32'}), final model "
                     f"{2 if mixed_precision else 4} B/param")
    else:
        ckpt = final = 0.0
        notes.append("parameter count unknown: checkpoint and model sizes priced at 0")
    data_tokens = dataset_tokens if dataset_tokens else tokens
    notes.append(f"dataset {DATASET_BYTES_PER_TOKEN} B/token (uint16 ids) x {data_tokens:.3g} tokens"
                 + ("" if dataset_tokens else " (the target: no dataset size given)"))
    return JobSpec(checkpoint_bytes=ckpt, dataset_bytes=data_tokens * DATASET_BYTES_PER_TOKEN,
                   final_model_bytes=final, assumptions=tuple(notes))


def _config_label(cfg: TrialConfig) -> str:
    parts = [f"{cfg.num_gpus * cfg.num_nodes}x", f"mb{cfg.micro_batch_size}", f"ga{cfg.grad_accum_steps}",
             cfg.precision.value]
    if cfg.zero_stage:
        parts.append(f"zero{cfg.zero_stage}")
    if cfg.tp_degree > 1:
        parts.append(f"tp{cfg.tp_degree}")
    if cfg.compile:
        parts.append("compiled")
    return " ".join(parts)


@dataclass(frozen=True)
class TrialPricing:
    """What pricing a trial needs, stored with its score so a report can re-price it."""

    throughput: Throughput
    tokens: float
    target_basis: str
    job: JobSpec
    offers: list[str] | None
    compile_s: float = 0.0  # charged once to the run (`with_compile`)
    measured_tokens_per_s: float | None = None  # before the compile's charge

    def as_dict(self) -> dict:
        tp = self.throughput
        return {"gpu": tp.gpu, "num_gpus": tp.num_gpus,
                "tokens_per_s": self.measured_tokens_per_s or tp.tokens_per_s, "compile_s": self.compile_s,
                "basis": tp.basis, "config": tp.config, "tokens": self.tokens,
                "target_basis": self.target_basis, "job": asdict(self.job), "offers": self.offers}


def with_compile(tokens_per_s: float, tokens: float, compile_s: float | None) -> float:
    """The run's throughput with a compiled config's compile time charged once: the run takes
    tokens / tokens_per_s + compile_s seconds (hours to target + compile_s / 3600)."""
    if not compile_s or not tokens:
        return tokens_per_s
    return tokens / (tokens / tokens_per_s + compile_s)


def trial_pricing(result: TrialResult, cfg: TrialConfig, spec: SweepSpec, catalog: Catalog,
                  gpu_type: str = "") -> TrialPricing | None:
    """The measured throughput, tokens to target and job sizes of one completed trial; None
    when it has no throughput or its hardware has no catalog type."""
    if not result.ok or not result.tokens_per_s:
        return None
    gpu = gpu_type or catalog.match_device(result.hardware.device_name or "") or ""
    if gpu not in catalog.gpus:
        return None
    b_noise = result.gradient_noise_scale * cfg.seq_len if result.gradient_noise_scale else None
    target = tokens_to_target(spec.target, cfg.global_batch_tokens, b_noise,
                              b_noise_source="measured by this trial")
    ranks = cfg.num_gpus * cfg.num_nodes
    # On CPU a "GPU" is a rank of `threads_per_rank` cores, each billed as a vCPU.
    units = ranks * (cfg.threads_per_rank if catalog.gpus[gpu].device_class == "cpu" else 1)
    hw = result.hardware
    where = hw.kind_key() if (hw.device_name or hw.cpu_model) else gpu
    compile_s = result.compile_s or 0.0
    tp = Throughput(gpu=gpu, num_gpus=units,
                    tokens_per_s=with_compile(result.tokens_per_s, target.tokens, compile_s),
                    basis=f"measured ({where}, {ranks} rank(s))"
                    + (f", compile {compile_s:.0f} s charged once" if compile_s else ""),
                    config=_config_label(cfg))
    job = job_for(cfg, result.params, target.tokens, spec.target.dataset_tokens)
    return TrialPricing(tp, target.tokens, target.basis, job, spec.platforms.offers, compile_s,
                        result.tokens_per_s)


def expand_trial(result: TrialResult, cfg: TrialConfig, spec: SweepSpec, catalog: Catalog,
                 gpu_type: str = "") -> tuple[list[Bill], list[Skipped]]:
    """One completed trial priced on every matching offer: (bills cheapest first, skipped)."""
    tp = trial_pricing(result, cfg, spec, catalog, gpu_type)
    if tp is None:
        return [], []
    return bills_for(catalog, tp.throughput, tp.tokens, tp.job, offers=tp.offers)


def score_trial(result: TrialResult, cfg: TrialConfig, spec: SweepSpec, catalog: Catalog,
                gpu_type: str) -> Score | None:
    """(hours, dollars) of the cheapest matching offer (within the deadline, if one is set)."""
    tp = trial_pricing(result, cfg, spec, catalog, gpu_type)
    if tp is None:
        return None
    bills, _ = bills_for(catalog, tp.throughput, tp.tokens, tp.job, offers=tp.offers)
    if not bills:
        return None
    best = objective_bill(bills, spec.budget.deadline_hours)
    return ScoreRecord(hours=best.hours, usd=best.usd, offer=best.offer, tokens_to_target=best.tokens,
                 gpu_hours=best.gpu_hours, basis=best.throughput_basis,
                 usd_worst_case=best.usd_worst_case, hours_worst_case=best.hours_worst_case,
                 pricing=best.pricing, target_basis=tp.target_basis,
                 price_note=catalog.price_note(b.offer for b in bills),
                 bills=[_compact(b) for b in bills], pricing_inputs=tp.as_dict())


def objective_bill(bills: list, deadline_hours: float | None):
    """The bill a trial is scored by: the cheapest, among those within the deadline when one
    is set (all of them when none is). Bills as `Bill`s or as report dicts."""
    def get(b, name):
        return b[name] if isinstance(b, dict) else getattr(b, name)

    pool = bills
    if deadline_hours is not None:
        pool = [b for b in bills if get(b, "hours") <= deadline_hours] or bills
    return min(pool, key=lambda b: (get(b, "usd"), get(b, "usd_worst_case") or 0.0))


def reprice(score, catalog: Catalog | None, tokens_per_s: float | None = None) -> list[dict] | None:
    """Every matching offer's bill (report dicts) of a stored score (`ScoreRecord`), priced
    again on `catalog` from the inputs stored with it, at `tokens_per_s` (default: the trial's
    own measurement; a config measured several times is priced at its estimate,
    autotune.search.estimates). Without a catalog, or for a score stored without inputs: the bills
    stored at sweep time (then only at the trial's own throughput). None: nothing to price."""
    if score is None:
        return None
    inputs = score.pricing_inputs
    if catalog is not None and inputs and inputs.get("gpu") in catalog.gpus:
        tp = Throughput(gpu=inputs["gpu"], num_gpus=int(inputs["num_gpus"]),
                        tokens_per_s=with_compile(float(tokens_per_s or inputs["tokens_per_s"]),
                                                  float(inputs["tokens"]), inputs.get("compile_s")),
                        basis=inputs["basis"], config=inputs.get("config", ""))
        fields: dict[str, Any] = {k: (tuple(v) if k == "assumptions" else v) for k, v in inputs["job"].items()}
        job = JobSpec(**fields)
        offers = [o for o in (inputs.get("offers") or []) if any(x.name == o for x in catalog.offers)]
        bills, _ = bills_for(catalog, tp, float(inputs["tokens"]), job, offers=offers or None)
        return [b.report_dict() for b in bills]
    if tokens_per_s is not None and inputs.get("tokens_per_s") and score.bills:
        # No catalog to price again: time and dollars scale with 1 / throughput.
        f = float(inputs["tokens_per_s"]) / tokens_per_s
        return [{**b, "hours": b["hours"] * f, "usd": b["usd"] * f} for b in score.bills]
    return list(score.bills) or None


def _compact(b: Bill) -> dict:
    """A bill as stored with the trial (JSON): the figures a report shows."""
    keep = ("offer", "provider", "pricing", "gpu_type", "gpus", "hours", "gpu_hours", "usd",
            "usd_worst_case", "hours_worst_case", "sensitivity", "basis", "price_usd_per_gpu_hour",
            "checkpoint_interval_hours", "expected_interruptions", "price_date", "breakdown",
            "instance", "nodes", "regions", "idle_gpus")
    d = b.report_dict()
    return {k: d[k] for k in keep}
