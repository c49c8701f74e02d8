"""Where memory binds, with real trials: a sweep on 2 CPU ranks whose per-rank limit lets
2 ranks run at micro-batch 4 but not at 16 (the first baseline). Before issue 28 the sweep
held back every 2-rank proposal after that first out-of-memory and re-measured 1-rank
configs; now it scans down the micro-batch and measures a 2-rank config that fits (named
fastest where this machine runs 2 ranks faster than 1, as a quiet 2-core machine does).

The model's logits dominate its activations (a large vocabulary), so a rank's peak grows by
tens of MiB per sample and the limit between micro-batch 4 and 16 is clear of the runs'
spread. The limit is derived from a real trial on this machine, never hard-coded."""

from __future__ import annotations

import pytest

from autotune.contract import GPTShape, GPTWorkload, TrialConfig
from autotune.record import TrialRecord
from autotune.spec import SweepSpec

# It asks which config runs fastest: another test file's trials beside it (the suite runs several
# files at a time) take a core from its 2-rank trials, not from the 1-rank ones, and tip the
# answer (it failed so in full runs). So it runs with no other file beside it.
pytestmark = pytest.mark.alone

SHAPE = GPTShape(n_layers=1, d_model=64, n_heads=2, vocab_size=16384, max_seq_len=64)


@pytest.mark.e2e
def test_a_sweep_where_memory_binds_names_a_two_rank_config_fastest(tmp_path):
    from autotune.report.build import build_report
    from autotune.run.launch import run_trial
    from autotune.search.calibration import measured_peak_bytes
    from autotune.search.study import open_study
    from autotune.search.sweep import run_sweep

    workload = GPTWorkload(preset=None, shape=SHAPE)
    probe = run_trial(TrialConfig(workload=workload, seq_len=64, num_gpus=2, micro_batch_size=4,
                                  warmup_steps=1, measure_steps=1, max_measure_steps=1,
                                  min_measure_s=0.0, timeout_s=240), tmp_path / "probe")
    assert probe.ok, probe.error
    peak4, _ = measured_peak_bytes(probe)
    # Micro-batch 4 fits with room; 16 (the first baseline: 12 more samples' logits, tens of
    # MiB each) does not.
    limit = int(peak4 * 1.10)

    space = tmp_path / "space.yaml"
    space.write_text("num_gpus: [1, 2]\nmicro_batch_size: [1, 2, 4, 16]\nprecision: [fp32]\n"
                     "checkpointing: [none]\n")
    spec = SweepSpec.model_validate(dict(
        workload=workload, seq_len=64, space=str(space),
        trial=dict(warmup_steps=1, measure_steps=2, max_measure_steps=2, min_measure_s=0.0, timeout_s=240),
        memory=dict(limit_bytes_per_rank=limit),
        storage=f"sqlite:///{tmp_path / 'db.sqlite'}", study="binds"))
    study = open_study(spec.storage, spec.study)
    summary = run_sweep(spec, study, n_trials=6, runs_dir=tmp_path / "runs")
    records = [TrialRecord.of(t) for t in study.trials]
    launched = [r for r in records if r.launched]
    assert summary.trials_run == 6 and not [r for r in launched if r.status == "crash"]
    two_rank_oom = [r for r in launched if r.status == "oom" and r.config["num_gpus"] == 2]
    assert two_rank_oom, "the premise: a 2-rank config measured over the limit"
    # After the 2-rank out-of-memory, the sweep scanned down and measured a 2-rank config
    # that fits (before issue 28 it held every 2-rank proposal back for the rest of the budget).
    two_rank_ok = [r for r in launched if r.status == "ok" and r.config["num_gpus"] == 2]
    assert two_rank_ok and all(r.peak_mem_bytes <= limit for r in two_rank_ok)
    doc = build_report(study)
    fastest = next(r for t, r in zip(study.trials, records) if t.number == doc.fastest.trial)
    assert fastest.peak_mem_bytes <= limit
    # The report's fastest is its quickest option within the limits, by the hours it prices
    # from what was measured here; or, where that one's runs peaked too near the limit, one
    # with headroom that takes at most GIVE_WAY_AFTER_OOM longer, and a note says so.
    from autotune.report.picks import GIVE_WAY_AFTER_OOM, headroom_note_start
    from autotune.search.verdict import runs_fit

    fits = runs_fit(study.get_trials())
    quickest = min((o for o in doc.options if o.feasible), key=lambda o: (o.hours, o.usd))
    if (doc.fastest.trial, doc.fastest.offer) != (quickest.trial, quickest.offer):
        assert not fits[quickest.trial].headroom, (doc.fastest, quickest)
        assert doc.fastest.trial not in fits or fits[doc.fastest.trial].headroom
        assert doc.fastest.hours <= quickest.hours * (1 + GIVE_WAY_AFTER_OOM), (doc.fastest, quickest)
        assert f"{headroom_note_start('time')}{doc.fastest.trial} is recommended over trial " \
               f"{quickest.trial}" in " ".join(doc.notes), doc.notes
    # Which is faster is this machine's answer (on a quiet 2-core machine 2 ranks are; on a
    # busy one they may not be): where 2 ranks measured clearly faster, the pick has 2.
    one_rank_tps = max((r.tokens_per_s for r in launched if r.status == "ok" and r.config["num_gpus"] == 1),
                       default=0.0)
    if max(r.tokens_per_s for r in two_rank_ok) > 1.1 * one_rank_tps:
        assert fastest.config["num_gpus"] == 2, doc.fastest

    # `autotune export` of the pick: bill.md says how its config's runs met the limit and how
    # likely the long run is to fit; where that is short of headroom, the export says so too.
    import os
    import subprocess
    import sys

    from autotune.format import fmt_bytes

    out = tmp_path / "launch"
    p = subprocess.run([sys.executable, "-m", "autotune.cli", "export", "--pick", "fastest", "--out", str(out),
                        "--study", spec.study, "--storage", spec.storage],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 0, p.stdout + p.stderr
    fit = runs_fit(study.get_trials())[doc.fastest.trial]
    bill = (out / "bill.md").read_text()
    assert f"the memory limit {fmt_bytes(limit)} per rank; one more run (the long run) fits with " \
           f"{fit.p_run:.0%} chance" in bill, bill
    assert ("**Little headroom**" in bill) == (not fit.headroom) == ("little memory headroom" in p.stdout), p.stdout
