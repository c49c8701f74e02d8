"""The study's objective: a measured trial -> (hours to target, dollars) on the cheapest offer.

    score = score_trial(result, cfg, spec, catalog, gpu_type="cpu-core")

A pure function of (result, offer, target); the full bill (storage, egress, interruptions,
billing granularity) lives in `autotune.pricing.cost`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from autotune.contract import TrialConfig, TrialResult
from autotune.pricing.catalog import Catalog
from autotune.spec import SweepSpec


@dataclass(frozen=True)
class Score:
    hours: float
    usd: float
    offer: str
    tokens_to_target: float
    gpu_hours: float
    basis: str  # "measured" | "projected from ..." | "estimated"

    def as_dict(self) -> dict:
        return asdict(self)


def device_type_key(cfg: TrialConfig) -> str:
    """Catalog GPU type of a trial run on this machine (CPU ranks price as CPU cores)."""
    return "cpu-core" if cfg.device.value == "cpu" else ""


def score_trial(result: TrialResult, cfg: TrialConfig, spec: SweepSpec, catalog: Catalog,
                gpu_type: str) -> Score | None:
    if not result.tokens_per_s:
        return None
    tokens = spec.target.tokens_to_target(cfg.global_batch_tokens)
    hours = tokens / result.tokens_per_s / 3600.0
    offers = catalog.offers_for(gpu_type)
    if spec.platforms.offers:
        offers = [o for o in offers if o.name in spec.platforms.offers]
    if not offers:
        return None
    # On CPU a "GPU" is a rank of `threads_per_rank` cores, each billed as a vCPU.
    per_rank = cfg.threads_per_rank if cfg.device.value == "cpu" else 1
    gpu_hours = hours * cfg.num_gpus * cfg.num_nodes * per_rank
    best = min(offers, key=lambda o: o.price_usd_per_gpu_hour)
    return Score(hours=hours, usd=gpu_hours * best.price_usd_per_gpu_hour, offer=best.name,
                 tokens_to_target=tokens, gpu_hours=gpu_hours, basis="measured")
