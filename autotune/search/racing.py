"""Re-measure before recommending: the closest rivals of the cheapest and the fastest config
are measured again, back to back, until the difference is outside the noise or the budget ends.

    scores = config_scores(trials, hw, catalog, max_usd=None, deadline_hours=None)
    leader, alive = rivals(scores, model, "usd")   # the cheapest, and who may still beat it
    racing = Racing(hw, catalog, reserve=3)
    members = racing.block(study, remaining=3)  # configs to measure again now, or None
    racing.enqueue(study, members)

Why: a single run on a shared machine is noisy (runs of one config differ by ~10%, in spells
that slow a whole run; docs/benchmarks.md), so the config with the best single run is often
only the luckiest. A config's score is its estimate over all its runs (autotune.search.estimates);
the pick is the best estimate; and before recommending, the sweep spends the last `reserve`
trials of its budget re-measuring the leader with the rivals that could still beat it by more
than TOLERANCE: each *block* measures the leader and up to BLOCK_SIZE - 1 rivals one after
another, so that a slow spell of the machine that outlasts a trial hits all of them and
cancels in their ratio (how much two runs of a block share is learnt from the study's own
blocks: autotune.search.estimates; docs/benchmarks.md measures it on a shared CPU). A rival drops out
once its interval (Z_RACE sds) no longer reaches TOLERANCE below the leader; racing stops when
none is left (the unused trials go back to exploring) or the budget ends. While a block waits,
the sweep queues nothing else: a local move in the middle of the race would spend the reserve on
a new rival measured once, which the race would then have to chase. A last trial too few for a
block measures, on its own, the leader where it rests on one run, else the raced rival with
the fewest runs (the least certain estimate), rather than a new config, which would be
recommended on one run if it led. A leader measured
only once is measured again with its runner-up whatever its lead, or alone where memory binds
and nothing else can be recommended: a single run is never crowned. Only what the report may
recommend races: a config whose typical peak is over the memory limit does not. Once every config of the space has
been tried, the rest of the budget may race. What each of these rules changed in pick accuracy
is in docs/benchmarks.md (the search section).

Repeats count against `--trials` like any launched trial; each is recorded as a repeat of the
config's first trial (`TrialRecord.repeat_of`) in its block (`race_block`).
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Any

from autotune.contract import HardwareFingerprint
from autotune.record import TrialRecord
from autotune.search.estimates import ConfigEstimate, RunModel
from autotune.search.score import objective_bill, reprice

# A pick within this much of the best is as good (the benchmark counts it right:
# docs/benchmarks.md); racing does not spend trials to split smaller gaps.
TOLERANCE = 0.03
# A rival stays in the race while its estimate, Z_RACE sds better, beats the leader by more
# than TOLERANCE (set by the search benchmark's replays: scripts/bench_search.py).
Z_RACE = 2.0
# Configs per block: the leader and up to two rivals, measured back to back. Blocks of 2 and 4,
# replayed on every memory-limit cell at 8 and 16 trials, get no more picks right at both
# budgets (scripts/bench_race_block.py; docs/benchmarks.md, the race's block size).
BLOCK_SIZE = 3
METRICS = ("usd", "hours")


@dataclass
class ConfigScore:
    """A config on one hardware, scored at its estimated throughput."""

    est: ConfigEstimate
    trial: Any  # the config's first trial (FrozenTrial): its params and stored pricing
    hours: float
    usd: float
    feasible: bool

    @property
    def key(self) -> str:
        return self.est.key

    def value(self, metric: str) -> float:
        return getattr(self, metric)


def config_scores(trials, hw: HardwareFingerprint, catalog, max_usd: float | None = None,
                  deadline_hours: float | None = None, model: RunModel | None = None,
                  bills_filter=None) -> list[ConfigScore]:
    """Every config measured successfully on `hw`, priced at its estimated throughput on the
    objective's bill (`autotune.search.score.objective_bill`). `bills_filter` narrows the
    offers (the report's --provider / --region)."""
    model = model or RunModel.fit(trials, hw)
    by_number = {t.number: t for t in trials}
    out = []
    for est in model.configs.values():
        t = by_number[est.first_trial]
        bills = reprice(TrialRecord.of(t).score, catalog, est.tokens_per_s)
        if bills_filter is not None and bills:
            bills = bills_filter(bills)
        if not bills:
            continue
        best = objective_bill(bills, deadline_hours)
        hours, usd = float(best["hours"]), float(best["usd"])
        feasible = (max_usd is None or usd <= max_usd) and (deadline_hours is None or hours <= deadline_hours)
        out.append(ConfigScore(est, t, hours, usd, feasible))
    return out


def rivals(scores: list[ConfigScore], model: RunModel, metric: str, z: float = Z_RACE,
           tolerance: float = TOLERANCE) -> tuple[ConfigScore | None, list[ConfigScore]]:
    """The leader by `metric` and the rivals that may still beat it by more than `tolerance`,
    most likely first."""
    feasible = sorted((s for s in scores if s.feasible), key=lambda s: (s.value(metric), s.est.first_trial))
    if not feasible:
        return None, []
    leader, alive = feasible[0], []
    for s in feasible[1:]:
        log_gap = math.log(s.value(metric) / leader.value(metric))
        sd = model.compare(leader.key, s.key).sd
        # The rival's best case (z sds) beats the leader by more than the tolerance.
        if log_gap - z * sd < -math.log1p(tolerance):
            alive.append((log_gap / sd if sd > 0 else math.inf, s))
    return leader, [s for _, s in sorted(alive, key=lambda p: p[0])]


class Racing:
    """The sweep's re-measuring: which configs to measure again, and enqueuing them."""

    def __init__(self, hw: HardwareFingerprint, catalog, reserve: int, enabled: bool = True,
                 max_usd: float | None = None, deadline_hours: float | None = None):
        self.hw, self.catalog, self.reserve, self.enabled = hw, catalog, reserve, enabled
        self.max_usd, self.deadline_hours = max_usd, deadline_hours
        self.blocks = 0

    def racing_now(self, remaining: int) -> bool:
        """Within the last `reserve` trials of the budget, where blocks of repeats come first."""
        return self.enabled and 1 <= remaining <= self.reserve

    def block(self, study, remaining: int, everything_tried: bool = False) -> list[ConfigScore] | None:
        """The configs to measure back to back now: within the last `reserve` trials of the
        budget (or any time once every config has been tried), when a rival may still beat
        the cheapest or the fastest config by more than the tolerance. With one trial left,
        one config: the leader where it rests on one run (its runner-up's repeat would crown
        that run), else the rival (of the block it would have been) with the fewest runs."""
        if not (self.racing_now(remaining) or (everything_tried and self.enabled and remaining >= 1)):
            return None
        from autotune.search.verdict import memory_binds, runs_fit

        trials = study.get_trials(deepcopy=False)
        model = RunModel.fit(trials, self.hw)
        scores = config_scores(trials, self.hw, self.catalog, self.max_usd, self.deadline_hours, model)
        # Only what the report may recommend races: a config whose typical peak is over the
        # memory limit is not (autotune.search.verdict.runs_fit), whatever its runs that fit cost.
        memory = runs_fit(trials)
        scores = [s for s in scores if s.trial.number not in memory or memory[s.trial.number].recommendable]
        members: list[ConfigScore] = []
        once: list[ConfigScore] = []  # leaders (by cost, by time) that rest on one run
        for metric in METRICS:
            leader, alive = rivals(scores, model, metric)
            if leader is not None and not alive and len(leader.est.runs) < 2:
                # Never crown a single run: the leader is measured again, back to back with
                # the runner-up, however far ahead that one run put it.
                alive = sorted((s for s in scores if s.feasible and s is not leader),
                               key=lambda s: s.value(metric))[:1]
            if leader is None or not alive:
                continue
            once += [leader] if len(leader.est.runs) < 2 else []
            members += [s for s in [leader, *alive] if s.key not in {m.key for m in members}]
        if remaining == 1 and len(members) >= 2:
            # A leader that rests on one run is measured again: the runner-up's second run
            # would leave it crowned on that run (the mem space at its 0.5 limit crowned such
            # runs: docs/benchmarks.md, the search matrix).
            return once[:1] or [min(members[1:BLOCK_SIZE], key=lambda m: len(m.est.runs))]
        alone = [s for s in scores if s.feasible]
        if not members and len(alone) == 1 and len(alone[0].est.runs) < 2 and memory_binds(trials):
            # Where memory binds, the only config that can be recommended rests on one run: it
            # is measured again, alone. That run may have been a low one (a CPU peak varies
            # between runs), and its typical peak over the limit (the big space at its 0.2
            # limit: docs/benchmarks.md, the search matrix). Where nothing binds, the trial
            # goes on to configs not measured yet.
            return alone
        members = members[:min(BLOCK_SIZE, remaining)]
        return members if len(members) >= 2 else None

    def enqueue(self, study, members: list[ConfigScore]) -> str:
        """Queue one repeat of each member, in this block's order (the leader first in every
        other block, so that neither always runs first)."""
        block = f"race-{uuid.uuid4().hex[:8]}"
        order = members if self.blocks % 2 == 0 else list(reversed(members))
        for s in order:
            study.enqueue_trial(dict(s.trial.params), user_attrs=TrialRecord.attrs(
                repeat_of=s.est.first_trial, race_block=block))
        self.blocks += 1
        return block
