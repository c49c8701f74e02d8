"""`autotune report` / `autotune export` with one of --max-usd / --deadline-hours: the flag
replaces that limit alone, and the sweep spec's other limit still applies (their help: each
defaults to the sweep spec's). Giving either flag used to drop both of the spec's limits, so
an option over the spec's budget was recommended as the fastest.

The study is a real Optuna study in SQLite holding two completed trials, scored by the real
scorer on the shipped catalog (no trial run: the scores are what a sweep stores), and the
spec's limits as a sweep stores them; the commands run as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.contract import GPTWorkload, HardwareFingerprint, TrialConfig, TrialResult, TrialStatus
from autotune.pricing.load import load_catalog
from autotune.record import SweepRecord
from autotune.search.score import score_trial
from autotune.search.study import open_study
from autotune.spec import SweepSpec

STUDY = "limits"


def _cli(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args, "--study", STUDY, "--storage",
                           f"sqlite:///{folder / 'study.db'}"], cwd=folder, capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> tuple[Path, dict[int, tuple[float, float]]]:
    """A study of two configs on CPU cores: trial 0 (2 ranks) cheaper and slower, trial 1 (4
    ranks) faster and dearer; the spec's budget and deadline both lie between theirs (trial 0 is
    past its deadline, trial 1 over its budget). Returns the folder and {trial: (hours, usd)}."""
    import optuna

    folder = tmp_path_factory.mktemp("limits")
    st = open_study(f"sqlite:///{folder / 'study.db'}", STUDY, create=True)
    catalog, spec = load_catalog(), SweepSpec(target={"tokens": 1e9})
    hw = HardwareFingerprint(cpu_model="test-cpu")
    bills = {}
    for number, (ranks, tokens_per_s) in enumerate(((2, 36_000.0), (4, 40_000.0))):
        cfg = TrialConfig(workload=GPTWorkload(preset="tiny"), seq_len=128, micro_batch_size=4, num_gpus=ranks)
        result = TrialResult(status=TrialStatus.ok, tokens_per_s=tokens_per_s, params=1_000_000, hardware=hw)
        score = score_trial(result, cfg, spec, catalog, "cpu-core")
        assert score is not None
        bills[number] = (score.hours, score.usd)
        st.add_trial(optuna.trial.create_trial(
            values=[score.hours, score.usd], distributions={}, params={},
            user_attrs={"score": score.model_dump(mode="json"), "config": cfg.model_dump(mode="json"),
                        "status": "ok", "tokens_per_s": tokens_per_s, "hardware": hw.key()}))
    (h0, usd0), (h1, usd1) = bills[0], bills[1]
    assert h1 < h0 and usd1 > usd0, bills  # one cheaper, the other faster: the limits decide
    SweepRecord(budget={"max_usd": (usd0 + usd1) / 2, "deadline_hours": (h0 + h1) / 2}).write(st)
    return folder, bills


def _report(folder: Path, *flags: str) -> dict:
    p = _cli(folder, "report", "--json", *flags)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_deadline_flag_keeps_the_specs_budget(stored):
    folder, bills = stored
    (h0, usd0), (_, usd1) = bills[0], bills[1]
    budget = (usd0 + usd1) / 2
    doc = _report(folder, "--deadline-hours", repr(3 * h0))
    assert doc["limits"]["max_usd"] == pytest.approx(budget)
    assert doc["limits"]["deadline_hours"] == pytest.approx(3 * h0)
    assert "--deadline-hours" in doc["limits"]["source"] and "spec" in doc["limits"]["source"]
    feasible = {o["trial"]: o["feasible"] for o in doc["options"] if o["offer"] == "aws-c7i-ondemand"}
    assert feasible == {0: True, 1: False}  # trial 1 is over the spec's budget
    # The fastest within the limits is the cheaper trial: the faster one costs more than allowed.
    assert doc["fastest"]["trial"] == doc["cheapest"]["trial"] == 0
    text = _cli(folder, "report", "--deadline-hours", repr(3 * h0)).stdout
    assert "--deadline-hours flag and the study (the sweep's spec) for the budget" in " ".join(text.split())


def test_budget_flag_keeps_the_specs_deadline(stored):
    folder, bills = stored
    (h0, _), (h1, usd1) = bills[0], bills[1]
    doc = _report(folder, "--max-usd", repr(10 * usd1))
    assert doc["limits"]["max_usd"] == pytest.approx(10 * usd1)
    assert doc["limits"]["deadline_hours"] == pytest.approx((h0 + h1) / 2)
    feasible = {o["trial"]: o["feasible"] for o in doc["options"] if o["offer"] == "aws-c7i-ondemand"}
    assert feasible == {0: False, 1: True}  # trial 0 is past the spec's deadline
    assert doc["cheapest"]["trial"] == doc["fastest"]["trial"] == 1


def test_no_flag_takes_both_of_the_specs_limits_and_two_flags_neither(stored):
    folder, bills = stored
    (h0, usd0), (h1, usd1) = bills[0], bills[1]
    doc = _report(folder)
    assert doc["limits"] == {"max_usd": pytest.approx((usd0 + usd1) / 2),
                             "deadline_hours": pytest.approx((h0 + h1) / 2), "source": "study (the sweep's spec)"}
    assert doc["cheapest"] is None and doc["fastest"] is None  # each trial breaks one limit
    doc = _report(folder, "--max-usd", repr(10 * usd1), "--deadline-hours", repr(10 * h0))
    assert doc["limits"] == {"max_usd": pytest.approx(10 * usd1), "deadline_hours": pytest.approx(10 * h0),
                             "source": "flags"}
    assert doc["cheapest"]["trial"] == 0 and doc["fastest"]["trial"] == 1


def test_a_limit_flag_of_zero_or_less_is_refused(stored, tmp_path):
    """As the spec's own budget.max_usd and deadline_hours (above 0): one line, exit 2; the help says
    so (it said "(min 0)", a bound the flag did not keep)."""
    folder, _ = stored
    for command in ("report", "export"):
        text = " ".join(_cli(folder, command, "--help").stdout.split())
        assert "budget in dollars, above 0" in text and "deadline in hours, above 0" in text and "min 0" not in text
    for command, flag, value in (("report", "--max-usd", "0"), ("report", "--deadline-hours", "0"),
                                 ("export", "--max-usd", "0"), ("export", "--deadline-hours", "-1")):
        extra = ["--pick", "cheapest", "--out", str(tmp_path / "out")] if command == "export" else []
        p = _cli(folder, command, flag, value, *extra)
        assert p.returncode == 2 and f"{flag} {float(value):g} must be above 0" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr
    assert not (tmp_path / "out").exists()


def test_export_deadline_flag_keeps_the_specs_budget(stored, tmp_path):
    folder, bills = stored
    h0 = bills[0][0]
    out = tmp_path / "launch"
    p = _cli(folder, "export", "--pick", "fastest", "--out", str(out), "--json",
             "--deadline-hours", repr(3 * h0))
    assert p.returncode == 0, p.stderr
    # The faster trial is over the spec's budget: the fastest within the limits is trial 0.
    assert json.loads(p.stdout)["trial"] == 0


# -- `autotune plan`: the spec's budget, deadline and memory limit, as a sweep applies them ------

PLAN_SPACE = {"num_gpus": [8], "micro_batch_size": [1], "precision": ["bf16"],
              "checkpointing": ["none", "full"], "zero_stage": [0, 1], "tp_degree": [1]}


def _plan(cli, tmp_path: Path, name: str, *flags: str, **spec_blocks) -> tuple[int, str, str]:
    import yaml

    (tmp_path / "space.yaml").write_text(yaml.safe_dump(PLAN_SPACE))
    (tmp_path / name).write_text(yaml.safe_dump({
        "workload": {"kind": "gpt", "preset": "1b"}, "seq_len": 2048, "target": {"tokens": 1e11},
        "batch": {"global_batch_samples": 256}, "space": str(tmp_path / "space.yaml"), **spec_blocks}))
    return cli("plan", str(tmp_path / name), "--gpu", "h100-sxm", "--top", "500", *flags)


@pytest.fixture
def unlimited(cli, tmp_path) -> list[dict]:
    """Every bill of the plan without limits in the spec."""
    code, out, err = _plan(cli, tmp_path, "free.yaml", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["over_limits"] == [] and doc["limit_notes"] == []
    return doc["bills"]


def test_plan_recommends_only_bills_within_the_specs_budget_and_deadline(cli, tmp_path, unlimited):
    usd = sorted(b["usd"] for b in unlimited)
    hours = sorted(b["hours"] for b in unlimited)
    max_usd, deadline = usd[len(usd) * 2 // 3], hours[len(hours) * 2 // 3]
    dear = [b for b in unlimited if b["usd"] > max_usd]
    late = [b for b in unlimited if b["hours"] > deadline]
    assert dear and late  # the limits leave some out, for each reason
    budget = {"max_usd": max_usd, "deadline_hours": deadline}
    code, out, err = _plan(cli, tmp_path, "limited.yaml", "--json", budget=budget)
    assert code == 0, err
    doc = json.loads(out)
    for listed in (doc["bills"], doc["fastest"]):
        assert listed and all(b["usd"] <= max_usd and b["hours"] <= deadline for b in listed)
    assert all(b["usd"] > max_usd or b["hours"] > deadline for b in doc["over_limits"])
    assert len(doc["bills"]) + len(doc["over_limits"]) == len(unlimited)
    assert [b["rank_usd"] for b in doc["bills"]] == list(range(1, len(doc["bills"]) + 1))
    assert doc["limits"]["max_usd"] == max_usd and doc["why_none"] is None
    # Its cheapest is the cheapest bill within both limits, not the cheapest of all.
    within = [b for b in unlimited if b["usd"] <= max_usd and b["hours"] <= deadline]
    assert doc["bills"][0]["usd"] == min(b["usd"] for b in within)
    code, out, err = _plan(cli, tmp_path, "limited.yaml", budget=budget)
    assert code == 0, err
    text = " ".join(out.split())
    assert f"{len(dear)} option(s) over budget.max_usd ${max_usd:,.2f} not recommended" in text
    assert f"{len(late)} option(s) past budget.deadline_hours {deadline:g} (" in text
    assert f"bills within the spec's limits ({len(doc['over_limits'])} over them)" in text


def test_plan_says_when_no_option_meets_the_limits(cli, tmp_path, unlimited):
    cheapest = min(b["usd"] for b in unlimited)
    budget = {"max_usd": cheapest / 2}
    code, out, err = _plan(cli, tmp_path, "poor.yaml", "--json", budget=budget)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["bills"] == [] and doc["fastest"] == [] and len(doc["over_limits"]) == len(unlimited)
    assert doc["why_none"].startswith(f"no option meets the spec's limits (budget.max_usd ${cheapest / 2:,.2f})")
    assert f"the cheapest is {unlimited[0]['config']} on {unlimited[0]['offer']}" in doc["why_none"]
    code, out, err = _plan(cli, tmp_path, "poor.yaml", budget=budget)
    assert code == 0, err
    text = " ".join(out.split())
    assert "no option meets the spec's limits" in text and "To fix: raise budget.max_usd" in text
    assert "cheapest\n" not in out  # no list of recommendations, empty or not


def test_plan_applies_the_specs_memory_limit_per_rank(cli, tmp_path, unlimited):
    import re

    mem = {b["config"]: float(re.search(r"memory ([\d.]+) GB", b["throughput_basis"]).group(1)) for b in unlimited}
    assert len(set(mem.values())) > 1
    # A limit between the configs' estimates: as a sweep's prescreen, the larger are not run.
    limit_gb = (min(mem.values()) + max(mem.values())) / 2 / (1 - 0.10)
    code, out, err = _plan(cli, tmp_path, "small.yaml", "--json",
                           memory={"limit_bytes_per_rank": int(limit_gb * 1e9)})
    assert code == 0, err
    doc = json.loads(out)
    kept = {b["config"] for b in doc["bills"] + doc["over_limits"]}
    assert kept == {c for c, gb in mem.items() if gb <= limit_gb * 0.9}
    assert all("(memory.limit_bytes_per_rank)" in b["throughput_basis"] for b in doc["bills"])
    dropped = len([c for c, gb in mem.items() if gb > limit_gb * 0.9])
    assert doc["not_fitting"] == dropped
    assert any(n.startswith(f"{dropped} (config, GPU type) pair(s) fit the GPU's memory but not "
                            f"memory.limit_bytes_per_rank") for n in doc["limit_notes"])
    assert any("memory.limit_bytes_per_rank" in a for a in doc["assumptions"])


def test_plan_applies_the_specs_safety_margin(cli, tmp_path, unlimited):
    """memory.safety_margin: a config fits only under the limit / (1 + margin), as the sweep's
    prescreen has it (MemoryGuard.fits_under). The plan kept its own 10% headroom whatever the
    spec's margin, so it planned configs a sweep of the same spec would not launch."""
    import re

    mem = {b["config"]: float(re.search(r"memory ([\d.]+) GB", b["throughput_basis"]).group(1)) for b in unlimited}
    top = sorted(set(mem.values()))
    assert len(top) > 1
    # A limit whose 10% headroom holds every config, and a margin of 0.5 that leaves the largest out.
    margin, line_gb = 0.5, (top[-1] + top[-2]) / 2
    limit_gb = line_gb * (1 + margin)
    assert limit_gb * 0.9 >= top[-1] and limit_gb <= 80
    code, out, err = _plan(cli, tmp_path, "margin.yaml", "--json",
                           memory={"limit_bytes_per_rank": int(limit_gb * 1e9), "safety_margin": margin})
    assert code == 0, err
    doc = json.loads(out)
    kept = {b["config"] for b in doc["bills"] + doc["over_limits"]}
    assert kept == {c for c, gb in mem.items() if gb <= line_gb}
    dropped = len(mem) - len(kept)
    assert dropped and doc["not_fitting"] == dropped
    assert any(n.startswith(f"{dropped} (config, GPU type) pair(s) fit the GPU's memory but not "
                            "memory.limit_bytes_per_rank") and "and memory.safety_margin 0.5" in n
               for n in doc["limit_notes"]), doc["limit_notes"]
    assert any("memory.safety_margin 0.5: under that limit / 1.5" in a for a in doc["assumptions"])
