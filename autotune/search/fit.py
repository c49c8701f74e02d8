"""What fits in memory, learnt from every trial: a probability per config, never a cut.

    fits = FitModel.from_study(ctx, guard)           # this hardware's trials, the calibrated guard
    fits.p_fit(cfg)                                  # 0..1: will a run of cfg stay under the limit?
    fits.fits_measured(key)                          # a measured config: do most of its runs fit?

Three sources, strongest first:
1. A config's own runs. Its peak differs from run to run (a CPU process's resident set does;
   an allocator's much less), so runs are a sample: the config fits when its typical (median)
   peak is under the limit, with the uncertainty of that median. One run over the limit among
   several under it is a fact about the spread, not a flip of the verdict.
2. Order. At the same memory savers, a larger micro-batch uses more memory; at the same
   micro-batch, more checkpointing uses less. So a config that ran out of memory caps every
   config above it in that order, and one that fit lifts every config below it.
3. The calibrated model (autotune.search.calibration): its prediction with the errors it has
   shown on this hardware (its residuals, shrunk toward a prior while it has few points).

An out-of-memory run costs a few seconds and one trial; a config never tried because a
prediction said "over" may be the optimum, which costs the whole long run. So the sweep holds a
config back only when it is unlikely to fit (calibration.P_HOLD), and when nothing tried so far fits it
probes the config most likely to (autotune.search.rules.FitRule).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.contract import Checkpointing, DeviceKind, Offload, TrialConfig
from autotune.record import TrialRecord
from autotune.search.calibration import P_FITS, PRIOR_DOF, PRIOR_SD_RUN, normal_cdf
from autotune.search.reuse import key_on

if TYPE_CHECKING:
    from autotune.search.calibration import MemoryGuard
    from autotune.search.context import SweepContext

# Checkpointing, least memory last: more recomputation keeps fewer activations.
_CKPT_ORDER = {Checkpointing.none: 0, Checkpointing.selective: 1, Checkpointing.full: 2}
_FSDP_AS_ZERO = {"none": 0, "shard_grad_op": 2, "full_shard": 3}


def saver_setting(cfg: TrialConfig) -> tuple:
    """Everything that decides memory except the micro-batch and checkpointing, whose order is
    known (accumulation does not change the peak: the gradients exist either way)."""
    doc = cfg.model_dump(mode="json", exclude={"micro_batch_size", "grad_accum_steps", "checkpointing",
                                              "seed", "device_peak_flops"})
    return tuple(sorted((k, str(v)) for k, v in doc.items()))


def uses_no_more(a: TrialConfig, b: TrialConfig) -> bool:
    """a uses no more memory than b: the same savers, a micro-batch no larger and at least as
    much checkpointing."""
    return (saver_setting(a) == saver_setting(b) and a.micro_batch_size <= b.micro_batch_size
            and _CKPT_ORDER[a.checkpointing] >= _CKPT_ORDER[b.checkpointing])


@dataclass
class Measured:
    """One config's runs on this hardware: peaks measured, and runs that ran out of memory
    without a peak (a real OOM stops the run: the peak is only known to be over the limit)."""

    cfg: TrialConfig
    log_peaks: list[float] = field(default_factory=list)
    censored: int = 0  # out of memory, peak unknown (over the limit)
    first_trial: int = -1  # the trial that measured it first, and its Optuna params
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def runs(self) -> int:
        return len(self.log_peaks) + self.censored


class FitModel:
    """P(fit) for any config of this sweep, from the study's trials on this hardware."""

    def __init__(self, guard: "MemoryGuard", measured: dict[str, Measured], sd_run: float,
                 held_back: dict[str, TrialConfig] | None = None):
        from autotune.search.machine import preferred_precision

        self.guard, self.measured, self.sd_run = guard, measured, sd_run
        # Configs the prescreen held back and no trial has measured since: a scan's ceiling
        # (open_boundaries) while the model still gives them little chance.
        self.held_back = {k: c for k, c in (held_back or {}).items() if k not in measured}
        self.prefer = preferred_precision(guard.hw).value  # probed first among equals

    @classmethod
    def from_study(cls, ctx: "SweepContext", guard: "MemoryGuard", trials=None) -> "FitModel":
        """`guard` must be loaded (its calibration refitted from the study)."""
        trials = trials if trials is not None else ctx.study.get_trials(deepcopy=False)
        measured: dict[str, Measured] = {}
        held_back: dict[str, TrialConfig] = {}
        for t in trials:
            rec = TrialRecord.of(t)
            key = key_on(rec, ctx.hardware)
            if key is not None and rec.status == "prescreened" and rec.config is not None:
                held_back[key] = rec.trial_config()
            if key is None or not t.state.is_finished() or rec.status in (None, "prescreened"):
                continue
            if rec.reused_from is not None or rec.config is None:
                continue
            peak = run_peak_bytes(rec)
            m = measured.setdefault(key, Measured(rec.trial_config(), first_trial=t.number,
                                                  params=dict(t.params)))
            if peak:
                m.log_peaks.append(math.log(peak))
            elif rec.status == "oom":
                m.censored += 1
        return cls(guard, measured, pooled_sd(measured.values(), PRIOR_SD_RUN[ctx.hardware.device_kind]),
                   held_back)

    def limit_for(self, cfg: TrialConfig) -> int | None:
        """The peak one rank of `cfg` must stay under (autotune.search.calibration)."""
        from autotune.search.calibration import device_limit_bytes

        return self.guard.fits_under(cfg.num_gpus) or device_limit_bytes(self.guard.hw, cfg.num_gpus,
                                                                          self.guard.spec_limit)

    # -- a config's own runs
    def p_measured(self, m: Measured) -> float | None:
        """P(the config's median peak is under the limit), from its runs; None: no run told."""
        limit = self.limit_for(m.cfg)
        n = len(m.log_peaks) + m.censored
        if n == 0:
            return None
        if limit is None:
            return 1.0
        return median_fits(m.log_peaks, m.censored, limit, self.sd_run)

    def fits_measured(self, key: str) -> bool | None:
        m = self.measured.get(key)
        p = self.p_measured(m) if m is not None else None
        return None if p is None else p >= P_FITS

    # -- any config
    def p_predicted(self, cfg: TrialConfig) -> float:
        """From the calibrated model and its errors on this hardware."""
        return self.guard.predict(cfg, sd_log_run=self.sd_run).p_fit

    def peak_to_limit(self, cfg: TrialConfig) -> float:
        """The calibrated peak per rank over the limit (1.0: at it; 0.0: no limit or no model)."""
        v = self.guard.predict(cfg, sd_log_run=self.sd_run)
        return v.predicted_bytes / v.limit_bytes if v.predicted_bytes and v.limit_bytes else 0.0

    def candidate(self, params: dict[str, Any], values: dict[str, Any], cfg: TrialConfig, key: str) -> Candidate:
        """An untried config with its chance to fit, and where that is 0, how near the limit it is."""
        p = self.p_fit(cfg, key)
        return Candidate(params, values, cfg, key, p, self.peak_to_limit(cfg) if p == 0.0 else 0.0)

    def p_fit(self, cfg: TrialConfig, key: str | None = None) -> float:
        """The config's own runs when it has some; else the model, within what order says."""
        if key is not None and key in self.measured:
            p = self.p_measured(self.measured[key])
            if p is not None:
                return p
        p = self.p_predicted(cfg)
        for m in self.measured.values():
            pm = self.p_measured(m)
            if pm is None:
                continue
            if pm < P_FITS and uses_no_more(m.cfg, cfg):
                p = min(p, pm)  # something using no more memory did not fit
            elif pm >= P_FITS and uses_no_more(cfg, m.cfg):
                p = max(p, pm)  # something using no less memory fit
        return p


