"""A config's runs and what they say together: every measurement of one config on one hardware
(the first, and repeats measured before recommending), one throughput estimate per config with
an interval, and how sure a comparison of two configs is.

    model = RunModel.fit(trials, hw)                     # this hardware's successful runs
    est = model.configs[key]; est.tokens_per_s, est.interval()
    cmp = model.compare(a, b)                            # log tokens/s of b over a, with its sd
    sentence = how_sure("cheaper", 7, cmp.ratio_interval(), ...)

The noise model, from what this project measured on shared machines (docs/benchmarks.md, the
noise section): runs of one config differ by ~10% (sd of log tokens/s) on a shared CPU, mostly in
spells that slow a whole run, so two configs measured back to back (a *block*, see
autotune.search.racing) share part of it. So the log tokens/s of a run is

    log tps = mu[config] + b[block] + e,    b ~ N(0, tau2) shared by a block, e ~ N(0, sigma2)

mu is estimated robustly by a median polish over (config, block): within a block, configs are
compared as paired ratios (the spell cancels), and medians keep one far-off run from
outweighing the others (`_median_polish`). The polish fixes the comparisons; the level they share
is that of the study's runs (`_level_shift`), since a long run is projected from it. Its
uncertainty is that of the generalised least squares estimate under the model: runs in
different blocks (the single runs of exploration) compare with the whole variance
tau2 + sigma2, runs in one block with sigma2. Both variances are estimated from the study's
own repeats, shrunk toward a prior with PRIOR_DOF pseudo-runs: the spread of one config's runs
gives tau2 + sigma2, the residual within blocks gives sigma2.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from autotune.contract import DeviceKind, HardwareFingerprint
from autotune.record import TrialRecord

# Prior sd of log tokens/s between runs of one config. CPU: the run-to-run spread this project
# measures on its shared 2-core machines (docs/benchmarks.md, the noise section; an sd is the
# (max - min) / median spread of 3 runs divided by about 1.69). CUDA: an assumption, small
# because a GPU is not shared; a study's own repeats replace either after a few runs.
PRIOR_SD = {DeviceKind.cpu: 0.10, DeviceKind.cuda: 0.03}
# Share of that variance that two runs measured back to back do NOT share (sigma2 / total):
# 1.0 assumes nothing is shared until the study's own blocks say otherwise.
PRIOR_WITHIN_SHARE = 1.0
# Weight of the prior, in runs' worth of degrees of freedom.
PRIOR_DOF = 3.0
# Two-sided 90% normal quantile for the intervals shown ("4% +- 2%").
Z_SHOWN = 1.645
# The fewest --trials of a later sweep that re-measure a leader and its rival side by side: a
# sweep re-measures in the last half of its trials by default (autotune.search.sweep.
# remeasure_reserve) and a block of the two takes 2. Fewer re-measure one of them, or none.
BOTH_REMEASURED_TRIALS = 4


@dataclass
class Run:
    trial: int
    tokens_per_s: float
    block: str  # the back-to-back block; a run of its own ("t12") when measured alone


@dataclass
class ConfigEstimate:
    """One config's runs on one hardware and the model's estimate of its throughput."""

    key: str
    first_trial: int  # the trial that measured it first: the config's representative
    runs: list[Run] = field(default_factory=list)
    log_tps: float = math.nan
    log_sd: float = math.nan  # sd of the estimate of log tokens/s

    @property
    def tokens_per_s(self) -> float:
        return math.exp(self.log_tps)

    @property
    def trials(self) -> list[int]:
        return [r.trial for r in self.runs]

    def interval(self, z: float = Z_SHOWN) -> tuple[float, float]:
        """Interval of its throughput (tokens/s)."""
        return math.exp(self.log_tps - z * self.log_sd), math.exp(self.log_tps + z * self.log_sd)


@dataclass(frozen=True)
class Comparison:
    """Log tokens/s of config b minus config a, with the sd of that difference."""

    a: str
    b: str
    log_diff: float
    sd: float
    paired_blocks: int  # blocks where both were measured back to back

    def ratio_interval(self, z: float = Z_SHOWN) -> tuple[float, float, float]:
        """tokens/s of b over a: (estimate, low, high)."""
        return (math.exp(self.log_diff), math.exp(self.log_diff - z * self.sd),
                math.exp(self.log_diff + z * self.sd))


@dataclass
class Noise:
    """The variances the model used, and how much of the study's data they rest on."""

    total_var: float  # tau2 + sigma2: two runs measured apart
    within_var: float  # sigma2: what two runs of one block do not share
    total_dof: float
    within_dof: float

    @property
    def run_sd(self) -> float:
        return math.sqrt(self.total_var)

    @property
    def paired_sd(self) -> float:
        return math.sqrt(self.within_var)


