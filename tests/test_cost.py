"""The bill, term by term, against values computed by hand (pure functions, no trials)."""

from __future__ import annotations

import json
import math

import pytest

from autotune.pricing.catalog import Catalog
from autotune.pricing.cost import JobSpec, Throughput, bills_for, breakeven, compute_bill, daly_interval, young_interval
from autotune.pricing.offers import Offer
from autotune.pricing.quote import explain

DATE = "2026-11-01"


def offer(**kw) -> Offer:
    base = dict(name="o", provider="p", gpu="g", pricing="on-demand", gpus_per_node=8,
                price_usd_per_gpu_hour=2.0, billing="second", setup_hours=0.0, restart_hours=0.0,
                price_date=DATE, price_source="test")
    base.update(kw)
    return Offer.model_validate(base)


def tp(num_gpus=8, tokens_per_s=1000.0, eff=None, config="") -> Throughput:
    return Throughput(gpu="g", num_gpus=num_gpus, tokens_per_s=tokens_per_s, basis="measured",
                      scaling_efficiency=eff, config=config)


def tokens_for_hours(hours: float, tokens_per_s: float = 1000.0) -> float:
    return hours * 3600 * tokens_per_s


# ---- billing granularity ---------------------------------------------------------------


def test_per_second_billing_is_exact():
    b = compute_bill(offer(), tokens_for_hours(10.5), tp())
    assert b.hours == pytest.approx(10.5)
    assert b.usd == pytest.approx(10.5 * 8 * 2.0)  # 168
    assert b.gpu_hours == pytest.approx(84.0)
    assert b.breakdown["billing_rounding"] == pytest.approx(0.0, abs=1e-6)


def test_hourly_billing_rounds_up_the_wall_clock():
    b = compute_bill(offer(billing="hour"), tokens_for_hours(10.5), tp())
    assert b.breakdown["compute"] == pytest.approx(168.0)
    assert b.breakdown["billing_rounding"] == pytest.approx(0.5 * 8 * 2.0)  # the 11th hour
    assert b.usd == pytest.approx(176.0)


def test_monthly_rental_pays_the_month_unless_the_rest_is_used():
    o = offer(pricing="monthly", billing="month", price_usd_per_gpu_hour=None,
              price_usd_per_gpu_month=1000.0, gpus_per_node=2)
    b = compute_bill(o, tokens_for_hours(20.0), tp(num_gpus=2))
    # 20 h on 2 GPUs rented by the month: 2 x $1000, of which 20/730 is the job's use.
    assert b.usd == pytest.approx(2000.0)
    assert b.breakdown["compute"] == pytest.approx(20 * 2 * 1000 / 730)
    assert b.breakdown["billing_rounding"] == pytest.approx(2000 - 20 * 2 * 1000 / 730)
    assert any("whole month" in n for n in b.notes)
    used = compute_bill(o, tokens_for_hours(20.0), tp(num_gpus=2), JobSpec(month_rest_used=True))
    assert used.usd == pytest.approx(20 * 2 * 1000 / 730)  # 54.79
    # 800 h spans two months.
    long = compute_bill(o, tokens_for_hours(800.0), tp(num_gpus=2))
    assert long.usd == pytest.approx(4000.0)


def test_whole_instances_are_billed_and_idle_gpus_noted():
    o = offer(gpu_counts=[1, 2, 4, 8])
    b = compute_bill(o, tokens_for_hours(10.0), tp(num_gpus=3))
    assert b.gpus == 4 and b.gpus_used == 3
    assert b.usd == pytest.approx(10 * 4 * 2.0)
    assert any("idle" in n for n in b.notes)
    two_nodes = compute_bill(offer(max_nodes=4), tokens_for_hours(1.0), tp(num_gpus=12))
    assert two_nodes.gpus == 16 and two_nodes.nodes == 2


def test_setup_hours_are_billed():
    b = compute_bill(offer(setup_hours=0.5), tokens_for_hours(10.0), tp())
    assert b.hours == pytest.approx(10.5)
    assert b.breakdown["setup"] == pytest.approx(0.5 * 8 * 2.0)