def run_peak_bytes(rec: TrialRecord) -> int | None:
    """The peak a run measured: its memory point's, else (a run that succeeded) its own."""
    if rec.memory_point is not None and rec.memory_point.measured_bytes:
        return rec.memory_point.measured_bytes
    return rec.peak_mem_bytes if rec.status == "ok" else None


def pooled_sd(measured, prior: float) -> float:
    """sd of log peak between runs of one config: pooled over configs with several measured
    peaks, shrunk toward `prior` with PRIOR_DOF points' weight."""
    ss, dof = PRIOR_DOF * prior * prior, PRIOR_DOF
    for m in measured:
        if len(m.log_peaks) > 1:
            mean = statistics.fmean(m.log_peaks)
            ss += sum((x - mean) ** 2 for x in m.log_peaks)
            dof += len(m.log_peaks) - 1
    return math.sqrt(ss / dof)


def speed_prior(values: dict[str, Any], prefer: str | None = None) -> tuple:
    """The order in which untried configs that may fit are probed, most promising first: the
    fewest memory savers (each costs speed: recomputation, communication, copies), then the
    precision that runs fastest here (`prefer`: autotune.search.machine.preferred_precision),
    then the most ranks, then the largest micro-batch (the DeepSpeed autotuner's scan order)."""
    plain = {k: getattr(v, "value", v) for k, v in values.items()}
    # FSDP2 shards as the ZeRO stage it matches does (shard_grad_op: 2, full_shard: 3), so it
    # ranks with that stage, not before ZeRO 1.
    sharding = max(int(plain.get("zero_stage", 0)), _FSDP_AS_ZERO.get(str(plain.get("fsdp", "none")), 3))
    savers = (_CKPT_ORDER[Checkpointing(plain.get("checkpointing", "none"))], sharding,
              plain.get("offload", "none") != "none", int(plain.get("tp_degree", 1)) - 1)
    slower_precision = prefer is not None and str(plain.get("precision", prefer)) != prefer
    return (sum(bool(x) for x in savers), slower_precision, savers, -int(plain.get("num_gpus", 1)),
            -int(plain.get("micro_batch_size", 1)))


