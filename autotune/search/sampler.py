"""Plain parameter names for every machine of a study: each dimension is suggested under its
own name (`num_gpus`) with the study's full choice list, and this sampler wrapper keeps the
value within what this machine offers for this trial.

    sampler = MachineSampler(optuna.samplers.TPESampler(...))   # autotune.search.study.make_sampler
    value = sampler.suggest(trial, "num_gpus", allowed=[1, 2], full=[1, 2, 4, 8])

Why a wrapper: Optuna's storage refuses a categorical parameter whose choice list differs
from an earlier trial's ("CategoricalDistribution does not support dynamic value space"), and
a 2-GPU machine can only run `num_gpus` 1 or 2. With one full list per name, every machine's
trials share names (optuna-dashboard plots `num_gpus` across machines, not one plot per
machine), and the restriction lives here, per trial. The wrapped sampler proposes as usual;
a proposal this machine cannot run is drawn again from the same sampler (TPE's distribution
restricted to the allowed choices), and after `RESAMPLE_TRIES` draws one of the allowed
choices is taken at random. Nothing is launched that the machine cannot run, and no trial is
spent on it.
"""

from __future__ import annotations

import random
from typing import Any

import optuna
from optuna.samplers import BaseSampler

# Draws from the wrapped sampler before a random allowed choice is taken instead.
RESAMPLE_TRIES = 16


class MachineSampler(BaseSampler):
    """Wraps a sampler; `suggest` is how autotune.search.space asks for a restricted choice."""

    def __init__(self, inner: BaseSampler, seed: int = 0):
        self.inner = inner
        self._allowed: dict[tuple[int, str], list[Any]] = {}
        self._relative: dict[int, dict[str, Any]] = {}
        self._rng = random.Random(seed)

    def suggest(self, trial, name: str, allowed: list[Any], full: list[Any]) -> Any:
        """The value of `name` for this Optuna trial: stored with the `full` list as its
        distribution, and one of `allowed`. A value queued (enqueue_trial) by a machine that
        offers more cannot run here: the trial is pruned, saying so."""
        self._allowed[(trial.number, name)] = list(allowed)
        value = trial.suggest_categorical(name, list(full))
        if value not in allowed:
            raise optuna.TrialPruned(f"{name}={value} was queued by a machine offering more; "
                                     f"this one offers {allowed}")
        return value

    # -- BaseSampler
    def infer_relative_search_space(self, study, trial):
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        # Kept aside, not returned: Optuna would take a relative value without asking which
        # choices this machine allows. `sample_independent` uses it when it is allowed.
        self._relative[trial.number] = self.inner.sample_relative(study, trial, search_space)
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        allowed = self._allowed.get((trial.number, param_name))
        if allowed is None:
            return self.inner.sample_independent(study, trial, param_name, param_distribution)
        proposed = self._relative.get(trial.number, {})
        if param_name in proposed and proposed[param_name] in allowed:
            return proposed[param_name]
        for _ in range(RESAMPLE_TRIES):
            value = self.inner.sample_independent(study, trial, param_name, param_distribution)
            if value in allowed:
                return value
        return self._rng.choice(allowed)

    def before_trial(self, study, trial) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self._relative.pop(trial.number, None)
        for key in [k for k in self._allowed if k[0] == trial.number]:
            del self._allowed[key]
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()
        self._rng.seed()


def machine_sampler(trial) -> MachineSampler:
    """The study's MachineSampler, wrapping the study's sampler first if needed (a study
    opened with another sampler, e.g. in a test)."""
    study = trial.study
    if not isinstance(study.sampler, MachineSampler):
        study.sampler = MachineSampler(study.sampler)
    return study.sampler
