"""The catalog of GPU types and platform offers (`autotune/data/catalog.yaml` by default).

    cat = read_catalog(DEFAULT_CATALOG)   # a YAML file; UserError if bad (autotune.pricing.load:
                                          # load_catalog() also reads SkyPilot's catalog folders)
    gpu = cat.gpu_type("h100-sxm")        # "did you mean" on unknown names
    offers = cat.offers_for("h100-sxm")   # every offer of that GPU type
    cat.select(providers=["aws"], regions=["us-east-1"])  # --provider / --region
    cat.offer("aws-p5-ondemand").placement(16)  # what 16 GPUs rent: 2x p5.48xlarge

An offer sells one GPU type at one pricing kind in one or more regions (the same prices hold
in each), as instance sizes (`instances`: name, GPUs, hourly price of the whole instance), and
when the provider sells clusters, up to `max_nodes` of its largest instance joined at
`inter_node_gb_per_s`. A bill rents the cheapest instance that holds the job (the smallest
where bigger costs more), or enough of the largest one. `load_catalog(DIR)` imports a
SkyPilot catalog folder (autotune/pricing/skypilot.py) on top of the shipped GPU types.

Prices are data, not code: every offer carries the date its price was read and its source,
and the catalog as a whole carries a date; `stale_warning(offers=...)` says when a price shown
is older than `STALE_AFTER_DAYS`, and `price_note(offers=...)` dates the prices shown. The
shipped prices are examples; users override them with `--catalog FILE`.
An offer and what it rents are in autotune/pricing/offers.py.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import re
from pathlib import Path
from typing import Iterable, Literal

from pydantic import Field, ValidationError, model_validator

from autotune.errors import UserError, did_you_mean, format_validation_error, load_yaml_file
from autotune.names import catalog_name
from autotune.pricing.offers import CatalogModel, Offer, check_date

# How close a mistyped offer, GPU, provider or region must be to a catalog name to be offered
# for it (difflib's ratio): catalog names are short, so looser than difflib's 0.6.
NAME_CUTOFF = 0.5

DEFAULT_CATALOG = Path(__file__).resolve().parent.parent / "data" / "catalog.yaml"
# 3 added instance sizes (`instances`) and `regions` to offers; a version-2 file is a valid
# version-3 file, so both are read.
SCHEMA_VERSION = 3
READABLE_SCHEMA_VERSIONS = (2, 3)
STALE_AFTER_DAYS = 90
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")


class GPUType(CatalogModel):
    """One accelerator type (or `cpu-core`, the 'GPU' of a CPU-only sweep). Dense peaks only."""

    device_class: Literal["gpu", "cpu"] = "gpu"
    memory_bytes: int | None = Field(default=None, gt=0, description="datasheet memory (GB = 1e9 B)")
    peak_tflops: dict[str, float] = Field(
        default_factory=dict,
        description="dense (no sparsity) peak TFLOPS by precision: fp32, tf32, bf16, fp16, fp8")
    memory_bandwidth_gb_per_s: float | None = Field(default=None, gt=0)
    interconnect: str | None = Field(default=None, description="e.g. 'NVLink 4', 'PCIe Gen4 x16'")
    interconnect_gb_per_s: float | None = Field(
        default=None, gt=0, description="datasheet GPU-to-GPU bandwidth, both directions summed")
    aliases: list[str] = Field(default_factory=list, description="device names as the driver reports them")
    source: str = ""
    source_date: str | None = None
    notes: str = ""

    @model_validator(mode="after")
    def _known_precisions(self) -> "GPUType":
        bad = [k for k in self.peak_tflops if k not in PRECISIONS]
        if bad:
            raise ValueError(f"unknown precision(s) {bad} in `peak_tflops`; use {', '.join(PRECISIONS)}")
        if any(v <= 0 for v in self.peak_tflops.values()):
            raise ValueError("`peak_tflops` values must be > 0 (leave a precision out when unknown)")
        if self.source_date is not None:
            check_date(self.source_date, "source_date")
        return self

    def peak_flops(self, precision: str) -> float | None:
        """Dense peak FLOP/s at a training precision; None when not sourced.

        fp16 falls back to the bf16 figure (equal on every GPU in the shipped catalog). fp32
        training uses the fp32 (non-tensor) peak: PyTorch leaves TF32 matmuls off by default.
        """
        tf = self.peak_tflops.get(precision)
        if tf is None and precision == "fp16":
            tf = self.peak_tflops.get("bf16")
        return tf * 1e12 if tf else None

    @property
    def ring_bytes_per_s(self) -> float | None:
        """One direction of the GPU-to-GPU link: what a ring collective's step moves at."""
        return self.interconnect_gb_per_s * 1e9 / 2 if self.interconnect_gb_per_s else None


