"""`autotune catalog import --skypilot DIR`: SkyPilot's vms.csv files (tests/data/skypilot: real
rows, sourced in its README) become offers; bad input ends in one message, exit 2, nothing
written. Through the real CLI."""

from __future__ import annotations

import datetime as _dt
import json
import shutil
from pathlib import Path

import pytest
import yaml

from autotune.pricing.catalog import STALE_AFTER_DAYS
from autotune.pricing.load import load_catalog

FIXTURE = Path(__file__).resolve().parent / "data" / "skypilot"


def _import(cli, folder, out, *flags):
    return cli("catalog", "import", "--skypilot", str(folder), "--out", str(out), *flags)


def test_fixture_imports_as_offers_by_instance_region_and_price(cli, tmp_path):
    out = tmp_path / "sky.yaml"
    code, stdout, err = _import(cli, FIXTURE, out, "--skip-unknown", "--price-date", "2026-11-30")
    assert code == 0, err
    flat = " ".join(stdout.split())
    assert "32 rows in 3 file(s) -> 15 offers" in flat
    assert "left out 2 rows with no accelerator (CPU instances)" in flat
    assert "no GPU type in the catalog: V100 (1)" in flat
    assert "spot prices of (instance, region) pairs" in flat  # no interruption rate given
    cat = load_catalog(out)
    offers = {o.name: o for o in cat.offers}
    # us-east-1 (two zones) and us-west-2 hold the same p5 price: one offer; the others apart.
    p5 = offers["aws-h100-sxm-us-east-1"]
    assert (p5.regions, p5.pricing, p5.max_nodes) == (["us-east-1", "us-west-2"], "on-demand", 1)
    assert [(i.name, i.gpus, i.price_usd_per_hour, i.vcpus) for i in p5.instances] == [
        ("p5.48xlarge", 8, 98.32, 192.0)]
    assert {o.regions[0] for o in cat.offers if o.provider == "aws" and o.gpu == "h100-sxm"} == {
        "us-east-1", "eu-north-1", "eu-west-2", "ap-northeast-1"}
    # Lambda's sizes in one offer; its PCIe instance and RunPod's A100-80GB (PCIe) named right.
    lam = offers["lambda-h100-sxm-us-east-1"]
    assert lam.gpu_counts == [1, 2, 4, 8] and lam.regions == ["us-east-1", "us-west-1"]
    assert lam.placement(3).instance == "gpu_4x_h100_sxm5"
    assert offers["lambda-h100-pcie-us-east-1"].gpu == "h100-pcie"
    assert offers["runpod-a100-80gb-pcie-us"].instances[0].name == "1x_A100-80GB_SECURE"
    assert offers["runpod-a100-80gb-us"].instances[0].name == "1x_A100-80GB-SXM_SECURE"
    for o in cat.offers:  # dated and sourced, and honest about what the CSV lacks
        assert o.price_date == "2026-11-30" and "vms.csv" in o.price_source
        assert "not in it" in o.notes and o.billing == "hour"
    # Staleness is dated from the offers' price_date, on the day asked: up to STALE_AFTER_DAYS
    # later no warning; a day past it, one naming the file, the offers and the age.
    priced = _dt.date.fromisoformat("2026-11-30")
    assert cat.stale_warning(today=priced) is None
    assert cat.stale_warning(today=priced + _dt.timedelta(days=STALE_AFTER_DAYS)) is None
    late = STALE_AFTER_DAYS + 1
    assert cat.stale_warning(today=priced + _dt.timedelta(days=late)) == (
        f"warning: {out} prices {', '.join(sorted(offers))} as of 2026-11-30, {late} days ago "
        f"(more than {STALE_AFTER_DAYS}): prices move; check your provider and update the file "
        f"or pass --catalog FILE")


def test_spot_prices_import_with_a_stated_interruption_rate(cli, tmp_path):
    out = tmp_path / "sky.yaml"
    code, _, err = _import(cli, FIXTURE, out, "--skip-unknown", "--spot-interruptions-per-node-month", "30.4")
    assert code == 0, err
    spot = load_catalog(out).offer("aws-h100-sxm-spot-us-east-1")
    # The cheapest zone of us-east-1 (27.6948 < 30.326), as SkyPilot picks.
    assert spot.instances[0].price_usd_per_hour == pytest.approx(27.6948)
    assert spot.regions == ["us-east-1"] and spot.interruptions_per_node_month == 30.4


