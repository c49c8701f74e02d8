"""A trial's optimizer steps: run, timed, the loss checked, every rank kept in step.

    steps = Steps(cfg, engine, batches, device, world)
    steps.run_one(); steps.start_measuring(); steps.run_one(); steps.times_s, steps.job_cv()
"""

from __future__ import annotations

import math


class Steps:
    """Runs optimizer steps, times them, checks the loss, and keeps every rank in step.

    `times_s` is the job's step time: the slowest rank's, shared by an all-reduce after each
    step (outside the timed window), so that every rank takes the same decision to extend."""

    def __init__(self, cfg, engine, batches, device, world: int):
        from trials.measure import StepTimer

        self.cfg, self.engine, self.batches = cfg, engine, batches
        self.device, self.world = device, world
        self.timer = StepTimer(device)
        self.times_s: list[float] = []
        self.losses: list[float] = []
        self.extended = False

    @property
    def local_times_s(self) -> list[float]:
        return list(self.timer.times_s)

    def run_one(self) -> None:
        from trials.errors import NonFiniteLoss

        with self.timer.step():
            loss = self.engine.train_step(self.batches)
        value = float(loss)  # a sync point; after the timer, so it does not count
        if not math.isfinite(value):
            raise NonFiniteLoss(f"loss became {value} at step {len(self.losses)}")
        self.losses.append(value)
        if self.timer.times_s:
            self.times_s.append(self._slowest(self.timer.times_s[-1]))

    def _slowest(self, seconds: float) -> float:
        if self.world == 1:
            return seconds
        import torch
        import torch.distributed as dist

        t = torch.tensor([seconds], dtype=torch.float64,
                         device=self.device if self.device.type == "cuda" else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def start_measuring(self) -> None:
        self.timer.reset()
        self.times_s.clear()

    def job_cv(self) -> float:
        from trials.measure import summarize

        return summarize(self.times_s)["cv"]

    def probe(self, model):
        """One untimed step under the activation meter and the linear-call counter."""
        from trials.measure import LinearCallCounter, SavedTensorMeter

        meter, counter = SavedTensorMeter(model), LinearCallCounter(model)
        with meter, counter:
            self.run_one()
        return meter, counter