class Catalog(CatalogModel):
    schema_version: int = SCHEMA_VERSION
    date: str = Field(description="when the catalog as a whole was last checked")
    note: str = ""
    gpus: dict[str, GPUType]
    offers: list[Offer]
    source_file: str | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _consistent(self) -> "Catalog":
        check_date(self.date, "date")
        if self.schema_version not in READABLE_SCHEMA_VERSIONS:
            raise ValueError(f"`schema_version` {self.schema_version} is not one of "
                             f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))}")

        for key in self.gpus:
            catalog_name(key)
        seen: set[str] = set()
        for o in self.offers:
            if o.name in seen:
                raise ValueError(f"offer name '{o.name}' appears twice")
            seen.add(o.name)
            if o.gpu not in self.gpus:
                raise ValueError(f"offer '{o.name}': unknown gpu '{o.gpu}'{did_you_mean(o.gpu, list(self.gpus))}")
        return self

    # -- lookups -------------------------------------------------------------------------

    def gpu_type(self, name: str) -> GPUType:
        if name in self.gpus:
            return self.gpus[name]
        raise UserError(f"unknown GPU type '{name}'{did_you_mean(name, list(self.gpus), cutoff=NAME_CUTOFF)}",
                        fix=f"use one of {', '.join(self.gpus)} (list them: autotune catalog)")

    def unit(self, gpu: str) -> str:
        """What one of `gpu` is billed as: 'vCPU' for a CPU type (its offers price a vCPU-hour,
        one rank = threads_per_rank of them), else 'GPU'. Unknown names: 'GPU'."""
        t = self.gpus.get(gpu)
        return "vCPU" if t is not None and t.device_class == "cpu" else "GPU"

    def offer(self, name: str) -> Offer:
        for o in self.offers:
            if o.name == name:
                return o
        names = [o.name for o in self.offers]
        raise UserError(f"unknown offer '{name}'{did_you_mean(name, names, cutoff=NAME_CUTOFF)}",
                        fix="list the offers with: autotune catalog")

    def offers_for(self, gpu: str, num_gpus: int | None = None) -> list[Offer]:
        """Offers of a GPU type (that can run `num_gpus`, when given)."""
        return [o for o in self.offers if o.gpu == gpu
                and (num_gpus is None or o.billed_gpus(num_gpus) is not None)]

    def providers(self) -> list[str]:
        return sorted({o.provider for o in self.offers})

    def regions(self) -> list[str]:
        return sorted({r for o in self.offers for r in o.regions})

    def select(self, providers: list[str] | None = None, regions: list[str] | None = None) -> "Catalog":
        """The catalog with only the offers of these providers, in these regions (shell-style
        patterns such as 'us-*' allowed; case ignored). An offer spanning several regions keeps
        only the matching ones, so its bills name them. A name matching no offer is a
        UserError with "did you mean"; so is a selection that leaves nothing."""
        if not providers and not regions:
            return self
        offers = list(self.offers)
        if providers:
            check_names(providers, self.providers(), "--provider", "provider")
            offers = [o for o in offers if matches(o.provider, providers)]
        if regions:
            check_names(regions, self.regions(), "--region", "region")
            offers = [o.model_copy(update={"regions": [r for r in o.regions if matches(r, regions)]})
                      for o in offers if any(matches(r, regions) for r in o.regions)]
        if not offers:
            asked = " and ".join(f"{flag} {', '.join(v)}" for flag, v in
                                 (("--provider", providers), ("--region", regions)) if v)
            raise UserError(f"no offer in {self.source_file or 'the catalog'} matches {asked} together",
                            fix="list providers and regions with `autotune catalog`, and pick a "
                                "provider that sells in that region")
        out = self.model_copy(update={"offers": offers})
        out.source_file = self.source_file
        return out

    def match_device(self, device_name: str) -> str | None:
        """Catalog key of a device as the driver names it ('NVIDIA H100 80GB HBM3' -> h100-sxm)."""
        norm = _norm(device_name)
        for key, g in self.gpus.items():
            if any(_norm(a) == norm for a in g.aliases) or _norm(key) == norm:
                return key
        return None

    # -- freshness -----------------------------------------------------------------------

    def price_dates(self, offers: Iterable[str] | None = None) -> tuple[str, str]:
        """(oldest, newest) price_date of the named offers (None: every offer); the catalog's
        own date where none is named."""
        names = None if offers is None else set(offers)
        dates = sorted(o.price_date for o in self.offers if names is None or o.name in names)
        return (dates[0], dates[-1]) if dates else (self.date, self.date)

    def age_days(self, today: _dt.date | None = None, offers: Iterable[str] | None = None) -> int:
        """Days since the oldest price of `offers` (None: of any offer) was read."""
        return ((today or _dt.date.today()) - _dt.date.fromisoformat(self.price_dates(offers)[0])).days

    def stale_warning(self, today: _dt.date | None = None, offers: Iterable[str] | None = None) -> str | None:
        """A warning where a price shown (`offers`; None: any of the catalog) is older than
        STALE_AFTER_DAYS, or dated after today: each offer's price_date, not the catalog's,
        dates its price."""
        names = None if offers is None else list(offers)
        # After the clock's today, not the `today` asked about: a typo (2062 for 2026), whose
        # age, and so whose staleness, cannot be told. A day of slack for time zones.
        now = _dt.date.today()
        future = sorted(o.name for o in self.offers if (names is None or o.name in names)
                        and _dt.date.fromisoformat(o.price_date) > now + _dt.timedelta(days=1))
        if future:
            return (f"warning: {self.source_file or 'the catalog'} dates the prices of {', '.join(future)} "
                    f"after today ({now}): their age cannot be checked; correct their price_date "
                    f"(the day each price was read)")
        age = self.age_days(today, names)
        if age <= STALE_AFTER_DAYS:
            return None
        oldest = self.price_dates(names)[0]
        which = sorted(o.name for o in self.offers if o.price_date == oldest and (names is None or o.name in names))
        where = self.source_file or "the catalog"
        return (f"warning: {where} prices {', '.join(which) or 'its offers'} as of {oldest}, {age} "
                f"days ago (more than {STALE_AFTER_DAYS}): prices move; check your provider and "
                f"update the file or pass --catalog FILE")

    def price_note(self, offers: Iterable[str] | None = None, today: _dt.date | None = None,
                   with_age: bool = False) -> str:
        """e.g. 'example prices as of 2025-06-01; check your provider': the dates of the prices
        priced (`offers`: their names; None: every offer of the catalog). `with_age`: where the
        oldest is over STALE_AFTER_DAYS old, how old (what a report or a bill says under its
        dollars, which carry no warning line of their own)."""
        names = None if offers is None else list(offers)
        first, last = self.price_dates(names)
        age = self.age_days(today, names) if with_age else 0
        which = "" if first == last else "the oldest "
        old = f" ({which}{age} days ago, over {STALE_AFTER_DAYS}: the dollars may be out of date)" \
            if age > STALE_AFTER_DAYS else ""
        return f"example prices as of {first if first == last else f'{first} to {last}'}{old}; check your provider"


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def matches(value: str, patterns: list[str]) -> bool:
    """Whether `value` matches one of the shell-style patterns (case ignored)."""
    return any(fnmatch.fnmatchcase(value.lower(), p.lower()) for p in patterns)


def check_names(asked: list[str], known: list[str], flag: str, what: str) -> None:
    """UserError with "did you mean" for a --provider / --region value matching none of `known`."""
    for name in asked:
        if not any(matches(k, [name]) for k in known):
            raise UserError(f"{flag} '{name}': no offer in the catalog has that {what}"
                            f"{did_you_mean(name, known, cutoff=NAME_CUTOFF)}",
                            fix=f"use one of {', '.join(known) or '(none: the offers state no ' + what + ')'}"
                                f" (shell patterns such as 'us-*' work too)")


def read_catalog(path: str | Path) -> Catalog:
    """Read and validate a catalog YAML file; every problem is a UserError naming the file and
    field. (`autotune.pricing.load.load_catalog` also reads SkyPilot's catalog folders.)"""
    p = Path(path)
    data = load_yaml_file(p, "catalog", empty_fix=f"give a catalog with its date, gpus and offers, as "
                                                  f"{DEFAULT_CATALOG}")
    try:
        cat = Catalog.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(p, exc),
                        fix=f"see {DEFAULT_CATALOG} for the format of each field") from None
    cat.source_file = str(p)
    return cat
