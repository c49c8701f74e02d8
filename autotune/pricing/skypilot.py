"""SkyPilot's catalogs (one `vms.csv` per cloud, e.g. ~/.sky/catalogs/v7/aws/vms.csv) as offers.

    result = catalog_from_skypilot(Path("~/.sky/catalogs/v7").expanduser(), load_catalog())  # pricing.load
    result.catalog            # the shipped GPU types + one offer per (cloud, GPU, pricing, prices)
    result.left_out           # rows not imported, by reason; result.unknown: unmapped accelerators
    write_catalog(result.catalog, Path("my_prices.yaml"), header=result.header())

The columns read (SkyPilot's catalog schema, skypilot-org/skypilot-catalog README): InstanceType,
AcceleratorName, AcceleratorCount, Price, SpotPrice, Region, and vCPUs, MemoryGiB when present;
AvailabilityZone and GpuInfo are ignored. Column order differs between clouds, so columns are read
by name. A row is one instance type in one zone (or region): zones of a region are folded into
the region (on-demand prices agree across zones; spot takes the cheapest zone, as SkyPilot does).
Regions whose instance prices are identical become one offer listing them all; regions that differ
become separate offers, so a plan ranks them.

What the CSVs do not hold is not made up: billing granularity (priced per started hour, the
conservative choice), storage and egress fees (0), inter-node networks (single-node offers), spot
interruption rates (spot rows are imported only with --spot-interruptions-per-node-month). Every
imported offer says so in its notes; edit the written YAML to add what you know.
"""

from __future__ import annotations

import csv
import datetime as _dt
import math
import os
import re
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from autotune.errors import UserError, did_you_mean, format_validation_error
from autotune.pricing.catalog import SCHEMA_VERSION, Catalog
from autotune.pricing.offers import Offer

REQUIRED_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "Region")
HEADER_HELP = ("SkyPilot's vms.csv header holds InstanceType, AcceleratorName, AcceleratorCount, "
               "vCPUs, MemoryGiB, Price, SpotPrice, Region, AvailabilityZone")

# SkyPilot's accelerator names, as its catalogs spell them (skypilot-org/skypilot-catalog,
# catalogs/v7 aws, gcp, lambda and runpod vms.csv, read 2026-11-30) -> this catalog's GPU types.
ACCELERATOR_TYPES = {
    "H100": "h100-sxm",          # AWS p5, Lambda gpu_Nx_h100_sxm5 (Lambda's PCIe: see PCIE_VARIANT)
    "H100-SXM": "h100-sxm",      # RunPod
    "H100-MEGA": "h100-sxm",     # GCP a3-megagpu
    "H200": "h200",              # AWS p5e / p5en
    "H200-SXM": "h200",          # RunPod
    "A100-80GB": "a100-80gb",    # AWS p4de, Lambda gpu_8x_a100_80gb_sxm4
    "A100-80GB-SXM": "a100-80gb",  # RunPod
    "A100": "a100-40gb",         # AWS p4d, Lambda gpu_Nx_a100
    "L40S": "l40s",
    "L4": "l4",
    "A10G": "a10g",
    "RTX4090": "rtx-4090",
}
# The same name for another GPU at one cloud: RunPod calls its A100 80GB PCIe "A100-80GB" (its
# SXM part is "A100-80GB-SXM").
CLOUD_ACCELERATOR_TYPES = {("runpod", "A100-80GB"): "a100-80gb-pcie"}
# An instance named "...pcie..." carries the PCIe part of a GPU SkyPilot names alike
# (Lambda: gpu_1x_h100_pcie, AcceleratorName H100).
PCIE_VARIANT = {"h100-sxm": "h100-pcie", "a100-80gb": "a100-80gb-pcie"}

IMPORT_NOTE = ("imported from SkyPilot's catalog: instance prices only. Billing granularity, "
               "storage, egress and inter-node network are not in it: priced per started hour, "
               "fees at 0, single node. Edit this offer to add them")


