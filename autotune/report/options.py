"""The priced options of a study: every (config, offer) pair of its completed trials, priced
again on the current catalog from what each trial stored, with the limits applied and the
Pareto set marked.

    options = [o for t, row in ... for o in options_for(t, row, catalog)]
    options, offer_filter = select(options, catalog, providers=["aws"], regions=["us-*"])   # --provider / --region
    apply_limits(options, limits); front = pareto_set(options)
"""

from __future__ import annotations

import math
from typing import Any

from autotune.pricing.catalog import Catalog
from autotune.record import TrialRecord
from autotune.report.labels import basis_kind
from autotune.report.schema import Limits, OfferFilter, OptionRow, Sensitivity, TrialRow
from autotune.search.pareto import front
from autotune.search.score import reprice


def offer_info(catalog, name: str | None) -> dict[str, Any]:
    """What the catalog says of an offer (provider, pricing, GPU, hourly price in its unit,
    the price's date and source)."""
    if catalog is None or name is None:
        return {}
    for o in catalog.offers:
        if o.name == name:
            try:  # monthly / owned offers: the hourly equivalent
                price = o.usd_per_gpu_hour
            except (TypeError, ValueError, ZeroDivisionError):
                price = o.price_usd_per_gpu_hour
            return {"provider": o.provider, "pricing": o.pricing, "gpu_type": o.gpu,
                    "price_usd_per_gpu_hour": price, "price_date": o.price_date,
                    "price_unit": catalog.unit(o.gpu), "price_source": o.price_source,
                    "regions": list(getattr(o, "regions", []))}
    return {}


def bills_for_trial(trial, catalog: Catalog | None, tokens_per_s: float | None = None) -> list[dict] | None:
    """Every matching offer's bill for a completed Optuna trial, as report dicts, priced again
    on `catalog` from what the trial stored (autotune.search.score.reprice), at `tokens_per_s`
    when given (a config's estimate over its runs). None when the trial has no score."""
    return reprice(TrialRecord.of(trial).score, catalog, tokens_per_s)


def options_for(trial, row: TrialRow, catalog, estimate=None) -> list[OptionRow]:
    """The priced options of one trial (none unless it completed). `estimate`: the config's
    runs on this hardware (autotune.search.estimates.ConfigEstimate, this trial being the first):
    the options are priced at its estimate over all of them."""
    if row.state != "COMPLETE":
        return []
    # A config measured once is priced at its run, unless the study's level moved its estimate
    # (autotune.search.estimates.RunModel.level_shift): every config on one level, as ranked.
    at_estimate = estimate is not None and (len(estimate.runs) > 1 or not math.isclose(
        estimate.tokens_per_s, estimate.runs[0].tokens_per_s, rel_tol=1e-9))
    bills = bills_for_trial(trial, catalog, estimate.tokens_per_s if at_estimate else None)
    score = TrialRecord.of(trial).score
    if bills is None:
        if row.hours is None or row.usd is None or row.offer is None:
            return []
        bills = [{"offer": row.offer, "hours": row.hours, "usd": row.usd, "basis": row.basis,
                  "gpu_hours": score.gpu_hours if score else None}]
    out = []
    for b in bills:
        info = offer_info(catalog, b["offer"])
        sens = b.get("sensitivity")
        provider, pricing = b.get("provider", info.get("provider")), b.get("pricing", info.get("pricing"))
        out.append(OptionRow(
            trial=row.number, config=row.config, offer=b["offer"], provider=provider, pricing=pricing,
            regions=b.get("regions", info.get("regions")) or [], instance=b.get("instance"),
            platform=f"{provider or '?'}/{pricing or '?'}",
            gpu_type=b.get("gpu_type", info.get("gpu_type")),
            price_usd_per_gpu_hour=b.get("price_usd_per_gpu_hour", info.get("price_usd_per_gpu_hour")),
            price_date=b.get("price_date", info.get("price_date")),
            price_unit=b.get("price_unit", info.get("price_unit")),
            price_source=b.get("price_source", info.get("price_source")),
            hours=float(b["hours"]), usd=float(b["usd"]), gpu_hours=b.get("gpu_hours"),
            basis=b.get("basis") or "measured", basis_kind=basis_kind(b.get("basis") or "measured"),
            tokens_per_s=estimate.tokens_per_s if at_estimate else row.tokens_per_s, mfu=row.mfu, hfu=row.hfu,
            peak_mem_bytes=row.peak_mem_bytes,
            peak_mem_source=row.peak_mem_source, headroom_bytes=row.headroom_bytes,
            sensitivity=Sensitivity(**{k: sens.get(k) for k in Sensitivity.model_fields})
            if isinstance(sens, dict) else None,
            usd_worst_case=b.get("usd_worst_case"), hours_worst_case=b.get("hours_worst_case"),
            breakdown=b.get("breakdown") if isinstance(b.get("breakdown"), dict) else None,
            within_budget=None, within_deadline=None, feasible=True, pareto=False,
            runs=estimate.trials if estimate is not None else [row.number],
            tokens_to_target=score.tokens_to_target if score else None,
            target_basis=(score.target_basis or None) if score else None,
        ))
    return out


def pareto_set(options: list[OptionRow]) -> list[OptionRow]:
    """Options that no other option beats on both hours and dollars, cheapest first."""
    return sorted(front(options, key=lambda o: (o.hours, o.usd)), key=lambda o: (o.usd, o.hours))


def apply_limits(options: list[OptionRow], limits: Limits) -> None:
    for o in options:
        o.within_budget = None if limits.max_usd is None else o.usd <= limits.max_usd
        o.within_deadline = None if limits.deadline_hours is None else o.hours <= limits.deadline_hours
        o.feasible = o.within_budget is not False and o.within_deadline is not False


def select(options: list[OptionRow], catalog, providers: list[str] | None,
           regions: list[str] | None) -> tuple[list[OptionRow], OfferFilter]:
    """Options on offers of these providers, in these regions (--provider / --region), and the
    filter as the report records it (how many options it left out)."""
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
    return kept, OfferFilter(providers=list(providers or []), regions=list(regions or []),
                             options_left_out=len(options) - len(kept))
