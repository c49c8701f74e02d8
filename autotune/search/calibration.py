"""Keep the memory model honest on this hardware: fit its overhead from the study's own
trials, and prescreen configurations with the calibrated model before launching them.

    guard = MemoryGuard(hw, spec.memory.limit_bytes_per_rank, spec.memory.safety_margin)
    verdict = guard.prescreen(trial, cfg, fits.p_fit)   # loads (and refits) the calibration
    if not verdict.launch: guard.record_prescreened(trial, verdict)   # unlikely to fit: PRUNED
    result = guard.after_trial(trial, cfg, verdict, result)            # a calibration point

The fit. Measured peak per rank = c[engine] + d[ranks > 1] + s * analytic, where `analytic`
is everything `autotune.estimate.memory` counts. The constant is what a runtime costs
whatever the model: the CUDA context or, on CPU, the Python + torch (+ DeepSpeed) process;
it differs by engine (DeepSpeed imports and allocates more; ZeRO-3 more again), hence one per
engine group (`calibration_group`: ddp, deepspeed, deepspeed-zero3); d is
what running in a process group adds per rank (communicator, its buffers and threads). The
slope is what grows with the bytes allocated: allocator rounding and fragmentation, the
caching allocator's slack, copies the model does not count. Three kinds of term, few
parameters, because a study has few trials. Weighted least squares minimises the
*relative* error (weights 1/measured), the figure that matters when configs span an
order of magnitude of memory. With too few points or too little spread, the slope is
fixed at 1 (overhead = a constant) rather than extrapolated from noise.

The fit is stored in the study's user attributes under `memory_calibration`, keyed by the
hardware key, so a resumed study on the same hardware keeps it; its points live in the
trials' own records (`TrialRecord.memory_point`), so workers on several machines never
overwrite each other's data, and each refit uses every point of this hardware.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

from autotune.contract import DeviceKind, HardwareFingerprint, TrialConfig, TrialResult, TrialStatus
from autotune.estimate.memory import MemoryConfig, MemoryEstimate, estimate_memory
from autotune.estimate.workload import model_shape_for
from autotune.format import fmt_bytes
from autotune.record import MemoryPointRecord, TrialRecord

# How sure the prescreen is that a config fits (autotune.search.fit weighs these).
# Below this probability of fitting a proposal is held back (not launched, costs no trial).
P_HOLD = 0.2
# A measured config fits when this probability that its median peak is under the limit holds.
P_FITS = 0.5
# Prior sd of log peak between runs of one config, until the study's own repeats say more: a CPU
# rank's resident set varies with the allocator's and the OS's timing, a GPU allocator's peak
# hardly (docs/benchmarks.md, "Memory: how peaks vary between runs").
PRIOR_SD_RUN = {DeviceKind.cpu: 0.03, DeviceKind.cuda: 0.005}
# Prior sd of log (measured / calibrated prediction) for a config not yet measured: the
# calibration's errors on configs it had not seen (docs/benchmarks.md, the memory model
# section: leave-one-out errors on CPU, the H200 sweep's predictions on GPU).
PRIOR_SD_MODEL = {DeviceKind.cpu: 0.05, DeviceKind.cuda: 0.10}
PRIOR_DOF = 2.0  # weight of each prior, in points' worth
# sd of log error for an engine with no trial yet, predicted with another engine's constant.
SD_BORROWED = 0.5


def normal_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


CALIBRATION_ATTR = "memory_calibration"  # study user attribute: {hardware key: CalibrationFit}
MIN_POINTS_FOR_SLOPE = 3
MIN_SPREAD_FOR_SLOPE = 1.15  # max/min analytic bytes; less and a slope is extrapolated noise
SLOPE_RANGE = (0.5, 4.0)


@dataclass(frozen=True)
class CalibrationPoint:
    analytic_bytes: float
    measured_bytes: float
    engine: str
    trial_number: int | None = None
    ranks: int = 1


class CalibrationFit(BaseModel):
    """A fitted overhead model for one hardware key:
    peak = constant_bytes[engine] + (distributed_bytes if ranks > 1) + scale * analytic."""

    model_config = ConfigDict(extra="forbid")

    hardware: str
    constant_bytes: dict[str, float]
    distributed_bytes: float | None = None  # None: no multi-rank trial (or no single-rank one) yet
    scale: float
    n_points: int
    median_rel_error: float
    max_under_prediction: float  # max over points of (measured - predicted) / predicted
    basis: str
    # Sum of squared log errors (measured / predicted) over the points, and the degrees of
    # freedom left after the fitted terms: what `sd_log` weighs against a prior. None in fits
    # stored by older versions.
    sum_sq_log_error: float | None = None
    resid_dof: int | None = None
    # Per engine whose trials came in under their analytic figures: the lowest measured / analytic
    # ratio. On this machine that engine's lower bound is the figure times it (MemoryGuard.predict).
    analytic_floor: dict[str, float] = {}

    def sd_log(self, prior: float, prior_dof: float) -> float:
        """sd of log (measured / predicted) for a config the fit has not seen: its residuals,
        shrunk toward `prior` with `prior_dof` points' weight (few points say little)."""
        ss, dof = prior_dof * prior * prior, prior_dof
        if self.sum_sq_log_error is not None and self.resid_dof:
            ss, dof = ss + self.sum_sq_log_error, dof + self.resid_dof
        return math.sqrt(ss / dof)

    def predict(self, analytic_bytes: float, engine: str, ranks: int = 1) -> tuple[int, str]:
        """Calibrated peak per rank and a phrase saying what it rests on."""
        on = f"calibrated on {self.n_points} trial{'' if self.n_points == 1 else 's'}"
        if engine in self.constant_bytes:
            c, basis = self.constant_bytes[engine], f"{on} ({self.basis})"
        else:  # no trial of this engine yet: the largest known constant (the cautious side)
            known = max(self.constant_bytes, key=lambda e: self.constant_bytes[e])
            c, basis = self.constant_bytes[known], f"{on}; no {engine} trial yet, so {known}'s constant (the largest)"
        if ranks > 1 and self.distributed_bytes is not None:
            c += self.distributed_bytes
        return int(round(c + self.scale * analytic_bytes)), basis


