"""A prescreened sweep against an unscreened one on the same space: real trials, real study.

The space: a GPT with a large vocabulary (its logits dominate memory) at micro-batch 1, 4
and 64, on an emulated device (`memory.limit_bytes_per_rank`) whose limit is derived from a
real trial on this machine (micro-batch 4 peaks under it with room), never hard-coded. Both
sweeps are offered the same three configs in the same order. The unscreened sweep launches
all three; micro-batch 64 measures over the limit and counts as out of memory. The
prescreened sweep never launches it (PRUNED with its predicted breakdown and an infeasible
constraint), so it launches fewer trials and finds the same best config. Every completed
trial records predicted vs measured peak memory and the study stores the fitted calibration.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.contract import GPTShape, GPTWorkload
from autotune.record import TrialRecord
from autotune.search.calibration import CALIBRATION_ATTR
from autotune.spec import SweepSpec

SHAPE = GPTShape(n_layers=1, d_model=64, n_heads=2, vocab_size=16384, max_seq_len=64)
MICRO_BATCHES = (1, 4, 64)


def _limit(tmp_path: Path) -> int:
    """The emulated device's limit per rank: 10% over micro-batch 4's peak measured here (a
    rank's resident set is mostly this machine's Python + torch runtime). Micro-batch 64 adds
    60 samples' logits and their gradients, tens of MiB each: far over it."""
    from autotune.contract import TrialConfig
    from autotune.run.launch import run_trial
    from autotune.search.calibration import measured_peak_bytes

    probe = run_trial(TrialConfig(workload=GPTWorkload(preset=None, shape=SHAPE), seq_len=64, num_gpus=1,
                                  micro_batch_size=4, warmup_steps=1, measure_steps=1, max_measure_steps=1,
                                  min_measure_s=0.0, timeout_s=240), tmp_path / "probe")
    assert probe.ok, probe.error
    peak4, _ = measured_peak_bytes(probe)
    assert peak4
    return int(peak4 * 1.10)


def _spec(tmp_path: Path, name: str, prescreen: bool, limit: int) -> SweepSpec:
    space = tmp_path / "space.yaml"
    space.write_text(f"num_gpus: [1]\nmicro_batch_size: {list(MICRO_BATCHES)}\n"
                     "precision: [fp32]\ncheckpointing: [none]\n")
    return SweepSpec.model_validate(dict(
        workload=GPTWorkload(preset=None, shape=SHAPE), seq_len=64, space=str(space),
        trial=dict(warmup_steps=1, measure_steps=1, max_measure_steps=1, timeout_s=240),
        memory=dict(limit_bytes_per_rank=limit, prescreen=prescreen),
        # No re-measuring: the trial the prescreen saves would otherwise go to a repeat of the
        # two configs measured once (autotune.search.racing), and this test counts launches.
        budget=dict(remeasure_trials=0),
        storage=f"sqlite:///{tmp_path / 'db.sqlite'}", study=name))


def _sweep(tmp_path: Path, name: str, prescreen: bool, limit: int):
    from autotune.search.study import open_study
    from autotune.search.sweep import run_sweep

    spec = _spec(tmp_path, name, prescreen, limit)
    study = open_study(spec.storage, spec.study)
    for mb in MICRO_BATCHES:  # the same proposals, in the same order, for both sweeps
        study.enqueue_trial({"num_gpus": 1, "micro_batch_size": mb, "grad_accum_steps": 1,
                             "precision": "fp32", "checkpointing": "none"})
    runs = tmp_path / "runs" / name
    outcomes = []
    run_sweep(spec, study, n_trials=len(MICRO_BATCHES), runs_dir=runs, on_trial=outcomes.append)
    launched = sorted(p.parent.name for p in runs.glob("trial_*/command.json"))
    # (run_sweep also queues its baseline configs: the same configs, so they reuse)
    # What the sweep's progress counts as run here (autotune.report.progress): the trials that
    # launched, not the held back or reused ones (before, a prescreened one counted as run).
    assert sorted(f"trial_{o.number:04d}" for o in outcomes if o.launched) == launched, outcomes
    return study, launched


def _trials(study) -> dict:
    # (a proposal of a config already tried reuses that trial's record: not its own config)
    return {t.user_attrs["config"]["micro_batch_size"]: t for t in study.trials
            if "config" in t.user_attrs and "reused_from" not in t.user_attrs}


def _best(study) -> int:
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    return min(done, key=lambda t: t.values[0]).user_attrs["config"]["micro_batch_size"]


@pytest.mark.e2e
def test_prescreened_sweep_launches_fewer_trials_and_finds_the_same_best(tmp_path):
    limit = _limit(tmp_path)
    plain, plain_launched = _sweep(tmp_path, "plain", prescreen=False, limit=limit)
    screened, screened_launched = _sweep(tmp_path, "screened", prescreen=True, limit=limit)

    by_mb = _trials(plain)
    # Unscreened: all three ran; micro-batch 64 really measured over the emulated device.
    assert len(plain_launched) == 3
    over = by_mb[64]
    assert over.state.name == "PRUNED" and over.user_attrs["status"] == "oom"
    assert "exceeds the memory limit" in over.user_attrs["error"]
    assert TrialRecord.of(over).memory_point.measured_bytes > limit  # a real measurement, recorded

    # Prescreened: micro-batch 64 was never launched, and says why.
    s_by_mb = _trials(screened)
    held = s_by_mb[64]
    assert held.state.name == "PRUNED" and held.user_attrs["status"] == "prescreened"
    pre = TrialRecord.of(held).memory_prescreen
    assert pre.launch is False and pre.predicted_bytes > limit
    assert pre.breakdown["activations_bytes"] > 0 and pre.breakdown["total_bytes"] > 0
    assert [v for k, v in held.system_attrs.items() if k.endswith(":feasible")] == [1.0]
    assert len(screened_launched) == 2 < len(plain_launched)
    assert f"trial_{held.number:04d}" not in screened_launched

    # The prescreen held back only what does not fit: every config the unscreened sweep
    # measured within the limit, its best among them, the screened sweep measured too.
    # (Which of micro-batch 1 and 4 is faster is a timing race on a shared 2-core machine, so
    # the two sweeps' bests are not compared directly.)
    def completed(study) -> list[int]:
        return sorted(mb for mb, t in _trials(study).items() if t.state.name == "COMPLETE")

    assert completed(screened) == completed(plain) == [1, 4]

    # Calibration: completed trials carry predicted vs measured; the study stores the fit.
    for t in (s_by_mb[1], s_by_mb[4]):
        point = TrialRecord.of(t).memory_point
        assert point.measured_bytes > 0 and point.predicted_bytes > 0
    fit = screened.user_attrs[CALIBRATION_ATTR]
    (key,) = fit.keys()
    assert fit[key]["n_points"] == 2
    # The second trial was predicted by the fit on the first, and that fit is close.
    second = TrialRecord.of(s_by_mb[4]).memory_point
    assert abs(second.rel_error) < 0.10
    print(f"\nunscreened: {len(plain_launched)} launched, best micro-batch {_best(plain)}; "
          f"prescreened: {len(screened_launched)} launched, best micro-batch {_best(screened)}; "
          f"mb64 measured {TrialRecord.of(over).memory_point.measured_bytes / 2**20:.0f} MiB, "
          f"predicted {pre.predicted_bytes / 2**20:.0f} MiB ({pre.basis}), limit {limit / 2**20:.0f} MiB")
