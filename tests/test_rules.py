"""One home per rule: the controller and the worker apply the same engine choice, host
fingerprint, FLOPs per token and accelerate precision names; the trial's defaults are
TrialConfig's everywhere; the Pareto front and hours read the same in every output. Each test
pins the rule by its values, then checks that the places that use it agree."""

from __future__ import annotations

import itertools

import pytest

from autotune.contract import (
    ACCELERATE_MIXED_PRECISION,
    GPT_PRESETS,
    DeviceKind,
    EngineKind,
    Launcher,
    Offload,
    Precision,
    TrainingKnobs,
    TrialConfig,
    engine_for,
)

# --- engine and launcher ---------------------------------------------------------------

@pytest.mark.parametrize("zero, tp, launcher, engine", [
    (0, 1, Launcher.torchrun, EngineKind.ddp),
    (0, 1, Launcher.deepspeed, EngineKind.deepspeed),  # DeepSpeed's engine at stage 0
    (0, 1, Launcher.accelerate, EngineKind.accelerate),
    (2, 1, Launcher.torchrun, EngineKind.deepspeed),   # ZeRO runs on DeepSpeed whoever launches
    (0, 2, Launcher.deepspeed, EngineKind.tensor_parallel),
    (0, 1, None, EngineKind.ddp),
    (3, 1, None, EngineKind.deepspeed),
])
def test_engine_choice(zero, tp, launcher, engine):
    assert engine_for(zero, tp, launcher) is engine


def test_the_memory_estimate_and_calibration_follow_the_engine_choice():
    from autotune.estimate.memory import MemoryConfig
    from autotune.search.calibration import calibration_group

    for zero, tp, launcher in itertools.product((0, 1, 3), (1, 2), list(Launcher)):
        if zero and tp > 1:
            continue  # never suggested (the worker refuses it)
        cfg = TrialConfig(zero_stage=zero, tp_degree=tp, num_gpus=2, launcher=launcher)
        mcfg = MemoryConfig.from_trial_config(cfg)
        deepspeed = engine_for(zero, tp, launcher) is EngineKind.deepspeed
        assert mcfg.resolved_engine == ("deepspeed" if deepspeed else "ddp"), (zero, tp, launcher)
        assert calibration_group(mcfg) == ("deepspeed-zero3" if zero == 3 else
                                           "deepspeed" if deepspeed else "ddp")


def test_a_sweep_launches_zero_with_deepspeed_unless_the_spec_says():
    from autotune.search.objective import launcher_for
    from autotune.spec import SweepSpec, TrialSettings

    assert launcher_for({"zero_stage": 2}, SweepSpec()) is Launcher.deepspeed
    assert launcher_for({"zero_stage": 0}, SweepSpec()) is Launcher.torchrun
    forced = SweepSpec(trial=TrialSettings(launcher=Launcher.accelerate))
    assert launcher_for({"zero_stage": 2}, forced) is Launcher.accelerate


# --- defaults ------------------------------------------------------------------------------

def test_spec_trial_settings_take_trialconfigs_defaults():
    from autotune.spec import TrialSettings

    settings, cfg = TrialSettings(), TrialConfig()
    for name in ("warmup_steps", "measure_steps", "max_measure_steps", "min_measure_s", "timeout_s", "threads_per_rank"):
        assert getattr(settings, name) == getattr(cfg, name), name
    assert (cfg.max_measure_steps, cfg.timeout_s) == (15, 300.0)  # the sweep's, as documented


