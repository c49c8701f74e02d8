"""The parallel engines change what runs, by an effect seen from inside the ranks: ZeRO-3
holds half the parameters per rank on 2 ranks, offload steps the optimizer with
DeepSpeedCPUAdam in host memory, bf16 changes the dtypes, TP=2 shards the linear weights and
still computes what one unsplit rank computes, FSDP2 and ZeRO-3 built from the meta device
train exactly what DDP trains. Real trials (tests/fixtures/engine_trials.py), run in worker
pools as a sweep runs them by default (the launchers' own tests, tests/test_launchers.py, run
theirs unpooled), plus the DeepSpeed config and the dispatch checked without launching anything.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from autotune.contract import DeviceKind, Offload, Precision, TrialConfig, TrialStatus, deepspeed_config
from tests.fixtures.engine_trials import CONFIGS, engine_trials

# The fp16 trials last: where the CPU refuses fp16 they fail, which ends their pool, and the
# trials before them in the same pool keep it.
NEEDED = ["deepspeed", "zero1_bf16", "zero2_offload", "zero3_offload", "single", "tp2",
          "tp2_dp2", "hf_single", "hf_tp2", "qwen3_single", "qwen3_tp2", "qwen3_fsdp_tp2", "qwen2_moe_tp2",
          "olmo2_1", "olmo2_2", "phi3_1", "phi3_2", "gpt_neox_1", "gpt_neox_2",
          "torchrun", "zero3", "fsdp", "fsdp_knobs",
          "fsdp_tp2_dp2", "zero_fp16", "fsdp_fp16"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return engine_trials(NEEDED, tmp_path_factory.getbasetemp() / "engine_trials_pooled", pooled=True)


def ok(r):
    assert r.status is TrialStatus.ok, f"{r.error_type}: {r.error}\n{r.log_tail}"
    return r.observations


# --- DeepSpeed ZeRO -----------------------------------------------------------------------


def test_zero3_holds_half_the_parameters_per_rank(runs):
    zero0, zero3 = ok(runs["deepspeed"]), ok(runs["zero3_offload"])
    assert zero0["zero_stage"] == 0 and zero3["zero_stage"] == 3
    total = zero0["param_elements_total"]
    assert zero3["param_elements_total"] == total
    assert zero0["param_elements_local"] == total  # stage 0: every rank holds every weight
    # Stage 3 on 2 ranks: half each (DeepSpeed pads each partition by a few elements).
    assert zero3["param_elements_local"] == pytest.approx(total / 2, rel=0.01)


@pytest.mark.parametrize("name,stage", [("zero1_bf16", 1), ("zero2_offload", 2)])
def test_zero1_and_zero2_run_and_partition_the_optimizer_state(runs, name, stage):
    obs, zero0 = ok(runs[name]), ok(runs["deepspeed"])
    assert obs["zero_stage"] == stage and obs["dp_world_size"] == 2
    total = obs["param_elements_total"]
    assert obs["param_elements_local"] == total  # stages 1-2 keep whole weights on every rank
    # Adam keeps two moments per element; stages 1-2 split them across the 2 ranks.
    assert obs["optimizer_state_elements_local"] == pytest.approx(2 * total / 2, rel=0.01)
    assert zero0["optimizer_state_elements_local"] == 2 * total


def test_deepspeed_steps_the_optimizer_at_accumulation_boundaries(runs):
    r = runs["zero1_bf16"]
    obs = ok(r)
    assert obs["ds_gradient_accumulation_steps"] == 2
    assert obs["micro_steps"] == 2 * obs["optimizer_steps"]
    cfg = CONFIGS["zero1_bf16"]
    assert obs["ds_train_batch_size"] == cfg.micro_batch_size * 2 * 2  # micro x accum x ranks


def test_bf16_under_deepspeed_changes_the_dtypes(runs):
    fp32, bf16 = ok(runs["deepspeed"]), ok(runs["zero1_bf16"])
    assert fp32["param_dtype"] == "torch.float32" and fp32["linear_output_dtype"] == "torch.float32"
    assert bf16["bf16"] is True
    assert bf16["param_dtype"] == "torch.bfloat16" and bf16["linear_output_dtype"] == "torch.bfloat16"
    # fp32 master weights and Adam moments stay in the optimizer.
    assert bf16["optimizer_state_dtypes"] == ["torch.float32"]


@pytest.mark.parametrize("name", ["zero2_offload", "zero3_offload"])
def test_offload_steps_the_optimizer_in_host_memory(runs, name):
    """On this CPU-only machine every tensor is in host memory anyway; what offload changes
    here is who steps the optimizer: DeepSpeedCPUAdam on the host partition instead of torch's
    AdamW (on a GPU the state devices would read cpu against cuda:N)."""
    obs, plain = ok(runs[name]), ok(runs["deepspeed"])
    assert obs["offload_optimizer"] is True and plain["offload_optimizer"] is False
    assert obs["optimizer_class"] == "DeepSpeedCPUAdam" and plain["optimizer_class"] == "AdamW"
    assert obs["optimizer_state_devices"] == ["cpu"]
    assert obs["ds_zero_config"]["offload_optimizer"]["device"] == "cpu"


def test_parameter_offload_at_stage3(runs):
    obs = ok(runs["zero3_offload"])
    assert obs["offload_param"] is True and obs["param_devices"] == ["cpu"]
    assert ok(runs["zero2_offload"])["offload_param"] is False


def deepspeed_supports_fp16_on_cpu() -> bool:
    """DeepSpeed's own answer, asked as the trial asks it (its CPU accelerator, in a fresh
    process like a rank): oneDNN's fp16 support, which depends on the CPU (an AMD EPYC without
    AVX512-FP16 says no, an Intel Xeon with AMX-FP16 says yes)."""
    probe = ("from deepspeed.accelerator import get_accelerator; "
             "print(bool(get_accelerator().is_fp16_supported()))")
    out = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "DS_ACCELERATOR": "cpu"},
                         capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip().splitlines()[-1] == "True"


def test_fp16_on_cpu_follows_deepspeeds_own_answer(runs):
    """Unsupported with DeepSpeed's reason on a CPU whose oneDNN lacks fp16; a real fp16
    trial where DeepSpeed says the CPU has it."""
    r = runs["zero_fp16"]
    if deepspeed_supports_fp16_on_cpu():
        obs = ok(r)
        assert obs["fp16"] is True and obs["param_dtype"] == "torch.float16"
    else:
        assert r.status is TrialStatus.unsupported, f"{r.status}: {r.error}\n{r.log_tail}"
        assert "fp16 is not supported on your device" in r.error


# --- tensor parallel ----------------------------------------------------------------------


def test_tp2_shards_the_linear_weights(runs):
    obs = ok(runs["tp2"])
    assert obs["tp_degree"] == 2 and obs["dp_degree"] == 1
    n_layers = CONFIGS["tp2"].workload.resolved_shape().n_layers
    assert obs["sharded_linears"] == 4 * n_layers
    for name, w in obs["tp_linear_weights"].items():
        assert w["dtensor"], name
        out_dim, in_dim = w["global_shape"]
        if name.endswith(("qkv", "up")):  # column-parallel: output rows split
            assert w["local_shape"] == [out_dim // 2, in_dim] and w["placements"] == ["S(0)"]
        else:  # row-parallel: input columns split
            assert w["local_shape"] == [out_dim, in_dim // 2] and w["placements"] == ["S(1)"]
    assert obs["param_elements_local"] < obs["param_elements_total"]


def test_tp2_computes_what_one_unsplit_rank_computes(runs):
    """Same weights, same tokens: the split model's loss after every step equals the unsplit
    one's (the fused qkv is laid out so each rank gets whole heads)."""
    one, tp2 = runs["single"], runs["tp2"]
    ok(one), ok(tp2)
    assert tp2.final_loss == pytest.approx(one.final_loss, rel=1e-5)


