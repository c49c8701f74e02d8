"""The catalog: shipped GPU specs and offers validate, every price dated and sourced, bad
files fail with one clear message, unknown names get a "did you mean"."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import yaml

from autotune.errors import UserError
from autotune.pricing.catalog import DEFAULT_CATALOG
from autotune.pricing.load import load_catalog

REQUIRED_GPUS = ("h200", "h100-sxm", "h100-pcie", "a100-80gb", "a100-40gb", "l40s", "l4", "a10g",
                 "rtx-4090", "cpu-core")


def test_shipped_catalog_is_complete_and_sourced():
    cat = load_catalog()
    for name in REQUIRED_GPUS:
        assert name in cat.gpus
    for name, g in cat.gpus.items():
        assert g.source, name
        if g.device_class == "gpu":
            assert g.memory_bytes and g.memory_bandwidth_gb_per_s and g.interconnect_gb_per_s, name
    # Datasheet figures (dense): H100 SXM bf16 989 TFLOPS, fp16 falls back to it; A100 no fp8.
    assert cat.gpus["h100-sxm"].peak_flops("bf16") == 989e12
    assert cat.gpus["h100-sxm"].peak_flops("fp16") == 989e12
    assert cat.gpus["a100-80gb"].peak_flops("fp8") is None
    assert cat.gpus["a10g"].peak_flops("bf16") is None  # not sourced: left out
    for o in cat.offers:
        assert o.price_date and o.price_source, o.name
        dt.date.fromisoformat(o.price_date)
    assert any(o.gpu == "cpu-core" for o in cat.offers)  # a CPU-only sweep prices honestly
    assert {o.pricing for o in cat.offers} >= {"on-demand", "spot", "own"}
    dates = sorted(o.price_date for o in cat.offers)
    assert cat.price_note() == f"example prices as of {dates[0]} to {dates[-1]}; check your provider"
    # A note dates the prices it sits beside, not the catalog: the CPU offer's is its own.
    cpu_date = cat.offer("aws-c7i-ondemand").price_date
    assert cat.price_note(["aws-c7i-ondemand"]) == f"example prices as of {cpu_date}; check your provider"
    # Under a report's or a bill's dollars the note says how old the prices are, past 90 days.
    read = dt.date.fromisoformat(cpu_date)
    for days, said in ((90, ""), (91, " (91 days ago, over 90: the dollars may be out of date)")):
        assert cat.price_note(["aws-c7i-ondemand"], today=read + dt.timedelta(days=days), with_age=True) == \
            f"example prices as of {cpu_date}{said}; check your provider"
    oldest = min(dates)
    assert f"as of {oldest} to {dates[-1]} (the oldest 91 days ago, over 90:" in cat.price_note(
        today=dt.date.fromisoformat(oldest) + dt.timedelta(days=91), with_age=True)


def test_lookups_and_did_you_mean():
    cat = load_catalog()
    with pytest.raises(UserError, match="did you mean 'h100-sxm'"):
        cat.gpu_type("h100-sxn")
    with pytest.raises(UserError, match="did you mean 'runpod-h100-sxm'"):
        cat.offer("runpod-h100-smx")
    # A family name alone offers every type of the family, not the nearest spelling ('h200').
    with pytest.raises(UserError, match=r"unknown GPU type 'h100' \(did you mean 'h100-sxm' or 'h100-pcie'\?\)"):
        cat.gpu_type("h100")
    with pytest.raises(UserError, match="did you mean 'a100-80gb', 'a100-80gb-pcie' or 'a100-40gb'"):
        cat.gpu_type("A100")
    assert cat.match_device("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert cat.match_device("NVIDIA A100-SXM4-40GB") == "a100-40gb"
    assert cat.match_device("Some Other GPU") is None


def test_instance_sizes_decide_billed_gpus():
    cat = load_catalog()
    runpod = cat.offer("runpod-h100-sxm")  # 1, 2, 4 or 8 GPUs on one node
    assert [runpod.billed_gpus(n) for n in (1, 3, 8, 9)] == [1, 4, 8, None]
    p5en = cat.offer("aws-p5en-ondemand")  # whole 8-GPU instances, up to 64 nodes
    assert [p5en.billed_gpus(n) for n in (1, 12, 512, 513)] == [8, 16, 512, None]
    cpu = cat.offer("aws-c7i-ondemand")  # vCPUs: the smallest c7i has 2
    assert cpu.billed_gpus(1) == 2 and cpu.billed_gpus(3) == 4


def test_staleness_warning_after_90_days_of_the_prices_shown():
    """The warning dates each price by its offer's price_date: a catalog checked recently can
    still hold an old price, and a bill on a recent offer is not warned about an old one."""
    cat = load_catalog()
    oldest = min(cat.offers, key=lambda o: o.price_date)
    day = dt.date.fromisoformat(oldest.price_date)
    assert cat.stale_warning(day + dt.timedelta(days=90)) is None
    msg = cat.stale_warning(day + dt.timedelta(days=91))
    assert msg and "91 days ago" in msg and oldest.name in msg and "--catalog" in msg
    newer = max(cat.offers, key=lambda o: o.price_date)
    later = dt.date.fromisoformat(newer.price_date) + dt.timedelta(days=90)
    assert newer.price_date > oldest.price_date
    assert cat.stale_warning(later, offers=[newer.name]) is None
    assert oldest.name in (cat.stale_warning(later, offers=[newer.name, oldest.name]) or "")


def test_a_price_dated_after_today_is_warned_about():
    """A price_date after today (a typo: 2062 for 2026) gave a negative age, so the staleness
    warning never fired and the catalog read as valid and fresh."""
    cat = load_catalog()
    first, rest = cat.offers[0], cat.offers[1:]
    typo = cat.model_copy(update={"offers": [first.model_copy(update={"price_date": "2999-01-01"}), *rest]})
    newest = dt.date.fromisoformat(max(o.price_date for o in rest))
    for today in (None, newest):  # the clock's today decides what is after it, whatever day is asked about
        msg = typo.stale_warning(today)
        assert msg and first.name in msg and f"after today ({dt.date.today()})" in msg and "price_date" in msg
    # Only where such a price is shown.
    assert typo.stale_warning(newest, offers=[o.name for o in rest if o.price_date == str(newest)]) is None


def _write(tmp_path, data) -> str:
    p = tmp_path / "cat.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def _base() -> dict:
    return yaml.safe_load(DEFAULT_CATALOG.read_text())


@pytest.mark.parametrize("typed, hint", [
    ("H200", " (did you mean 'h200'?)"),          # the same name in other case
    ("h1", " (did you mean 'h100-sxm' or 'h100-pcie'?)"),  # every name it starts
    ("h100-smx", " (did you mean 'h100-sxm'?)"),  # a typo: the closest spelling
    ("h", ""),                                    # one letter says too little
    ("tpu-v5", ""),                               # nothing near
])
def test_did_you_mean_offers_names_the_user_likely_meant(typed, hint):
    from autotune.errors import did_you_mean

    assert did_you_mean(typed, ["h200", "h100-sxm", "h100-pcie", "l4"]) == hint


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["offers"][1].pop("price_date"), "price_date"),
    (lambda d: d["offers"].append({**d["offers"][1], "name": "x", "pricing": "spot"}),
     "interruptions_per_node_month"),
    (lambda d: d["offers"].append({**d["offers"][1], "name": "y", "gpu": "h100-sxn"}),
     "did you mean 'h100-sxm'"),
    (lambda d: d["offers"].append({**d["offers"][1], "name": "z", "pricing": "monthly"}),
     "price_usd_per_gpu_month"),
    (lambda d: d["gpus"]["h200"]["peak_tflops"].update(int8=1), "unknown precision"),
    (lambda d: d.update(date="yesterday"), "YYYY-MM-DD"),
    # An infinite price passes every >= 0 check and priced bills at $nan (invalid JSON).
    (lambda d: d["offers"][1].update(price_usd_per_gpu_hour=float("inf")), "finite number"),
    (lambda d: d["offers"][1].update(storage_usd_per_gb_month=float("inf")), "finite number"),
    (lambda d: d["gpus"]["h200"]["peak_tflops"].update(bf16=float("inf")), "finite number"),
])
def test_bad_catalog_is_one_clear_error(tmp_path, mutate, message):
    d = _base()
    mutate(d)
    path = _write(tmp_path, d)
    with pytest.raises(UserError) as exc:
        load_catalog(path)
    assert path in str(exc.value) and message in str(exc.value)


def test_catalog_cli_lists_validates_and_warns(run_cli, tmp_path):
    r = run_cli("catalog", "--json")  # a real subprocess: the installed entry point
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert "h100-sxm" in doc["gpus"] and doc["price_note"].startswith("example prices as of")
    assert any(be["own"] == "own-rtx4090" for be in doc["breakevens"])



def test_catalog_cli_in_process(cli, tmp_path):
    code, out, err = cli("catalog")
    assert code == 0 and "offers: valid" in out and "check your provider" in out
    # A CPU offer's price is per vCPU-hour (it read "$0.045/GPU-h"); a GPU offer's per GPU-hour.
    cpu = next(line for line in out.splitlines() if line.startswith("aws-c7i-ondemand "))
    assert "/vCPU-h" in cpu and "GPU-h" not in cpu.replace("vCPU-h", ""), cpu
    assert "/GPU-h" in next(line for line in out.splitlines() if line.startswith("runpod-h100-sxm "))
    old = _base()
    for o in old["offers"]:
        o["price_date"] = "2020-01-01"
    code, out, err = cli("catalog", "--catalog", _write(tmp_path, old))
    assert code == 0 and "days ago" in err
    bad = _base()
    bad["offers"][1]["pricing"] = "spot"
    code, out, err = cli("catalog", "--catalog", _write(tmp_path, bad))
    assert code == 2 and "interruptions_per_node_month" in err and "Traceback" not in err


def test_a_bill_is_dated_by_its_offers_price_not_the_catalogs(cli):
    """`cost` on the CPU offer said 'example prices as of <the catalog's date>' beside a price
    read long before; the note and the warning now date the prices the bills use."""
    cat = load_catalog()
    cpu = cat.offer("aws-c7i-ondemand")
    code, out, err = cli("cost", "--gpu", "cpu-core", "--gpus", "2", "--tokens-per-s", "1000",
                         "--target-tokens", "1e9")
    assert code == 0, err
    assert f"example prices as of {cpu.price_date}; check your provider" in out
    old = (dt.date.today() - dt.date.fromisoformat(cpu.price_date)).days > 90
    assert ("aws-c7i-ondemand as of" in err) == old, err


def test_the_terminal_shows_each_offers_own_note_beside_its_bill(cli):
    """An offer's note (a price older than the provider's last cut) reached only --json."""
    cat = load_catalog()
    p5 = cat.offer("aws-p5-ondemand")
    assert p5.notes
    code, out, err = cli("cost", "--gpu", "h100-sxm", "--gpus", "8", "--tokens-per-s", "100000",
                         "--target-tokens", "1e10", "--offer", "aws-p5-ondemand")
    assert code == 0, err
    assert f"note on aws-p5-ondemand: {p5.notes}" in " ".join(out.split())


def test_gpu_hours_of_a_short_run_are_not_rounded_to_nothing():
    from autotune.format import fmt_gpu_hours

    assert [fmt_gpu_hours(x) for x in (0.55, 0.004, 12.34, 34146.2)] == ["0.55", "0.004", "12.3", "34,146"]