def savers_used(cfg: TrialConfig) -> int:
    """How many memory savers a config uses (checkpointing, ZeRO, offload, FSDP, TP)."""
    return speed_prior(cfg.model_dump(mode="json"))[0]


@dataclass
class Candidate:
    params: dict[str, Any]  # Optuna params, to enqueue
    values: dict[str, Any]  # TrialConfig fields
    cfg: TrialConfig
    key: str
    p_fit: float
    # Its predicted peak per rank over the limit, where p_fit is 0 (else 0.0: not needed).
    peak_to_limit: float = 0.0


def choose_probe(candidates: list[Candidate], prefer: str | None = None) -> Candidate | None:
    """Among untried candidates: the most promising of those likely to fit (P_FITS), else the
    one most likely to fit (the most promising among equals; where none has any chance, the
    nearest the limit by its predicted peak, not the first in speed order: the largest). An
    out-of-memory probe costs a trial; a config never tried may be the optimum. `prefer`: as
    `speed_prior`."""
    ordered = sorted(candidates, key=lambda c: speed_prior(c.values, prefer))
    likely = [c for c in ordered if c.p_fit >= P_FITS]
    if likely:
        return likely[0]
    best = max(ordered, key=lambda c: c.p_fit, default=None)
    if best is not None and best.p_fit == 0.0:
        return min(ordered, key=lambda c: c.peak_to_limit)
    return best


# A scan skips a micro-batch only when the model gives it less than this chance to fit: on a
# boundary the model has just been shown wrong about (an out-of-memory run beside it), measuring
# costs one short trial, and the micro-batch it would skip may be the optimum.
P_SCAN = 0.05


def scan_probe(boundary: list[Candidate], prefer: str | None = None) -> Candidate | None:
    """The next micro-batch of an open boundary, found by measuring, as DeepSpeed's autotuner
    scans: the most promising candidate (fewest savers, then the largest micro-batch below the
    smallest failure) unless the model all but rules it out (P_SCAN), not the one the model
    finds most likely to fit (that would be the smallest, slowest micro-batch every time)."""
    ordered = sorted(boundary, key=lambda c: speed_prior(c.values, prefer))
    return next((c for c in ordered if c.p_fit >= P_SCAN), None) or choose_probe(ordered, prefer)