def _solve(rows: list[list[float]], targets: list[float]) -> list[float] | None:
    import numpy as np

    a, b = np.asarray(rows, dtype=float), np.asarray(targets, dtype=float)
    if a.shape[0] < a.shape[1] or np.linalg.matrix_rank(a) < a.shape[1]:
        return None
    return [float(x) for x in np.linalg.lstsq(a, b, rcond=None)[0]]


def fit_calibration(points: list[CalibrationPoint], hardware: str) -> CalibrationFit | None:
    """Weighted least squares for measured = c[engine] + d[ranks > 1] + s * analytic.

    Each row is divided by its measured figure, so the fit minimises relative error. The
    distributed term (communicator, process-group buffers: a per-rank cost of running more
    than one rank) is fitted only once both single- and multi-rank trials exist; the slope
    only with enough points and spread in the analytic figure (else it is fixed at 1).
    """
    points = [p for p in points if p.measured_bytes > 0 and p.analytic_bytes > 0]
    if not points:
        return None
    engines = sorted({p.engine for p in points})
    with_dist = len({p.ranks > 1 for p in points}) == 2
    n_const = len(engines) + (1 if with_dist else 0)
    analytic = [p.analytic_bytes for p in points]
    want_slope = (len(points) >= n_const + MIN_POINTS_FOR_SLOPE - 1
                  and max(analytic) / min(analytic) >= MIN_SPREAD_FOR_SLOPE)

    def const_row(p: CalibrationPoint) -> list[float]:
        row = [1.0 if p.engine == e else 0.0 for e in engines]
        return row + ([1.0 if p.ranks > 1 else 0.0] if with_dist else [])

    def solve(fit_slope: bool, scale: float) -> list[float] | None:
        rows = [[x / p.measured_bytes for x in const_row(p)]
                + ([p.analytic_bytes / p.measured_bytes] if fit_slope else []) for p in points]
        targets = [(p.measured_bytes - (0.0 if fit_slope else scale * p.analytic_bytes)) / p.measured_bytes
                   for p in points]
        return _solve(rows, targets)

    scale, basis, sol = 1.0, "constant per engine; slope fixed at 1", None
    if want_slope:
        sol = solve(True, 1.0)
        if sol is not None:
            lo, hi = SLOPE_RANGE
            scale = min(max(sol[-1], lo), hi)
            basis = "constant per engine + slope" + ("" if scale == sol[-1] else " (slope clamped)")
            if scale != sol[-1]:
                sol = None
            else:
                sol = sol[:-1]
    if sol is None:
        sol = solve(False, scale)
    if sol is None:  # rank-deficient (cannot happen with these columns; kept for safety)
        return None
    constants = {e: sol[i] for i, e in enumerate(engines)}
    dist = sol[len(engines)] if with_dist else None
    if with_dist:
        basis += " + multi-rank term"
    fit = CalibrationFit(hardware=hardware, constant_bytes=constants, distributed_bytes=dist,
                         scale=scale, n_points=len(points), median_rel_error=0.0,
                         max_under_prediction=0.0, basis=basis)
    lowest = {e: min(p.measured_bytes / p.analytic_bytes for p in points if p.engine == e) for e in engines}
    fit.analytic_floor = {e: r for e, r in lowest.items() if r < 1.0}
    preds = [fit.predict(p.analytic_bytes, p.engine, p.ranks)[0] for p in points]
    if min(preds) <= 0:
        # The analytic figure overestimates these peaks so far that even the smallest slope leaves
        # a negative constant: the fit does not describe these trials; no fit beats a wrong one.
        return None
    fit.median_rel_error = statistics.median(abs(q - p.measured_bytes) / p.measured_bytes
                                             for q, p in zip(preds, points))
    fit.max_under_prediction = max((p.measured_bytes - q) / q for q, p in zip(preds, points))
    fit.sum_sq_log_error = sum(math.log(p.measured_bytes / q) ** 2 for q, p in zip(preds, points))
    fit.resid_dof = max(0, len(points) - n_const - (1 if "slope" in basis else 0))
    return fit


