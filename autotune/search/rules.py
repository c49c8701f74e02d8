"""The sweep loop's rules: after every trial, each is asked in turn what to do next, and the
first with an answer decides. A rule answers `Stop(reason)` (the sweep ends), `QUEUED` (it
queued what runs next), or None (no say: the next rule is asked).

    loop = SweepLoop([StopRule(...), OpenVerdictRule(...), NewSettingRule(...), RaceRule(...),
                      FitRule(...), ExhaustedRule(...), MoveRule(...)], state)
    study.optimize(objective, callbacks=[loop])       # autotune.search.sweep.run_sweep

Order matters and reads as the sweep's policy: stop when asked or out of budget; where memory
binds, settle an open memory verdict and measure an untried engine that may beat the cheapest
before racing; re-measure the leaders in the last trials; probe what fits while memory binds;
stop once every config has been tried or the sampler only repeats itself; otherwise a local
move every other trial.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from autotune.record import TrialRecord
from autotune.search.budget import RepeatedError, SearchBudget
from autotune.search.floor import over_limit_reason
from autotune.search.interrupt import OUTPUT_CLOSED_REASON, Interrupt, output_closed
from autotune.search.racing import Racing
from autotune.search.strategy import LOCAL_MOVE_EVERY, MAX_IDLE_PROPOSALS, LocalMoves

# NewSettingRule probes within the reserve only while this many trials are left, so that at
# least two still race after its probe (a block: the leader and a rival).
NEW_SETTING_MIN_LEFT = 3

QUEUED = True  # a rule queued the next trial(s): no later rule is asked

# How many times FitRule measures an open memory verdict again: once, or twice for a config
# whose runs fell on both sides of the limit (its median then rests on a third run: one run
# far under no longer carries one over). A config only ever over it, by less than the spread,
# gets one more run: another would most likely spend a trial on a third failure.
AGAIN_MAX, AGAIN_MAX_STRADDLING = 1, 2


@dataclass
class Stop:
    """The sweep ends; `reason` is printed (None: the invocation's --trials are done)."""

    reason: str | None
    interrupted: bool = False


@dataclass
class SweepState:
    """What this invocation has counted, for the rules to read."""

    n_trials: int
    trials_run: int = 0  # launched here: each ran its own measurement
    trials_ok: int = 0  # of those, measured successfully
    proposals: int = 0  # Optuna trials here, including reused and prescreened ones
    idle: int = 0  # proposals in a row that launched nothing
    launched: bool = False  # the last proposal launched a trial
    baselines_enqueued: int = 0
    remaining: int = 0  # trials this invocation may still launch (budget.trials_left)

    def count(self, rec: TrialRecord) -> None:
        self.proposals += 1
        self.launched = rec.launched
        if rec.launched:
            # --trials counts this invocation's launches: a lost run's result recorded now
            # (TrialRecord.recovered_from) was launched by the sweep that lost it.
            self.trials_run += rec.recovered_from is None
            self.trials_ok += rec.status == "ok"
            self.idle = 0
        else:
            self.idle += 1


class Rule(Protocol):
    def decide(self, study: Any, frozen: Any, state: SweepState) -> "Stop | bool | None": ...


class StopRule:
    """Ctrl-C, the output's reader gone (autotune.search.interrupt.reader_left), the study's
    search budget, one error ending several configs before any trial succeeded, a memory limit
    below what the runtime holds before any model is built, or this invocation's --trials done."""

    def __init__(self, budget: SearchBudget, interrupt: Interrupt):
        self.budget, self.interrupt = budget, interrupt
        self.same_error = RepeatedError()

    def decide(self, study, frozen, state: SweepState) -> Stop | None:
        if state.launched:
            self.same_error.add(TrialRecord.of(frozen), frozen.number)
        if self.interrupt.requested:
            return Stop("interrupted (Ctrl-C)", interrupted=True)
        if output_closed():
            return Stop(OUTPUT_CLOSED_REASON, interrupted=True)
        reason = self.budget.exhausted(study) or (
            None if state.trials_ok else self.same_error.verdict()
            or (over_limit_reason(frozen, study.get_trials(deepcopy=False)) if state.launched else None))
        if reason is not None:
            return Stop(reason)
        if state.trials_run >= state.n_trials:
            return Stop(None)
        state.remaining = self.budget.trials_left(study, state.n_trials - state.trials_run)
        return None


def waiting(study) -> bool:
    """Trials wait in the queue, or a repeat runs (on any machine of the study): racing waits
    for them rather than queue a second block of the same rivals."""
    from optuna.trial import TrialState

    return bool(study.get_trials(deepcopy=False, states=(TrialState.WAITING,))) or any(
        TrialRecord.of(t).repeat_of is not None
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))


