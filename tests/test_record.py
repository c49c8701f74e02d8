"""The trial record (autotune.record.TrialRecord): one typed writer and reader of what a trial
stores in the study, and studies written before it still read. The old study here is real:
tests/data/study_written_by_main.json is a 6-trial sweep (2 CPU ranks, tiny GPT, one reused
trial) run by `autotune sweep` at main cbb0978, dumped trial by trial; a user resumes such
studies, so every reader must take them as they are."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from autotune.contract import HardwareFingerprint, TrialConfig
from autotune.record import SweepRecord, TrialRecord

OLD = Path(__file__).parent / "data" / "study_written_by_main.json"


@pytest.fixture()
def old_study(tmp_path):
    """The study written by main, in a real SQLite storage."""
    from optuna.distributions import json_to_distribution

    doc = json.loads(OLD.read_text())
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(study_name=doc["study"], storage=f"sqlite:///{tmp_path / 'old.db'}",
                                directions=[d.lower() for d in doc["directions"]])
    for k, v in doc["user_attrs"].items():
        study.set_user_attr(k, v)
    for t in doc["trials"]:
        study.add_trial(optuna.trial.create_trial(
            state=optuna.trial.TrialState[t["state"]], values=t["values"], params=t["params"],
            distributions={k: json_to_distribution(json.dumps(d)) for k, d in t["distributions"].items()},
            user_attrs=t["user_attrs"], system_attrs=t["system_attrs"]))
    return optuna.load_study(study_name=doc["study"], storage=f"sqlite:///{tmp_path / 'old.db'}"), doc


def test_every_attribute_main_wrote_reads_into_the_record(old_study):
    study, doc = old_study
    for t, raw in zip(study.trials, doc["trials"]):
        rec = TrialRecord.of(t)
        assert rec.model_fields_set == set(raw["user_attrs"])  # nothing unknown, nothing dropped
        assert rec.trial_config() == TrialConfig.model_validate(raw["user_attrs"]["config"])
        # Main's key was the device model alone: today's `kind_key`.
        assert HardwareFingerprint.model_validate(rec.machine).kind_key() == rec.hardware
        assert rec.status == "ok" and rec.score.usd > 0 and rec.score.bills
    reused = [TrialRecord.of(t) for t in study.trials if TrialRecord.of(t).reused_from is not None]
    assert [r.reused_from for r in reused] == [0] and not reused[0].launched
    assert SweepRecord.of(study).budget["max_usd"] == 100


def test_a_report_of_the_old_study(old_study):
    from autotune.report.build import collect

    study, _ = old_study
    doc = collect(study)
    assert doc["counts"]["complete"] == 6
    assert doc["limits"]["max_usd"] == 100 and doc["limits"]["source"].startswith("study")
    # The reused trial repeats trial 0's measurement: options for the five measured trials only.
    assert {o["trial"] for o in doc["options"]} == {0, 1, 2, 4, 5}
    assert {m["trial"] for m in doc["memory"]} == {0, 1, 2, 4, 5}
    assert all(m["predicted_peak_mem_bytes"] > 0 and m["measured_peak_mem_bytes"] > 0 for m in doc["memory"])
    assert doc["pareto"] and doc["cheapest"] is not None
    # Its spec record holds the target; its scores, the tokens to it.
    assert doc["target"] == "1B tokens"
    assert {o["tokens_to_target"] for o in doc["options"]} == {1e9}


def test_the_report_names_the_price_behind_a_picks_dollars(old_study, tmp_path, run_cli):
    """The report gave a pick's dollars ("35.8 h, $3.20 on aws-c7i-ondemand") but never the rate
    they were multiplied by, nor its unit, source or date. The JSON now carries each option's
    `price_unit` and `price_source` (schema version 1: fields added), and the terminal report,
    the sweep's end, the HTML cards and the export's bill show "at $0.0446/vCPU-h, priced DATE
    (aws: ...)" (a CPU offer is priced per vCPU-hour, not per GPU-hour)."""
    import html
    import io

    from rich.console import Console

    from autotune.pricing.load import load_catalog
    from autotune.report.build import collect
    from autotune.report.html import render_html
    from autotune.report.schema import REPORT_SCHEMA_VERSION, ReportDoc
    from autotune.report.terminal import print_report, print_summary

    study, _ = old_study
    doc = collect(study)
    offer = load_catalog().offer(doc["cheapest"]["offer"])
    assert offer.gpu == "cpu-core" and REPORT_SCHEMA_VERSION == 1
    for o in doc["options"]:
        assert (o["price_unit"], o["price_source"]) == ("vCPU", load_catalog().offer(o["offer"]).price_source)
    ReportDoc.model_validate(doc)
    said = (f"price: at ${offer.price_usd_per_gpu_hour:.4f}/vCPU-h, priced {offer.price_date} "
            f"({offer.provider}: {offer.price_source})")
    con = Console(width=1000, file=io.StringIO(), record=True, highlight=False)
    print_report(doc, con)
    assert con.export_text().count(f"  {said}\n") == 2  # under the cheapest and the fastest
    con = Console(width=80, file=io.StringIO(), record=True, highlight=False)
    print_summary(doc, con, [])
    lines = con.export_text().splitlines()
    assert any(ln.startswith(f"  {said[:60]}") for ln in lines) and all(len(ln) <= 80 for ln in lines)
    assert render_html(doc).count(html.escape(said)) == 2  # the cards of the cheapest and the fastest
    p = run_cli("export", "--study", "old", "--storage", f"sqlite:///{tmp_path / 'old.db'}", "--pick",
                "cheapest", "--out", str(tmp_path / "launch"))
    assert p.returncode == 0, p.stderr
    bill = " ".join((tmp_path / "launch" / "bill.md").read_text().split())
    assert (f"${offer.price_usd_per_gpu_hour:.4f} per vCPU-hour as of {offer.price_date} "
            f"({offer.price_source})") in bill
    assert "per GPU-hour" not in bill


