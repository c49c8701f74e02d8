"""The catalog of GPU types and platform offers (`autotune/data/catalog.yaml` by default).

    cat = load_catalog()                  # or load_catalog("my_prices.yaml")
    offers = cat.offers_for("cpu-core")
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.errors import UserError, format_validation_error, load_yaml_file

DEFAULT_CATALOG = Path(__file__).resolve().parent.parent / "data" / "catalog.yaml"


class GPUType(BaseModel):
    model_config = ConfigDict(extra="allow")
    memory_bytes: int | None = None
    source: str = ""


class Offer(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    provider: str
    gpu: str
    pricing: str = "on-demand"
    price_usd_per_gpu_hour: float = Field(ge=0)
    price_date: str
    price_source: str


class Catalog(BaseModel):
    model_config = ConfigDict(extra="allow")
    schema_version: int = 1
    date: str
    gpus: dict[str, GPUType]
    offers: list[Offer]

    def offers_for(self, gpu: str) -> list[Offer]:
        return [o for o in self.offers if o.gpu == gpu]


def load_catalog(path: str | Path | None = None) -> Catalog:
    p = Path(path) if path else DEFAULT_CATALOG
    data = load_yaml_file(p, "catalog")
    try:
        return Catalog.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(p, exc), fix="see autotune/data/catalog.yaml") from None