# ---- storage, egress, ingress ----------------------------------------------------------


def test_storage_egress_ingress():
    o = offer(storage_usd_per_gb_month=0.10, egress_usd_per_gb=0.09, ingress_usd_per_gb=0.01,
              storage_write_gb_per_s=1e9)  # writes take no time here: storage alone
    job = JobSpec(checkpoint_bytes=50e9, dataset_bytes=100e9, final_model_bytes=14e9,
                  checkpoints_kept=2, egress_checkpoints=1)
    b = compute_bill(o, tokens_for_hours(73.0), tp(), job)
    # (100 + 2 x 50) GB x $0.10 per GB-month x 73/730 month = $2.00
    assert b.breakdown["storage"] == pytest.approx(2.0, rel=1e-6)
    # (14 + 1 x 50) GB x $0.09 = $5.76; ingress 100 GB x $0.01 = $1.00
    assert b.breakdown["egress"] == pytest.approx(5.76)
    assert b.breakdown["ingress"] == pytest.approx(1.0)


def test_checkpoint_write_time_from_size_and_bandwidth():
    o = offer(storage_write_gb_per_s=2.0)
    job = JobSpec(checkpoint_bytes=72e9, checkpoint_interval_hours=1.0)  # 36 s per write
    b = compute_bill(o, tokens_for_hours(10.0), tp(), job)
    assert b.checkpoint_write_hours == pytest.approx(36 / 3600)
    # 10 checkpoints (one per hour of training) x 36 s = 0.1 h of 8 GPUs at $2
    assert b.breakdown["checkpoint_writes"] == pytest.approx(0.1 * 8 * 2.0)
    assert b.hours == pytest.approx(10.1)


# ---- spot interruptions and the Young / Daly interval ----------------------------------


def test_daly_worked_examples():
    """Daly 2006: delta = 5 min, M = 24 h / 6 h / 15 min -> 117 / 57 / 9.1 minutes."""
    d = 5 / 60
    assert daly_interval(d, 24.0) * 60 == pytest.approx(117, abs=0.5)
    assert daly_interval(d, 6.0) * 60 == pytest.approx(57, abs=0.5)
    assert daly_interval(d, 0.25) * 60 == pytest.approx(9.1, abs=0.05)
    assert young_interval(d, 24.0) * 60 == pytest.approx(120.0)  # sqrt(2 x 5 x 1440)
    assert daly_interval(1.0, 0.4) == 0.4  # delta >= 2M: checkpoint every M


def test_spot_interruption_cost_by_hand():
    # One node, 730/24 interruptions a month = one per 24 h; 300 GB at 1 GB/s = 5 min write.
    o = offer(pricing="spot", price_usd_per_gpu_hour=1.0, interruptions_per_node_month=730 / 24,
              restart_hours=0.25, storage_write_gb_per_s=1.0)
    job = JobSpec(checkpoint_bytes=300e9)
    b = compute_bill(o, tokens_for_hours(100.0), tp(), job)
    delta, m = 300 / 3600, 24.0
    tau = math.sqrt(2 * delta * m) * (1 + math.sqrt(delta / (2 * m)) / 3 + delta / (2 * m) / 9) - delta
    assert b.checkpoint_interval_hours == pytest.approx(tau)
    assert tau * 60 == pytest.approx(116.7, abs=0.1)
    ckpt_h = 100 / tau * delta                          # 4.285 h of writes
    lost = (tau + delta) / 2 + 0.25                     # half a segment + restart per interruption
    run = (100 + ckpt_h) / (1 - lost / m)               # interruptions also hit re-done work
    assert b.expected_interruptions == pytest.approx(run / m)     # ~4.59
    assert b.breakdown["interruptions"] == pytest.approx((run - 100 - ckpt_h) * 8 * 1.0)
    assert b.breakdown["checkpoint_writes"] == pytest.approx(ckpt_h * 8)
    assert b.hours == pytest.approx(run)
    assert b.usd == pytest.approx(math.ceil(run * 3600) / 3600 * 8 * 1.0)  # billed per second