def test_tp2_splits_a_hugging_face_llama_by_its_own_plan(runs):
    obs = ok(runs["hf_tp2"])
    w = obs["tp_linear_weights"]
    # 4 query heads and 2 key/value heads of 16 dims, MLP 128: half of each per rank.
    assert w["model.layers.0.self_attn.q_proj"]["local_shape"] == [32, 64]
    assert w["model.layers.0.self_attn.k_proj"]["local_shape"] == [16, 64]
    assert w["model.layers.0.self_attn.o_proj"]["local_shape"] == [64, 32]
    assert w["model.layers.0.mlp.down_proj"]["local_shape"] == [64, 64]
    assert obs["sharded_linears"] == 7 * 2
    ok(runs["hf_single"])
    assert runs["hf_tp2"].final_loss == pytest.approx(runs["hf_single"].final_loss, rel=1e-5)


def test_tp2_runs_qwen3_with_its_q_and_k_norms_whole_and_their_gradients_summed(runs):
    """Qwen3's plan keeps q_norm and k_norm whole on every rank (`replicated_with_grad_allreduce`):
    each rank normalises its own heads with them, so its gradient is a share, summed over the
    TP group before the step, by the TP engine and by FSDP2 over a TP split. The copies stay
    equal on both ranks (unsummed they drift apart: 0.0021 after the trial's 4 steps) and
    training matches one unsplit rank."""
    obs = ok(runs["qwen3_tp2"])
    assert obs["tp_linear_weights"]["model.layers.0.self_attn.q_proj"]["local_shape"] == [32, 64]
    assert obs["sharded_linears"] == 7 * 2
    ok(runs["qwen3_single"])
    # The TP engine, and FSDP2 over the TP split (its 2-D mesh's engine), alike.
    for name in ("qwen3_tp2", "qwen3_fsdp_tp2"):
        obs = ok(runs[name])
        assert obs["grad_summed_weights"] == 2 * 2, name  # q_norm and k_norm of 2 layers
        assert obs["grad_summed_max_abs_diff"] == 0.0, name
        assert runs[name].final_loss == pytest.approx(runs["qwen3_single"].final_loss, rel=1e-5), name


