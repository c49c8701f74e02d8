"""`autotune plan`: the whole search on the analytic models alone, no trial run.

    autotune plan spec.yaml --mfu 0.4 [--gpu h100-sxm] [--region us-east-1] [--json]

Torch-free: the estimates of autotune/search/plan.py priced on the catalog; its bills are
printed with `autotune cost`'s helpers (autotune/cli/cost.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from autotune.cli.catalog import provider_option, region_option
from autotune.cli.common import console, print_json
from autotune.cli.cost import bill_price, offer_notes, price_used_note, rented, warn_stale
from autotune.format import fmt_gpu_hours, fmt_hours


def register(app: typer.Typer) -> None:
    @app.command(name="plan")
    def plan_cmd(
        spec_file: Path = typer.Argument(..., help="sweep spec YAML (workload, target, space, platforms)"),
        mfu: float = typer.Option(0.35, "--mfu", help="stated fraction of the dense peak reached "
                                  "(default 0.35: torchtitan's 33-39% on H100, Dec 2024)"),
        gpu: Optional[list[str]] = typer.Option(
            None, "--gpu", help="only this GPU type (repeat); default: every type with an offer"),
        catalog_file: Optional[Path] = typer.Option(
            None, "--catalog",
            help="catalog YAML or SkyPilot catalog folder (default: the spec's, else the shipped one)"),
        top: int = typer.Option(10, "--top", min=1, help="how many bills to show, cheapest first"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON document"),
        provider: Optional[list[str]] = provider_option(),
        region: Optional[list[str]] = region_option(),
    ) -> None:
        """The whole search on the analytic models alone, for hardware you don't have: no trial
        runs; every figure is labelled estimated (memory, FLOPs at a stated MFU, ring
        communication, and the full bill on every matching offer)."""
        from autotune.pricing.load import load_catalog
        from autotune.run.preflight import resolve_unknown_family
        from autotune.search.plan import plan
        from autotune.spec import load_spec

        spec = load_spec(spec_file)
        resolve_unknown_family(spec)  # a family the count does not know: as the trials' transformers builds it
        catalog = load_catalog(catalog_file or spec.platforms.catalog).select(providers=provider, regions=region)
        for name in spec.platforms.offers or []:
            catalog.offer(name)
        result = plan(spec, catalog, hfu=mfu, gpu_types=gpu)
        fastest = sorted(result.bills, key=lambda b: (b.hours, b.usd))[:top]
        warn_stale(catalog, _priced(result, top))
        if as_json:
            doc = {"assumptions": result.assumptions, "configs": result.configs,
                   "not_fitting": result.not_fitting,
                   "price_note": price_used_note(catalog, _priced(result, top)),
                   "why_none": result.why_none,
                   "limits": {"max_usd": spec.budget.max_usd, "deadline_hours": spec.budget.deadline_hours,
                              "limit_bytes_per_rank": spec.memory.limit_bytes_per_rank},
                   "limit_notes": result.limit_notes,
                   "bills": [b.as_dict() for b in result.bills[:top]],
                   "fastest": [b.as_dict() for b in fastest],
                   # Billed but over budget.max_usd or past budget.deadline_hours: never recommended.
                   "over_limits": [b.as_dict() for b in result.over_limits[:top]]}
            print_json(doc)
            return
        print_plan(spec_file, result, catalog, fastest, top, console())


def print_plan(spec_file, result, catalog, fastest, top: int, c) -> None:
    """`autotune plan`'s answer on the terminal: the cheapest bills, the fastest, and how."""
    from autotune.pricing.quote import explain

    c.print(f"[bold]autotune plan[/] {spec_file}: {result.configs} (config, GPU type) pairs, "
            f"{result.not_fitting} over memory, {len(result.bills)} bills"
            + (f" within the spec's limits ({len(result.over_limits)} over them)" if result.over_limits else "")
            + " (estimated, no trial run)")
    for a in result.assumptions:
        c.print(f"[dim]assumed: {a}[/]", soft_wrap=True)
    if result.bills:  # else why_none says why nothing is recommended
        c.print("[bold]cheapest[/]")
    for b, tied in tied_groups(result.bills, top):
        ranks = f"{b.rank_usd}-{tied[-1].rank_usd}" if tied else f"{b.rank_usd}"
        c.print(f"{ranks:>5}. {b.config} on {b.offer} ({b.pricing}, {b.region}: {rented(b)}): "
                f"{b.tokens_per_s:,.0f} tok/s "
                f"(estimated)  eff {b.scaling_efficiency:.0%}  {fmt_hours(b.hours)}  "
                f"{fmt_gpu_hours(b.gpu_hours)} {b.price_unit}-h  "
                f"[bold]${b.usd:,.2f}[/]  worst ${b.usd_worst_case:,.2f}", soft_wrap=True)
        if tied:
            c.print(f"[dim]       the same estimate with {tie_text(b, tied)}: the plan's models do not "
                    "tell these apart (a sweep measures them)[/]", soft_wrap=True)
    if fastest:
        c.print("[bold]fastest[/]")
    for b, tied in tied_groups(fastest, min(top, 5)):
        c.print(f"      {b.config} on {b.offer} ({b.region}: {rented(b)}): {fmt_hours(b.hours)}  ${b.usd:,.2f}"
                + (f"  [dim](the same with {tie_text(b, tied)})[/]" if tied else ""), soft_wrap=True)
    for note in result.limit_notes:  # what the spec's limits kept from the lists above
        c.print(f"[yellow]{note}[/]", soft_wrap=True)
    for line in explain(result.bills):
        c.print(line, soft_wrap=True)
    if result.bills:
        c.print(f"how the cheapest was estimated: {result.bills[0].throughput_basis}", soft_wrap=True)
        c.print(f"price of {result.bills[0].offer}: {bill_price(result.bills[0])}",
                soft_wrap=True, markup=False)
    else:
        c.print(result.why_none, soft_wrap=True, markup=False)  # its `[...]` are the space's lists
    for line in offer_notes(result.bills[:top] + fastest[: min(top, 5)]):
        c.print(f"[dim]{line}[/]", soft_wrap=True)
    c.print(price_used_note(catalog, _priced(result, top)), soft_wrap=True, markup=False)


