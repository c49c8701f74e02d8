"""Time to target: tokens, steps, epochs, and a loss target through McCandlish et al. 2018."""

from __future__ import annotations

import pytest

from autotune.errors import UserError
from autotune.pricing.target import data_efficiency_factor, loss_target_tokens, steps_factor, tokens_to_target
from autotune.spec import TargetSpec


def test_tokens_steps_epochs():
    assert tokens_to_target(TargetSpec(tokens=2e10), 4096).tokens == 2e10
    assert tokens_to_target(TargetSpec(steps=1000), 524_288).tokens == 1000 * 524_288
    assert tokens_to_target(TargetSpec(epochs=2.5, dataset_tokens=4e9), 4096).tokens == 1e10


def test_mccandlish_efficiency_by_hand():
    # Reference: 1e10 tokens at a 1M-token batch; B_noise = 2M tokens.
    # E_min = 1e10 / (1 + 1/2) = 6.667e9; at 4M: E = E_min (1 + 2) = 2e10; at 0.5M: x1.25.
    assert data_efficiency_factor(1e6, 2e6) == pytest.approx(1.5)
    assert steps_factor(1e6, 2e6) == pytest.approx(3.0)
    assert loss_target_tokens(1e10, 1e6, 4e6, 2e6) == pytest.approx(2e10)
    assert loss_target_tokens(1e10, 1e6, 0.5e6, 2e6) == pytest.approx(1e10 / 1.5 * 1.25)
    # Far below B_noise the batch size barely matters; far above, tokens grow ~linearly with B.
    assert loss_target_tokens(1e10, 1e3, 2e3, 1e9) == pytest.approx(1e10, rel=1e-5)


def test_loss_target_from_spec_given_or_measured_noise_scale():
    t = TargetSpec(loss=2.1, reference_tokens=1e10, reference_global_batch_tokens=1_000_000,
                   b_noise_tokens=2e6)
    r = tokens_to_target(t, 4_000_000)
    assert r.tokens == pytest.approx(2e10)
    assert "McCandlish" in r.basis and "given" in r.basis
    # Measured by a trial (no value in the spec): used, and the basis says so.
    t2 = TargetSpec(loss=2.1, reference_tokens=1e10, reference_global_batch_tokens=1_000_000)
    r2 = tokens_to_target(t2, 4_000_000, b_noise_tokens=2e6)
    assert r2.tokens == pytest.approx(2e10) and "measured" in r2.basis
    # Same batch as the reference: the reference's tokens, no noise scale needed.
    assert tokens_to_target(t2, 1_000_000).tokens == 1e10
    with pytest.raises(UserError, match="gradient noise scale is unknown"):
        tokens_to_target(t2, 4_000_000)


def test_target_spec_validation():
    with pytest.raises(ValueError, match="reference_tokens"):
        TargetSpec(loss=2.0)
    with pytest.raises(ValueError, match="give one target"):
        TargetSpec(loss=2.0, tokens=1e9, reference_tokens=1e9, reference_global_batch_tokens=10)
    with pytest.raises(ValueError, match="must be > 0"):
        TargetSpec(loss=2.0, reference_tokens=1e9, reference_global_batch_tokens=10, b_noise_tokens=-1)


def test_a_target_in_words_as_outputs_name_it():
    """What the report and the bill print beside hours and dollars (autotune.format.fmt_tokens)."""
    from autotune.format import fmt_tokens

    assert [fmt_tokens(x) for x in (1e9, 2.5e11, 1.5e12, 12_345, 999, 1e7)] == \
        ["1B", "250B", "1.5T", "12.3k", "999", "10M"]
    assert TargetSpec().describe() == "1B tokens"  # no target given: the default
    assert TargetSpec(tokens=1e11).describe() == "100B tokens"
    assert TargetSpec(steps=10_000).describe() == "10,000 steps"
    assert TargetSpec(epochs=2, dataset_tokens=5e9).describe() == "2 epochs of 5B tokens"
    assert TargetSpec(loss=2.1, reference_tokens=1.3e10,
                      reference_global_batch_tokens=524_288).describe() == "loss 2.1 (reference run: 13B tokens)"
