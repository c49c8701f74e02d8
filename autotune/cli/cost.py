"""`autotune cost` and `autotune catalog`: bills without running a trial (`autotune plan`:
autotune/cli/plan.py, which prints its bills with the helpers here).

    autotune cost --gpu a100-80gb --gpus 1 --tokens-per-s 3200 --target-tokens 2e10
    autotune cost --gpu a100-80gb --gpus 1 --tokens-per-s 3200 --params 1.3e9 \\
        --global-batch-tokens 8192 --target-tokens 2e10 --run-gpus 8 --run-gpus 16
    autotune cost --gpu h100-sxm --gpus 8 --mfu 0.4 --params 7e9 --target-tokens 1e11 \\
        --global-batch-tokens 4e6 --zero-stage 1 --json
    autotune catalog [--catalog FILE] [--provider aws] [--region 'us-*'] [--json]
    autotune catalog import --skypilot ~/.sky/catalogs/v7 --skip-unknown --out my_prices.yaml

Torch-free and fast: pure arithmetic over the catalog (see autotune/pricing/).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

from autotune.cli.catalog import provider_option, region_option
from autotune.cli.common import console, print_json
from autotune.errors import UserError
from autotune.format import fmt_gpu_hours, fmt_hours
from autotune.report.labels import basis_kind, price_text

COST_EPILOG = (
    "Example (planning, copy and run): a 1.3B model measured at 3,200 tokens/s on one A100 80GB, "
    "8,192 tokens per GPU per step, priced to 2e10 tokens on 8 and 16 GPUs:\n\n"
    "autotune cost --gpu a100-80gb --gpus 1 --tokens-per-s 3200 --params 1.3e9 "
    "--global-batch-tokens 8192 --target-tokens 2e10 --run-gpus 8 --run-gpus 16"
)


def _number(text: str | None, flag: str, integer: bool = False, allow_zero: bool = False):
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"{flag} '{text}' is not a number", fix=f"write it as e.g. {flag} 2e10") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise UserError(f"{flag} {text} must be a positive number", fix=f"give a positive {flag}")
    if integer and not value.is_integer():  # 1.5 steps is not a count: never rounded silently
        raise UserError(f"{flag} {text} must be a whole number",
                        fix=f"give {flag} as a count, e.g. {flag} {round(value)}")
    return int(value) if integer else value


def warn_stale(catalog, offers=None) -> None:
    """The catalog's staleness warning for the prices shown (`offers`: names; None: all; []:
    no price shown, no warning: the catalog's other prices are no bill's)."""
    if offers is not None and not offers:
        return
    msg = catalog.stale_warning(offers=offers)
    if msg:
        console(stderr=True).print(f"[yellow]{msg}[/]", soft_wrap=True)


def price_used_note(catalog, priced: list[str], skipped: list[str] | None = None) -> str:
    """What the dollars shown were priced at: the dates of the prices of the offers billed
    (`priced`), or, where none was billed, that no price was used, and which offers were
    `skipped` ([]: none matched; None: not said). The catalog's other prices are no bill's."""
    if priced:
        return catalog.price_note(priced)
    why = "" if skipped is None else (f" (skipped: {', '.join(dict.fromkeys(skipped))})" if skipped
                                      else " (no offer matches)")
    return f"no price used: no offer was billed{why}"


def bill_price(b) -> str:
    """The rate (in the bill's unit), provider, source and date behind one bill's dollars."""
    return price_text(b.as_dict()) or "price unknown"


def rented(b) -> str:
    """What a bill rents, e.g. '2x p5.48xlarge (400 GB/s between nodes)' or '1x gpu_8x_a100 (7 idle)'."""
    out = f"{b.nodes}x {b.instance}"
    if b.idle_gpus:
        out += f" ({b.idle_gpus} idle)"
    if b.nodes > 1:
        out += f" ({b.inter_node_gb_per_s:g} GB/s between nodes)" if b.inter_node_gb_per_s else ""
    return out


def offer_notes(bills) -> list[str]:
    """One line per offer shown with a note of its own (e.g. a price that predates a cut):
    the JSON carried them, the terminal dropped them."""
    seen: dict[str, list[str]] = {}
    for b in bills:
        if b.notes and b.offer not in seen:
            seen[b.offer] = list(dict.fromkeys(b.notes))
    return [f"note on {offer}: {'; '.join(notes)}" for offer, notes in seen.items()]


def print_bills(bills, skipped, catalog, job, console, explain_lines: bool = True) -> None:
    from autotune.pricing.quote import explain

    units = "/".join(sorted({b.price_unit for b in bills})) or "GPU"  # a CPU offer bills vCPUs
    console.print(f"[bold]Bills, cheapest first[/] ({units}s used/billed; eff = scaling efficiency; worst = "
                  "+30% time and one more interruption, with its rank)", soft_wrap=True)
    for b in bills:
        gpus = f"{b.gpus_used}" + (f"/{b.gpus}" if b.gpus != b.gpus_used else "")
        eff = f"  eff {b.scaling_efficiency:.0%}" if b.scaling_efficiency is not None else ""
        ck = f"  ckpt every {fmt_hours(b.checkpoint_interval_hours)}" if b.checkpoint_interval_hours else ""
        console.print(f"{b.rank_usd:>3}. {b.offer} ({b.pricing}, {b.region}): {gpus} x {b.gpu} "
                      f"on {rented(b)}  "
                      f"{b.tokens_per_s:,.0f} tok/s ({basis_kind(b.throughput_basis)}){eff}  "
                      f"{fmt_hours(b.hours)}  {fmt_gpu_hours(b.gpu_hours)} {b.price_unit}-h  "
                      f"[bold]${b.usd:,.2f}[/]  "
                      f"worst ${b.usd_worst_case:,.2f} (#{b.rank_usd_worst_case}){ck}", soft_wrap=True)
    if bills and explain_lines:
        for line in explain(bills):
            console.print(line, soft_wrap=True)
        top = bills[0]
        terms = ", ".join(f"{k} ${v:,.2f}" for k, v in top.breakdown.items() if v)
        console.print(f"{top.offer} breakdown: {terms}", soft_wrap=True)
        console.print(f"throughput of {top.offer}: {top.throughput_basis}", soft_wrap=True)
        console.print(f"price of {top.offer}: {bill_price(top)}", soft_wrap=True, markup=False)
    if not bills:
        console.print("no bill: every matching offer is skipped, each for the reason below" if skipped
                      else "no offer in the catalog matches (list them: autotune catalog)", soft_wrap=True)
    for s in skipped:
        console.print(f"[dim]skipped {s.offer}: {s.reason}[/]", soft_wrap=True)
    for a in job.assumptions:
        console.print(f"[dim]assumed: {a}[/]", soft_wrap=True)
    for line in offer_notes(bills):
        console.print(f"[dim]{line}[/]", soft_wrap=True)
    from autotune.pricing.cost import breakevens

    gpus_in_bills = {b.gpu for b in bills}
    for be in breakevens(catalog):
        if catalog.offer(be.own).gpu in gpus_in_bills:
            console.print(f"break-even: {be.text}", soft_wrap=True)
    note = price_used_note(catalog, [b.offer for b in bills], [s.offer for s in skipped])
    console.print(note + (f" ({catalog.source_file})" if catalog.source_file else ""), soft_wrap=True,
                  markup=False)


def register(app: typer.Typer) -> None:
    _register_cost(app)
    _register_catalog(app)


def _register_cost(app: typer.Typer) -> None:
    app.command(epilog=COST_EPILOG)(cost)


def cost(
    gpu: str = typer.Option(
        ..., "--gpu", help="catalog GPU type measured on (or planned for): see `autotune catalog`"),
    gpus: int = typer.Option(1, "--gpus", min=1, help="GPU count the throughput was measured at"),
    tokens_per_s: Optional[str] = typer.Option(None, "--tokens-per-s", help="measured training tokens/s at --gpus"),
    mfu: Optional[float] = typer.Option(
        None, "--mfu", help="planning: stated MFU (0-1) on 6N FLOPs a token (no attention term) instead of "
                            "a measurement; needs --params"),
    params: Optional[str] = typer.Option(
        None, "--params", help="model parameters, e.g. 7e9 (FLOPs, communication, checkpoint size)"),
    precision: str = typer.Option(
        "bf16", "--precision",
        help="fp32 | tf32 | bf16 | fp16 | fp8: which peak (tf32: fp32 training with TF32 matmuls, fp32 states)"),
    zero_stage: int = typer.Option(0, "--zero-stage", min=0, max=3,
                                   help="ZeRO stage (communication volume; with --params, offers whose GPUs "
                                        "cannot hold the model's states are skipped)"),
    target_tokens: Optional[str] = typer.Option(None, "--target-tokens", help="tokens to train"),
    target_steps: Optional[str] = typer.Option(
        None, "--target-steps", help="optimizer steps (with --global-batch-tokens)"),
    global_batch_tokens: Optional[str] = typer.Option(
        None, "--global-batch-tokens", help="tokens per optimizer step at --gpus"),
    run_gpus: Optional[list[int]] = typer.Option(
        None, "--run-gpus", min=1, help="GPU counts of the long run to price (repeat); default --gpus"),
    all_gpus: bool = typer.Option(
        False, "--all-gpus", help="also project onto every other GPU type (needs --params)"),
    catalog_file: Optional[Path] = typer.Option(None, "--catalog", help="catalog YAML (default: the shipped one)"),
    offer: Optional[list[str]] = typer.Option(None, "--offer", help="only this offer (repeat)"),
    checkpoint_gb: Optional[str] = typer.Option(
        None, "--checkpoint-gb", help="one checkpoint, GB (default: 14 B/param; 12 at fp32 and tf32)"),
    dataset_gb: Optional[str] = typer.Option(
        None, "--dataset-gb", help="dataset stored and uploaded, GB (default: 2 B/token of the target)"),
    final_model_gb: Optional[str] = typer.Option(
        None, "--final-model-gb", help="model downloaded at the end, GB (default: 2 B/param; 4 at fp32 and tf32)"),
    egress_checkpoints: int = typer.Option(0, "--egress-checkpoints", min=0, help="checkpoints also downloaded"),
    checkpoints_kept: int = typer.Option(2, "--checkpoints-kept", min=0, help="checkpoints stored at once"),
    checkpoint_interval_hours: float = typer.Option(
        1.0, "--checkpoint-interval-hours", min=0.001,
        help="checkpoint policy where no interruption rate is known"),
    month_rest_used: bool = typer.Option(
        False, "--month-rest-used", help="monthly rentals: the rest of the month is used by other work"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON list of bills"),
    provider: Optional[list[str]] = provider_option(),
    region: Optional[list[str]] = region_option(),
) -> None:
    """Price a training run on every matching offer, cheapest first, without any trial.

    From a measured --tokens-per-s at --gpus on --gpu, or (planning) from --mfu with
    --params. Other GPU counts (--run-gpus) and types (--all-gpus) are projected with a
    ring-collective model and labelled so. Each bill: wall-clock hours, GPU-hours, dollars
    by term (compute, setup, checkpoint writes, interruptions, billing rounding, storage,
    egress, ingress, power), and the worst case (+30% time, one more interruption).
    """
    from autotune.api.plan import cost as price

    sizes = {field: _number(text, flag, allow_zero=True) for flag, text, field in (
        ("--checkpoint-gb", checkpoint_gb, "checkpoint_gb"), ("--dataset-gb", dataset_gb, "dataset_gb"),
        ("--final-model-gb", final_model_gb, "final_model_gb"))}
    result = price(gpu, gpus, tokens_per_s=_number(tokens_per_s, "--tokens-per-s"), mfu=mfu,
                   params=_number(params, "--params", integer=True), precision=precision,
                   zero_stage=zero_stage, target_tokens=_number(target_tokens, "--target-tokens"),
                   target_steps=_number(target_steps, "--target-steps", integer=True),
                   global_batch_tokens=_number(global_batch_tokens, "--global-batch-tokens"),
                   run_gpus=run_gpus, all_gpus=all_gpus, catalog=catalog_file, offers=offer,
                   providers=provider, regions=region, **sizes, egress_checkpoints=egress_checkpoints,
                   checkpoints_kept=checkpoints_kept, checkpoint_interval_hours=checkpoint_interval_hours,
                   month_rest_used=month_rest_used)
    bills, skipped, catalog, job = result.bills, result.skipped, result.catalog, result.job
    warn_stale(catalog, [b.offer for b in bills])
    if as_json:
        print_json([b.as_dict() for b in bills])
        return
    print_bills(bills, skipped, catalog, job, console())


def _register_catalog(app: typer.Typer) -> None:
    catalog_app = typer.Typer(help="List and validate the catalog; `catalog import` reads SkyPilot's catalogs.")
    app.add_typer(catalog_app, name="catalog")
    from autotune.cli.catalog import register as register_import

    register_import(catalog_app)

    @catalog_app.callback(invoke_without_command=True)
    def catalog_cmd(
        ctx: typer.Context,
        catalog_file: Optional[Path] = typer.Option(
            None, "--catalog", help="catalog YAML, or a SkyPilot catalog folder (default: the shipped one)"),
        as_json: bool = typer.Option(False, "--json", help="print the validated catalog as JSON"),
        provider: Optional[list[str]] = provider_option(),
        region: Optional[list[str]] = region_option(),
    ) -> None:
        """List and validate the catalog: GPU types (peaks, memory, bandwidth) and offers (instance
        sizes, regions, prices with dates). `autotune catalog import --help`: SkyPilot's catalogs."""
        if ctx.invoked_subcommand is not None:
            return
        from autotune.pricing.cost import breakevens
        from autotune.pricing.load import load_catalog

        cat = load_catalog(catalog_file).select(providers=provider, regions=region)
        warn_stale(cat)
        if as_json:
            doc = cat.model_dump(mode="json")
            doc["price_note"] = cat.price_note()
            doc["breakevens"] = [be.__dict__ for be in breakevens(cat)]
            print_json(doc)
            return
        print_catalog(cat, console())


def print_catalog(cat, c) -> None:
    """The catalog's GPU types and offers as two tables, then its break-evens."""
    from autotune.pricing.cost import breakevens
    from autotune.report.terminal import LINE, NAME, TEXT, fit_table

    rows = []
    for k, t in cat.gpus.items():
        tflops = [f"{t.peak_tflops[p]:g}" if p in t.peak_tflops else "-" for p in ("bf16", "fp8", "fp32", "tf32")]
        rows.append([k, f"{t.memory_bytes / 1e9:g} GB" if t.memory_bytes else "-", *tflops,
                     f"{t.memory_bandwidth_gb_per_s:g}" if t.memory_bandwidth_gb_per_s else "-",
                     f"{t.interconnect or '-'}"
                     + (f" {t.interconnect_gb_per_s:g} GB/s" if t.interconnect_gb_per_s else ""),
                     t.source])
    # GPU types are what --gpu takes: never cut; the source is prose (in full: --json).
    c.print(fit_table(f"GPU types ({cat.source_file}); dense TFLOPS", [
        ("type", NAME, "left"), ("memory", NAME, "right"), ("bf16", NAME, "right"), ("fp8", NAME, "right"),
        ("fp32", TEXT, "right"), ("tf32", TEXT, "right"), ("mem GB/s", TEXT, "right"), ("link", TEXT, "left"),
        ("source", LINE, "left")], rows, c.width))
    rows = []
    for x in cat.offers:
        unit = cat.unit(x.gpu)  # a CPU offer prices a vCPU-hour
        if x.pricing == "monthly":
            price = f"${x.price_usd_per_gpu_month:,.0f}/{unit}-month"
        elif x.pricing == "own":
            price = f"${x.usd_per_gpu_hour:.3f}/{unit}-h (amortised + power)"
        else:
            rates = sorted({round(r, 4) for _, _, r in x.sizes()})
            price = (f"${rates[0]:.3f}/{unit}-h" if len(rates) == 1
                     else f"${rates[0]:.3f}-{rates[-1]:.3f}/{unit}-h")
        sizes = ", ".join(f"{n} ({g})" if x.instances else str(g) for n, g, _ in x.sizes())
        nodes = (f"up to {x.max_nodes}, {x.inter_node_gb_per_s:g} GB/s each" if x.max_nodes > 1
                 and x.inter_node_gb_per_s else (f"up to {x.max_nodes}, network unknown"
                                                 if x.max_nodes > 1 else "1"))
        rows.append([x.name, x.gpu, x.pricing, price, x.billing, sizes, nodes,
                     ", ".join(x.regions) or "-", x.price_date, x.price_source])
    # Offer and GPU names are what --offer / --gpu take: never cut.
    c.print(fit_table("Offers (prices in USD)", [
        ("offer", NAME, "left"), ("gpu", NAME, "left"), ("pricing", TEXT, "left"), ("price", TEXT, "left"),
        ("billing", TEXT, "left"), ("instance sizes (GPUs)", TEXT, "left"), ("nodes", TEXT, "left"),
        ("region", TEXT, "left"), ("price date", TEXT, "left"), ("source", LINE, "left")], rows, c.width))
    for be in breakevens(cat):
        c.print(f"break-even: {be.text}")
    c.print(f"{len(cat.gpus)} GPU types, {len(cat.offers)} offers: valid. {cat.price_note()}")
