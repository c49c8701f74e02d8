"""Load the catalog a command or a sweep prices on: the shipped YAML, a user's YAML, or a
SkyPilot catalog folder.

    cat = load_catalog()                      # autotune/data/catalog.yaml
    cat = load_catalog("my_prices.yaml")      # UserError naming the file and field if bad
    cat = load_catalog("~/.sky/catalogs/v7")  # SkyPilot's vms.csv files, on the shipped GPU types

Kept apart from autotune/pricing/catalog.py so that the SkyPilot reader, which builds a
Catalog, and the catalog do not import each other.
"""

from __future__ import annotations

from pathlib import Path

from autotune.pricing.catalog import DEFAULT_CATALOG, Catalog, read_catalog


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Read and validate a catalog; every problem is a UserError naming the file and field.

    A folder is read as SkyPilot's catalogs (`<cloud>/vms.csv`, e.g. ~/.sky/catalogs/v7): its
    instances become offers on top of the shipped GPU types (accelerators the catalog has no
    type for are left out; `autotune catalog import --skypilot DIR` says which)."""
    p = Path(path) if path else DEFAULT_CATALOG
    if p.is_dir():
        from autotune.errors import UserError
        from autotune.pricing.skypilot import catalog_from_skypilot

        if not (p / "vms.csv").is_file() and not any(f.is_file() for f in p.glob("*/vms.csv")):
            # Said here, not by the SkyPilot reader: that one's message names --skypilot.
            raise UserError(f"catalog '{p}' is a folder, and it holds no vms.csv (nor do its sub-folders)",
                            fix="give --catalog (or the spec's platforms.catalog) a catalog YAML file, or "
                                "SkyPilot's catalog folder, e.g. ~/.sky/catalogs/v7 (it holds aws/vms.csv, ...)")
        return catalog_from_skypilot(p, read_catalog(DEFAULT_CATALOG), skip_unknown=True).catalog
    return read_catalog(p)