@pytest.mark.parametrize("name", ["hf_tp2", "qwen3_tp2", "qwen2_moe_tp2", "olmo2_2", "phi3_2", "gpt_neox_2"])
def test_the_estimate_counts_the_parameters_and_activations_a_tp_rank_holds(runs, name):
    """A TP rank holds what its model's plan splits, halved, and the rest whole: embeddings,
    LM head, norms, row-parallel biases and a mixture's experts, router and shared expert,
    which transformers' plans leave out (ModelShape.tp_local_params). Counted from the
    config as `estimate` and `plan` count it, it equals what rank 0 of the real trial holds;
    so do the activations it keeps (the attention's and a dense MLP's split tensors by the
    rank's heads and width, the rest whole; tests/test_hf_shape.py pins them at TP 1)."""
    from autotune.estimate.memory import MemoryConfig, activation_parts
    from autotune.estimate.workload import model_from_workload

    shape = model_from_workload(CONFIGS[name].workload)
    obs = ok(runs[name])
    assert obs["param_elements_total"] == shape.params
    assert obs["param_elements_local"] == shape.tp_local_params(2)
    parts = activation_parts(shape, MemoryConfig.from_trial_config(CONFIGS[name]))
    assert parts is not None
    assert obs["activation_saved_bytes"] == parts["kept"] + parts["kept_logits"]


@pytest.mark.parametrize("mt", ["olmo2", "phi3", "gpt_neox"])
def test_tp2_runs_the_plans_that_gather_outputs_or_split_the_embedding(runs, mt):
    """olmo2's plan gathers q, k and v whole (its norms run over all heads) and splits o's whole
    input; phi3's gathers its fused qkv and gate_up; gpt_neox's splits the embedding by
    vocabulary rows (trials/engines/tp.py SPLIT_STYLES). Each rank holds its shards, as the
    estimate counts them (and keeps the activations it counts, above), and training matches
    one unsplit rank."""
    from autotune.estimate.workload import model_from_workload

    obs = ok(runs[f"{mt}_2"])
    ok(runs[f"{mt}_1"])
    assert obs["sharded_linears"] > 0
    assert obs["param_elements_local"] == model_from_workload(CONFIGS[f"{mt}_2"].workload).tp_local_params(2)
    assert runs[f"{mt}_2"].final_loss == pytest.approx(runs[f"{mt}_1"].final_loss, rel=1e-5)


