"""The catalog of GPU types and platform offers (`autotune/data/catalog.yaml` by default).

    cat = load_catalog()                  # or load_catalog("my_prices.yaml"): UserError if bad
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
and the catalog as a whole carries a date; `stale_warning()` says when it is older than
`STALE_AFTER_DAYS`. The shipped prices are examples; users override them with `--catalog FILE`.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from autotune.errors import UserError, format_validation_error, load_yaml_file

DEFAULT_CATALOG = Path(__file__).resolve().parent.parent / "data" / "catalog.yaml"
# 3 added instance sizes (`instances`) and `regions` to offers; a version-2 file is a valid
# version-3 file, so both are read.
SCHEMA_VERSION = 3
READABLE_SCHEMA_VERSIONS = (2, 3)
STALE_AFTER_DAYS = 90
HOURS_PER_YEAR = 8760.0
HOURS_PER_MONTH = HOURS_PER_YEAR / 12  # 730: the month that monthly prices and storage bill

Pricing = Literal["on-demand", "spot", "monthly", "own"]
Billing = Literal["second", "minute", "hour", "month"]
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _check_date(value: str, field: str) -> str:
    try:
        _dt.date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"`{field}` must be a date YYYY-MM-DD, got '{value}'") from None
    return value


class GPUType(_Model):
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
            _check_date(self.source_date, "source_date")
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


class OwnHardware(_Model):
    """Hardware you buy: amortised over its useful life at the stated utilisation, plus power."""

    purchase_usd_per_gpu: float = Field(gt=0, description="incl. the GPU's share of the server")
    useful_life_years: float = Field(gt=0)
    power_watts_per_gpu: float = Field(gt=0, description="incl. the GPU's share of host and cooling")
    electricity_usd_per_kwh: float = Field(ge=0)
    utilisation: float = Field(gt=0, le=1, description="fraction of all hours the hardware is busy")
    source: str = ""

    @property
    def amortised_usd_per_gpu_hour(self) -> float:
        """Purchase spread over the hours it is actually used in its life."""
        return self.purchase_usd_per_gpu / (self.useful_life_years * HOURS_PER_YEAR * self.utilisation)

    @property
    def power_usd_per_gpu_hour(self) -> float:
        return self.power_watts_per_gpu / 1000.0 * self.electricity_usd_per_kwh

    @property
    def fixed_usd_per_gpu_month(self) -> float:
        """What owning costs each month whether used or not (straight-line depreciation)."""
        return self.purchase_usd_per_gpu / (self.useful_life_years * 12.0)


class InstanceType(_Model):
    """One size a provider rents: its name, its GPUs and the hourly price of the whole instance."""

    name: str = Field(min_length=1, description="the provider's instance type, e.g. p5.48xlarge")
    gpus: int = Field(gt=0)
    price_usd_per_hour: float | None = Field(
        default=None, ge=0, description="the whole instance (on-demand / spot offers); default: "
                                        "the offer's price_usd_per_gpu_hour x gpus")
    vcpus: float | None = Field(default=None, gt=0)
    memory_gib: float | None = Field(default=None, gt=0)


@dataclass(frozen=True)
class Placement:
    """What a job of some GPU count rents on an offer: `count` x `instance`."""

    instance: str
    gpus_per_instance: int
    count: int                   # instances rented (= nodes when the job spans several)
    usd_per_gpu_hour: float      # the hourly rate each billed GPU costs on this instance

    @property
    def billed_gpus(self) -> int:
        return self.gpus_per_instance * self.count

    @property
    def label(self) -> str:
        return f"{self.count}x {self.instance}"


class Offer(_Model):
    """One way to get GPUs: a provider, a GPU type, a pricing kind, the regions where these
    prices hold, the instance sizes sold and every fee around them."""

    name: str
    provider: str
    gpu: str
    pricing: Pricing = "on-demand"
    regions: list[str] = Field(
        default_factory=list, description="regions (or locations) where these prices hold; "
                                          "empty: not stated")
    instances: list[InstanceType] | None = Field(
        default=None, description="instance sizes sold, each with its hourly price; default: "
                                  "`gpu_counts` (or any count up to gpus_per_node) at "
                                  "price_usd_per_gpu_hour")
    gpus_per_node: int = Field(default=8, gt=0)
    gpu_counts: list[int] | None = Field(
        default=None, description="GPU counts one node can be rented with (instance sizes); "
                                  "default: any count up to gpus_per_node")
    max_nodes: int = Field(default=1, gt=0)
    inter_node_gb_per_s: float | None = Field(
        default=None, gt=0, description="network bandwidth per node, each direction (multi-node)")
    price_usd_per_gpu_hour: float | None = Field(default=None, ge=0)
    price_usd_per_gpu_month: float | None = Field(default=None, ge=0)
    billing: Billing = "second"
    interruptions_per_node_month: float | None = Field(
        default=None, gt=0, description="expected interruptions of one node per 730 h (spot)")
    restart_hours: float = Field(default=0.25, ge=0, description="re-acquire, reload, resume")
    setup_hours: float = Field(default=0.5, ge=0, description="billed time before training starts")
    storage_usd_per_gb_month: float = Field(default=0.0, ge=0)
    storage_write_gb_per_s: float = Field(default=1.0, gt=0, description="checkpoint write bandwidth")
    egress_usd_per_gb: float = Field(default=0.0, ge=0)
    ingress_usd_per_gb: float = Field(default=0.0, ge=0)
    own: OwnHardware | None = None
    price_date: str
    price_source: str = Field(min_length=1)
    notes: str = ""

    @model_validator(mode="after")
    def _fields_for_pricing(self) -> "Offer":
        _check_date(self.price_date, "price_date")
        p = self.pricing
        if self.instances is not None and p in ("on-demand", "spot"):
            self._check_instances()  # derives price_usd_per_gpu_hour from the instance prices
        if p in ("on-demand", "spot") and self.price_usd_per_gpu_hour is None:
            raise ValueError(f"a {p} offer needs `price_usd_per_gpu_hour` (or a "
                             f"`price_usd_per_hour` on each of its `instances`)")
        if p == "monthly":
            if self.price_usd_per_gpu_month is None:
                raise ValueError("a monthly offer needs `price_usd_per_gpu_month`")
            if self.billing != "month":
                raise ValueError("a monthly offer bills by the month: set `billing: month`")
        if p != "monthly" and self.billing == "month":
            raise ValueError("`billing: month` is for monthly offers")
        if p == "spot" and self.interruptions_per_node_month is None:
            raise ValueError("a spot offer needs `interruptions_per_node_month` (e.g. from the "
                             "provider's interruption advisor)")
        if p == "own" and self.own is None:
            raise ValueError("an own-hardware offer needs an `own:` block (purchase, life, power, "
                             "electricity, utilisation)")
        if p != "own" and self.own is not None:
            raise ValueError("`own:` is only for `pricing: own`")
        if self.gpu_counts is not None:
            if not self.gpu_counts or any(c <= 0 or c > self.gpus_per_node for c in self.gpu_counts):
                raise ValueError(f"`gpu_counts` must be between 1 and gpus_per_node={self.gpus_per_node}")
            self.gpu_counts = sorted(set(self.gpu_counts))
        if self.instances is not None and p not in ("on-demand", "spot"):
            self._check_instances()
        return self

    def _check_instances(self) -> None:
        """`instances` decide the sizes: gpus_per_node and gpu_counts follow from them."""
        assert self.instances is not None
        if not self.instances:
            raise ValueError("`instances` is empty: list at least one, or leave it out")
        names = [i.name for i in self.instances]
        if len(set(names)) != len(names):
            raise ValueError(f"an instance name appears twice in `instances`: {names}")
        largest = max(i.gpus for i in self.instances)
        if "gpus_per_node" in self.model_fields_set and self.gpus_per_node != largest:
            raise ValueError(f"`gpus_per_node` {self.gpus_per_node} is not the largest instance's "
                             f"{largest} GPUs: leave it out (it follows from `instances`)")
        counts = sorted({i.gpus for i in self.instances})
        if self.gpu_counts is not None and sorted(set(self.gpu_counts)) != counts:
            raise ValueError(f"`gpu_counts` {self.gpu_counts} differ from the `instances` sizes "
                             f"{counts}: leave gpu_counts out (it follows from `instances`)")
        self.gpus_per_node = largest
        self.gpu_counts = counts
        if self.pricing in ("on-demand", "spot"):
            unpriced = [i.name for i in self.instances if i.price_usd_per_hour is None]
            if unpriced and self.price_usd_per_gpu_hour is None:
                raise ValueError(f"instance(s) {unpriced} have no `price_usd_per_hour` and the "
                                 f"offer no `price_usd_per_gpu_hour`")
            if self.price_usd_per_gpu_hour is None:
                # The lowest per-GPU rate among the sizes: what summaries of the offer show.
                self.price_usd_per_gpu_hour = min(i.price_usd_per_hour / i.gpus for i in self.instances
                                                  if i.price_usd_per_hour is not None)
        elif any(i.price_usd_per_hour is not None for i in self.instances):
            raise ValueError(f"a {self.pricing} offer is priced per GPU: leave `price_usd_per_hour` "
                             f"out of its `instances`")

    @property
    def max_gpus(self) -> int:
        return self.gpus_per_node * self.max_nodes

    def nodes_for(self, num_gpus: int) -> int:
        p = self.placement(num_gpus)
        return p.count if p else -(-num_gpus // self.gpus_per_node)

    def billed_gpus(self, num_gpus: int) -> int | None:
        """GPUs paid for when the job uses `num_gpus` (whole instances); None if it cannot run."""
        p = self.placement(num_gpus)
        return p.billed_gpus if p else None

    def sizes(self) -> list[tuple[str, int, float]]:
        """(instance name, GPUs, $ per GPU-hour) of every size this offer rents, smallest first."""
        rate = self.usd_per_gpu_hour
        unit = "vCPU" if self.gpu == "cpu-core" else "GPU"
        if self.instances:
            out = [(i.name, i.gpus, i.price_usd_per_hour / i.gpus
                    if i.price_usd_per_hour is not None and self.pricing in ("on-demand", "spot") else rate)
                   for i in self.instances]
        else:
            counts = self.gpu_counts or range(1, self.gpus_per_node + 1)
            out = [(f"{c}-{unit}", c, rate) for c in counts]
        return sorted(out, key=lambda s: (s[1], s[2]))

    def placement(self, num_gpus: int) -> Placement | None:
        """The instances a job of `num_gpus` rents: the cheapest single instance that holds it
        (the smallest, where a bigger one costs more per hour), else as many of the largest
        instance as it needs (every node alike, up to max_nodes). None if it cannot run."""
        if num_gpus <= 0 or num_gpus > self.max_gpus:
            return None
        sizes = self.sizes()
        holding = [s for s in sizes if s[1] >= num_gpus]
        if holding:
            name, gpus, rate = min(holding, key=lambda s: (s[1] * s[2], s[1]))
            return Placement(name, gpus, 1, rate)
        largest = max(s[1] for s in sizes)
        name, gpus, rate = min((s for s in sizes if s[1] == largest), key=lambda s: s[2])
        count = -(-num_gpus // gpus)
        return Placement(name, gpus, count, rate) if count <= self.max_nodes else None

    def unfit_reason(self, num_gpus: int) -> str | None:
        """Why `num_gpus` cannot run on this offer, in words; None when it can."""
        if self.placement(num_gpus) is not None:
            return None
        name, gpus, _ = max(self.sizes(), key=lambda s: s[1])
        nodes = (f"up to {self.max_nodes} x {name}" if self.max_nodes > 1
                 else f"{name}, single node")
        return (f"{self.name} sells at most {self.max_gpus} {self.gpu} ({nodes}); "
                f"{num_gpus} asked")

    @property
    def region_label(self) -> str:
        """The regions of the offer in a few words, for bills and tables."""
        if not self.regions:
            return "region not stated"
        if len(self.regions) == 1:
            return self.regions[0]
        return f"{self.regions[0]} +{len(self.regions) - 1} more"

    @property
    def usd_per_gpu_hour(self) -> float:
        """The hourly rate that time on this offer costs (own: amortisation + power)."""
        if self.pricing == "own":
            assert self.own is not None
            return self.own.amortised_usd_per_gpu_hour + self.own.power_usd_per_gpu_hour
        if self.pricing == "monthly":
            return float(self.price_usd_per_gpu_month or 0.0) / HOURS_PER_MONTH
        return float(self.price_usd_per_gpu_hour or 0.0)

    @property
    def mtbf_node_hours(self) -> float | None:
        """Mean hours between interruptions of one node."""
        if self.interruptions_per_node_month is None:
            return None
        return HOURS_PER_MONTH / self.interruptions_per_node_month


class Catalog(_Model):
    schema_version: int = SCHEMA_VERSION
    date: str = Field(description="when the catalog as a whole was last checked")
    note: str = ""
    gpus: dict[str, GPUType]
    offers: list[Offer]
    source_file: str | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _consistent(self) -> "Catalog":
        _check_date(self.date, "date")
        if self.schema_version not in READABLE_SCHEMA_VERSIONS:
            raise ValueError(f"`schema_version` {self.schema_version} is not one of "
                             f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))}")
        seen: set[str] = set()
        for o in self.offers:
            if o.name in seen:
                raise ValueError(f"offer name '{o.name}' appears twice")
            seen.add(o.name)
            if o.gpu not in self.gpus:
                close = difflib.get_close_matches(o.gpu, list(self.gpus), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise ValueError(f"offer '{o.name}': unknown gpu '{o.gpu}'{hint}")
        return self

    # -- lookups -------------------------------------------------------------------------

    def gpu_type(self, name: str) -> GPUType:
        if name in self.gpus:
            return self.gpus[name]
        raise UserError(f"unknown GPU type '{name}'{_did_you_mean(name, list(self.gpus))}",
                        fix=f"use one of {', '.join(self.gpus)} (list them: autotune catalog)")

    def offer(self, name: str) -> Offer:
        for o in self.offers:
            if o.name == name:
                return o
        names = [o.name for o in self.offers]
        raise UserError(f"unknown offer '{name}'{_did_you_mean(name, names)}",
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

    def age_days(self, today: _dt.date | None = None) -> int:
        return ((today or _dt.date.today()) - _dt.date.fromisoformat(self.date)).days

    def stale_warning(self, today: _dt.date | None = None) -> str | None:
        age = self.age_days(today)
        if age <= STALE_AFTER_DAYS:
            return None
        where = self.source_file or "the catalog"
        return (f"warning: {where} is dated {self.date}, {age} days ago (more than "
                f"{STALE_AFTER_DAYS}): prices move; check your provider and update the file "
                f"or pass --catalog FILE")

    def price_note(self) -> str:
        return f"example prices as of {self.date}; check your provider"


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
                            f"{_did_you_mean(name, known)}",
                            fix=f"use one of {', '.join(known) or '(none: the offers state no ' + what + ')'}"
                                f" (shell patterns such as 'us-*' work too)")


def _did_you_mean(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Read and validate a catalog; every problem is a UserError naming the file and field.

    A folder is read as SkyPilot's catalogs (`<cloud>/vms.csv`, e.g. ~/.sky/catalogs/v7): its
    instances become offers on top of the shipped GPU types (accelerators the catalog has no
    type for are left out; `autotune catalog import --skypilot DIR` says which)."""
    p = Path(path) if path else DEFAULT_CATALOG
    if p.is_dir():
        from autotune.pricing.skypilot import catalog_from_skypilot

        return catalog_from_skypilot(p, load_catalog(), skip_unknown=True).catalog
    data = load_yaml_file(p, "catalog")
    try:
        cat = Catalog.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(p, exc),
                        fix=f"see {DEFAULT_CATALOG} for the format of each field") from None
    cat.source_file = str(p)
    return cat
