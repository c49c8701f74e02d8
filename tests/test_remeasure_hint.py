"""The sentence under a pick that is not yet surely better than its runner-up says how to settle
it. It used to say "sweeping this study again with 4 or more --trials re-measures both" even where
the study's spec said `budget.remeasure_trials: 0` ("never re-measure"), under which no number
of --trials re-measures anything (autotune.search.sweep.remeasure_reserve).

The study is a real Optuna study holding two configs measured once each, 1% apart (one run each
cannot tell them apart), scored by the real scorer on the shipped catalog, with the spec stored
as `autotune sweep` stores it (`record_sweep`); the report is the real report."""

from __future__ import annotations

import optuna
import pytest

from autotune.contract import GPTWorkload, HardwareFingerprint, TrialConfig, TrialResult, TrialStatus
from autotune.pricing.load import load_catalog
from autotune.report.build import collect
from autotune.search.estimates import BOTH_REMEASURED_TRIALS
from autotune.search.reuse import config_key
from autotune.search.score import score_trial
from autotune.search.study import DIRECTIONS, record_sweep
from autotune.spec import SweepSpec

WIDE = "either may be the better one"


def _study(remeasure_trials: int | None) -> optuna.Study:
    spec = SweepSpec(target={"tokens": 1e9}).with_overrides(**{"budget.remeasure_trials": remeasure_trials})
    catalog, hw = load_catalog(), HardwareFingerprint(cpu_model="test-cpu")
    st = optuna.create_study(directions=DIRECTIONS)
    for mb, tokens_per_s in ((4, 36_000.0), (2, 35_640.0)):
        cfg = TrialConfig(workload=GPTWorkload(preset="tiny"), seq_len=128, micro_batch_size=mb,
                          grad_accum_steps=8 // mb, num_gpus=2)
        result = TrialResult(status=TrialStatus.ok, tokens_per_s=tokens_per_s, params=1_000_000, hardware=hw)
        score = score_trial(result, cfg, spec, catalog, "cpu-core")
        assert score is not None
        st.add_trial(optuna.trial.create_trial(
            values=[score.hours, score.usd], distributions={}, params={},
            user_attrs={"score": score.model_dump(mode="json"), "config": cfg.model_dump(mode="json"),
                        "status": "ok", "tokens_per_s": tokens_per_s, "hardware": hw.key(),
                        "machine": hw.model_dump(mode="json"), "config_key": config_key(cfg, hw.key())}))
    record_sweep(st, spec)
    return st


@pytest.mark.parametrize("remeasure_trials", [None, 2])
def test_a_sweep_that_re_measures_names_the_trials_that_settle_it(remeasure_trials):
    picks = collect(_study(remeasure_trials))["picks"]
    assert picks and all(WIDE in p["how_sure"] for p in picks), picks
    for p in picks:
        assert p["how_sure"].endswith(f"sweeping this study again with {BOTH_REMEASURED_TRIALS} or "
                                      "more --trials re-measures both"), p["how_sure"]


def test_a_sweep_that_never_re_measures_says_so_and_what_would():
    picks = collect(_study(0))["picks"]
    assert picks and all(WIDE in p["how_sure"] for p in picks), picks
    for p in picks:
        assert "--trials re-measures both" not in p["how_sure"]
        assert p["how_sure"].endswith("its sweep never re-measures (budget.remeasure_trials: 0); with it "
                                      "at 2 or more, sweeping this study again re-measures both"), p["how_sure"]
