"""Gradient noise scale, the "simple" estimator of McCandlish et al. 2018 (arXiv:1812.06162,
Appendix A.1): B_simple = tr(Σ) / |G|², from squared gradient norms at two batch sizes.

    est = NoiseScale(b_small=8, b_big=16)
    for small_sq, big_sq in samples:     # one pair per optimizer step
        est.add(small_sq, big_sq)
    est.value                            # None while |G|² is not measurably positive

The two batch sizes come from what a step computes anyway: a rank's local gradient before
the all-reduce (B_small) against the all-reduced one (B_big), or the first micro-batch's
gradient against the accumulated one. Per step, unbiased estimates are

    |G|²  ≈ (B_big·|G_big|² − B_small·|G_small|²) / (B_big − B_small)
    tr(Σ) ≈ (|G_small|² − |G_big|²) / (1/B_small − 1/B_big)

and each is averaged over steps (an exponential moving average) before dividing, because
the per-step ratio is very noisy.
"""

from __future__ import annotations

import math


class NoiseScale:
    def __init__(self, b_small: int, b_big: int, ema_beta: float = 0.9):
        if not 0 < b_small < b_big:
            raise ValueError(f"need 0 < b_small < b_big, got {b_small}, {b_big}")
        self.b_small, self.b_big, self.beta = b_small, b_big, ema_beta
        self._g2 = 0.0  # EMA of |G|² estimates (bias-corrected on read)
        self._trace = 0.0  # EMA of tr(Σ) estimates
        self.steps = 0

    def add(self, small_sq: float, big_sq: float) -> None:
        """One optimizer step's squared gradient norms; non-finite pairs (an fp16 overflow
        step) are skipped."""
        if not (math.isfinite(small_sq) and math.isfinite(big_sq)):
            return
        bs, bb = self.b_small, self.b_big
        g2 = (bb * big_sq - bs * small_sq) / (bb - bs)
        trace = (small_sq - big_sq) / (1.0 / bs - 1.0 / bb)
        self._g2 = self.beta * self._g2 + (1 - self.beta) * g2
        self._trace = self.beta * self._trace + (1 - self.beta) * trace
        self.steps += 1

    def _corrected(self, ema: float) -> float | None:
        return ema / (1 - self.beta ** self.steps) if self.steps else None

    @property
    def grad_sq(self) -> float | None:
        """EMA of the |G|² estimate (true-gradient squared norm)."""
        return self._corrected(self._g2)

    @property
    def trace_sigma(self) -> float | None:
        """EMA of the tr(Σ) estimate (per-sample gradient variance, summed)."""
        return self._corrected(self._trace)

    @property
    def value(self) -> float | None:
        """B_simple in samples, or None when |G|² is not measurably positive (too few steps
        or gradient noise swamping the signal: then the batch is far below B_noise)."""
        g2, trace = self.grad_sq, self.trace_sigma
        if g2 is None or trace is None or g2 <= 0 or trace <= 0:
            return None
        return trace / g2

    def details(self) -> dict:
        return {"b_small": self.b_small, "b_big": self.b_big, "steps": self.steps,
                "ema_beta": self.beta, "grad_sq_ema": self.grad_sq,
                "trace_sigma_ema": self.trace_sigma}
