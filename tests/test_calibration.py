"""The overhead fit, its storage with the study (resume keeps it) and the prescreen verdict.

Studies here are real Optuna studies on a real SQLite file; points are written as trials'
user attributes exactly as the objective writes them. The real-trial path (a sweep that
records measured peaks and fits them) is in tests/test_prescreen.py.
"""

from __future__ import annotations

import pytest

from autotune.contract import DeviceKind, GPTShape, GPTWorkload, HardwareFingerprint, Precision, TrialConfig
from autotune.search.calibration import (
    CALIBRATION_ATTR,
    P_HOLD,
    CalibrationPoint,
    MemoryGuard,
    device_limit_bytes,
    fit_calibration,
)

MB = 2**20
CPU = HardwareFingerprint(device_kind=DeviceKind.cpu, cpu_model="test-cpu", cpu_count=2,
                          host_memory_bytes=16 * 2**30)


def test_fit_recovers_constant_per_engine_and_slope():
    pts = [CalibrationPoint(a * MB, 300 * MB + 1.3 * a * MB, "ddp") for a in (50, 120, 400, 900)]
    pts += [CalibrationPoint(a * MB, 550 * MB + 1.3 * a * MB, "deepspeed") for a in (80, 300)]
    fit = fit_calibration(pts, "hw")
    assert fit.scale == pytest.approx(1.3, rel=1e-6)
    assert fit.constant_bytes["ddp"] == pytest.approx(300 * MB, rel=1e-6)
    assert fit.constant_bytes["deepspeed"] == pytest.approx(550 * MB, rel=1e-6)
    assert fit.median_rel_error == pytest.approx(0, abs=1e-6)
    pred, basis = fit.predict(200 * MB, "ddp")
    assert pred == pytest.approx(300 * MB + 1.3 * 200 * MB, rel=1e-6) and "6 trials" in basis


def test_fit_separates_the_multi_rank_term():
    # Ranks in a process group pay for the communicator: 60 MiB each here.
    pts = [CalibrationPoint(a * MB, 300 * MB + 1.2 * a * MB, "ddp", ranks=1) for a in (50, 300)]
    pts += [CalibrationPoint(a * MB, 360 * MB + 1.2 * a * MB, "ddp", ranks=2) for a in (80, 500)]
    fit = fit_calibration(pts, "hw")
    assert fit.distributed_bytes == pytest.approx(60 * MB, rel=1e-6)
    assert fit.predict(100 * MB, "ddp", ranks=4)[0] == pytest.approx(480 * MB, rel=1e-6)
    assert fit.predict(100 * MB, "ddp", ranks=1)[0] == pytest.approx(420 * MB, rel=1e-6)
    # only single-rank trials so far: no multi-rank term is invented
    assert fit_calibration(pts[:2], "hw").distributed_bytes is None


def test_fit_with_few_points_is_a_constant_not_an_extrapolated_slope():
    one = fit_calibration([CalibrationPoint(100 * MB, 420 * MB, "ddp")], "hw")
    assert one.scale == 1.0 and one.constant_bytes["ddp"] == pytest.approx(320 * MB)
    # same analytic figure twice: no spread to fit a slope on
    flat = fit_calibration([CalibrationPoint(100 * MB, m * MB, "ddp") for m in (400, 440, 420)], "hw")
    assert flat.scale == 1.0 and flat.basis.startswith("constant per engine")
    # an engine never measured borrows the largest known constant (the cautious side)
    pred, basis = one.predict(10 * MB, "deepspeed")
    assert pred == 330 * MB and basis == "calibrated on 1 trial; no deepspeed trial yet, so ddp's constant (the largest)"
    assert flat.predict(10 * MB, "ddp")[1].startswith("calibrated on 3 trials (constant per engine")
    assert fit_calibration([], "hw") is None


def test_a_fit_that_would_predict_a_peak_below_zero_is_no_fit():
    # The analytic figure 50-200x the measured peak, with spread: even the smallest slope allowed
    # leaves a constant so negative that the fit predicts a negative peak for a trial it was
    # fitted on. Found replaying a stand-in truth whose trials ran a smaller model than the
    # spec's; before, the sweep stopped there with a math domain error.
    pts = [CalibrationPoint(a * 1000 * MB, m * MB, "ddp") for a, m in ((20, 400), (40, 410), (80, 420))]
    assert fit_calibration(pts, "hw") is None
    # The same spread with the analytic figure near the peaks fits as before.
    near = [CalibrationPoint(a * MB, m * MB, "ddp") for a, m in ((200, 400), (400, 610), (800, 1020))]
    assert fit_calibration(near, "hw") is not None