def slowing_savers(cfg: TrialConfig) -> int:
    """The memory savers a config uses that cost speed by construction. On CPU ranks optimizer
    offload is not one: nothing crosses a PCIe bus, and DeepSpeed's CPU Adam replaces torch's
    optimizer. Measured on this project's CPU truths, it ran faster than the same ZeRO stage
    without it on ZeRO 3 (389.5M GPT: median $942 against $1,196, truth_gpt390_pool.json;
    124M: $338 against $372, truth_mem_pool.json), slower on the 389.5M's ZeRO 2 ($1,139
    against $999) and level on the 124M's ($296 against $300): its sign is the engine's and the
    model's, not known before it is measured."""
    used = savers_used(cfg)
    if cfg.device == DeviceKind.cpu and cfg.offload != Offload.none:
        used -= 1
    return used


def dominated(fitting: list[Measured], cfg: TrialConfig) -> bool:
    """A config that fits already does what `cfg` could at best, so probing `cfg` for memory's
    sake cannot find anything faster: the same precision, at least as many ranks, as much
    checkpointing or less, and either the same savers or fewer of them with a micro-batch at
    least as large, or as many savers of another setting with a larger micro-batch. At the
    same micro-batch, another saver setting with as many savers is not dominated: engines
    (ZeRO 2, ZeRO 3, FSDP2, and on CPU ranks offload: `slowing_savers`) differ in speed more
    than any model here can say."""
    def beats(m: Measured) -> bool:
        if not _no_slower_base(m.cfg, cfg):
            return False
        mine, theirs = slowing_savers(cfg), slowing_savers(m.cfg)
        fewer = saver_setting(m.cfg) == saver_setting(cfg) or theirs < mine
        mb, other = m.cfg.micro_batch_size, cfg.micro_batch_size
        return (fewer and mb >= other) or (theirs <= mine and mb > other)

    return any(beats(m) for m in fitting)


def as_promising(cfg: TrialConfig, than: TrialConfig) -> bool:
    """Nothing known by construction makes `cfg` slower than `than`: the same precision, at
    least as many ranks, no more checkpointing, a micro-batch at least as large and no more
    savers that cost speed (`slowing_savers`)."""
    return (_no_slower_base(cfg, than) and cfg.micro_batch_size >= than.micro_batch_size
            and slowing_savers(cfg) <= slowing_savers(than))


def _no_slower_base(a: TrialConfig, b: TrialConfig) -> bool:
    """What `dominated` and `as_promising` both compare first: the same precision, at least as
    many ranks and no more checkpointing in `a` than in `b`."""
    return (a.precision == b.precision and a.num_gpus >= b.num_gpus
            and _CKPT_ORDER[a.checkpointing] <= _CKPT_ORDER[b.checkpointing])