def test_more_nodes_more_interruptions():
    o = offer(pricing="spot", price_usd_per_gpu_hour=1.0, interruptions_per_node_month=730 / 24,
              restart_hours=0.25, max_nodes=2)
    job = JobSpec(checkpoint_bytes=300e9)
    one = compute_bill(o, tokens_for_hours(100.0), tp(num_gpus=8), job)
    two = compute_bill(o, tokens_for_hours(50.0), tp(num_gpus=16), job)
    # Two nodes: the job's MTBF halves (12 h), the Daly interval shrinks accordingly.
    assert two.checkpoint_interval_hours == pytest.approx(daly_interval(300 / 3600, 12.0))
    assert two.expected_interruptions / two.hours == pytest.approx(1 / 12)
    assert one.expected_interruptions / one.hours == pytest.approx(1 / 24)


def test_offer_interrupted_faster_than_it_can_work_is_skipped():
    o = offer(pricing="spot", price_usd_per_gpu_hour=1.0, interruptions_per_node_month=730 * 4,
              restart_hours=0.5, name="hopeless")
    cat = Catalog.model_validate({"date": DATE, "gpus": {"g": {}}, "offers": [o.model_dump()]})
    bills, skipped = bills_for(cat, tp(), 1e9, JobSpec(checkpoint_bytes=1e9))
    assert bills == [] and skipped[0].offer == "hopeless" and "interrupted every" in skipped[0].reason


# ---- own hardware ----------------------------------------------------------------------


OWN = dict(purchase_usd_per_gpu=2000.0, useful_life_years=2.0, power_watts_per_gpu=500.0,
           electricity_usd_per_kwh=0.20, utilisation=0.5, source="test")


def test_own_hardware_amortised_plus_power():
    o = offer(pricing="own", price_usd_per_gpu_hour=None, own=OWN, gpus_per_node=1)
    b = compute_bill(o, tokens_for_hours(100.0), tp(num_gpus=1))
    amort = 2000 / (2 * 8760 * 0.5)  # $0.2283 per used hour
    assert b.breakdown["compute"] == pytest.approx(100 * amort)
    assert b.breakdown["power"] == pytest.approx(100 * 0.5 * 0.20)  # 0.5 kW x $0.20 x 100 h = $10
    assert b.usd == pytest.approx(100 * amort + 10.0)


def test_own_hardware_break_even():
    own = offer(name="own", pricing="own", price_usd_per_gpu_hour=None, own=OWN)
    # F = 2000 / 24 months = $83.33/month; power e = $0.10/h; renting at $0.60/h:
    be = breakeven(own, offer(name="rent", price_usd_per_gpu_hour=0.60))
    assert be.own_cheaper == "above"
    assert be.hours_per_month == pytest.approx((2000 / 24) / (0.60 - 0.10))  # 166.7 h/month
    # Power alone costs more than renting: never.
    assert breakeven(own, offer(name="cheap", price_usd_per_gpu_hour=0.05)).own_cheaper == "never"
    monthly = dict(pricing="monthly", billing="month", price_usd_per_gpu_hour=None)
    # A $300/month rental: owning is cheaper below (300 - 83.33) / 0.10 = 2167 h: always (> 730).
    assert breakeven(own, offer(name="m", price_usd_per_gpu_month=300.0, **monthly)).own_cheaper == "always"
    # A $120/month rental: owning is cheaper below (120 - 83.33) / 0.10 = 366.7 h/month.
    be = breakeven(own, offer(name="m2", price_usd_per_gpu_month=120.0, **monthly))
    assert be.own_cheaper == "below" and be.hours_per_month == pytest.approx((120 - 2000 / 24) / 0.10)
    assert breakeven(own, offer(name="m3", price_usd_per_gpu_month=80.0, **monthly)).own_cheaper == "never"


# ---- sensitivity -----------------------------------------------------------------------