def tied_groups(bills: list, top: int) -> list[tuple[Any, list]]:
    """The first `top` bills, each followed by the bills right after it that it ties with: the
    same offer, region, GPU count, throughput and dollars, another config (on one GPU, ZeRO
    stages and FSDP2 move no bytes in the plan's model, and fp16 runs at bf16's peak).
    `top` counts the lines shown, so ten ties do not fill the list."""
    groups: list[tuple[Any, list]] = []
    for b in bills:
        if groups and _ties(groups[-1][0], b):
            groups[-1][1].append(b)
        elif len(groups) == top:
            break
        else:
            groups.append((b, []))
    return groups


def _ties(a, b) -> bool:
    return ((a.offer, a.region, a.gpus, a.tokens_per_s, round(a.usd, 2), round(a.usd_worst_case, 2))
            == (b.offer, b.region, b.gpus, b.tokens_per_s, round(b.usd, 2), round(b.usd_worst_case, 2)))


def tie_text(first, tied: list, shown: int = 4) -> str:
    """What each tied config changes from the first's label: 'zero1; fp16 zero1; +3 more'."""
    own = set(first.config.split())
    diffs = [" ".join(w for w in t.config.split() if w not in own) or t.config for t in tied]
    more = f"; +{len(diffs) - shown} more" if len(diffs) > shown else ""
    return "; ".join(diffs[:shown]) + more


def _priced(result, top: int) -> list[str]:
    """The offers whose prices the plan shows: the `top` cheapest and fastest bills', else (none
    within the spec's limits) those over them that why_none names; []: no price shown."""
    fastest = sorted(result.bills, key=lambda b: (b.hours, b.usd))[:top]
    shown = result.bills[:top] + fastest if result.bills else result.over_limits[:top]
    return list(dict.fromkeys(b.offer for b in shown))