def runs_of(trials, hw: HardwareFingerprint) -> dict[str, ConfigEstimate]:
    """This hardware's successful measurements, by config key (a reused trial copies another's
    measurement and is not a run)."""
    from optuna.trial import TrialState

    from autotune.search.reuse import key_on

    out: dict[str, ConfigEstimate] = {}
    for t in sorted(trials, key=lambda t: t.number):
        rec = TrialRecord.of(t)
        if t.state is not TrialState.COMPLETE or rec.status != "ok" or not rec.launched:
            continue
        key = key_on(rec, hw)
        if key is None or not rec.tokens_per_s or rec.tokens_per_s <= 0:
            continue
        est = out.setdefault(key, ConfigEstimate(key, t.number))
        est.runs.append(Run(t.number, float(rec.tokens_per_s), rec.race_block or f"t{t.number}"))
    return out


def _noise(configs: list[ConfigEstimate], prior_var: float) -> Noise:
    import numpy as np

    # Total: the spread of one config's runs. A config appears at most once per block, so two
    # of its runs never share a block.
    ss, dof = 0.0, 0
    for c in configs:
        ys = [math.log(r.tokens_per_s) for r in c.runs]
        if len(ys) > 1:
            m = sum(ys) / len(ys)
            ss += sum((y - m) ** 2 for y in ys)
            dof += len(ys) - 1
    total = (ss + PRIOR_DOF * prior_var) / (dof + PRIOR_DOF)
    # Within blocks: residuals of config + block fixed effects over the runs in shared blocks.
    sizes: dict[str, int] = {}
    for c in configs:
        for r in c.runs:
            sizes[r.block] = sizes.get(r.block, 0) + 1
    rows = [(ci, r.block, math.log(r.tokens_per_s)) for ci, c in enumerate(configs) for r in c.runs
            if sizes[r.block] > 1]
    wss, wdof = 0.0, 0
    if rows:
        blocks = sorted({b for _, b, _ in rows})
        cidx = sorted({ci for ci, _, _ in rows})
        design = np.zeros((len(rows), len(cidx) + len(blocks)))
        for i, (ci, b, _) in enumerate(rows):
            design[i, cidx.index(ci)] = 1.0
            design[i, len(cidx) + blocks.index(b)] = 1.0
        y = np.array([v for _, _, v in rows])
        coef, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
        wdof = len(rows) - int(rank)
        if wdof > 0:
            wss = float(((y - design @ coef) ** 2).sum())
    within = (wss + PRIOR_DOF * prior_var * PRIOR_WITHIN_SHARE) / (wdof + PRIOR_DOF)
    within = min(within, total)
    return Noise(total, within, float(dof), float(wdof))


def _median_polish(runs: list[tuple[int, Run]], n_configs: int, passes: int = 10) -> list[float]:
    """Each config's log tokens/s, robustly: Tukey's median polish of the runs over (config,
    block). A block of several configs gets an effect (the spell they shared: the median of
    its members' offsets), and a config's estimate is the median of its runs net of their
    block's effect. A run alone (exploration) is taken as it is. Medians, not means: runs on a
    shared machine have heavy tails both ways (a run on a briefly idle machine is as far off
    as one in a busy spell), and a single such run should not outweigh the others."""
    import statistics

    ys = [math.log(r.tokens_per_s) for _, r in runs]
    mu = [0.0] * n_configs
    for c in range(n_configs):
        mine = [y for (ci, _), y in zip(runs, ys) if ci == c]
        mu[c] = statistics.median(mine) if mine else math.nan
    members: dict[str, list[int]] = {}
    for i, (_, r) in enumerate(runs):
        members.setdefault(r.block, []).append(i)
    effect = {b: 0.0 for b in members}
    for _ in range(passes):
        for b, idx in members.items():
            if len(idx) > 1:
                effect[b] = statistics.median(ys[i] - mu[runs[i][0]] for i in idx)
        for c in range(n_configs):
            net = [y - effect[r.block] for (ci, r), y in zip(runs, ys) if ci == c]
            if net:
                mu[c] = statistics.median(net)
    return mu


def _level_shift(runs: list[tuple[int, Run]], mu: list[float]) -> float:
    """The one offset (log) that puts every estimate at the level of the runs behind it.

    The polish measures a block's spell against the runs measured alone (their effect is 0), so
    its levels are those of the lone runs. Where the re-measuring blocks ran slower (or faster)
    than the lone runs, every re-measured config then sits above (below) most of its own runs, and
    a long run projected from it, which runs under the conditions runs do, would be too fast
    (slow). So the levels are shifted, all by the same offset, until the runs of the configs
    measured more than once average, in log, to their estimates. Comparisons, and so the ranking,
    the races and the margins, are the polish's and do not move. The runs of a config measured
    once do not count toward the offset (the polish set its estimate to its run, so it says
    nothing of the level), but its estimate moves with the others. docs/benchmarks.md ("The
    pick's projected tokens/s") replays how far each rule's level lies from held-out runs."""
    counts = Counter(ci for ci, _ in runs)
    offsets = [math.log(r.tokens_per_s) - mu[ci] for ci, r in runs if counts[ci] > 1]
    return sum(offsets) / len(offsets) if offsets else 0.0