def test_tp_with_data_parallel_on_a_2d_mesh(runs):
    r = runs["tp2_dp2"]
    obs = ok(r)
    assert obs["mesh_shape"] == [2, 2] and obs["dp_degree"] == 2 and r.world_size == 4
    assert obs["tp_linear_weights"]["blocks.0.mlp.up"]["local_shape"][0] == 4 * 128 // 2
    # Rank 0 trains on the same tokens as in the 2-rank TP trial; its loss differs only
    # because the other data-parallel replica's gradients were averaged in.
    assert r.final_loss != pytest.approx(runs["tp2"].final_loss, rel=1e-6)


# --- sharded builds and FSDP2 ---------------------------------------------------------------


def test_sharded_builds_train_what_ddp_trains(runs):
    """Same seed, same tokens, fp32: FSDP2 and ZeRO-3, each rank materialising only its
    shard from the meta device, start from DDP's very weights and end at its loss."""
    ddp = runs["torchrun"]
    fsdp, zero3 = ok(runs["fsdp"]), ok(runs["zero3"])
    for obs in (fsdp, zero3):
        assert obs["model_built_as"] == "meta"
        assert obs["param_elements_local"] == pytest.approx(obs["param_elements_total"] / 2, rel=0.01)
    assert fsdp["engine"] == "fsdp2" and fsdp["reshard_after_forward"] is True and fsdp["fsdp_units"] == 3
    assert runs["fsdp"].final_loss == pytest.approx(ddp.final_loss, rel=1e-6)
    # DeepSpeed steps an fp32 master copy of its partition: the same math, other rounding.
    assert runs["zero3"].final_loss == pytest.approx(ddp.final_loss, rel=1e-4)
    assert zero3["ds_zero_config"]["stage3_max_reuse_distance"] == 12 * 128 * 128  # tiny: d_model 128


def test_fsdp2_knobs_reach_fully_shard(runs):
    obs = ok(runs["fsdp_knobs"])
    assert obs["fsdp"] == "shard_grad_op" and obs["reshard_after_forward"] is False
    # MixedPrecisionPolicy: bf16 compute on fp32 shards and fp32 optimizer state
    assert obs["mp_param_dtype"] == "torch.bfloat16" and obs["linear_output_dtype"] == "torch.bfloat16"
    assert obs["param_dtype"] == "torch.float32" and obs["optimizer_state_dtypes"] == ["torch.float32"]
    # CPUOffloadPolicy: shards and optimizer state in host memory (on this CPU machine there is
    # no other memory; on a GPU the compute would run on cuda:N with these on cpu)
    assert obs["cpu_offload"] is True and obs["param_devices"] == ["cpu"]


def test_fsdp2_composes_with_tp_on_a_2d_mesh(runs):
    r, tp = runs["fsdp_tp2_dp2"], runs["tp2_dp2"]
    obs = ok(r)
    assert obs["mesh_shape"] == [2, 2] and obs["tp_degree"] == 2 and obs["dp_degree"] == 2
    # TP halves the sharded linears, FSDP halves every weight again over the dp ranks.
    assert obs["param_elements_local"] < ok(tp)["param_elements_local"]
    # The same weights and tokens as TP with DDP-style averaging over dp: the same loss.
    assert r.final_loss == pytest.approx(tp.final_loss, rel=1e-5)


def test_fsdp2_fp16_is_unsupported_with_the_reason(runs):
    r = runs["fsdp_fp16"]
    assert r.status is TrialStatus.unsupported, f"{r.status}: {r.error}\n{r.log_tail}"
    assert "GradScaler" in r.error and "To fix" in r.error


# --- no launch: the DeepSpeed config and the dispatch -------------------------------------