def test_plan_ranks_the_imported_regions(cli, tmp_path, monkeypatch):
    out = tmp_path / "sky.yaml"
    assert _import(cli, FIXTURE, out, "--skip-unknown")[0] == 0
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({
        "num_gpus": [8], "micro_batch_size": [4], "precision": ["bf16"], "checkpointing": ["full"],
        "zero_stage": [3], "tp_degree": [1]}))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({
        "workload": {"kind": "gpt", "preset": "7b"}, "seq_len": 4096, "target": {"tokens": 1e11},
        "batch": {"global_batch_samples": 64}, "space": "space.yaml"}))
    code, stdout, err = cli("plan", "spec.yaml", "--gpu", "h100-sxm", "--catalog", str(out), "--json", "--top", "20")
    assert code == 0, err
    bills = json.loads(stdout)["bills"]
    aws = [b for b in bills if b["provider"] == "aws"]
    assert [b["regions"][0] for b in aws] == ["us-east-1", "eu-north-1", "ap-northeast-1", "eu-west-2"]
    assert [b["usd"] for b in aws] == sorted(b["usd"] for b in aws)
    # The same plan straight from the folder (a flag pointing at SkyPilot's catalogs).
    code, again, err = cli("plan", "spec.yaml", "--gpu", "h100-sxm", "--catalog", str(FIXTURE), "--json",
                           "--top", "20", "--region", "eu-*")
    assert code == 0, err
    assert {b["offer"] for b in json.loads(again)["bills"]} == {"aws-h100-sxm-eu-north-1", "aws-h100-sxm-eu-west-2"}


def _copy(tmp_path) -> Path:
    folder = tmp_path / "catalogs"
    shutil.copytree(FIXTURE, folder)
    return folder


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("change, flags, message", [
    (None, [], "'V100' (1 rows, first at aws,"),
    (None, [], "or leave their rows out with --skip-unknown"),
    (lambda f: _edit(f / "runpod/vms.csv", "H200-SXM,1.0", "H200-SMX,1.0"), ["--map", "V100=a100-40gb"],
     "'H200-SMX' (did you mean 'H200-SXM'?)"),
    (lambda f: _edit(f / "aws/vms.csv", "GpuInfo,Price,SpotPrice", "GpuInfo,Cost,SpotPrice"), ["--skip-unknown"],
     "aws/vms.csv: column(s) Price missing"),
    (lambda f: _edit(f / "lambda/vms.csv", ",3.29,us-west-1", ",3.2g,us-west-1"), ["--skip-unknown"],
     "lambda/vms.csv, line 7: Price '3.2g' is not a number"),
    (lambda f: _edit(f / "lambda/vms.csv", ",3.29,us-west-1", ",-3.29,us-west-1"), ["--skip-unknown"],
     "Price '-3.29' must be a number >= 0"),
    (lambda f: _edit(f / "runpod/vms.csv", "US,3.59,3.99,US-CA-1", "US,3.59,3.99"), ["--skip-unknown"],
     "runpod/vms.csv, line 10: 9 fields, the header has 10"),
    (lambda f: shutil.rmtree(f), [], "does not exist"),
    (lambda f: [p.unlink() for p in f.glob("*/vms.csv")], [], "no vms.csv in"),
    (None, ["--map", "V100=a100-40gbb"], "unknown GPU type 'a100-40gbb' (did you mean 'a100-40gb'?)"),
    (None, ["--map", "V100"], "--map 'V100' is not NAME=TYPE"),
    (None, ["--skip-unknown", "--price-date", "yesterday"], "--price-date 'yesterday' is not a date"),
    # A date after today (a typo): its prices would never read as stale.
    (None, ["--skip-unknown", "--price-date", "2999-01-01"], "--price-date 2999-01-01 is after today ("),
])
def test_bad_input_is_exit_2_and_nothing_written(cli, tmp_path, change, flags, message):
    folder = _copy(tmp_path)
    if change:
        change(folder)
    out = tmp_path / "out.yaml"
    code, stdout, err = _import(cli, folder, out, *flags)
    assert code == 2, (stdout, err)
    assert message in " ".join(err.split()), err
    assert "To fix:" in err and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".out.yaml.*"))  # nothing half-written


def test_an_existing_output_is_kept_unless_forced(cli, tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("my prices\n")
    for force in ([], ["--force"]):  # a file autotune did not write is never replaced
        code, _, err = _import(cli, FIXTURE, mine, "--skip-unknown", *force)
        assert code == 2 and "exists" in err and mine.read_text() == "my prices\n"
    out = tmp_path / "imported.yaml"
    code, _, err = _import(cli, FIXTURE, out, "--skip-unknown")
    assert code == 0, err
    code, _, err = _import(cli, FIXTURE, out, "--skip-unknown", "--keep-offers")
    assert code == 2 and "exists" in err
    code, stdout, err = _import(cli, FIXTURE, out, "--skip-unknown", "--force", "--keep-offers")
    assert code == 0, err
    cat = load_catalog(out)
    # The summary counts the kept offers too: it said "N offers" of a file holding N + 25.
    kept = len(load_catalog().offers)
    assert f"and the base catalog's {kept} offers kept" in " ".join(stdout.split()), stdout
    assert len(cat.offers) > kept
    # --keep-offers: the shipped offers next to the imported ones, names kept apart.
    assert "runpod-h100-sxm" in {o.name for o in cat.offers} and "aws-h100-sxm-us-east-1" in {o.name for o in cat.offers}
