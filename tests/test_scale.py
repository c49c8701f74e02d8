"""Trials at the scale users train (issue 13), real trials on 2 CPU ranks: the 389.5M GPT of
the issue (12 layers, d_model 1536, vocab 32000; SGD, micro-batch 1, seq 128) under DDP,
ZeRO-3 and FSDP2 full_shard; a Hugging Face Llama of comparable size under ZeRO-3. (A real
sweep under a per-rank memory limit that the whole model exceeds and its shards fit, on a
smaller GPT: tests/test_scale_sweep.py.)

Each big trial takes ~1 min here (two optimizer steps of a 389.5M model on one core per
rank); they run one after another, never two at once (DDP holds ~7 GB per rank), and no other
test file runs beside this one (marked `alone`: tests/conftest.py). The scale
table (sizes from 29M to 1.3B) is scripts/bench_scale.py's, in docs/benchmarks.md.
"""

from __future__ import annotations

import pytest

from autotune.contract import FSDPMode, GPTShape, GPTWorkload, HFWorkload, MemorySource, TrialConfig, TrialStatus

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

# The model: 389,526,528 parameters.
GPT_389M = GPTShape(n_layers=12, d_model=1536, n_heads=12, vocab_size=32000, max_seq_len=256)
# A Llama of comparable size: 400,332,288 parameters (untied LM head, grouped-query attention).
LLAMA_400M = dict(hidden_size=1536, intermediate_size=4096, num_hidden_layers=12,
                  num_attention_heads=12, num_key_value_heads=4, vocab_size=32000,
                  max_position_embeddings=256)
# Two optimizer steps: the optimizer state exists from the first step's end on, so the
# second step holds the whole peak.
BIG = dict(seq_len=128, micro_batch_size=1, num_gpus=2, optimizer="sgd", warmup_steps=1,
           measure_steps=1, max_step_time_cv=100.0, timeout_s=900)


def big_config(**overrides) -> TrialConfig:
    return TrialConfig(**{**BIG, "workload": GPTWorkload(preset=None, shape=GPT_389M), **overrides})


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """The 389.5M GPT under DDP, ZeRO-3 and FSDP2 full_shard: one real trial each."""
    from tests.fixtures.engine_trials import _prebuild_deepspeed_ops
    from tests.fixtures.trials import run_many

    _prebuild_deepspeed_ops()
    configs = {"ddp": big_config(), "zero3": big_config(zero_stage=3),
               "fsdp": big_config(fsdp=FSDPMode.full_shard)}
    results = run_many(configs, tmp_path_factory.mktemp("scale"), parallel=1)
    for name, r in results.items():
        assert r.status is TrialStatus.ok, f"{name}: {r.error_type}: {r.error}\n{r.log_tail}"
    return configs, results


def peak(r) -> int:
    assert r.peak_mem_source is MemorySource.host_rss
    return max(r.memory.host_rss_peak_bytes)


def build_growth(r) -> list[int]:
    """Per rank: how much the model's build added to the rank's memory (RSS peak once its
    weights were in place, less the RSS before the build; imports excluded, see worker.py)."""
    return [b - a for a, b in zip(r.memory.host_rss_baseline_bytes, r.memory.build_host_rss_peak_bytes)]


def test_zero3_and_fsdp2_hold_at_most_three_quarters_of_ddp(big):
    _, results = big
    ddp = peak(results["ddp"])
    for name in ("zero3", "fsdp"):
        ratio = peak(results[name]) / ddp
        print(f"\n{name}: peak {peak(results[name]) / 2**30:.2f} GiB per rank = {ratio:.2f} x DDP's "
              f"{ddp / 2**30:.2f} GiB")
        assert ratio <= 0.75, name
        obs = results[name].observations
        assert obs["param_elements_local"] == pytest.approx(GPT_389M.num_params() / 2, rel=0.01)


def test_build_grows_each_rank_by_its_share_not_the_model(big, tmp_path):
    """No rank holds more of the model than its config says, not even while building it:
    the built-in GPT (ZeRO-3 and FSDP2) and a Hugging Face Llama of comparable size (ZeRO-3,
    transformers' own init on each module before it is partitioned) each grow a rank by at
    most 0.6x the whole model's fp32 bytes (its half is 0.5x)."""
    from tests.fixtures.trials import run_many

    _, results = big
    llama = TrialConfig(**{**BIG, "warmup_steps": 0, "zero_stage": 3,
                           "workload": HFWorkload(model_type="llama", config_overrides=LLAMA_400M)})
    hf = run_many({"llama": llama}, tmp_path, parallel=1)["llama"]
    assert hf.status is TrialStatus.ok, f"{hf.error_type}: {hf.error}\n{hf.log_tail}"
    assert hf.params == 400_332_288
    for name, r, params in (("gpt zero3", results["zero3"], GPT_389M.num_params()),
                            ("gpt fsdp", results["fsdp"], GPT_389M.num_params()),
                            ("llama zero3", hf, hf.params)):
        whole_fp32 = 4 * params
        growth = build_growth(r)
        print(f"\n{name}: build grew ranks by {[round(g / whole_fp32, 3) for g in growth]} x the model's "
              f"fp32 bytes ({whole_fp32 / 2**30:.2f} GiB) in {r.phase_s['build_model']:.1f} s")
        assert r.observations["model_built_as"] == "meta"
        assert max(growth) <= 0.6 * whole_fp32, name
    # DDP holds the whole model, by its config: its build grows by about the model.
    assert min(build_growth(results["ddp"])) >= 4 * GPT_389M.num_params()


def test_prescreen_predicts_sharded_peaks_within_15_percent_before_calibration(big):
    """The sweep's memory prescreen, before any trial of the engine calibrates it: with no
    calibration at all (the analytic figure), and with a calibration fitted on the DDP trial
    only (ZeRO-3 and FSDP2 then borrow DDP's runtime constant)."""
    from autotune.run.hardware import local_hardware
    from autotune.search.calibration import CalibrationPoint, MemoryGuard, fit_calibration, measured_peak_bytes

    configs, results = big
    hw = local_hardware()
    fresh = MemoryGuard(hw)
    ddp = fresh.predict(configs["ddp"])
    fit = fit_calibration([CalibrationPoint(ddp.estimate.analytic_bytes,
                                            measured_peak_bytes(results["ddp"])[0], ddp.engine, 0, 2)],
                          hw.key())
    after_ddp = MemoryGuard(hw)
    after_ddp.fit = fit
    for name in ("zero3", "fsdp"):
        measured = measured_peak_bytes(results[name])[0]
        for guard, when in ((fresh, "uncalibrated"), (after_ddp, "calibrated on DDP only")):
            verdict = guard.predict(configs[name])
            assert verdict.engine not in (fit.constant_bytes if guard is after_ddp else {})
            err = (verdict.predicted_bytes - measured) / measured
            print(f"\n{name} {when}: predicted {verdict.predicted_bytes / 2**30:.2f} GiB, measured "
                  f"{measured / 2**30:.2f} GiB ({err:+.1%}); {verdict.basis}")
            assert abs(err) <= 0.15, (name, when)
