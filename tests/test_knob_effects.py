"""Settings a user gives that had no test of their effect, only of their parsing: the spec's
`platforms.offers` (the sweep's scoring, the report's re-pricing, `autotune plan`),
`trial.reuse_workers: false`, and `autotune cost`'s job-size flags and `--month-rest-used`.
No trial runs: each is checked where the setting is applied, on the shipped catalog (with a
monthly offer added for the last: none ships)."""

from __future__ import annotations

import json

import pytest
import yaml

from autotune.contract import GPTWorkload, HardwareFingerprint, TrialConfig, TrialResult, TrialStatus
from autotune.pricing.load import load_catalog
from autotune.report.options import bills_for_trial
from autotune.search.score import score_trial
from autotune.spec import SweepSpec

DEAR = "aws-p5-ondemand"  # an H100 offer dearer than the catalog's cheapest


def test_platforms_offers_prices_the_sweeps_trials_and_the_report_on_those_offers_alone():
    import optuna

    catalog = load_catalog()
    cfg = TrialConfig(workload=GPTWorkload(preset="tiny"), seq_len=128, micro_batch_size=4, num_gpus=2,
                      device="cuda")
    result = TrialResult(status=TrialStatus.ok, tokens_per_s=36_000.0, params=1_000_000,
                         hardware=HardwareFingerprint(cpu_model="test-cpu"))
    free = score_trial(result, cfg, SweepSpec(target={"tokens": 1e9}), catalog, "h100-sxm")
    only = score_trial(result, cfg, SweepSpec(target={"tokens": 1e9}, platforms={"offers": [DEAR]}),
                       catalog, "h100-sxm")
    assert free is not None and only is not None
    assert free.offer != DEAR and only.offer == DEAR and only.usd > free.usd
    # The report re-prices the stored inputs: on the spec's offers alone, still.
    t = optuna.trial.create_trial(values=[only.hours, only.usd], user_attrs={"score": only.model_dump()},
                                  distributions={}, params={})
    assert {b["offer"] for b in bills_for_trial(t, catalog)} == {DEAR}


def test_platforms_offers_limits_the_plans_bills(cli, tmp_path):
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({
        "num_gpus": [8], "micro_batch_size": [1], "precision": ["bf16"], "checkpointing": ["none"],
        "zero_stage": [1], "tp_degree": [1]}))
    spec = {"workload": {"kind": "gpt", "preset": "1b"}, "seq_len": 2048, "target": {"tokens": 1e10},
            "space": str(tmp_path / "space.yaml")}
    offers = {}
    for name, extra in (("free.yaml", {}), ("only.yaml", {"platforms": {"offers": [DEAR]}})):
        (tmp_path / name).write_text(yaml.safe_dump({**spec, **extra}))
        code, out, err = cli("plan", str(tmp_path / name), "--gpu", "h100-sxm", "--json", "--top", "100")
        assert code == 0, err
        offers[name] = {b["offer"] for b in json.loads(out)["bills"]}
    assert len(offers["free.yaml"]) > 1 and DEAR in offers["free.yaml"]
    assert offers["only.yaml"] == {DEAR}


def test_reuse_workers_false_launches_each_trial_afresh(tmp_path):
    from autotune.run.pool import PoolRunner
    from autotune.search.objective import default_runner, uses_pool

    pooled = SweepSpec(study="s")
    fresh = pooled.with_overrides(**{"trial.reuse_workers": False})
    # No memory limit and no launcher template: pooled on any machine (uses_pool), so the
    # setting is what turns it off.
    assert uses_pool(pooled)
    runner = default_runner(pooled)
    assert isinstance(runner, PoolRunner)
    runner.close()
    assert not uses_pool(fresh) and not isinstance(default_runner(fresh), PoolRunner)


def test_the_cost_job_flags_change_the_terms_they_name(cli):
    base = ["cost", "--gpu", "h100-sxm", "--gpus", "8", "--tokens-per-s", "1e5", "--params", "1e9",
            "--target-tokens", "1e10", "--offer", DEAR, "--json"]

    def bill(*flags: str) -> dict:
        code, out, err = cli(*base, *flags)
        assert code == 0, err
        (b,) = json.loads(out)
        return b

    plain = bill()
    terms = plain["breakdown"]
    # Each flag moves its own term of the bill, and only that one.
    for flags, term in ((("--egress-checkpoints", "3"), "egress"), (("--checkpoints-kept", "10"), "storage"),
                        (("--dataset-gb", "5000"), "storage")):
        changed = bill(*flags)["breakdown"]
        assert changed[term] > terms[term], flags
        assert {k: v for k, v in changed.items() if k not in (term, "ingress")} == pytest.approx(
            {k: v for k, v in terms.items() if k not in (term, "ingress")}), flags


def test_month_rest_used_bills_a_monthly_rental_by_the_hours_used(cli, tmp_path):
    """No monthly offer ships (no sourced price), so the user's catalog adds one, as the shipped
    catalog's note says to; without the flag the bill pays whole months."""
    cat = yaml.safe_load(open(load_catalog().source_file))
    (hourly,) = [o for o in cat["offers"] if o["name"] == DEAR]
    monthly = {k: v for k, v in hourly.items() if k not in ("price_usd_per_gpu_hour", "billing", "instances")}
    monthly.update(name="my-monthly", pricing="monthly", billing="month", price_usd_per_gpu_month=1500.0)
    cat["offers"].append(monthly)
    (tmp_path / "cat.yaml").write_text(yaml.safe_dump(cat))
    base = ["cost", "--gpu", "h100-sxm", "--gpus", "8", "--tokens-per-s", "1e5", "--target-tokens", "1e10",
            "--catalog", str(tmp_path / "cat.yaml"), "--offer", "my-monthly", "--json"]

    def bill(*flags: str) -> dict:
        code, out, err = cli(*base, *flags)
        assert code == 0, err
        (b,) = json.loads(out)
        return b

    whole, used = bill(), bill("--month-rest-used")
    assert whole["hours"] == pytest.approx(used["hours"]) and whole["hours"] < 730
    assert whole["breakdown"]["billing_rounding"] > 0 == used["breakdown"]["billing_rounding"]
    assert whole["usd"] > used["usd"]
    assert any("whole month" in n for n in whole["notes"])