def measured_peak_bytes(result: TrialResult) -> tuple[int | None, str]:
    """The measured peak per rank that a device limit is about, and its source.

    CUDA: the NVML device peak (context included) where sampled, else the allocator's
    reserved peak (what the caching allocator holds), else allocated. CPU: host RSS peak.
    """
    mem = result.memory
    for name in ("nvml_device_peak_bytes", "allocator_reserved_peak_bytes",
                 "allocator_allocated_peak_bytes", "host_rss_peak_bytes"):
        values = getattr(mem, name, None)
        if values:
            return int(max(values)), name
    if result.peak_mem_bytes:
        return int(result.peak_mem_bytes), result.peak_mem_source.value
    return None, "not measured"


def calibration_group(mcfg: MemoryConfig) -> str:
    """Which runtime constant a config shares: DDP, DeepSpeed ZeRO 0-2, ZeRO-3, whose
    gather / reduce-scatter machinery keeps buffers of its own (docs/benchmarks.md, the
    memory section, compares it with ZeRO-2 at the same config), or FSDP2."""
    engine = mcfg.resolved_engine
    group = f"{engine}-zero3" if engine == "deepspeed" and mcfg.zero_stage == 3 else engine
    # Compiled graphs keep other activations (and, on CPU, the compiler's own memory).
    return group + "-compiled" if mcfg.compile else group


@dataclass
class Verdict:
    launch: bool
    estimate: MemoryEstimate | None
    predicted_bytes: int | None  # calibrated when a fit exists, else the analytic figure
    limit_bytes: int | None  # what a rank may use: a config fits under it
    margin: float | None  # the spec's fixed headroom, if any (limit / (1 + margin) is used)
    basis: str
    engine: str
    ranks: int = 1
    p_fit: float = 1.0  # probability that a run stays under the limit (autotune.search.fit)

    def as_dict(self) -> dict[str, Any]:
        return {"launch": self.launch, "predicted_bytes": self.predicted_bytes,
                "limit_bytes": self.limit_bytes, "safety_margin": self.margin, "basis": self.basis,
                "engine": self.engine, "ranks": self.ranks, "p_fit": round(self.p_fit, 4),
                "breakdown": self.estimate.as_dict() if self.estimate is not None else None}


def device_limit_bytes(hw: HardwareFingerprint, num_ranks: int, spec_limit: int | None) -> int | None:
    """Memory one rank may use: the GPU's memory, or on CPU the host memory shared by the
    ranks; a smaller limit from the spec wins (e.g. to emulate a small device)."""
    if hw.device_kind is DeviceKind.cuda:
        limit = hw.device_memory_bytes
    else:
        limit = hw.host_memory_bytes // max(1, num_ranks) if hw.host_memory_bytes else None
    if spec_limit is not None:
        limit = spec_limit if limit is None else min(limit, spec_limit)
    return limit