def test_sensitivity_plus_30_percent_and_one_interruption():
    o = offer(restart_hours=0.25)
    b = compute_bill(o, tokens_for_hours(10.0), tp(num_gpus=1), JobSpec(checkpoint_interval_hours=1.0))
    assert b.usd == pytest.approx(20.0)
    assert b.hours_plus_30pct == pytest.approx(13.0) and b.usd_plus_30pct == pytest.approx(26.0)
    # One more interruption: a whole 1 h interval lost + 0.25 h restart.
    assert b.hours_extra_interruption == pytest.approx(11.25)
    assert b.usd_extra_interruption == pytest.approx(22.5)
    assert b.hours_worst_case == pytest.approx(14.25) and b.usd_worst_case == pytest.approx(28.5)


def test_ranking_by_normal_and_worst_case():
    # A spot offer cheaper in the normal case but worse in the worst case than on-demand.
    cat = Catalog.model_validate({"date": DATE, "gpus": {"g": {}}, "offers": [
        offer(name="steady", price_usd_per_gpu_hour=1.00).model_dump(),
        # Rarely interrupted (MTBF 240 h) but slow to restart (3 h): fine on average, bad luck hurts.
        offer(name="spot", pricing="spot", price_usd_per_gpu_hour=0.90,
              interruptions_per_node_month=730 / 240, restart_hours=3.0).model_dump(),
    ]})
    bills, _ = bills_for(cat, tp(num_gpus=1), tokens_for_hours(10.0), JobSpec(checkpoint_bytes=36e9))
    by_name = {b.offer: b for b in bills}
    assert [b.offer for b in bills] == sorted(by_name, key=lambda n: by_name[n].usd)
    assert by_name["spot"].rank_usd == 1 and by_name["steady"].rank_usd == 2
    assert by_name["spot"].usd_worst_case > by_name["steady"].usd_worst_case
    assert by_name["steady"].rank_usd_worst_case == 1 and by_name["spot"].rank_usd_worst_case == 2
    assert any(line.startswith("best worst case") and "steady" in line for line in explain(bills))


# ---- the worked case: faster is dearer ---------------------------------------------------


def test_faster_config_is_more_expensive_and_explained():
    """8 GPUs at 90% scaling efficiency against 16 at 60%: the 16 finish sooner but burn more
    GPU-hours. Single-GPU throughput 1,000 tok/s; 1e9 tokens; $2 per GPU-hour, per second."""
    cat = Catalog.model_validate({"date": DATE, "gpus": {"g": {}}, "offers": [
        offer(name="cloud", max_nodes=2).model_dump()]})
    eight = tp(num_gpus=8, tokens_per_s=8 * 1000 * 0.9, eff=0.9, config="8 GPUs")
    sixteen = tp(num_gpus=16, tokens_per_s=16 * 1000 * 0.6, eff=0.6, config="16 GPUs")
    bills, _ = bills_for(cat, [sixteen, eight], 1e9)
    a, b = bills  # cheapest first
    assert a.config == "8 GPUs" and b.config == "16 GPUs"
    assert a.hours == pytest.approx(1e9 / 7200 / 3600)       # 38.58 h
    assert b.hours == pytest.approx(1e9 / 9600 / 3600)       # 28.94 h
    assert a.gpu_hours == pytest.approx(8 * a.hours)          # 308.6 GPU-h
    assert b.gpu_hours == pytest.approx(16 * b.hours)         # 463.0 GPU-h
    assert a.usd == pytest.approx(617.28, abs=0.01) and b.usd == pytest.approx(925.93, abs=0.01)
    assert (a.rank_usd, b.rank_usd) == (1, 2) and (a.rank_hours, b.rank_hours) == (2, 1)
    text = "\n".join(explain(bills))
    assert "cheapest: cloud [8 GPUs]" in text and "fastest:  cloud [16 GPUs]" in text
    assert "463 GPU-hours against 309" in text and "60%" in text and "90%" in text
    assert "lower scaling efficiency" in text


def test_bill_json_has_the_documented_keys():
    b = compute_bill(offer(), tokens_for_hours(1.0), tp())
    d = json.loads(json.dumps(b.as_dict()))
    for key in ("offer", "pricing", "gpus", "hours", "gpu_hours", "usd", "usd_worst_case",
                "checkpoint_interval_hours", "breakdown"):
        assert key in d
    assert d["usd"] == pytest.approx(sum(d["breakdown"].values()))
