"""An offer of the catalog: one GPU type at one pricing kind, sold as instance sizes in one or
more regions (and as clusters of the largest, where the provider sells them), and what a job of
N GPUs rents of it.

    offer.placement(16)          # Placement: 2x p5.48xlarge, 16 GPUs billed, $/GPU-hour
    offer.usd_per_gpu_hour       # the hourly equivalent (monthly / 730, own: amortised + power)

Part of the catalog (autotune.pricing.catalog), which holds the offers with the GPU types.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

HOURS_PER_YEAR = 8760.0
HOURS_PER_MONTH = HOURS_PER_YEAR / 12  # 730: the month that monthly prices and storage bill

Pricing = Literal["on-demand", "spot", "monthly", "own"]
Billing = Literal["second", "minute", "hour", "month"]


class CatalogModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # `.inf` passes every >= 0 check


def check_date(value: str, field: str) -> str:
    try:
        _dt.date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"`{field}` must be a date YYYY-MM-DD, got '{value}'") from None
    return value


class OwnHardware(CatalogModel):
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


class InstanceType(CatalogModel):
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


class Offer(CatalogModel):
    """One way to get GPUs: a provider, a GPU type, a pricing kind, the regions where these
    prices hold, the instance sizes sold and every fee around them."""

    name: str
    provider: str
    gpu: str
    pricing: Pricing = "on-demand"

    @field_validator("name", "provider", "gpu")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        # Typed as --offer / --provider / --gpu and written into exported scripts and bills:
        # a newline or a ';' in one must never become shell.
        from autotune.names import catalog_name

        return catalog_name(v)
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
        check_date(self.price_date, "price_date")
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