class RunModel:
    """Every config's throughput estimate on one hardware, from all its runs (see module)."""

    def __init__(self, configs: dict[str, ConfigEstimate], noise: Noise, cov: Any, index: dict[str, int],
                 blocks: dict[str, set[str]], level_shift: float = 0.0):
        self.configs, self.noise, self._cov, self._index, self._blocks = configs, noise, cov, index, blocks
        self.level_shift = level_shift  # log: every estimate's move from the lone runs' level

    @classmethod
    def fit(cls, trials, hw: HardwareFingerprint, prior_sd: float | None = None) -> "RunModel":
        configs = runs_of(trials, hw)
        prior = prior_sd if prior_sd is not None else PRIOR_SD.get(hw.device_kind, 0.10)
        return cls.from_runs(configs, prior)

    @classmethod
    def from_runs(cls, configs: dict[str, ConfigEstimate], prior_sd: float) -> "RunModel":
        import numpy as np

        keys = list(configs)
        index = {k: i for i, k in enumerate(keys)}
        noise = _noise(list(configs.values()), prior_sd ** 2)
        runs = [(index[k], r) for k in keys for r in configs[k].runs]
        blocks: dict[str, set[str]] = {}
        for k in keys:
            for r in configs[k].runs:
                blocks.setdefault(r.block, set()).add(k)
        if not runs:
            return cls(configs, noise, np.zeros((0, 0)), index, blocks)
        n, p = len(runs), len(keys)
        x = np.zeros((n, p))
        tau2 = noise.total_var - noise.within_var
        shared = np.zeros((n, n))
        for i, (ci, ri) in enumerate(runs):
            x[i, ci] = 1.0
            for j, (_, rj) in enumerate(runs):
                shared[i, j] = ri.block == rj.block
        v = np.diag(np.full(n, noise.within_var)) + tau2 * shared
        vinv = np.linalg.inv(v)
        cov = np.linalg.inv(x.T @ vinv @ x)
        mu = _median_polish(runs, p)
        shift = _level_shift(runs, mu)
        mu = [m + shift for m in mu]
        for k, i in index.items():
            configs[k].log_tps = float(mu[i])
            configs[k].log_sd = math.sqrt(max(float(cov[i, i]), 0.0))
        return cls(configs, noise, cov, index, blocks, shift)

    def compare(self, a: str, b: str) -> Comparison:
        i, j = self._index[a], self._index[b]
        var = float(self._cov[i, i] + self._cov[j, j] - 2 * self._cov[i, j])
        shared = sum(1 for members in self._blocks.values() if a in members and b in members)
        return Comparison(a, b, self.configs[b].log_tps - self.configs[a].log_tps,
                          math.sqrt(max(var, 0.0)), shared)


def margin(leader_value: float, other_value: float, sd: float,
           z: float = Z_SHOWN) -> tuple[float, float, float]:
    """How much worse `other_value` is than `leader_value` (0.04 = 4%), as (estimate, low,
    high), given the sd of their log throughput ratio (time and dollars scale with 1 / it)."""
    log_m = math.log(other_value / leader_value)
    return math.exp(log_m) - 1, math.exp(log_m - z * sd) - 1, math.exp(log_m + z * sd) - 1


def how_sure(better: str, leader_trial: int, runner_trial: int | None,
             margin: tuple[float, float, float] | None, tolerance: float,
             remeasures: bool = True) -> str:
    """The sentence under a pick. `better`: "cheaper" or "faster"; `margin`: how much worse the
    runner-up is (0.04 = 4%), with its interval (estimate, low, high); `tolerance`: a gap this
    small does not matter (the benchmark counts a pick within 3% of the best as right);
    `remeasures`: False where the study's sweep never re-measures (`budget.remeasure_trials: 0`),
    so more --trials alone would not settle it."""
    if runner_trial is None or margin is None:
        return f"trial {leader_trial} is the only config measured successfully"
    est, lo, hi = margin
    pm = (hi - lo) / 2
    if lo > 0:
        return f"{better} than the runner-up (trial {runner_trial}) by {est:.0%} ± {pm:.0%}"
    if -tolerance <= lo and hi <= tolerance:
        return f"not distinguishable from trial {runner_trial} ({est:+.0%} ± {pm:.0%}): either will do"
    how = (f"sweeping this study again with {BOTH_REMEASURED_TRIALS} or more --trials re-measures both"
           if remeasures else "its sweep never re-measures (budget.remeasure_trials: 0); with it at "
           "2 or more, sweeping this study again re-measures both")
    return (f"not distinguishable from trial {runner_trial} with the runs so far ({better} by "
            f"{est:.0%} ± {pm:.0%}): either may be the better one; {how}")