def test_fit_minimises_relative_error():
    # Noisy points: the fit's median relative error is small and never worse than the raw model.
    import random

    rng = random.Random(0)
    pts = [CalibrationPoint(a * MB, (350 * MB + 1.1 * a * MB) * (1 + rng.uniform(-0.05, 0.05)), "ddp")
           for a in (20, 60, 150, 300, 600, 1200)]
    fit = fit_calibration(pts, "hw")
    assert fit.median_rel_error < 0.05
    assert 1.0 < fit.scale < 1.25


def _tiny_cfg(mb: int) -> TrialConfig:
    shape = GPTShape(n_layers=1, d_model=64, n_heads=2, vocab_size=16384, max_seq_len=64)
    return TrialConfig(workload=GPTWorkload(preset=None, shape=shape), seq_len=64, micro_batch_size=mb,
                       precision=Precision.fp32)


def test_calibration_is_stored_with_the_study_and_kept_on_resume(tmp_path):
    import optuna

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    study = optuna.create_study(study_name="s", storage=url, directions=["minimize", "minimize"])
    guard = MemoryGuard(CPU)
    for analytic, measured in ((50, 380), (200, 560), (700, 1120)):
        t = study.ask()
        t.set_user_attr("memory_point", {"hardware": CPU.key(), "engine": "ddp",
                                     "analytic_bytes": analytic * MB, "measured_bytes": measured * MB})
        study.tell(t, [1.0, 1.0])
    # another machine's points never enter this hardware's fit
    t = study.ask()
    t.set_user_attr("memory_point", {"hardware": "cuda:H100", "engine": "ddp",
                                 "analytic_bytes": 1e9, "measured_bytes": 9e9})
    study.tell(t, [1.0, 1.0])
    fit = guard.load(study)
    assert fit.n_points == 3
    guard.save(study)

    resumed = optuna.load_study(study_name="s", storage=url)
    stored = resumed.user_attrs[CALIBRATION_ATTR][CPU.key()]
    assert stored["n_points"] == 3 and stored["scale"] == pytest.approx(fit.scale)
    again = MemoryGuard(CPU)
    assert again.load(resumed).model_dump() == fit.model_dump()
    # a study that holds only the stored fit (its trials elsewhere) still uses it
    bare = optuna.create_study(study_name="bare", storage=url, directions=["minimize", "minimize"])
    bare.set_user_attr(CALIBRATION_ATTR, resumed.user_attrs[CALIBRATION_ATTR])
    assert MemoryGuard(CPU).load(bare).model_dump() == fit.model_dump()


def test_prescreen_verdicts_uncalibrated_and_calibrated():
    limit = 600 * MB
    guard = MemoryGuard(CPU, limit_bytes_per_rank=limit, safety_margin=0.1)
    small, big = guard.predict(_tiny_cfg(1)), guard.predict(_tiny_cfg(64))
    # uncalibrated: the analytic figure is a lower bound; only what cannot fit is held back
    assert small.launch and small.basis.startswith("not calibrated")
    assert not big.launch and big.predicted_bytes > limit
    assert big.estimate.as_dict()["activations_bytes"] > 0
    # calibrated with a runtime constant of 500 MiB: the small one fits, with the margin
    guard.fit = fit_calibration([CalibrationPoint(20 * MB, 520 * MB, "ddp")], CPU.key())
    v = guard.predict(_tiny_cfg(1))
    assert v.predicted_bytes == pytest.approx(500 * MB + v.estimate.analytic_bytes, rel=1e-6)
    assert v.limit_bytes == int(limit / (1 + guard.margin))  # the headroom comes off the limit
    assert v.predicted_bytes < v.limit_bytes and v.p_fit > 0.5
    assert v.launch and v.p_fit >= P_HOLD
    assert v.estimate.as_dict()["detail"]["overhead_bytes"] == pytest.approx(500 * MB, rel=1e-6)

    # The rule is a probability to fit (>= P_HOLD), not "predicted + margin under the limit":
    # a calibrated peak 1% over the headroom line may still fit, one 8% over hardly can.
    def calibrated_to(peak: float):
        # one point: the constant is its measured - analytic, so the config's analytic figure
        # (`small.predicted_bytes`, uncalibrated) + that constant is `peak`
        guard.fit = fit_calibration([CalibrationPoint(20 * MB, 20 * MB + peak - small.predicted_bytes,
                                                      "ddp")], CPU.key())
        return guard.predict(_tiny_cfg(1))

    near = calibrated_to(v.limit_bytes * 1.01)
    assert near.predicted_bytes * (1 + guard.margin) > limit  # a fixed margin would hold it back
    assert P_HOLD <= near.p_fit < 0.5 and near.launch
    over = calibrated_to(v.limit_bytes * 1.08)
    assert over.predicted_bytes <= limit  # under the bare limit, but unlikely to fit its headroom
    assert over.p_fit < P_HOLD and not over.launch
    # An engine with no trial yet is predicted with the largest known constant, but held back
    # only when its analytic lower bound cannot fit: a borrowed constant would otherwise keep
    # it from ever being measured and calibrated.
    guard.fit = fit_calibration([CalibrationPoint(20 * MB, 700 * MB, "deepspeed")], CPU.key())
    ddp = guard.predict(_tiny_cfg(1))
    assert ddp.predicted_bytes > limit and ddp.launch and "no ddp trial yet" in ddp.basis
    assert not guard.predict(_tiny_cfg(64)).launch  # its lower bound alone is over the limit
    # disabled prescreen: predicts, never holds back
    assert MemoryGuard(CPU, limit_bytes_per_rank=limit, enabled=False).predict(_tiny_cfg(64)).launch