def test_a_trial_measures_more_while_its_window_is_short_or_noisy_up_to_the_cap():
    cfg = TrialConfig()  # 5 steps, then on to 2 s or a CV of 0.15, 15 steps at most
    assert (cfg.measure_steps, cfg.min_measure_s, cfg.max_step_time_cv) == (5, 2.0, 0.15)
    assert cfg.measure_more([0.1] * 4, cv=0.0)  # under measure_steps
    assert cfg.measure_more([0.1] * 5, cv=0.0)  # 0.5 s: too short
    assert not cfg.measure_more([0.5] * 5, cv=0.0)  # 2.5 s, steady
    assert cfg.measure_more([0.5] * 5, cv=0.3)  # long enough, but noisy
    assert not cfg.measure_more([0.1] * 15, cv=0.3)  # the cap
    assert not TrialConfig(min_measure_s=0).measure_more([0.1] * 5, cv=0.0)


def test_the_default_window_floor_keeps_config_keys_and_another_floor_is_another_measurement():
    from autotune.search.reuse import config_key

    cfg = TrialConfig()
    before = cfg.model_dump(mode="json")
    del before["min_measure_s"]  # a record written before the floor existed
    assert config_key(TrialConfig.model_validate(before), "cpu:x") == config_key(cfg, "cpu:x")
    assert config_key(TrialConfig(min_measure_s=0.0), "cpu:x") != config_key(cfg, "cpu:x")


def test_memory_config_shares_trialconfigs_knobs_and_rules():
    from autotune.estimate.memory import MemoryConfig

    mem, cfg = MemoryConfig(), TrialConfig()
    for name in TrainingKnobs.model_fields:
        assert getattr(mem, name) == getattr(cfg, name), name
    for cls in (MemoryConfig, TrialConfig):
        with pytest.raises(ValueError, match="offload needs ZeRO"):
            cls(offload=Offload.optimizer)
        with pytest.raises(ValueError, match="parameter offload needs ZeRO stage 3"):
            cls(zero_stage=2, offload=Offload.optimizer_params)


# --- accelerate's precision names ----------------------------------------------------------

def test_accelerate_precision_names_in_launch_and_export(tmp_path):
    from autotune.report.export_accelerate import accelerate_config
    from autotune.report.export_launch import settings_env
    from autotune.run.argv import build_argv

    assert ACCELERATE_MIXED_PRECISION == {Precision.fp32: "no", Precision.bf16: "bf16",
                                          Precision.fp16: "fp16", Precision.fp8: "fp8"}
    for p in (Precision.fp32, Precision.bf16):
        cfg = TrialConfig(precision=p, launcher=Launcher.accelerate)
        argv = build_argv(cfg, tmp_path / "c.json", tmp_path / "r.json", port=1, python="py")
        assert argv[argv.index("--mixed_precision") + 1] == ACCELERATE_MIXED_PRECISION[p]
        assert accelerate_config(cfg)["mixed_precision"] == ACCELERATE_MIXED_PRECISION[p]
        assert dict(settings_env(cfg))["ACCELERATE_MIXED_PRECISION"] == ACCELERATE_MIXED_PRECISION[p]
        # With ZeRO the DeepSpeed config decides precision: accelerate refuses the key beside it.
        assert "mixed_precision" not in accelerate_config(cfg.model_copy(update={"zero_stage": 2}))


# --- hardware fingerprint ------------------------------------------------------------------

def test_worker_and_controller_fingerprint_the_host_alike():
    import torch

    from autotune.run.hardware import local_hardware
    from trials.hardware import fingerprint

    here = local_hardware()
    seen = fingerprint(torch.device("cpu"), world_size=2)
    for name in ("hostname", "cpu_model", "cpu_count", "host_memory_bytes"):
        assert getattr(seen, name) == getattr(here, name), name
    if here.device_kind is DeviceKind.cpu:
        assert seen.key() == here.key()  # results measured here are scored as this machine's


# --- FLOPs per token -----------------------------------------------------------------------

