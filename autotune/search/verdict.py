"""Whether a measured config can be recommended, from its runs' peaks under the memory limit:
the verdict the report shows and the race reads (autotune.report.build, autotune.search.racing).

    verdicts = runs_fit(study.trials)       # {trial number: RunsFit}, every trial of a config
    verdicts[n].recommendable, verdicts[n].p_run, verdicts[n].headroom
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from autotune.record import TrialRecord
from autotune.search.calibration import P_FITS, PRIOR_SD_RUN, normal_cdf
from autotune.search.fit import Measured, median_fits, pooled_sd, run_peak_bytes

# A config has headroom when one more run (the long run) stays under the memory limit with at
# least this chance (RunsFit.p_run, from its runs' peaks and their spread). A recommended config
# without it gives way to one with it that is within the pick tolerance (autotune.report.picks.
# with_headroom): a few percent are not worth a long run that may run out of memory.
P_HEADROOM = 0.9


@dataclass
class RunsFit:
    """Whether a measured config can be recommended: when its typical (median) peak is under
    the limit (P_FITS), as for any measured config. A run over the limit among runs under it
    is the spread of its peaks, not a flip of the verdict; the report says how likely one
    more run (the long run) is to stay under (`p_run`) whenever a run went over."""

    p_median: float
    p_run: float
    oom_runs: int
    runs: int
    limit_bytes: int

    @property
    def recommendable(self) -> bool:
        return self.p_median >= P_FITS

    @property
    def headroom(self) -> bool:
        return self.p_run >= P_HEADROOM


def runs_fit(trials) -> dict[int, RunsFit]:
    """{each trial of a config: its RunsFit}, for configs measured under a memory limit (the
    limit each trial's prescreen recorded); every hardware's configs on their own spread."""
    groups: dict[tuple[str, str], list] = {}
    for t in trials:
        rec = TrialRecord.of(t)
        if (rec.config_key is None or rec.reused_from is not None or rec.memory_prescreen is None
                or rec.memory_prescreen.limit_bytes is None or rec.status not in ("ok", "oom")):
            continue
        if rec.status == "ok" and not run_peak_bytes(rec):
            continue  # ran, but measured no peak: it says nothing about memory
        groups.setdefault((rec.hardware or "", rec.config_key), []).append((t.number, rec))
    spreads: dict[str, list[Measured]] = {}
    for (hw, _), runs in groups.items():
        m = Measured(runs[0][1].trial_config())
        for _, rec in runs:
            peak = run_peak_bytes(rec)
            if peak:
                m.log_peaks.append(math.log(peak))
            else:
                m.censored += 1
        spreads.setdefault(hw, []).append(m)
    out = {}
    for (hw, _), runs in groups.items():
        first = min(runs, key=lambda r: r[0])
        m = next(x for x in spreads[hw] if x.cfg == runs[0][1].trial_config())
        sd = pooled_sd(spreads[hw], PRIOR_SD_RUN[m.cfg.device])
        limit = first[1].memory_prescreen.limit_bytes
        n = len(m.log_peaks) + m.censored
        over = math.log(limit) + sd
        mean = statistics.fmean(m.log_peaks + [over] * m.censored)
        p_run = normal_cdf((math.log(limit) - mean) / (sd * math.sqrt(1 + 1 / n)))
        oom = sum(r.status == "oom" for _, r in runs)
        verdict = RunsFit(median_fits(m.log_peaks, m.censored, limit, sd), p_run, oom, len(runs), limit)
        for number, _ in runs:  # the report's row may be any of them (the first may have failed)
            out[number] = verdict
    return out


def memory_binds(trials) -> bool:
    """A trial ran out of memory or was held back: the limit decides what can be picked."""
    return any(TrialRecord.of(t).status in ("oom", "prescreened") for t in trials)