def test_device_limit():
    assert device_limit_bytes(CPU, 2, None) == 8 * 2**30  # ranks share host memory
    assert device_limit_bytes(CPU, 2, 2**30) == 2**30  # a smaller emulated device wins
    gpu = HardwareFingerprint(device_kind=DeviceKind.cuda, device_name="H100", device_memory_bytes=80 * 10**9)
    assert device_limit_bytes(gpu, 8, None) == 80 * 10**9


def test_the_analytic_figure_is_a_lower_bound_only_as_low_as_the_engines_trials_came():
    """The analytic figure counts what the model holds; a runtime may hold less (FSDP2 on CPU
    came in 24% under it). Until a trial of the engine has, a config whose figure alone is over
    the limit is held back whatever the calibration says; after, the bound is the figure times
    the lowest measured / analytic of the engine's trials (a 2-rank FSDP2 config 16% under the
    limit was held back before)."""
    cfg = _tiny_cfg(32)
    analytic = MemoryGuard(CPU).predict(cfg).predicted_bytes  # uncalibrated: the analytic figure
    limit = int(analytic * 0.93)
    guard = MemoryGuard(CPU, limit_bytes_per_rank=limit)

    def fitted(*extra: CalibrationPoint):
        # peak = 0.12 * analytic + 0.7 * a: slope under 1, so the calibrated figure is well
        # under the limit; these three points are all measured at or over their own figures
        pts = [CalibrationPoint(a, 0.12 * analytic + 0.7 * a, "ddp") for a in (0.1 * analytic, 0.2 * analytic,
                                                                                0.3 * analytic)]
        guard.fit = fit_calibration(pts + list(extra), CPU.key())
        assert guard.fit.scale == pytest.approx(0.7)
        return guard.predict(cfg)

    held = fitted()
    assert held.predicted_bytes < limit * 0.9 and guard.fit.analytic_floor == {}
    assert held.p_fit == 0.0 and not held.launch and "lower bound alone" in held.basis
    # one ddp trial came in at 0.83x its analytic figure: the bound is 0.83x this config's, under the limit
    a = 0.9 * analytic
    freed = fitted(CalibrationPoint(a, 0.12 * analytic + 0.7 * a, "ddp"))
    assert guard.fit.analytic_floor["ddp"] == pytest.approx(0.12 / 0.9 + 0.7)
    assert freed.launch and freed.p_fit >= P_HOLD and "lower bound alone" not in freed.basis
    # one that came in at 0.97x: the bound is still over the limit (0.93x)
    a = 0.12 * analytic / 0.27  # on the line, at 0.97x its figure
    near = fitted(CalibrationPoint(a, 0.12 * analytic + 0.7 * a, "ddp"))
    assert guard.fit.analytic_floor["ddp"] == pytest.approx(0.97)
    assert near.p_fit == 0.0 and not near.launch
    # another engine's trial under its figure says nothing about this one's
    a = 0.9 * analytic
    other = fitted(CalibrationPoint(a, 0.12 * analytic + 0.7 * a, "fsdp2"))
    assert list(guard.fit.analytic_floor) == ["fsdp2"] and other.p_fit == 0.0 and not other.launch