def race(study, racing: Racing, remaining: int, everything_tried: bool = False) -> bool:
    """Queue a block of repeats when racing wants one now (True)."""
    members = racing.block(study, remaining, everything_tried)
    if members:
        racing.enqueue(study, members)
    return bool(members)


class RaceRule:
    """Re-measure before recommending, within the last trials of the budget. While a block of
    repeats waits, nothing else is queued: a local move would spend the reserve on a new rival
    measured once, which the race then has to chase."""

    def __init__(self, racing: Racing):
        self.racing = racing

    def decide(self, study, frozen, state: SweepState) -> bool | None:
        if self.racing.racing_now(state.remaining) and (waiting(study) or race(study, self.racing,
                                                                                 state.remaining)):
            return QUEUED
        return None


class ExhaustedRule:
    """After a proposal that launched nothing: once every config of a listable space has been
    tried, race with what is left, then stop; stop too when the sampler has proposed only
    measured or held-back configs MAX_IDLE_PROPOSALS times in a row."""

    def __init__(self, moves: LocalMoves, racing: Racing):
        self.moves, self.racing = moves, racing

    def decide(self, study, frozen, state: SweepState) -> Stop | bool | None:
        if not state.idle:
            return None
        n_all = self.moves.exhausted(study)
        if n_all is not None and race(study, self.racing, state.remaining, everything_tried=True):
            return QUEUED
        if n_all is not None and not waiting(study):  # queued trials (a retry) go first
            return Stop(f"every config this machine can run has been tried ({n_all} configs)")
        if state.idle >= MAX_IDLE_PROPOSALS:
            return Stop(f"{state.idle} proposals in a row were configs already tried: the sampler "
                        "has settled; widen the search space to search further")
        return None


class MoveRule:
    """A local move when the proposal measured nothing (a repeat, or held back), and every
    LOCAL_MOVE_EVERY-th launched trial past the baselines."""

    def __init__(self, moves: LocalMoves):
        self.moves = moves

    def decide(self, study, frozen, state: SweepState) -> bool | None:
        past_baselines = state.trials_run > state.baselines_enqueued
        if not state.launched or (past_baselines and state.trials_run % LOCAL_MOVE_EVERY == 0):
            return QUEUED if self.moves.enqueue_next(study) else None
        return None


class SweepLoop:
    """Optuna's after-trial callback: counts the trial, then asks the rules in order."""

    def __init__(self, rules: list[Rule], state: SweepState):
        self.rules, self.state = rules, state
        self.stop: Stop | None = None

    def __call__(self, study, frozen) -> None:
        self.state.count(TrialRecord.of(frozen))
        for rule in self.rules:
            decision = rule.decide(study, frozen, self.state)
            if isinstance(decision, Stop):
                self.stop = decision
                study.stop()
                return
            if decision:
                return


class OpenVerdictRule:
    """Within the re-measuring reserve, where memory binds: a config whose memory verdict is
    still open (autotune.search.fit.worth_another_run: its runs fell on both sides of the
    limit, or missed it by less than the spread) is measured again before the race. The race
    ranks speed; a pick whose long run may not fit costs more than any speed it wins (on the
    big space's 0.5 limit, a config with one run 16% under the limit and one over was picked,
    though its median over three runs is over)."""

    def __init__(self, fit: "FitRule", racing: Racing):
        self.fit, self.racing = fit, racing

    def decide(self, study, frozen, state: SweepState) -> bool | None:
        if not self.racing.racing_now(state.remaining):
            return None
        return self.fit.decide(study, frozen, state, again_only=True)


class NewSettingRule:
    """Within the re-measuring reserve, while memory binds and NEW_SETTING_MIN_LEFT trials or
    more are left: a saver setting not tried yet, likely to fit and as promising as the
    cheapest config measured (autotune.search.fit.as_promising), is measured before the next
    race block. The race only ranks what has been measured, and engines differ in speed more
    than any model here can say (in the 389.5M GPT's truth, benchmarks/results/truth_gpt390_pool.json,
    optimizer offload makes ZeRO 3 cheaper but ZeRO 2 dearer); the trials left still race after it."""

    def __init__(self, fit: "FitRule", racing: Racing):
        self.fit, self.racing = fit, racing

    def decide(self, study, frozen, state: SweepState) -> bool | None:
        if not self.racing.racing_now(state.remaining) or state.remaining < NEW_SETTING_MIN_LEFT:
            return None
        return self.fit.decide(study, frozen, state, new_setting_only=True)