@dataclass
class ImportResult:
    catalog: Catalog
    offers: list[Offer]
    files: list[Path]
    rows: int
    left_out: Counter = field(default_factory=Counter)   # reason -> rows
    unknown: Counter = field(default_factory=Counter)    # accelerator name -> rows (skipped)

    def header(self) -> str:
        return (f"{IMPORTED_MARK} --skypilot` on {_dt.date.today()} from\n"
                + "".join(f"#   {f}\n" for f in self.files)
                + f"# {self.rows} rows read, {len(self.offers)} offers written. {IMPORT_NOTE}.\n")

    def summary(self) -> list[str]:
        lines = [f"{self.rows} rows in {len(self.files)} file(s) -> {len(self.offers)} offers"]
        for reason, n in self.left_out.most_common():
            lines.append(f"left out {n} {reason}")
        if self.unknown:
            names = ", ".join(f"{k} ({v})" for k, v in self.unknown.most_common(12))
            lines.append(f"left out {sum(self.unknown.values())} rows of accelerators with no GPU type "
                         f"in the catalog: {names}")
        return lines


def find_vms_files(folder: Path) -> list[tuple[str, Path]]:
    """(cloud, vms.csv) pairs: FOLDER/vms.csv (the cloud is the folder's name) and FOLDER/*/vms.csv."""
    if not folder.exists():
        raise UserError(f"SkyPilot catalog folder '{folder}' does not exist",
                        fix="give the folder that holds <cloud>/vms.csv, e.g. ~/.sky/catalogs/v7")
    if not folder.is_dir():
        raise UserError(f"'{folder}' is a file, not a folder",
                        fix="give the folder that holds <cloud>/vms.csv (or the cloud's own folder)")
    found = [(folder.resolve().name, folder / "vms.csv")] if (folder / "vms.csv").is_file() else []
    found += sorted((p.parent.name, p) for p in folder.glob("*/vms.csv") if p.is_file())
    if not found:
        raise UserError(f"no vms.csv in '{folder}' nor in its sub-folders",
                        fix="point --skypilot at SkyPilot's catalog folder, e.g. ~/.sky/catalogs/v7 "
                            "(it holds aws/vms.csv, lambda/vms.csv, ...)")
    return found


def _number(text: str | None, where: str, column: str) -> float | None:
    if text is None or not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"{where}: {column} '{text}' is not a number",
                        fix=f"correct or remove that row ({HEADER_HELP}; prices in USD per hour)") from None
    if not math.isfinite(value) or value < 0:
        raise UserError(f"{where}: {column} '{text}' must be a number >= 0", fix="correct or remove that row")
    return value


class _Names:
    """Accelerator name -> catalog GPU type: the user's --map first, then SkyPilot's names."""

    def __init__(self, catalog: Catalog, given: dict[str, str]):
        for gpu in given.values():
            catalog.gpu_type(gpu)  # "did you mean" on a typo in --map
        self.catalog = catalog
        self.given = {k.lower(): v for k, v in given.items()}
        self.known = {k.lower(): v for k, v in ACCELERATOR_TYPES.items() if v in catalog.gpus}

    def resolve(self, cloud: str, name: str, instance: str) -> str | None:
        key = name.lower()
        if key in self.given:
            return self.given[key]
        gpu = CLOUD_ACCELERATOR_TYPES.get((cloud.lower(), name)) or self.known.get(key)
        if gpu is None:
            gpu = name if name in self.catalog.gpus else self.catalog.match_device(name)
        if gpu is not None and "pcie" in instance.lower() and PCIE_VARIANT.get(gpu) in self.catalog.gpus:
            gpu = PCIE_VARIANT[gpu]
        if gpu is not None and self.catalog.gpus[gpu].device_class != "gpu":
            return None
        return gpu

    def hint(self, name: str) -> str:
        choices = list(ACCELERATOR_TYPES) + list(self.catalog.gpus)
        return did_you_mean(name, choices, cutoff=0.8)


