"""What runs a trial for the sweep: the TrialRunner protocol and a wrapper for plain functions.

    runner = as_runner(lambda cfg, trial_dir, on_start=None: replay(cfg))   # tests, replays
    result = runner(cfg, trial_dir, on_start=record_pid); runner.close()
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from autotune.contract import TrialConfig, TrialResult


@runtime_checkable
class TrialRunner(Protocol):
    """Runs one trial to its end and returns its result (a failed trial is a result too): the
    only way a sweep measures. `on_start(pid)` is called once the trial's process group
    exists (pid = its leader), so a later sweep can kill what a dead controller left. `close()`
    ends what the runner keeps between trials (a worker pool); the sweep calls it at its end.
    The default is `launcher_runner()`; benchmark replays and tests pass their own, a plain
    function being enough (`as_runner`)."""

    def __call__(self, cfg: TrialConfig, trial_dir: Path,
                 on_start: Callable[[int], None] | None = None) -> TrialResult: ...

    def close(self) -> None: ...


class FunctionRunner:
    """A TrialRunner from a plain function with `__call__`'s signature: nothing to close."""

    def __init__(self, fn: Callable[..., TrialResult]):
        self.fn = fn

    def __call__(self, cfg: TrialConfig, trial_dir: Path,
                 on_start: Callable[[int], None] | None = None) -> TrialResult:
        return self.fn(cfg, trial_dir, on_start=on_start)

    def close(self) -> None:
        """Nothing is kept between trials."""


def as_runner(runner: TrialRunner | Callable[..., TrialResult]) -> TrialRunner:
    """`runner` itself when it meets the protocol, else the plain function wrapped."""
    return runner if isinstance(runner, TrialRunner) else FunctionRunner(runner)
