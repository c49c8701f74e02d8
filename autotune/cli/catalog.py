"""`autotune catalog import` and the --provider / --region options of the pricing commands.

    autotune catalog import --skypilot ~/.sky/catalogs/v7 --skip-unknown --out my_prices.yaml
    autotune plan spec.yaml --gpu h100-sxm --catalog my_prices.yaml --region 'us-*'
    autotune cost ... --provider aws --provider lambda

Torch-free: csv and YAML only (autotune/pricing/skypilot.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from autotune.errors import UserError


def provider_option():
    return typer.Option(None, "--provider", help="only offers of this provider (repeat; e.g. aws, lambda)")


def region_option():
    return typer.Option(None, "--region", help="only offers in this region (repeat; shell patterns such "
                                               "as 'us-*'; list them: autotune catalog)")


def _names(pairs: list[str] | None) -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        name, sep, gpu = pair.partition("=")
        if not sep or not name.strip() or not gpu.strip():
            raise UserError(f"--map '{pair}' is not NAME=TYPE",
                            fix="write it as e.g. --map 'A100-80GB-PCIE=a100-80gb-pcie'")
        out[name.strip()] = gpu.strip()
    return out


def register(catalog_app: typer.Typer) -> None:
    @catalog_app.command(name="import")
    def import_cmd(
        skypilot: Path = typer.Option(
            ..., "--skypilot", help="SkyPilot's catalog folder (holds <cloud>/vms.csv), e.g. ~/.sky/catalogs/v7"),
        out: Path = typer.Option(..., "--out", help="catalog YAML to write (then: --catalog FILE)"),
        base: Optional[Path] = typer.Option(
            None, "--catalog", help="catalog whose GPU types the offers use (default: the shipped one)"),
        mapping: Optional[list[str]] = typer.Option(
            None, "--map", help="accelerator name to GPU type, NAME=TYPE (repeat)"),
        skip_unknown: bool = typer.Option(
            False, "--skip-unknown", help="leave out rows of accelerators with no GPU type (else: an error)"),
        spot_rate: Optional[float] = typer.Option(
            None, "--spot-interruptions-per-node-month",
            help="import spot prices with this interruption rate (per node per 730 h)"),
        price_date: Optional[str] = typer.Option(
            None, "--price-date",
            help="date the prices were fetched, YYYY-MM-DD (default: each vms.csv's modification date)"),
        keep_offers: bool = typer.Option(
            False, "--keep-offers", help="keep the base catalog's offers next to the imported ones"),
        force: bool = typer.Option(
            False, "--force", help="replace --out if an earlier import wrote it (any other file is never replaced)"),
        as_json: bool = typer.Option(False, "--json", help="print what was imported as one JSON document"),
    ) -> None:
        """Turn SkyPilot's per-cloud catalogs (vms.csv) into offers: instance sizes, regions,
        on-demand (and spot) prices. Nothing is written when any input is bad."""
        from autotune.cli.common import console
        from autotune.pricing.load import load_catalog
        from autotune.pricing.skypilot import catalog_from_skypilot, write_catalog

        result = catalog_from_skypilot(skypilot.expanduser(), load_catalog(base), names=_names(mapping),
                                       skip_unknown=skip_unknown, spot_interruptions_per_node_month=spot_rate,
                                       price_date=price_date, keep_offers=keep_offers)
        write_catalog(result.catalog, out, header=result.header(), force=force)
        regions = sorted({r for o in result.offers for r in o.regions})
        if as_json:
            from autotune.cli.common import print_json

            print_json({"out": str(out.resolve()), "offers": [o.name for o in result.offers],
                        "gpus": sorted({o.gpu for o in result.offers}), "regions": regions,
                        "summary": list(result.summary())})
            return
        c = console()
        for line in result.summary():
            c.print(line, soft_wrap=True)
        kept = len(result.catalog.offers) - len(result.offers)  # --keep-offers: the base catalog's, beside them
        c.print(f"wrote {out}: {len(result.offers)} offers of "
                f"{', '.join(sorted({o.gpu for o in result.offers}))} in {len(regions)} region(s)"
                + (f", and the base catalog's {kept} offers kept" if kept else ""), soft_wrap=True)
        c.print(f"next: autotune plan SPEC --catalog {out}   (or autotune catalog --catalog {out})", soft_wrap=True)