@dataclass
class _Seen:
    gpus: int
    on_demand: list[float] = field(default_factory=list)
    spot: list[float] = field(default_factory=list)
    vcpus: float | None = None
    memory_gib: float | None = None


def _read(cloud: str, path: Path, names: _Names, seen: dict, left_out: Counter,
          unknown: dict[str, list[str]]) -> int:
    """Fold one vms.csv into `seen[(cloud, gpu, region)][instance]`; returns the rows read."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror})", fix="check the file's permissions") from None
    rows = 0
    with handle:
        reader = csv.reader(handle)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise UserError(f"{path} is empty", fix=f"give SkyPilot's vms.csv ({HEADER_HELP})") from None
        except (csv.Error, UnicodeDecodeError) as exc:
            raise UserError(f"{path}: not a CSV file ({exc})", fix=f"give SkyPilot's vms.csv ({HEADER_HELP})") from None
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise UserError(f"{path}: column(s) {', '.join(missing)} missing (the header has "
                            f"{', '.join(header) or 'nothing'})",
                            fix=f"give SkyPilot's vms.csv ({HEADER_HELP})")
        col = {c: i for i, c in enumerate(header)}
        try:
            for line, values in enumerate(reader, start=2):
                if not values or not any(v.strip() for v in values):
                    continue
                where = f"{path}, line {line}"
                if len(values) != len(header):
                    raise UserError(f"{where}: {len(values)} fields, the header has {len(header)}",
                                    fix="correct or remove that row (quote fields that hold commas)")
                rows += 1
                _fold_row(cloud, {c: values[i].strip() for c, i in col.items()}, where, names, seen,
                          left_out, unknown)
        except csv.Error as exc:
            raise UserError(f"{path}: not a valid CSV file ({exc})",
                            fix=f"give SkyPilot's vms.csv ({HEADER_HELP})") from None
        except UnicodeDecodeError as exc:
            raise UserError(f"{path}: not UTF-8 text ({exc.reason})", fix="give SkyPilot's vms.csv") from None
    return rows


def _fold_row(cloud: str, row: dict[str, str], where: str, names: _Names, seen: dict, left_out: Counter,
              unknown: dict[str, list[str]]) -> None:
    """Fold one row of a vms.csv into `seen`, or count why it is left out."""
    price = _number(row["Price"], where, "Price")
    spot = _number(row.get("SpotPrice"), where, "SpotPrice")
    count = _number(row["AcceleratorCount"], where, "AcceleratorCount")
    accelerator, instance, region = row["AcceleratorName"], row["InstanceType"], row["Region"]
    if not accelerator:
        left_out["rows with no accelerator (CPU instances)"] += 1
        return
    if not instance:
        left_out["rows of an accelerator priced apart from its host VM (no InstanceType, "
                 "as in GCP's catalog): add such offers by hand"] += 1
        return
    if count is None or count == 0:
        raise UserError(f"{where}: {accelerator} has no AcceleratorCount",
                        fix="give the number of accelerators of that instance type")
    if not region:
        raise UserError(f"{where}: Region is empty", fix="give the region of that row")
    gpu = names.resolve(cloud, accelerator, instance)
    if gpu is None:
        unknown.setdefault(accelerator, []).append(f"{cloud}, {where}")
        return
    if count != int(count):
        left_out["rows of a fraction of one GPU (shared GPUs)"] += 1
        return
    if price is None and spot is None:
        left_out["rows with no price"] += 1
        return
    s = seen.setdefault((cloud, gpu, region), {}).setdefault(instance, _Seen(int(count)))
    if s.gpus != int(count):
        raise UserError(f"{where}: {instance} has {int(count)} accelerators here and "
                        f"{s.gpus} on another row", fix="correct the AcceleratorCount of that row")
    if price is not None:
        s.on_demand.append(price)
    if spot is not None:
        s.spot.append(spot)
    s.vcpus = _number(row.get("vCPUs"), where, "vCPUs") or s.vcpus
    s.memory_gib = _number(row.get("MemoryGiB"), where, "MemoryGiB") or s.memory_gib


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def catalog_from_skypilot(folder: Path, base: Catalog, names: dict[str, str] | None = None,
                          skip_unknown: bool = False, spot_interruptions_per_node_month: float | None = None,
                          price_date: str | None = None, keep_offers: bool = False) -> ImportResult:
    """Read every vms.csv under `folder` into offers on `base`'s GPU types. Raises UserError
    (nothing returned, nothing written) on a missing folder or column, a bad number, or an
    accelerator with no GPU type unless `skip_unknown`."""
    if price_date is not None:
        try:
            day = _dt.date.fromisoformat(price_date)
        except ValueError:
            raise UserError(f"--price-date '{price_date}' is not a date", fix="write it as YYYY-MM-DD") from None
        # A price is read before it is imported: a later date (a typo, 2062 for 2026) would
        # keep the staleness warning from ever firing. A day of slack for time zones.
        if day > _dt.date.today() + _dt.timedelta(days=1):
            raise UserError(f"--price-date {price_date} is after today ({_dt.date.today()})",
                            fix="give the date the prices were fetched, YYYY-MM-DD, or leave it out "
                                "(each vms.csv's modification date)")
    if spot_interruptions_per_node_month is not None and not spot_interruptions_per_node_month > 0:
        raise UserError("--spot-interruptions-per-node-month must be > 0",
                        fix="give the expected interruptions of one node per 730 h, e.g. 30.4 (one a day)")
    resolver = _Names(base, names or {})
    files = find_vms_files(folder)
    seen: dict = {}
    left_out: Counter = Counter()
    unknown: dict[str, list[str]] = {}
    rows = 0
    dates: dict[str, str] = {}
    for cloud, path in files:
        rows += _read(cloud, path, resolver, seen, left_out, unknown)
        dates[cloud] = price_date or _dt.date.fromtimestamp(path.stat().st_mtime).isoformat()
    if unknown and not skip_unknown:
        listed = [f"'{n}'{resolver.hint(n)} ({len(w)} rows, first at {w[0]})"
                  for n, w in sorted(unknown.items(), key=lambda kv: -len(kv[1]))[:8]]
        more = f" and {len(unknown) - 8} more" if len(unknown) > 8 else ""
        raise UserError(f"{len(unknown)} accelerator name(s) have no GPU type in the catalog: "
                        f"{'; '.join(listed)}{more}",
                        fix=f"map each to a GPU type with --map NAME=TYPE (types: "
                            f"{', '.join(k for k, g in base.gpus.items() if g.device_class == 'gpu')}), "
                            f"or leave their rows out with --skip-unknown")
    offers = _offers(seen, files, dates, spot_interruptions_per_node_month, left_out,
                     {o.name for o in base.offers} if keep_offers else set())
    if not offers:
        raise UserError(f"no row of {', '.join(str(p) for _, p in files)} became an offer "
                        f"({'; '.join(f'{n} {r}' for r, n in left_out.most_common()) or 'no rows'})",
                        fix="give vms.csv files that list GPU instances with a Price")
    all_offers = (list(base.offers) if keep_offers else []) + offers
    dated = [o.price_date for o in all_offers]
    try:
        cat = Catalog.model_validate({
            "schema_version": SCHEMA_VERSION, "date": min(dated),
            "note": f"GPU types from {base.source_file or 'the shipped catalog'}; offers imported from "
                    f"SkyPilot's catalog {folder} ({IMPORT_NOTE})" + (" and kept from the base catalog"
                                                                      if keep_offers else ""),
            "gpus": {k: g.model_dump() for k, g in base.gpus.items()},
            "offers": [o.model_dump() for o in all_offers]})
    except ValidationError as exc:  # a bug here, not the user's: say where anyway
        raise UserError(format_validation_error(folder, exc), fix="report this with the file") from None
    cat.source_file = str(folder)
    return ImportResult(cat, offers, [p for _, p in files], rows, left_out,
                        Counter({k: len(v) for k, v in unknown.items()}))


def _offers(seen: dict, files: list, dates: dict[str, str], spot_rate: float | None,
            left_out: Counter, taken: set[str]) -> list[Offer]:
    source = {cloud: str(path) for cloud, path in files}
    # (cloud, gpu, pricing) -> prices signature -> regions
    groups: dict[tuple, dict[tuple, list[str]]] = defaultdict(lambda: defaultdict(list))
    detail: dict[tuple, dict[str, _Seen]] = {}
    for (cloud, gpu, region), instances in seen.items():
        for pricing in ("on-demand", "spot"):
            prices = {}
            for name, s in instances.items():
                values = s.on_demand if pricing == "on-demand" else s.spot
                if values:
                    # On-demand: the zones agree (the highest, should one differ); spot: the
                    # cheapest zone, as SkyPilot itself picks.
                    prices[name] = max(values) if pricing == "on-demand" else min(values)
            if not prices:
                continue
            if pricing == "spot" and spot_rate is None:
                left_out["spot prices of (instance, region) pairs: no interruption rate is "
                         "known (give --spot-interruptions-per-node-month to import them)"] += len(prices)
                continue
            signature = tuple(sorted((n, instances[n].gpus, round(p, 6)) for n, p in prices.items()))
            groups[(cloud, gpu, pricing)][signature].append(region)
            detail[(cloud, gpu, region)] = instances
    offers = []
    for (cloud, gpu, pricing), by_prices in sorted(groups.items()):
        for signature, regions in sorted(by_prices.items(), key=lambda kv: sorted(kv[1])[0]):
            regions = sorted(regions)
            instances = detail[(cloud, gpu, regions[0])]
            name = _slug(f"{cloud}-{gpu}-{'spot-' if pricing == 'spot' else ''}{regions[0]}")
            if name in taken:
                name += "-skypilot"
            taken.add(name)
            spot = dict(interruptions_per_node_month=spot_rate, restart_hours=0.25) if pricing == "spot" else {}
            offers.append(Offer.model_validate(dict(
                name=name, provider=cloud, gpu=gpu, pricing=pricing, regions=regions,
                instances=[dict(name=n, gpus=g, price_usd_per_hour=p, vcpus=instances[n].vcpus,
                                memory_gib=instances[n].memory_gib) for n, g, p in signature],
                billing="hour", setup_hours=0.5, price_date=dates[cloud],
                price_source=f"SkyPilot catalog {source[cloud]} (file dated {dates[cloud]})",
                notes=IMPORT_NOTE + (f"; spot interruptions {spot_rate:g} per node-month as given "
                                     f"on the command line" if pricing == "spot" else ""),
                **spot)))
    return offers


# The first line of every catalog `catalog import` writes: --force replaces only such a file.
IMPORTED_MARK = "# Imported by `autotune catalog import"


def write_catalog(catalog: Catalog, out: Path, header: str = "", force: bool = False) -> None:
    """Write `catalog` as YAML atomically (a temp file renamed over `out`): all or nothing.
    A path that cannot be written is a UserError naming it and the system's reason."""
    import yaml

    from autotune.paths import check_parent, refuse_foreign, writing

    if out.is_dir():
        raise UserError(f"--out '{out}' is a folder", fix="give a file name for --out, e.g. "
                        f"{out / 'my_prices.yaml'}")
    refuse_foreign(out, IMPORTED_MARK, "--out", "a catalog")
    if out.exists() and not force:
        raise UserError(f"--out '{out}' exists (an earlier import)",
                        fix="give another --out, or --force to replace that import")
    check_parent(out, "--out")
    doc = catalog.model_dump(mode="json", exclude_none=True)
    text = header + yaml.safe_dump(doc, sort_keys=False, width=100)
    Catalog.model_validate(yaml.safe_load(text))  # what is written reads back
    tmp: str | None = None
    with writing(out, "--out"):  # only file operations on `out`: their OSError names it
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, out)
        except BaseException:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            raise