class FitRule:
    """Never give up while a config may fit. Once memory binds (a trial ran out of memory or a
    proposal was held back), after every trial (once the queue has run): a saver setting whose
    largest fitting micro-batch is not known yet is scanned, down from its smallest failure (or
    held-back config: fit.open_boundaries) or up from its largest fit (found by measuring, as
    DeepSpeed's autotuner scans); a saver
    setting not tried yet that is likely to fit is probed (engines differ in speed), or one that
    may fit and is as promising as the cheapest config measured; when nothing tried so far fits,
    the untried config most likely to fit is. Only what may beat a config that already fits is
    worth a probe (autotune.search.fit.dominated). A measured config whose verdict the spread
    of peaks leaves open is measured again first (AGAIN_MAX). Probes run whatever the prescreen
    predicts (autotune.search.fit says why)."""

    def __init__(self, ctx, moves: LocalMoves):
        from autotune.search.calibration import MemoryGuard

        self.ctx, self.moves = ctx, moves
        mem = ctx.spec.memory
        self.guard = MemoryGuard(ctx.hardware, mem.limit_bytes_per_rank, mem.safety_margin)

    def decide(self, study, frozen, state: SweepState, new_setting_only: bool = False,
               again_only: bool = False) -> bool | None:
        """Queue a probe (QUEUED) or leave the turn to the next rule (None). `new_setting_only`:
        only a saver setting not tried yet (NewSettingRule); `again_only`: only an open verdict
        measured again (OpenVerdictRule)."""
        from autotune.search.fit import FitModel
        from autotune.search.verdict import memory_binds

        if waiting(study):
            return None  # queued trials run first: the probe is chosen with what they measure
        trials = study.get_trials(deepcopy=False)
        # Once memory binds (a trial ran out of memory or was held back), after every trial: the
        # scan of what fits goes on while it has somewhere to go.
        if not memory_binds(trials):
            return None
        self.guard.load(study)
        fits = FitModel.from_study(self.ctx, self.guard, trials)
        if again_only:
            again, probe = self.open_verdict(fits, trials), None
        elif new_setting_only:
            again, probe = None, self.new_setting_probe(fits, self.candidates(study, trials, fits), trials)
        else:
            again, probe = self.next_probe(fits, self.candidates(study, trials, fits), trials)
        if again is not None:  # a peak that varies between runs: measure the open verdict again
            key, m = again
            study.enqueue_trial(m.params, user_attrs=TrialRecord.attrs(repeat_of=m.first_trial,
                                                                       fit_probe=True))
            return QUEUED
        if probe is None:
            return None
        study.enqueue_trial(probe.params, user_attrs=TrialRecord.attrs(fit_probe=True))
        self.moves.queued.add(probe.key)
        return QUEUED

    def next_probe(self, fits, candidates: list, trials) -> tuple:
        """(a measured config to measure again, None) or (None, an untried candidate or None), in
        this order, among what may beat what fits: an open verdict (while nothing fits, only
        when no untried config is likely to fit); the next micro-batch of an open boundary;
        while nothing fits, the config most likely to; else a saver setting not tried yet that
        is likely to fit, else one the prescreen would launch (P_HOLD) that is as promising as
        the cheapest config measured (fit.as_promising). An out-of-memory probe costs one short
        trial, and the model's offload term is the least sure: probed last, the 389.5M truth's
        optimum at the 0.3 limit lost on noise (docs/benchmarks.md, the search matrix)."""
        from autotune.search.calibration import P_FITS, P_HOLD
        from autotune.search.fit import as_promising, choose_probe, dominated, open_boundaries, scan_probe

        fitting = [m for k, m in fits.measured.items() if fits.fits_measured(k)]
        # Only what may beat what already fits is worth a trial.
        candidates = [c for c in candidates if not dominated(fitting, c.cfg)]
        likely = [c for c in candidates if c.p_fit >= P_FITS]
        again = self.open_verdict(fits, trials)
        if again and (fitting or not likely):
            return again, None
        pool = open_boundaries(fits, candidates)
        if pool:
            return None, scan_probe(pool, fits.prefer)
        if not fitting:  # nothing fits yet and no boundary is open: the config most likely to fit
            return None, choose_probe(candidates, fits.prefer)
        probe = self.untried_setting(fits, likely)
        cheapest = self.cheapest(trials)
        if probe is None and cheapest is not None:
            possible = [c for c in candidates if c.p_fit >= P_HOLD and as_promising(c.cfg, cheapest)]
            probe = self.untried_setting(fits, possible)
        return None, probe

    def cheapest(self, trials):
        """The TrialConfig of the cheapest config measured that fits (the front's first), or None."""
        from autotune.search.strategy import ranked_by_front

        ranked = ranked_by_front(trials, self.ctx.hardware)
        return TrialRecord.of(ranked[0]).trial_config() if ranked else None

    @staticmethod
    def open_verdict(fits, trials) -> tuple | None:
        """(key, Measured) of the most promising config whose memory verdict is still open and
        that this rule has measured again fewer than AGAIN_MAX times (AGAIN_MAX_STRADDLING
        when its runs fell on both sides of the limit), or None. The count is read from the
        study (its fit-probe repeats), so a resumed sweep or another worker keeps it."""
        from autotune.search.fit import straddles, worth_another_run

        again: dict[int, int] = {}
        for t in trials:
            rec = TrialRecord.of(t)
            if rec.fit_probe and rec.repeat_of is not None:
                again[rec.repeat_of] = again.get(rec.repeat_of, 0) + 1
        fitting = [m for k, m in fits.measured.items() if fits.fits_measured(k)]
        return next(((k, m) for k, m in worth_another_run(fits, fitting) if again.get(m.first_trial, 0)
                     < (AGAIN_MAX_STRADDLING if straddles(fits, m) else AGAIN_MAX)), None)

    @staticmethod
    def untried_setting(fits, likely: list):
        """The most promising candidate, likely to fit, of a saver setting not tried yet."""
        from autotune.search.fit import choose_probe, saver_setting

        tried = {saver_setting(m.cfg) for m in fits.measured.values()}
        return choose_probe([c for c in likely if saver_setting(c.cfg) not in tried], fits.prefer)

    def new_setting_probe(self, fits, candidates: list, trials):
        """For NewSettingRule: a saver setting not tried yet, likely to fit, not dominated by
        what fits, and as promising as the cheapest config measured; None when something
        else should run (nothing fits yet: the race, or the other rules, decide)."""
        from autotune.search.calibration import P_FITS
        from autotune.search.fit import as_promising, dominated

        cheapest = self.cheapest(trials)
        fitting = [m for k, m in fits.measured.items() if fits.fits_measured(k)]
        if cheapest is None or not fitting:
            return None
        likely = [c for c in candidates if c.p_fit >= P_FITS and not dominated(fitting, c.cfg)
                  and as_promising(c.cfg, cheapest)]
        return self.untried_setting(fits, likely)

    def candidates(self, study, trials, fits) -> list:
        """Untried, unqueued configs of this machine's space with their chance to fit: every
        config when the space can be listed, else the neighbours of those measured."""
        from autotune.search.objective import trial_config_for
        from autotune.search.space_walk import neighbours

        ms, spec = self.ctx.machine, self.ctx.spec
        gb = spec.batch.global_batch_samples
        nodes = spec.launcher.num_nodes[0]
        pairs = self.moves.listed(nodes)
        if not pairs:
            seen = [c for c in (TrialRecord.of(t).config for t in trials) if c]
            pairs = [p for c in seen for p in neighbours({k: c[k] for k in c if k in ms.restricted.__dict__},
                                                         ms.restricted, gb, ms.full, nodes)]
        skip = self.moves.tried(trials) | self.moves.queued | self.queued_keys(study)
        out = []
        for params, values in pairs:
            key = self.moves.key_for(values, nodes)
            if key in skip:
                continue
            skip.add(key)
            cfg = trial_config_for(values, spec, ms, nodes, seed=0)
            out.append(fits.candidate(params, values, cfg, key))
        return out

    def queued_keys(self, study) -> set[str]:
        """Keys of the configs waiting in the queue (baselines, moves, other workers' probes)."""
        from optuna.trial import TrialState

        from autotune.search.space_walk import params_for

        ms, gb = self.ctx.machine, self.ctx.spec.batch.global_batch_samples
        out = set()
        for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            fixed = t.system_attrs.get("fixed_params") or {}
            nodes = int(fixed.get("num_nodes", self.ctx.spec.launcher.num_nodes[0]))
            _, values = params_for(fixed, ms.restricted, gb, ms.full, nodes)
            out.add(self.moves.key_for(values, nodes))
        return out