class MemoryGuard:
    """The study's memory prescreen and calibration for one spec on one machine."""

    def __init__(self, hw: HardwareFingerprint, limit_bytes_per_rank: int | None = None,
                 safety_margin: float | None = None, enabled: bool = True):
        self.hw = hw
        self.hw_key = hw.key()
        self.spec_limit = limit_bytes_per_rank
        self.margin = safety_margin or None
        self.enabled = enabled
        self.fit: CalibrationFit | None = None

    # -- calibration state, stored with the study
    def load(self, study: Any) -> CalibrationFit | None:
        """Refit from every point of this hardware in the study; fall back to the stored fit."""
        points = study_points(study, self.hw)
        fit = fit_calibration(points, self.hw_key)
        if fit is None:
            stored = (study.user_attrs.get(CALIBRATION_ATTR) or {}).get(self.hw_key)
            fit = CalibrationFit.model_validate(stored) if stored else None
        self.fit = fit
        return fit

    def save(self, study: Any) -> None:
        if self.fit is None:
            return
        allfits = dict(study.user_attrs.get(CALIBRATION_ATTR) or {})
        allfits[self.hw_key] = self.fit.model_dump()
        study.set_user_attr(CALIBRATION_ATTR, allfits)

    # -- before a trial
    def fits_under(self, num_ranks: int) -> int | None:
        """The peak a rank's config must stay under: the device's limit, less the spec's fixed
        headroom when one is set."""
        limit = device_limit_bytes(self.hw, num_ranks, self.spec_limit)
        return None if limit is None or not self.margin else int(limit / (1 + self.margin))

    def predict(self, cfg: TrialConfig, sd_log_run: float | None = None) -> Verdict:
        """The calibrated peak per rank and the probability that it fits, from the model and
        the errors it has shown on this machine (`sd_log_run`: the spread of one config's
        peaks between runs, default the prior of autotune.search.fit)."""
        mcfg = MemoryConfig.from_trial_config(cfg)
        engine, ranks = calibration_group(mcfg), cfg.num_gpus * cfg.num_nodes
        model = model_shape_for(cfg.workload)
        limit = self.fits_under(cfg.num_gpus) or device_limit_bytes(self.hw, cfg.num_gpus, self.spec_limit)
        if model is None:
            return Verdict(True, None, None, limit, self.margin, "no model description: not prescreened",
                           engine, ranks)
        est = estimate_memory(model, mcfg)
        # On CPU offloaded state is host memory too: the rank holds all of it.
        cpu = self.hw.device_kind is DeviceKind.cpu
        analytic = est.analytic_bytes + (est.host_bytes if cpu else 0)
        sd_run = sd_log_run if sd_log_run is not None else PRIOR_SD_RUN[self.hw.device_kind]
        if self.fit is None:
            # No measurement yet: only the analytic figure, a lower bound (it leaves out the
            # runtime's own memory), so only configs certain not to fit are unlikely to.
            predicted, basis, p = analytic, "not calibrated yet: analytic lower bound", 1.0
        else:
            predicted, basis = self.fit.predict(analytic, engine, ranks)
            est = est.with_overhead(predicted - analytic, basis)
            if engine in self.fit.constant_bytes:
                sd = self.fit.sd_log(PRIOR_SD_MODEL[self.hw.device_kind], PRIOR_DOF)
            else:
                # No trial of this engine yet: the borrowed constant is a guess, so the chance
                # to fit is wide; a tight one would keep the engine from ever being measured.
                sd = SD_BORROWED
            sd = math.hypot(sd, sd_run)
            basis += f"; error sd {sd:.1%} (log) from this machine's calibration errors"
            p = 1.0 if limit is None else normal_cdf(math.log(limit / max(1, predicted)) / sd)
        # The analytic figure is a lower bound until this engine's trials come in under theirs (no
        # strict bound: docs/benchmarks.md, memory); then the bound is as low as they came.
        floor = (self.fit.analytic_floor.get(engine, 1.0) if self.fit is not None else 1.0) * analytic
        if limit is not None and floor > limit:
            p = 0.0
            if self.fit is not None:  # uncalibrated, the prediction is this bound and its basis says so
                basis += f"; its lower bound alone, {fmt_bytes(floor)}, is over the limit"
        if self.margin:
            basis += f"; fixed headroom {self.margin:.0%} below the limit (memory.safety_margin)"
        return Verdict(p >= P_HOLD or not self.enabled, est, int(predicted), limit, self.margin, basis,
                       engine, ranks, p_fit=p)

    def prescreen(self, trial: Any, cfg: TrialConfig, p_fit: Callable[[TrialConfig], float] | None = None) -> Verdict:
        """Load the study's calibration, predict, and decide: launched unless unlikely to fit.
        `p_fit`: the sweep's fit model (autotune.search.fit.FitModel.p_fit), which adds what
        the config's own runs and its neighbours' say to the prediction."""
        self.load(trial.study)
        verdict = self.predict(cfg)
        if p_fit is not None and verdict.estimate is not None:
            verdict.p_fit = p_fit(cfg)
            verdict.launch = verdict.p_fit >= P_HOLD or not self.enabled
        TrialRecord.write(trial, memory_prescreen=verdict.as_dict())
        return verdict

    def record_prescreened(self, trial: Any, verdict: Verdict) -> TrialResult:
        """What a config held back looks like: a result that says it was never launched."""
        msg = (f"not launched: predicted peak {fmt_bytes(verdict.predicted_bytes)} per rank "
               f"against the limit {fmt_bytes(verdict.limit_bytes)}: {verdict.p_fit:.0%} chance to "
               f"fit ({verdict.basis})")
        TrialRecord.write(trial, status="prescreened", error=f"PredictedOOM: {msg}")
        return TrialResult(status=TrialStatus.oom, error_type="PredictedOOM", error=msg,
                           notes=["prescreened: memory estimated, not measured"])

    # -- after a trial
    def after_trial(self, trial: Any, cfg: TrialConfig, verdict: Verdict, result: TrialResult) -> TrialResult:
        """Record predicted vs measured, refit and store the calibration; on an emulated
        device (a limit from the spec), a measured peak over the limit is an OOM."""
        measured, source = measured_peak_bytes(result)
        if result.ok and measured and verdict.estimate is not None:
            cpu = self.hw.device_kind is DeviceKind.cpu
            analytic = verdict.estimate.analytic_bytes + (verdict.estimate.host_bytes if cpu else 0)
            TrialRecord.write(trial, memory_point=MemoryPointRecord(
                hardware=self.hw_key, engine=verdict.engine, ranks=verdict.ranks,
                analytic_bytes=analytic, predicted_bytes=verdict.predicted_bytes,
                measured_bytes=measured, measured_source=source,
                rel_error=(verdict.predicted_bytes - measured) / measured if verdict.predicted_bytes else None))
            points = [p for p in study_points(trial.study, self.hw) if p.trial_number != trial.number]
            points.append(CalibrationPoint(analytic, measured, verdict.engine, trial.number, verdict.ranks))
            self.fit = fit_calibration(points, self.hw_key)
            self.save(trial.study)
        if (result.ok and measured and self.spec_limit is not None and verdict.limit_bytes is not None
                and measured > verdict.limit_bytes):
            return result.model_copy(update=dict(
                status=TrialStatus.oom, error_type="OverMemoryLimit",
                error=f"measured peak {fmt_bytes(measured)} ({source}) exceeds the memory limit "
                      f"{fmt_bytes(verdict.limit_bytes)} per rank set in the spec"
                      + (f" (its limit less safety_margin {self.margin:.0%})" if self.margin else "")))
        return result


def study_points(study: Any, hw: HardwareFingerprint) -> list[CalibrationPoint]:
    """Every calibration point of this hardware recorded by the study's trials."""
    out = []
    for t in study.get_trials(deepcopy=False):
        rec = TrialRecord.of(t)
        p = rec.memory_point
        if (p and (p.hardware == hw.key() or (p.hardware == hw.kind_key() and rec.on(hw)))
                and p.measured_bytes and p.analytic_bytes):
            out.append(CalibrationPoint(float(p.analytic_bytes), float(p.measured_bytes),
                                        p.engine, t.number, p.ranks))
    return out


def relative_error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured if measured else math.nan