def test_resuming_the_old_study_reuses_and_moves_from_its_records(old_study):
    """What a resumed sweep reads: config keys (a repeated config is reused, not measured),
    the Pareto ranking local moves start from, calibration points, the search budget."""
    from autotune.search.budget import trials_since_front_improved
    from autotune.search.calibration import study_points
    from autotune.search.reuse import config_key, finished_same_key
    from autotune.search.strategy import ranked_by_front

    study, doc = old_study
    old_key = TrialRecord.of(study.trials[0]).hardware
    for t in study.trials:
        rec = TrialRecord.of(t)
        assert config_key(rec.trial_config(), old_key) == rec.config_key  # the key rule is unchanged
    # The machine that wrote it, as this version fingerprints it: versions are now recorded
    # (main did not), so the key differs, and the old records count as this machine's because
    # every field they recorded matches.
    hw = HardwareFingerprint.model_validate(doc["trials"][0]["user_attrs"]["machine"]).model_copy(
        update=dict(torch_version="2.13.0+cpu", deepspeed_version="0.19.8"))
    assert hw.key() != old_key and all(TrialRecord.of(t).on(hw) for t in study.trials)
    first = TrialRecord.of(study.trials[0])
    assert finished_same_key(study, config_key(first.trial_config(), hw.key()), 99, hw).number == 0
    ranked = ranked_by_front(study.trials, hw)
    assert len(ranked) == 5  # one per config; the reused trial shares trial 0's key
    assert ranked[0].values[1] == min(t.values[1] for t in study.trials)  # cheapest of the front first
    points = study_points(study, hw)
    # The reused trial copied its source's point (as main's sweeps do): 6 points, 5 distinct.
    assert len(points) == 6 and len({p.measured_bytes for p in points}) == 5
    # Trial 0 is the fastest and the cheapest of the six (both objectives minimised), so it is
    # the front on its own: each of the five that finished after it (trial 3 reuses it, equal
    # values) adds nothing, and the front has not improved for 5 trials.
    zero = study.trials[0].values
    assert all(zero[0] <= t.values[0] and zero[1] <= t.values[1] for t in study.trials)
    assert study.trials[3].values == zero
    assert trials_since_front_improved(study.trials, hw) == 5
    # Another machine of the same CPU model (more cores, or other host memory) is not this one.
    for other in (hw.model_copy(update=dict(cpu_count=64)),
                  hw.model_copy(update=dict(host_memory_bytes=2 * hw.host_memory_bytes))):
        assert not any(TrialRecord.of(t).on(other) for t in study.trials)
        assert finished_same_key(study, config_key(first.trial_config(), other.key()), 99, other) is None
        assert ranked_by_front(study.trials, other) == [] and study_points(study, other) == []


def test_the_hardware_key_names_device_count_memory_versions_and_host():
    """Results count as the same hardware only when all of these match (issue #15)."""
    from autotune.contract import DeviceKind

    gpu = HardwareFingerprint(device_kind=DeviceKind.cuda, device_name="NVIDIA H100 80GB HBM3",
                              device_count=8, device_memory_bytes=85_520_809_984,
                              driver_version="550.54.15", cuda_version="12.4",
                              torch_version="2.5.1", deepspeed_version="0.16.4",
                              cpu_model="AMD EPYC 9654", cpu_count=192,
                              host_memory_bytes=1_622_000_000_000)
    assert gpu.key() == ("cuda:NVIDIA H100 80GB HBM3 x8, 80 GiB, driver 550.54.15, CUDA 12.4 | "
                         "AMD EPYC 9654, 192 cores, 1511 GiB | torch 2.5.1, DeepSpeed 0.16.4")
    for change in (dict(device_name="NVIDIA H100 PCIe"), dict(device_count=4),
                   dict(device_memory_bytes=40 * 2**30), dict(driver_version="535.1"),
                   dict(cuda_version="12.1"), dict(torch_version="2.6.0"),
                   dict(deepspeed_version="0.17.0"), dict(cpu_model="Intel Xeon"), dict(cpu_count=96),
                   dict(cpu_bf16="native"),
                   dict(host_memory_bytes=512 * 2**30)):
        assert gpu.model_copy(update=change).key() != gpu.key(), change
    # Identical machines report host memory a few MiB apart: still the same hardware.
    assert gpu.model_copy(update=dict(host_memory_bytes=gpu.host_memory_bytes - 5 * 2**20)).key() == gpu.key()
    assert gpu.kind_key() == "cuda:NVIDIA H100 80GB HBM3"