def test_deepspeed_config_is_the_trial():
    cfg = TrialConfig(num_gpus=4, micro_batch_size=3, grad_accum_steps=2, zero_stage=3,
                      offload=Offload.optimizer_params, precision=Precision.bf16,
                      device=DeviceKind.cuda)
    ds = deepspeed_config(cfg)
    assert ds["train_batch_size"] == 3 * 2 * 4
    assert ds["train_micro_batch_size_per_gpu"] == 3 and ds["gradient_accumulation_steps"] == 2
    assert ds["bf16"] == {"enabled": True} and ds["fp16"]["enabled"] is False
    assert ds["zero_optimization"] == {
        "stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "offload_param": {"device": "cpu", "pin_memory": True}}
    # Offloaded: DeepSpeed builds DeepSpeedCPUAdam from "AdamW" (no torch_adam).
    assert ds["optimizer"]["type"] == "AdamW" and "torch_adam" not in ds["optimizer"]["params"]


def test_deepspeed_config_without_offload_uses_torch_adamw():
    ds = deepspeed_config(TrialConfig(num_gpus=2, zero_stage=1, precision=Precision.fp16))
    assert "offload_optimizer" not in ds["zero_optimization"]
    assert ds["optimizer"]["params"]["torch_adam"] is True
    assert ds["fp16"]["enabled"] is True and ds["fp16"]["loss_scale"] == 0  # dynamic scaling
    assert ds["train_batch_size"] == 2


def test_deepspeed_config_lets_sgd_run_under_zero():
    plain = deepspeed_config(TrialConfig(optimizer="sgd"))
    assert plain["optimizer"] == {"type": "SGD", "params": {"lr": 3e-4, "momentum": 0.9}}
    assert "zero_allow_untested_optimizer" not in plain
    off = deepspeed_config(TrialConfig(optimizer="sgd", zero_stage=2, offload=Offload.optimizer))
    # Without these DeepSpeed refuses torch's SGD under ZeRO, and offloaded.
    assert off["zero_allow_untested_optimizer"] is True and off["zero_force_ds_cpu_optimizer"] is False


def test_zero_with_tp_is_unsupported_with_the_fix():
    import torch

    from trials.engines import build_engine
    from trials.errors import UnsupportedConfig
    from trials.workloads.gpt import GPT

    cfg = TrialConfig(num_gpus=2, tp_degree=2, zero_stage=1)
    with pytest.raises(UnsupportedConfig, match="To fix"):
        build_engine(cfg, GPT(cfg.workload.resolved_shape()), torch.device("cpu"), 2)


@pytest.mark.parametrize("tp,why", [(3, "n_heads"), (2, "built-in GPT")])
def test_tp_degrees_that_cannot_split_are_unsupported(tp, why):
    import torch

    from trials.engines.tp import check_tp_shape
    from trials.errors import UnsupportedConfig
    from trials.workloads.gpt import GPT

    model = GPT(TrialConfig().workload.resolved_shape()) if why == "n_heads" else torch.nn.Linear(4, 4)
    with pytest.raises(UnsupportedConfig, match=why):
        check_tp_shape(model, tp, world_size=6)


def test_the_space_never_suggests_zero_with_tp():
    import optuna

    from autotune.contract import HardwareFingerprint
    from autotune.search.space import capabilities_for, restrict, suggest
    from autotune.search.space_file import SearchSpace

    hw = HardwareFingerprint(device_kind=DeviceKind.cpu, cpu_count=8)
    caps = capabilities_for(hw)
    assert caps.zero_stages == {0, 1, 2, 3} and caps.tensor_parallel and caps.offload
    rs = restrict(SearchSpace(num_gpus=[2], tp_degree=[1, 2], zero_stage=[0, 1, 2, 3]), caps, n_heads=4)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(60):
        values = suggest(study.ask(), rs)
        assert not (values["tp_degree"] > 1 and values["zero_stage"] > 0), values
        seen.add((values["tp_degree"], values["zero_stage"]))
    assert (2, 0) in seen and any(z > 0 for _, z in seen)
    # A space without stage 0 cannot run TP at all: it is dropped, and said so.
    no_zero0 = restrict(SearchSpace(num_gpus=[2], tp_degree=[1, 2], zero_stage=[1, 3]), caps, n_heads=4)
    assert no_zero0.tp_degree == [1] and no_zero0.dropped["tp_degree"] == [2]
