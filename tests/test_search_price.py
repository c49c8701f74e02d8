"""What a rank-hour of the search costs (autotune.search.score.rank_hour_price_usd): the spec's
price, else the catalog's cheapest offer for the hardware the trials run on.

The GPU cases describe an H100 by the name its driver reports (a HardwareFingerprint written by
hand): this machine has no GPU, and the rule under test reads only the fingerprint and the catalog.
"""

from __future__ import annotations

import pytest

from autotune.contract import DeviceKind, GPTWorkload, HardwareFingerprint, TrialConfig
from autotune.errors import UserError
from autotune.pricing.load import load_catalog
from autotune.search.score import rank_hour_price_usd
from autotune.spec import SweepSpec

H100 = HardwareFingerprint(device_kind=DeviceKind.cuda, device_name="NVIDIA H100 80GB HBM3", device_count=8)
UNKNOWN_GPU = HardwareFingerprint(device_kind=DeviceKind.cuda, device_name="Acme Tensor 9000", device_count=1)
CPU = HardwareFingerprint(device_kind=DeviceKind.cpu, cpu_model="test-cpu", cpu_count=2)


def _cfg(device: DeviceKind, threads: int = 1) -> TrialConfig:
    return TrialConfig(workload=GPTWorkload(preset="tiny"), device=device, threads_per_rank=threads)


def test_a_gpu_search_is_priced_at_the_catalogs_cheapest_offer_of_its_type():
    catalog = load_catalog()
    gpu = catalog.match_device(H100.device_name)
    assert gpu == "h100-sxm"
    cheapest = min(o.price_usd_per_gpu_hour for o in catalog.offers_for(gpu))
    spec = SweepSpec()
    assert rank_hour_price_usd(spec, _cfg(DeviceKind.cuda), catalog, H100) == pytest.approx(cheapest)
    # A GPU the catalog does not know is not priced (and a search budget in dollars is refused).
    assert rank_hour_price_usd(spec, _cfg(DeviceKind.cuda), catalog, UNKNOWN_GPU) is None


def test_cpu_ranks_are_priced_per_core_and_the_specs_price_wins():
    catalog = load_catalog()
    core = min(o.price_usd_per_gpu_hour for o in catalog.offers_for("cpu-core"))
    assert rank_hour_price_usd(SweepSpec(), _cfg(DeviceKind.cpu, threads=3), catalog, CPU) == pytest.approx(3 * core)
    spec = SweepSpec.model_validate({"budget": {"search_price_usd_per_gpu_hour": 1.25}})
    assert rank_hour_price_usd(spec, _cfg(DeviceKind.cuda), catalog, UNKNOWN_GPU) == 1.25


def test_a_search_budget_in_dollars_on_a_gpu_the_catalog_knows_is_accepted(tmp_path):
    """The sweep's check before any trial (autotune.search.sweep.check_search_price): on an
    H100 it passes; on a GPU the catalog lacks, it names the fix."""
    from types import SimpleNamespace

    from autotune.search.sweep import check_search_price

    spec = SweepSpec.model_validate({"budget": {"search_usd": 5.0}})
    catalog = load_catalog()
    check_search_price(SimpleNamespace(spec=spec, hardware=H100, catalog=catalog))
    with pytest.raises(UserError, match="search_price_usd_per_gpu_hour"):
        check_search_price(SimpleNamespace(spec=spec, hardware=UNKNOWN_GPU, catalog=catalog))