def test_cpus_of_one_model_name_apart_by_native_bf16_and_older_records_still_count():
    """Two "AMD EPYC" VMs, one with AVX512-BF16: their bf16 trials ran 10x apart (1.21x vs
    0.12x fp32), so they are different hardware. A record written before the key named it
    (its fingerprint lacks cpu_bf16) still counts on the machine it describes."""
    from autotune.contract.hardware import bf16_in_cpuinfo

    zen4 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx_vnni\n\nprocessor\t: 1\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"
    zen3 = "processor\t: 0\nflags\t\t: fpu avx2 fma\n"
    arm = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"
    assert (bf16_in_cpuinfo(zen4), bf16_in_cpuinfo(zen3), bf16_in_cpuinfo(arm)) == ("native", "emulated", "native")
    assert bf16_in_cpuinfo(zen4 + "\nprocessor\t: 2\nflags\t\t: fpu avx2\n") == "emulated"  # not on every core
    assert bf16_in_cpuinfo("model name\t: ?\n") is None

    hw = HardwareFingerprint(cpu_model="AMD EPYC", cpu_count=2, host_memory_bytes=24 * 2**30,
                             torch_version="2.13.0+cpu", cpu_bf16="native")
    assert "AMD EPYC, bf16 native, 2 cores" in hw.key()
    assert hw.key() != hw.model_copy(update=dict(cpu_bf16="emulated")).key()
    older = hw.model_copy(update=dict(cpu_bf16=None))
    rec = TrialRecord.from_attrs({"hardware": older.key(), "machine": older.model_dump(mode="json")})
    assert rec.on(hw)  # written before cpu_bf16: unknown, not different
    assert not rec.on(hw.model_copy(update=dict(cpu_count=4)))
    rec_other = TrialRecord.from_attrs({"hardware": hw.model_copy(update=dict(cpu_bf16="emulated")).key(),
                                        "machine": hw.model_copy(update=dict(cpu_bf16="emulated")).model_dump(mode="json")})
    assert not rec_other.on(hw)


def test_written_and_read_back_through_a_real_storage(tmp_path):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'r.db'}", directions=["minimize"] * 2)
    trial = study.ask()
    TrialRecord.write(trial, status="ok", tokens_per_s=1234.5, search_gpu_hours=0.5,
                      controller={"host": "h", "pid": 7}, memory_point={
                          "hardware": "cpu:x", "engine": "ddp", "analytic_bytes": 10, "measured_bytes": 20})
    study.tell(trial, [1.0, 2.0])
    rec = TrialRecord.of(study.trials[0])
    assert (rec.status, rec.tokens_per_s, rec.controller.pid, rec.memory_point.measured_bytes) == \
        ("ok", 1234.5, 7, 20)
    assert rec.launched
    # Stored one attribute per field, plain JSON (optuna-dashboard shows them as they are).
    assert study.trials[0].user_attrs["controller"] == {"host": "h", "pid": 7, "start_ticks": None}


def test_the_writer_refuses_what_the_record_does_not_hold():
    with pytest.raises(TypeError, match="not TrialRecord fields: colour"):
        TrialRecord.attrs(colour="blue")
    with pytest.raises(ValueError):
        TrialRecord.attrs(status="exploded")  # not a way a trial can end


def test_a_reader_keeps_the_good_attributes_of_a_damaged_record():
    rec = TrialRecord.from_attrs({"status": "ok", "tokens_per_s": "fast", "hardware": "cpu:x",
                                  "an_attribute_of_another_tool": 1})
    assert rec.status == "ok" and rec.hardware == "cpu:x" and rec.tokens_per_s is None


def test_reuse_copies_the_measurement_and_keeps_its_own_provenance():
    src = TrialRecord.from_attrs({"status": "ok", "tokens_per_s": 10.0, "trial_dir": "/runs/trial_0000",
                                  "config_key": "k", "hardware": "cpu:x", "local_move_from": 3,
                                  "search_gpu_hours": 0.2, "baseline": True})
    assert set(src.measurement()) == {"status", "tokens_per_s", "trial_dir"}