def open_boundaries(fits: FitModel, candidates: list[Candidate]) -> list[Candidate]:
    """Candidates inside a saver setting's open boundary, where the largest micro-batch that fits
    is not known yet: between the largest fit and the smallest failure of the setting (with
    its checkpointing), or above the largest fit when nothing of it has failed yet (the scan
    goes up as well as down, as DeepSpeed's autotuner's does). A config the prescreen held
    back, and that the model still finds unlikely to fit, counts as a failure: a setting whose
    largest micro-batches were only ever held back is scanned down from them, as DeepSpeed's
    autotuner scans down from the largest micro-batch. (On the H200 truth at the 0.9 limit,
    micro-batch 32 and 16 without checkpointing were held back; the setting was never
    measured, so its micro-batch 8, the optimum, faster than the checkpointed pick, was never
    tried: docs/benchmarks.md, the search matrix.)"""
    failed: dict[tuple, int] = {}
    fitted: dict[tuple, int] = {}
    measured_groups = set()
    outcomes = [(fits.fits_measured(key), m.cfg, True) for key, m in fits.measured.items()]
    outcomes += [(False, cfg, False) for key, cfg in fits.held_back.items() if fits.p_fit(cfg, key) < P_FITS]
    for ok, cfg, was_measured in outcomes:
        if ok is None:
            continue
        group = (saver_setting(cfg), cfg.checkpointing)
        if was_measured:
            measured_groups.add(group)
        book = fitted if ok else failed
        book[group] = (max if ok else min)(book.get(group, cfg.micro_batch_size), cfg.micro_batch_size)
    out = []
    for c in candidates:
        group = (saver_setting(c.cfg), c.cfg.checkpointing)
        # Below a ceiling that was only held back, the model has not been shown wrong: what it
        # all but rules out (P_SCAN) is no boundary to scan (on the H200 truth at the 0.2 limit,
        # a scan below held-back DDP configs spent the budget on out-of-memory runs).
        if group not in measured_groups and c.p_fit < P_SCAN:
            continue
        if (group in failed or group in fitted) and not outpaced(fits, c.cfg) \
                and fitted.get(group, 0) < c.cfg.micro_batch_size < failed.get(group, math.inf):
            out.append(c)
    return out


def outpaced(fits: FitModel, cfg: TrialConfig) -> bool:
    """A config that fits uses the same savers with no more checkpointing and a micro-batch at
    least as large: `cfg` would only recompute more or batch less, so it is not worth a probe."""
    for key, m in fits.measured.items():
        if (fits.fits_measured(key) and saver_setting(m.cfg) == saver_setting(cfg)
                and m.cfg.micro_batch_size >= cfg.micro_batch_size
                and _CKPT_ORDER[m.cfg.checkpointing] <= _CKPT_ORDER[cfg.checkpointing]):
            return True
    return False


def median_fits(log_peaks: list[float], censored: int, limit: int, sd_run: float) -> float:
    """P(a config's median peak is under `limit`) from its runs: measured peaks (log bytes) and
    `censored` runs that ran out of memory with no peak (over the limit, by about a spread)."""
    n = len(log_peaks) + censored
    over = math.log(limit) + sd_run
    # The median, not the mean: one far-off run (a CPU peak can jump between runs) must not
    # carry the verdict. Its sampling sd is about 1.25 sd / sqrt(n) for three or more normal
    # runs; of one or two it is their mean.
    middle = statistics.median(log_peaks + [over] * censored)
    return normal_cdf((math.log(limit) - middle) / ((1.25 if n > 2 else 1.0) * sd_run / math.sqrt(n)))


def straddles(fits: FitModel, m: Measured) -> bool:
    """Some of a config's runs went over the limit while others stayed under."""
    limit = fits.limit_for(m.cfg)
    if limit is None:
        return False
    over = m.censored + sum(x > math.log(limit) for x in m.log_peaks)
    return 0 < over < m.runs


def worth_another_run(fits: FitModel, fitting: list[Measured]) -> list[tuple[str, Measured]]:
    """Measured configs whose verdict is still open, measured fewer than three times: they did
    not fit so far, yet the spread of peaks between runs leaves them a real chance (P_HOLD or
    more) that their typical peak is under the limit; or they fit by their median, but their
    runs fell on both sides of the limit (`straddles`: with two runs the median is their mean,
    so one run far under carries one over). Only those that may beat what fits (not
    `dominated`). Most promising first."""
    from autotune.search.calibration import P_HOLD

    out = []
    for key, m in fits.measured.items():
        p = fits.p_measured(m)
        if p is None or m.runs >= 3:
            continue
        if P_HOLD <= p < P_FITS and not dominated(fitting, m.cfg):
            out.append((key, m))
        elif p >= P_FITS and straddles(fits, m) and not dominated([f for f in fitting if f is not m], m.cfg):
            # Its median rests on runs on both sides of the limit: one more run settles it.
            out.append((key, m))
    return sorted(out, key=lambda km: speed_prior(km[1].cfg.model_dump(mode="json"), fits.prefer))