def test_flops_per_token_counts_matmul_parameters():
    """6N + 12*L*d*s with N the matmul parameters: the built-in GPT's learned positions are a
    lookup table, its token embedding counts once (the tied LM head). By hand for `tiny`."""
    from autotune.contract.flops import hardware_flops_per_token, model_flops_per_token
    from autotune.estimate.compute import flops_per_token, model_from_preset

    s = GPT_PRESETS["tiny"]  # 2 layers, d 128, vocab 2048, 256 positions
    matmul = s.num_params() - 256 * 128
    by_hand = 6 * matmul + 12 * 2 * 128 * 64
    assert model_flops_per_token(matmul, 2, 128, 64) == by_hand
    assert flops_per_token(model_from_preset("tiny"), 64) == by_hand
    assert hardware_flops_per_token(matmul, 2, 128, 64, 1.0) == 8 * matmul + 16 * 2 * 128 * 64


def test_the_worker_counts_the_same_matmul_parameters_as_the_estimate():
    import torch

    from autotune.contract import HFWorkload
    from autotune.estimate.compute import model_from_hf_config, model_from_preset
    from trials.workloads.build import build_workload

    gpt = build_workload(TrialConfig(seq_len=32), torch.device("cpu"))
    assert gpt.matmul_params == model_from_preset("tiny").matmul_params
    llama = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                 max_position_embeddings=128)
    hf = build_workload(TrialConfig(seq_len=32, workload=HFWorkload(
        model_type="llama", config_overrides={k: v for k, v in llama.items() if k != "model_type"})),
        torch.device("cpu"))
    assert hf.matmul_params == model_from_hf_config(llama).matmul_params
    # A mixture of experts: both count the top-k experts a token runs, not all of them (the
    # worker's MFU counted all 4 experts: 2.4x the N of the estimate; qwen2_moe adds a shared expert).
    for mt, moe in (("mixtral", dict(num_local_experts=4, num_experts_per_tok=1)),
                    ("qwen2_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                       shared_expert_intermediate_size=48))):
        sizes = {**{k: v for k, v in llama.items() if k != "model_type"}, **moe}
        built = build_workload(TrialConfig(seq_len=32, workload=HFWorkload(
            model_type=mt, config_overrides=sizes)), torch.device("cpu"))
        m = model_from_hf_config({"model_type": mt, **sizes})
        assert built.params == m.params and built.matmul_params == m.matmul_params < m.params, mt


# --- Pareto front and hours ----------------------------------------------------------------

def test_pareto_front_fronts_and_tracker():
    from autotune.search.pareto import FrontTracker, dominates, front, fronts

    pts = [(1, 5), (2, 2), (5, 1), (3, 3), (2, 2), (6, 6)]
    assert dominates((1, 1), (1, 2)) and not dominates((2, 2), (2, 2))
    assert front(pts, key=lambda p: p) == [(1, 5), (2, 2), (5, 1), (2, 2)]  # equal points both stay
    assert fronts(pts, key=lambda p: p) == [[(1, 5), (2, 2), (5, 1), (2, 2)], [(3, 3)], [(6, 6)]]
    tracker = FrontTracker()
    assert [tracker.add(p) for p in pts] == [True, True, True, False, False, False]


def test_hours_read_the_same_everywhere():
    from autotune.format import fmt_hours

    assert [fmt_hours(h) for h in (None, 0.5, 12.25, 72, 30000)] == \
        ["-", "30.0 min", "12.2 h", "3.0 d", "1,250.0 d"]
    assert fmt_hours(72, days_beside=True) == "72.0 h (3.0 d)"
    assert fmt_hours(12, days_beside=True) == "12.0 h"


def test_a_dollar_range_reads_at_one_precision():
    from autotune.format import fmt_usd_range

    assert fmt_usd_range(0.9057, 1.11) == "$0.91 to $1.11"  # fmt_usd alone: "$0.9057 to $1.11"
    assert fmt_usd_range(1234.5, 1500) == "$1,234.50 to $1,500.00"
    assert fmt_usd_range(0.0012, 0.0015) == "$0.0012 to $0.0015"  # under a dollar: fmt_usd's
    assert fmt_usd_range(0.004, 2.5) == "$0.0040 to $2.50"  # cents would show $0.00
