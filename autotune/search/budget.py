"""When the search stops, beyond one invocation's `--trials`: the study's total trials, the
GPU-hours (CPU: rank-hours) or dollars trials have cost (all machines), or a Pareto front that
stopped improving.

    budget = SearchBudget(spec, hw)
    reason = budget.exhausted(study)       # None, or why the sweep stops (printed to the user)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autotune.contract import DeviceKind, HardwareFingerprint
from autotune.contract.result import ENTRY_POINT_CONTRACT_ERROR
from autotune.record import TrialRecord
from autotune.search.pareto import FrontTracker
from autotune.spec import SweepSpec


def trials_since_front_improved(trials, hw: HardwareFingerprint) -> int:
    """Finished trials of this hardware since its Pareto front last gained a point."""
    from optuna.trial import TrialState

    mine = [t for t in trials if t.state.is_finished() and TrialRecord.of(t).on(hw)]
    mine.sort(key=lambda t: (t.datetime_complete or t.datetime_start or 0, t.number))
    front = FrontTracker()
    since = 0
    for t in mine:
        feasible = all(v <= 0 for v in t.constraints.values())
        if t.state is TrialState.COMPLETE and t.values and feasible and front.add(t.values):
            since = 0
            continue
        since += 1
    return since


@dataclass
class SearchBudget:
    """When the search stops, beyond this invocation's `n_trials`: total finished trials in
    the study, GPU-hours or dollars spent on trials (all machines), or a Pareto front (this
    machine's hardware) that has not improved for `patience_trials` trials."""

    spec: SweepSpec
    hardware: HardwareFingerprint

    def trials_left(self, study, invocation_left: int) -> int:
        """Trials this invocation may still launch: its own `--trials` left, capped by the
        study's `total_trials` (a block of repeats is sized to fit, so none is left queued)."""
        from optuna.trial import TrialState

        total = self.spec.budget.total_trials
        if total is None:
            return invocation_left
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED,
                                                             TrialState.FAIL))
        return min(invocation_left, total - len(finished))

    def exhausted(self, study) -> str | None:
        from optuna.trial import TrialState

        b = self.spec.budget
        trials = study.get_trials(deepcopy=False)
        finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)]
        if b.total_trials is not None and len(finished) >= b.total_trials:
            return f"the study holds {len(finished)} finished trials (budget.total_trials = {b.total_trials})"
        records = [TrialRecord.of(t) for t in trials]
        gpu_hours = sum(r.search_gpu_hours or 0.0 for r in records)
        if b.search_gpu_hours is not None and gpu_hours >= b.search_gpu_hours:
            if self.hardware.device_kind is DeviceKind.cpu:  # its trials' ranks are CPU cores
                return (f"trials have used {gpu_hours:.4g} rank-hours, wall time x CPU ranks "
                        f"(budget.search_gpu_hours = {b.search_gpu_hours:g}: a CPU rank counts as a GPU)")
            return (f"trials have used {gpu_hours:.4g} GPU-hours (budget.search_gpu_hours = "
                    f"{b.search_gpu_hours:g})")
        usd = sum(r.search_usd or 0.0 for r in records)
        if b.search_usd is not None and usd >= b.search_usd:
            return f"trials have cost ${usd:.4g} (budget.search_usd = ${b.search_usd:g})"
        if b.patience_trials is not None:
            since = trials_since_front_improved(trials, self.hardware)
            if since >= b.patience_trials:
                return (f"the Pareto front on {self.hardware.kind_key()} has not improved for {since} "
                        f"trials (budget.patience_trials = {b.patience_trials})")
        return None


# Different configs ended by the same error before any trial of the sweep succeeded: the error
# does not depend on the config (a model that raises, a broken install), so the rest of the
# budget would be spent on it.
SAME_ERROR_STOP = 3
# Endings that depend on the config by nature (its memory, its speed, what it asks of this
# machine: `unsupported`): never "the same error" however often they repeat.
_CONFIG_DEPENDENT = ("oom", "timeout", "prescreened", "unsupported")


class RepeatedError:
    """Watches launched trials for one error that ends several different configs.

        watch.add(record)          # each launched trial's TrialRecord
        watch.verdict()            # the stop reason, or None
    """

    def __init__(self, limit: int = SAME_ERROR_STOP):
        self.limit = limit
        self.configs: dict[str, set[str]] = {}  # error signature -> configs it ended
        self.contract_broken: str | None = None  # the entry point's own error, at its first trial

    @staticmethod
    def signature(rec) -> str | None:
        status = rec.status
        if status in (None, "ok", *_CONFIG_DEPENDENT):
            return None
        first = (rec.error or "").strip().splitlines()[:1]
        # Numbers differ between trials of the same error (ports, pids, sizes, ranks).
        return f"{status}: " + re.sub(r"\d+", "N", first[0] if first else "")[:300]

    def add(self, rec, number: int = 0) -> None:
        sig = self.signature(rec)
        if sig is not None:
            self.configs.setdefault(sig, set()).add(rec.config_key or str(number))
        error = (rec.error or "").strip()
        if sig is not None and error.startswith(f"{ENTRY_POINT_CONTRACT_ERROR}:"):
            first = error.splitlines()[0].removeprefix(f"{ENTRY_POINT_CONTRACT_ERROR}:").strip()
            self.contract_broken = re.sub(r"^rank \d+: ", "", first)  # every rank's own, alike

    def verdict(self) -> str | None:
        if self.contract_broken:  # what the entry point returns does not depend on the config
            return (f"the workload's entry point broke its calling convention, which every config "
                    f"would break alike: {self.contract_broken}. Fix the function and run the sweep again")
        for sig, configs in self.configs.items():
            if len(configs) >= self.limit:
                return (f"the same error ended {len(configs)} different configs, so it does not "
                        f"depend on the config: {sig}. Fix it (see the trial folders' stderr.log) "
                        "and run the sweep again")
        return None
