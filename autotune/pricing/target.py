"""Time to target: how many tokens the long run must process, at a given global batch.

    t = tokens_to_target(spec.target, global_batch_tokens=524_288, b_noise_tokens=2e6)
    t.tokens, t.basis                      # 1.3e10, "loss 2.1: reference ... (McCandlish 2018)"
    hours = t.tokens / tokens_per_s / 3600

A target is tokens, optimizer steps at the global batch, epochs over a dataset, or a loss
to reach, known from a reference run (tokens it took at a reference global batch). For a
loss target, a different global batch B changes the tokens needed by the empirical model of
McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training", eq. 2.11):
E = E_min (1 + B / B_noise), where E counts training examples (here tokens) and B_noise is
the gradient noise scale, measured by the trials or given.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotune.errors import UserError
from autotune.format import fmt_tokens

# A target with none of tokens, steps, epochs or loss (an empty `target: {}`) is this many tokens,
# the spec's default.
DEFAULT_TOKENS = 1e9


class TargetSpec(BaseModel):
    """The training target. Give exactly one of: tokens; steps (with the global batch);
    epochs (with dataset_tokens); loss (with the reference run that reached it:
    reference_tokens at reference_global_batch_tokens). The spec's `target:` section
    (autotune.spec); `tokens_to_target` below turns it into tokens at a global batch."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # `tokens: .nan` passes every > 0 check

    tokens: float | None = Field(default=None, description="training tokens to process")
    steps: int | None = Field(default=None, description="optimizer steps at the global batch")
    epochs: float | None = Field(default=None, description="passes over the dataset")
    dataset_tokens: float | None = Field(default=None, description="dataset size in tokens")
    loss: float | None = Field(default=None, description="loss to reach (needs a reference run)")
    reference_tokens: float | None = Field(
        default=None, description="tokens the reference run took to reach `loss`")
    reference_global_batch_tokens: int | None = Field(
        default=None, description="the reference run's global batch, in tokens")
    b_noise_tokens: float | None = Field(
        default=None, description="gradient noise scale in tokens; default: measured by the trials")

    @model_validator(mode="after")
    def _exactly_one(self) -> "TargetSpec":
        given = [n for n in ("tokens", "steps", "epochs", "loss") if getattr(self, n) is not None]
        if len(given) > 1:
            raise ValueError(f"give one target, not {' and '.join(given)}")
        for n in ("tokens", "steps", "epochs", "dataset_tokens", "reference_tokens",
                  "reference_global_batch_tokens", "b_noise_tokens"):
            v = getattr(self, n)
            if v is not None and v <= 0:
                raise ValueError(f"`{n}` must be > 0, got {v}")
        if self.epochs is not None and self.dataset_tokens is None:
            raise ValueError("an `epochs` target needs `dataset_tokens`")
        if self.loss is not None and (self.reference_tokens is None
                                      or self.reference_global_batch_tokens is None):
            raise ValueError("a `loss` target needs `reference_tokens` and "
                             "`reference_global_batch_tokens` (the run that reached that loss)")
        return self

    def describe(self) -> str:
        """The target in a few words, as outputs name it beside hours and dollars:
        '1B tokens', '10,000 steps', '2 epochs of 5B tokens', 'loss 2.1 (reference run: 13B tokens)'."""
        if self.loss is not None:
            return f"loss {self.loss:g} (reference run: {fmt_tokens(self.reference_tokens)} tokens)"
        if self.steps is not None:
            return f"{self.steps:,} steps"
        if self.epochs is not None:
            return f"{self.epochs:g} epochs of {fmt_tokens(self.dataset_tokens)} tokens"
        return f"{fmt_tokens(self.tokens if self.tokens is not None else DEFAULT_TOKENS)} tokens"


@dataclass(frozen=True)
class TokensToTarget:
    tokens: float
    basis: str  # how the figure was derived, for reports


def data_efficiency_factor(batch_tokens: float, b_noise_tokens: float) -> float:
    """E / E_min = 1 + B / B_noise: how many times the minimum data a batch of B needs."""
    if batch_tokens <= 0 or b_noise_tokens <= 0:
        raise ValueError("batch and B_noise must be > 0")
    return 1.0 + batch_tokens / b_noise_tokens


def steps_factor(batch_tokens: float, b_noise_tokens: float) -> float:
    """S / S_min = 1 + B_noise / B (McCandlish et al. 2018, eq. 2.11)."""
    if batch_tokens <= 0 or b_noise_tokens <= 0:
        raise ValueError("batch and B_noise must be > 0")
    return 1.0 + b_noise_tokens / batch_tokens


def loss_target_tokens(reference_tokens: float, reference_batch_tokens: float,
                       batch_tokens: float, b_noise_tokens: float) -> float:
    """Tokens to reach the reference run's loss at another global batch.

    E_min = E_ref / (1 + B_ref / B_noise); E(B) = E_min (1 + B / B_noise).
    """
    e_min = reference_tokens / data_efficiency_factor(reference_batch_tokens, b_noise_tokens)
    return e_min * data_efficiency_factor(batch_tokens, b_noise_tokens)


def tokens_to_target(target: TargetSpec, global_batch_tokens: int,
                     b_noise_tokens: float | None = None,
                     b_noise_source: str = "measured by the trials") -> TokensToTarget:
    """Tokens the long run must process to reach `target` at `global_batch_tokens`.

    `b_noise_tokens` (the gradient noise scale in tokens) is used for a loss target only;
    the target's own `b_noise_tokens`, when given, wins over a measured one.
    """
    if target.loss is not None:
        ref_tokens = float(target.reference_tokens or 0.0)
        ref_batch = float(target.reference_global_batch_tokens or 0)
        given = target.b_noise_tokens
        b_noise = given if given is not None else b_noise_tokens
        src = "given" if given is not None else b_noise_source
        if global_batch_tokens == ref_batch:
            return TokensToTarget(ref_tokens, f"loss {target.loss:g}: reference run, same global batch "
                                              f"({ref_batch:,.0f} tokens)")
        if not b_noise:
            raise UserError(
                f"target loss {target.loss:g}: the global batch {global_batch_tokens:,} tokens differs "
                f"from the reference run's {ref_batch:,.0f}, and the gradient noise scale is unknown",
                fix="set target.b_noise_tokens, or let the trials measure it (measure_noise_scale), "
                    "or fix the global batch to the reference one (batch.global_batch_samples)")
        tokens = loss_target_tokens(ref_tokens, ref_batch, global_batch_tokens, b_noise)
        return TokensToTarget(
            tokens, f"loss {target.loss:g}: reference {ref_tokens:.3g} tokens at batch {ref_batch:,.0f}, "
                    f"B_noise {b_noise:.3g} tokens ({src}); E = E_min(1 + B/B_noise) "
                    f"(McCandlish et al. 2018) -> x{tokens / ref_tokens:.3f} at batch {global_batch_tokens:,}")
    if target.steps is not None:
        tokens = float(target.steps) * global_batch_tokens
        return TokensToTarget(tokens, f"{target.steps:,} steps x {global_batch_tokens:,} tokens/step")
    if target.epochs is not None:
        tokens = float(target.epochs) * float(target.dataset_tokens or 0.0)
        return TokensToTarget(tokens, f"{target.epochs:g} epochs x {target.dataset_tokens:.3g} tokens")
    tokens = float(target.tokens if target.tokens is not None else DEFAULT_TOKENS)
    return TokensToTarget(tokens, f"{tokens:.3g} tokens")
