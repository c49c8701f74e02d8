"""The CLI surface of pricing: `autotune cost` (worked examples, JSON, bad input),
`autotune plan` (analytic search, every figure estimated), and the study objective."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from autotune.contract import GPTWorkload, HardwareFingerprint, TrialConfig, TrialResult, TrialStatus
from autotune.pricing.load import load_catalog
from autotune.pricing.offers import HOURS_PER_MONTH
from autotune.report.options import bills_for_trial
from autotune.search.score import score_trial
from autotune.spec import SweepSpec

EXAMPLE = ("cost --gpu a100-80gb --gpus 1 --tokens-per-s 3200 --params 1.3e9 "
           "--global-batch-tokens 8192 --target-tokens 2e10 --run-gpus 8 --run-gpus 16").split()


def test_cost_help_shows_a_copyable_example(run_cli):
    r = run_cli("cost", "--help")
    assert r.returncode == 0
    flat = " ".join(r.stdout.split())
    assert "autotune cost --gpu a100-80gb --gpus 1 --tokens-per-s 3200" in flat
    for flag in ("--mfu", "--target-steps", "--global-batch-tokens", "--catalog", "--offer", "--json"):
        assert flag in flat


def test_cost_readme_example_ranks_by_cost_and_time_and_explains(cli):
    code, out, err = cli(*EXAMPLE, "--json")
    assert code == 0, err
    bills = json.loads(out)
    for b in bills:
        for key in ("offer", "pricing", "gpus", "hours", "gpu_hours", "usd", "usd_worst_case",
                    "checkpoint_interval_hours", "breakdown"):
            assert key in b
        assert b["throughput_basis"].startswith("projected from 3,200 tok/s at 1")
    assert [b["usd"] for b in bills] == sorted(b["usd"] for b in bills)
    on_p4de = {b["gpus"]: b for b in bills if b["offer"] == "aws-p4de-ondemand"}
    # On the same offer 16 GPUs (two nodes over 50 GB/s) finish sooner but cost more than 8.
    assert on_p4de[16]["hours"] < on_p4de[8]["hours"]
    assert on_p4de[16]["usd"] > on_p4de[8]["usd"]
    assert on_p4de[16]["scaling_efficiency"] < on_p4de[8]["scaling_efficiency"]
    code, out, err = cli(*EXAMPLE, "--offer", "aws-p4de-ondemand")
    assert code == 0, err
    assert "cheapest: aws-p4de-ondemand [8x a100-80gb]" in out
    assert "fastest:  aws-p4de-ondemand [16x a100-80gb]" in out
    assert "lower scaling efficiency" in out and "GPU-hours against" in out
    assert "example prices as of" in out


def test_cost_planning_from_mfu_and_steps_target(cli):
    code, out, err = cli("cost", "--gpu", "h100-sxm", "--mfu", "0.4", "--params", "7e9", "--target-steps", "1000",
                "--global-batch-tokens", "4e6", "--gpus", "8", "--zero-stage", "1", "--offer", "runpod-h100-sxm",
                "--json")
    assert code == 0, err
    [b] = json.loads(out)
    # 0.4 x 989 TFLOPS / (6 x 7e9 FLOPs/token) = 9,419 tok/s per GPU, less the all-reduce.
    assert b["tokens"] == 1000 * 4e6 and b["throughput_basis"].startswith("estimated: MFU 40%")
    assert 0.97 < b["tokens_per_s"] / (8 * 0.4 * 989e12 / 42e9) <= 1.0


@pytest.mark.parametrize("args, message", [
    (["--gpu", "h100-smx", "--tokens-per-s", "1", "--target-tokens", "1e9"], "did you mean 'h100-sxm'"),
    (["--gpu", "h100-sxm", "--target-tokens", "1e9"], "exactly one of --tokens-per-s"),
    (["--gpu", "h100-sxm", "--tokens-per-s", "1e3", "--target-steps", "10"], "--global-batch-tokens"),
    (["--gpu", "h100-sxm", "--tokens-per-s", "-5", "--target-tokens", "1e9"], "positive"),
    (["--gpu", "h100-sxm", "--tokens-per-s", "1e3", "--target-tokens", "1e9", "--offer", "lamda-h100-sxm"],
     "did you mean 'lambda-h100-sxm'"),
])
def test_cost_bad_input_is_one_line_exit_2(cli, args, message):
    code, out, err = cli("cost", *args)
    assert code == 2 and message in " ".join(err.split()) and "Traceback" not in err


def test_bad_input_through_a_real_subprocess(run_cli):
    r = run_cli("cost", "--gpu", "h100-smx", "--tokens-per-s", "1", "--target-tokens", "1e9")
    assert r.returncode == 2 and "did you mean 'h100-sxm'" in r.stderr and "Traceback" not in r.stderr


def test_plan_estimates_every_figure(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({
        "num_gpus": [1, 8], "micro_batch_size": [4], "precision": ["bf16"],
        "checkpointing": ["none", "full"], "zero_stage": [0, 3], "tp_degree": [1]}))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({
        "workload": {"kind": "gpt", "preset": "7b"}, "seq_len": 4096, "target": {"tokens": 1e11},
        "batch": {"global_batch_samples": 64}, "space": str(tmp_path / "space.yaml")}))
    code, out, err = cli("plan", "spec.yaml", "--gpu", "a100-40gb", "--gpu", "h100-sxm", "--json", "--top", "50")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["bills"] and all(b["throughput_basis"].startswith("estimated") for b in doc["bills"])
    assert any("no trial was run" in a for a in doc["assumptions"])
    # A 7B model with AdamW (16 B/param without sharding) fits no 40 GB GPU: only ZeRO-3 on 8 GPUs does.
    assert doc["not_fitting"] > 0
    for b in doc["bills"]:
        if b["gpu"] == "a100-40gb":
            assert "zero3" in b["config"] and b["gpus_used"] == 8
    assert [b["usd"] for b in doc["bills"]] == sorted(b["usd"] for b in doc["bills"])
    code, out, err = cli("plan", "spec.yaml", "--gpu", "h100-sxm")
    assert code == 0 and "estimated" in out and "check your provider" in out
    (tmp_path / "ep.yaml").write_text(yaml.safe_dump({"workload": {"kind": "entry_point",
                                                                   "entry_point": "m:f"}}))
    code, out, err = cli("plan", "ep.yaml")
    assert code == 2 and "entry-point" in err
    # A CPU core is in the catalog, but has no dense peak to plan at a fraction of: refused, not
    # answered (exit 0) with "no GPU type to plan on".
    code, out, err = cli("plan", "spec.yaml", "--gpu", "cpu-core")
    assert code == 2 and "--gpu cpu-core: not a GPU type" in err, out + err
    # A GPU whose peaks the catalog does not source: refused the same way, where it was planned to
    # "no GPU type to plan on (a10g lack sourced peaks ...)" with exit 0.
    code, out, err = cli("plan", "spec.yaml", "--gpu", "a10g")
    assert code == 2 and "--gpu a10g: the catalog sources no dense peak" in err and "--catalog FILE" in err, out + err


def test_plan_counts_ddps_fp32_gradients_and_deepspeeds_16_bit_ones(cli, tmp_path, monkeypatch):
    """DDP (ZeRO 0) all-reduces the fp32 gradients autocast keeps (trials/engines/ddp.py); bf16
    DeepSpeed ZeRO-1 reduces 16-bit ones. The plan counted 2 bytes for both, so both showed the
    same collective seconds (an audit's finding on the 1b preset: 0.0102 s each). Now DDP's
    all-reduce moves twice ZeRO-1's bytes, and fp32 training 4 bytes under either."""
    from autotune.estimate.scaling import grad_bytes_per_param

    assert [grad_bytes_per_param(p, z) for p, z in (("bf16", 0), ("bf16", 1), ("bf16", 3), ("fp32", 1))] == [4, 2, 2, 4]
    comm_s = _plan_1b_comm_s(cli, tmp_path, monkeypatch, {"zero_stage": [0, 1], "tp_degree": [1], "fsdp": ["none"]},
                             256, "zero1")
    assert set(comm_s) == {True, False}
    assert comm_s[False] == pytest.approx(2 * comm_s[True], rel=0.02), comm_s


def test_plan_plans_fsdp2_and_only_configs_a_trial_can_run(cli, tmp_path, monkeypatch):
    """The plan left the space's fsdp out (every FSDP2 config of the 7B example went unplanned,
    unsaid) and planned TP beside ZeRO 1-3, which no trial runs (autotune.search.space). Now
    FSDP2 configs are planned (its memory model, and a gather per pass plus a reduce-scatter of
    fp32 gradients every micro-step), and a config a sweep would never launch is never billed."""
    import re

    from autotune.estimate.scaling import CommModel

    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({
        "num_gpus": [8], "micro_batch_size": [1], "precision": ["bf16"], "checkpointing": ["none"],
        "zero_stage": [0, 3], "tp_degree": [1, 2], "offload": ["none"],
        "fsdp": ["none", "full_shard", "shard_grad_op"]}))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({
        "workload": {"kind": "gpt", "preset": "1b"}, "seq_len": 2048, "target": {"tokens": 1e11},
        "batch": {"global_batch_samples": 256}, "space": str(tmp_path / "space.yaml")}))
    code, out, err = cli("plan", "spec.yaml", "--gpu", "h100-sxm", "--json", "--top", "500")
    assert code == 0, err
    configs = {b["config"].split("bf16 ckpt:none")[1].strip(): b for b in json.loads(out)["bills"]}
    assert set(configs) == {"", "tp2", "zero3", "fsdp:full_shard", "fsdp:shard_grad_op",
                            "fsdp:full_shard tp2", "fsdp:shard_grad_op tp2"}, set(configs)

    def comm(label: str) -> float:
        return float(re.search(r"([\d.]+) s of collectives", configs[label]["throughput_basis"]).group(1))

    # A reduce-scatter (fp32) and two all-gathers (bf16) against DDP's fp32 all-reduce, every
    # micro-step (32 of them) against once: CommModel's volumes, in the plan's seconds.
    volume = {f: CommModel(params=1e9, grad_bytes_per_param=4, zero_stage=0, grad_accum_steps=32, fsdp=f)
              .bytes_per_rank(8) for f in ("none", "full_shard", "shard_grad_op")}
    assert volume["full_shard"] == pytest.approx(32 * 7 / 8 * (2 * 2 + 4) * 1e9)
    assert comm("fsdp:full_shard") / comm("") == pytest.approx(volume["full_shard"] / volume["none"], rel=0.05)
    assert comm("fsdp:shard_grad_op") < comm("fsdp:full_shard")
    mem = {k: float(re.search(r"memory ([\d.]+) GB", b["throughput_basis"]).group(1)) for k, b in configs.items()}
    assert mem["fsdp:full_shard"] < mem["fsdp:shard_grad_op"] < mem[""]


def test_a_space_with_fsdp_but_no_stage_0_is_refused(tmp_path):
    """FSDP2 runs at zero_stage 0: a space listing full_shard beside ZeRO 1-3 only (the 7B
    example's) never offered it, a setting accepted and not applied. Now refused, saying so."""
    from autotune.errors import UserError
    from autotune.search.space_file import load_space

    path = tmp_path / "space.yaml"
    path.write_text("zero_stage: [1, 2, 3]\nfsdp: [none, full_shard]\n")
    with pytest.raises(UserError, match="fsdp runs at zero_stage 0.*add 0 to zero_stage"):
        load_space(str(path))
    path.write_text("zero_stage: [0, 3]\nfsdp: [none, full_shard]\n")
    assert load_space(str(path)).fsdp[1].value == "full_shard"


def test_cost_at_fp8_says_what_fp8_training_reaches(cli):
    """cost takes the stated MFU of the fp8 peak (twice bf16's), so its fp8 bill ran 2x bf16's
    where `plan` plans 1.25x (an audit). The stated figure stays the user's; the basis now says
    what fp8 training measures and that plan uses it."""
    from autotune.estimate.compute import FP8_SPEEDUP_OVER_BF16

    args = ("cost", "--gpu", "h100-sxm", "--mfu", "0.4", "--params", "1.3e9", "--target-tokens", "1e10",
            "--offer", "runpod-h100-sxm", "--json")
    [fp8], [bf16] = (json.loads(cli(*args, "--precision", p)[1]) for p in ("fp8", "bf16"))
    assert fp8["tokens_per_s"] == pytest.approx(2 * bf16["tokens_per_s"], rel=0.01)
    assert f"fp8 training measures about {FP8_SPEEDUP_OVER_BF16:g}x bf16's tokens/s" in fp8["throughput_basis"]
    assert "fp8 training" not in bf16["throughput_basis"]


def _result(tokens_per_s: float, **kw) -> TrialResult:
    return TrialResult(status=TrialStatus.ok, tokens_per_s=tokens_per_s, params=1_000_000,
                       hardware=HardwareFingerprint(cpu_model="test-cpu"), **kw)


def test_score_trial_is_the_cheapest_offer_and_reports_can_reprice():
    catalog = load_catalog()
    cfg = TrialConfig(workload=GPTWorkload(preset="tiny"), seq_len=128, micro_batch_size=4, num_gpus=2)
    spec = SweepSpec(target={"tokens": 1e9})
    score = score_trial(_result(36_000.0), cfg, spec, catalog, "cpu-core")
    assert score is not None and score.offer == "aws-c7i-ondemand"
    # 1e9 tokens at 36,000 tok/s = 7.716 h of training + the offer's setup + the checkpoint
    # writes (the policy interval, at the offer's storage bandwidth), on 2 vCPUs (2 ranks x
    # 1 thread) at the offer's price, billed by the second; plus storage, the final model's
    # egress and the dataset's ingress at the offer's rates (the job's sizes as stored).
    offer, job = catalog.offer(score.offer), score.pricing_inputs["job"]
    vcpus = cfg.num_gpus * cfg.threads_per_rank
    assert offer.billing == "second" and offer.billed_gpus(vcpus) == vcpus == 2
    training_h = 1e9 / 36_000 / 3600
    writes_h = (training_h / job["checkpoint_interval_hours"]
                * job["checkpoint_bytes"] / (offer.storage_write_gb_per_s * 1e9) / 3600)
    assert score.hours == pytest.approx(offer.setup_hours + training_h + writes_h, rel=1e-9)
    billed_h = math.ceil(score.hours * 3600 - 1e-9) / 3600
    stored_gb = (job["dataset_bytes"] + job["checkpoints_kept"] * job["checkpoint_bytes"]) / 1e9
    assert score.usd == pytest.approx(
        billed_h * vcpus * offer.price_usd_per_gpu_hour
        + stored_gb * offer.storage_usd_per_gb_month * score.hours / HOURS_PER_MONTH
        + job["final_model_bytes"] / 1e9 * offer.egress_usd_per_gb
        + job["dataset_bytes"] / 1e9 * offer.ingress_usd_per_gb, rel=1e-9)
    assert score.basis.startswith("measured") and score.price_note.startswith("example prices")
    # The report's view: the stored inputs re-priced over a catalog, or the stored bills.
    import optuna

    t = optuna.trial.create_trial(values=[score.hours, score.usd], user_attrs={"score": score.model_dump()},
                                  distributions={}, params={})
    again = bills_for_trial(t, catalog)
    assert again and again[0]["usd"] == pytest.approx(score.usd)
    assert again[0]["sensitivity"]["plus_30pct_time_usd"] > score.usd
    assert bills_for_trial(t, None)[0]["offer"] == "aws-c7i-ondemand"


def test_loss_target_uses_the_trials_noise_scale():
    catalog = load_catalog()
    cfg = TrialConfig(workload=GPTWorkload(preset="tiny"), seq_len=128, micro_batch_size=4, num_gpus=1)
    spec = SweepSpec(target={"loss": 3.0, "reference_tokens": 1e9, "reference_global_batch_tokens": 1024})
    # B_noise 8 samples x 128 tokens = 1024 tokens = the reference batch; this trial's batch
    # is 512 tokens: E = 1e9 / (1 + 1) x (1 + 0.5) = 7.5e8 tokens.
    score = score_trial(_result(10_000.0, gradient_noise_scale=8.0), cfg, spec, catalog, "cpu-core")
    assert score.tokens_to_target == pytest.approx(7.5e8)
    assert "measured by this trial" in score.target_basis


def test_the_data_parallel_all_reduce_under_tp_moves_what_a_rank_holds(cli, tmp_path, monkeypatch):
    """Under TP each rank holds its share of the blocks and the whole embeddings and head
    (trials/engines/tp.py; ModelShape.tp_local_params), and all-reduces those gradients over its
    data-parallel group. The plan moved params / t, leaving the embeddings' share out (~8% of
    the 1b preset's gradient volume at TP 2)."""
    from autotune.estimate.compute import model_from_preset
    from autotune.estimate.scaling import CommModel, tp_bytes

    comm = _plan_1b_comm_s(cli, tmp_path, monkeypatch, {"zero_stage": [0], "tp_degree": [1, 2]}, 8, "tp2")
    model = model_from_preset("1b")
    ddp = CommModel(params=model.params, grad_bytes_per_param=4).bytes_per_rank(8)
    tp_part = tp_bytes(model.n_layers, model.d_model, 2048, 2, 2, grad_accum_steps=2)

    def tp2(local_params):
        return CommModel(params=model.params, grad_bytes_per_param=4, tp_degree=2, grad_accum_steps=2,
                         tp_bytes_per_step=tp_part, local_params=local_params).bytes_per_rank(4)

    held, split = tp2(model.tp_local_params(2)), tp2(None)
    assert held / split > 1.05  # the two rules differ by more than the check's tolerance
    assert comm[True] / comm[False] == pytest.approx(held / ddp, rel=0.01)


def _plan_1b_comm_s(cli, tmp_path, monkeypatch, space: dict, global_batch: int, label: str) -> dict[bool, float]:
    """`autotune plan` of the 1b preset at seq 2048 on 8 H100s over `space` (one precision,
    micro-batch 1): each bill's seconds of collectives, by whether its config names `label`."""
    import re

    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({
        "num_gpus": [8], "micro_batch_size": [1], "precision": ["bf16"], "checkpointing": ["none"],
        "offload": ["none"], **space}))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({
        "workload": {"kind": "gpt", "preset": "1b"}, "seq_len": 2048, "target": {"tokens": 1e11},
        "batch": {"global_batch_samples": global_batch}, "space": str(tmp_path / "space.yaml")}))
    code, out, err = cli("plan", "spec.yaml", "--gpu", "h100-sxm", "--json", "--top", "50")
    assert code == 0, err
    return {(label in b["config"]): float(re.search(r"([\d.]+) s of collectives", b["throughput_basis"]).group(1))
            for b in json.loads(out)["bills"]}


def test_a_tp_rank_is_planned_to_compute_what_the_plan_splits_and_the_rest_whole(cli, tmp_path, monkeypatch):
    """Each TP rank runs its share of the split matrices and attention heads, and the LM head and
    a mixture's routed experts whole (transformers' plans leave them out: tests/test_engines.py
    counts what a rank holds). The plan assumed tp x the speed of one GPU: for this mixture it
    billed TP 2 faster than two data-parallel GPUs, where each TP rank computes 82% of a token."""
    import re

    from autotune.estimate.compute import model_from_hf_config, tp_rank_flops_share

    moe = {"model_type": "qwen3_moe", "hidden_size": 1024, "intermediate_size": 3072, "moe_intermediate_size": 768,
           "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 64,
           "num_experts": 16, "num_experts_per_tok": 4, "vocab_size": 32000}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "moe.json").write_text(json.dumps(moe))
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({
        "num_gpus": [2], "micro_batch_size": [1], "precision": ["bf16"], "checkpointing": ["none"],
        "zero_stage": [0], "tp_degree": [1, 2], "offload": ["none"]}))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({
        "workload": {"kind": "hf", "config_path": "moe.json"}, "seq_len": 2048, "target": {"tokens": 1e10},
        "batch": {"global_batch_samples": 8}, "space": "space.yaml"}))
    code, out, err = cli("plan", "spec.yaml", "--gpu", "h100-sxm", "--json", "--top", "50")
    assert code == 0, err
    compute_s = {}
    for b in json.loads(out)["bills"]:
        coll, step = map(float, re.search(r"([\d.]+) s of collectives per ([\d.]+) s step", b["throughput_basis"]).groups())
        compute_s["tp2" in b["config"]] = step - coll
    share = tp_rank_flops_share(model_from_hf_config(moe), 2048, 2)
    assert share == pytest.approx(0.82, abs=0.01)
    # One TP-2 replica runs 8 micro-batches a step, each of 2 data-parallel ranks 4.
    assert compute_s[True] / compute_s[False] == pytest.approx(8 * share / 4, rel=0.02)
    dense = model_from_hf_config({**moe, "model_type": "qwen3"})
    assert 0.5 < tp_rank_flops_share(dense, 2048, 2) < 0.6  # its LM head whole on each rank
    # olmo2's plan gathers q, k and v whole: every rank runs the attention over all heads.
    olmo2 = model_from_hf_config({**moe, "model_type": "olmo2"})
    split_heads = olmo2.model_copy(update={"tp_gathered": (False, False)})
    whole_core = 12 * 8 * 1024 * 2048 / 2 / (6 * olmo2.matmul_params + 12 * 8 * 1024 * 2048)
    assert olmo2.tp_gathered == (True, False)
    assert tp_rank_flops_share(olmo2, 2048, 2) == pytest.approx(tp_rank_flops_share(split_heads, 2048, 2) + whole_core)


def test_the_plan_offers_no_tp_degree_a_models_key_value_heads_refuse(cli, tmp_path, monkeypatch):
    # Each TP rank holds whole key/value heads: a model with one runs no TP. The plan bounded
    # TP by the attention heads alone and billed TP 2, which the sweep would never launch.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "llama.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 2048, "intermediate_size": 5504, "num_hidden_layers": 16,
        "num_attention_heads": 16, "num_key_value_heads": 1, "vocab_size": 32000}))
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({
        "num_gpus": [8], "micro_batch_size": [1], "precision": ["bf16"], "checkpointing": ["none"],
        "zero_stage": [0], "tp_degree": [1, 2], "offload": ["none"]}))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({
        "workload": {"kind": "hf", "config_path": "llama.json"}, "seq_len": 2048, "target": {"tokens": 1e10},
        "batch": {"global_batch_samples": 64}, "space": "space.yaml"}))
    code, out, err = cli("plan", "spec.yaml", "--gpu", "h100-sxm", "--json", "--top", "50")
    assert code == 0, err
    configs = {b["config"] for b in json.loads(out)["bills"]}
    assert configs and not [c for c in configs if "tp2" in c], configs


def test_a_cpu_bill_counts_vcpu_hours_not_gpu_hours(cli):
    """The catalog prices a CPU offer per vCPU-hour (`autotune catalog`: "$0.045/vCPU-h"), but
    `cost` billed it as "1,111 GPU-h", "2 GPU(s)" and "per GPU-hour"; a GPU bill keeps GPU-h."""
    code, out, err = cli("cost", "--gpu", "cpu-core", "--gpus", "2", "--tokens-per-s", "500",
                         "--target-tokens", "1e9")
    assert code == 0, err
    text = " ".join(out.split())
    assert "GPU-h" not in text and "GPU(s)" not in text and "GPUs used" not in text, text
    assert "vCPUs used/billed" in text and " vCPU-h " in text and "2 vCPU(s)" in text and "vCPU-hours" in text
    rate = load_catalog().offer("aws-c7i-ondemand").price_usd_per_gpu_hour
    date = load_catalog().offer("aws-c7i-ondemand").price_date
    assert f"price of aws-c7i-ondemand: at ${rate:.4f}/vCPU-h, priced {date} (aws: AWS c7i.large" in text
    code, out, err = cli(*EXAMPLE)
    assert code == 0 and " GPU-h " in out and "vCPU" not in out
    # The JSON says what its counts count: without it gpu_hours read as GPU-hours.
    code, out, _ = cli("cost", "--gpu", "cpu-core", "--gpus", "2", "--tokens-per-s", "500",
                       "--target-tokens", "1e9", "--json")
    assert code == 0 and {b["price_unit"] for b in json.loads(out)} == {"vCPU"}
    code, out, _ = cli(*EXAMPLE, "--json")
    assert code == 0 and {b["price_unit"] for b in json.loads(out)} == {"GPU"}


def test_a_note_dates_only_the_prices_a_bill_used(cli, tmp_path, monkeypatch):
    """With no bill (every matching offer skipped, or none matching), `cost` and `plan` dated
    the whole catalog ("example prices as of 2025-06-01 to 2026-12-05") and warned that offers
    it never priced were stale; now they say no price was used, and which offers were skipped.
    With bills, the cheapest's own rate, source and date are named."""
    cat = load_catalog()
    code, out, err = cli("cost", "--gpu", "cpu-core", "--gpus", "2", "--tokens-per-s", "500",
                         "--target-tokens", "1e9", "--run-gpus", "1000", "--params", "1e6",
                         "--global-batch-tokens", "1000")
    assert code == 0, err
    text = " ".join(out.split())
    assert "no price used: no offer was billed (skipped: aws-c7i-ondemand)" in text, text
    assert "example prices as of" not in text and "warning" not in err, err
    code, out, err = cli("cost", "--gpu", "a10g", "--tokens-per-s", "500", "--target-tokens", "1e9")
    assert code == 0 and "no price used: no offer was billed (no offer matches)" in out and not err
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({
        "num_gpus": [8], "micro_batch_size": [1], "precision": ["bf16"], "checkpointing": ["full"],
        "zero_stage": [3], "tp_degree": [1]}))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({
        "workload": {"kind": "gpt", "preset": "1b"}, "seq_len": 2048, "target": {"tokens": 1e10},
        "batch": {"global_batch_samples": 64}, "space": str(tmp_path / "space.yaml")}))
    # No L4 offer sells 8 GPUs: no bill.
    code, out, err = cli("plan", "spec.yaml", "--gpu", "l4")
    assert code == 0 and out.strip().splitlines()[-1] == "no price used: no offer was billed", out
    assert "warning" not in err, err
    code, out, err = cli("plan", "spec.yaml", "--gpu", "l4", "--json")
    assert json.loads(out)["price_note"] == "no price used: no offer was billed"
    code, out, err = cli("plan", "spec.yaml", "--gpu", "h100-sxm", "--top", "1", "--json")
    doc = json.loads(out)
    shown = {b["offer"] for b in doc["bills"] + doc["fastest"]}
    assert doc["price_note"] == cat.price_note(shown)
    code, out, err = cli("plan", "spec.yaml", "--gpu", "h100-sxm", "--top", "1")
    top = cat.offer(doc["bills"][0]["offer"])
    assert (f"price of {top.name}: at ${doc['bills'][0]['price_usd_per_gpu_hour']:.3f}/GPU-h, priced "
            f"{top.price_date} ({top.provider}: {top.price_source})") in " ".join(out.split())


def test_plan_shows_configs_it_cannot_tell_apart_on_one_line(cli, tmp_path, monkeypatch):
    """On one GPU the plan's models move no bytes for ZeRO or FSDP2, and fp16 runs at bf16's
    peak: such configs tie to the cent on one offer. They fill one line with a note, not `--top`
    lines of the same figures (it showed ten copies of one bill and no other option)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({
        "num_gpus": [1, 2], "micro_batch_size": [4], "precision": ["bf16", "fp16"],
        "checkpointing": ["none"], "zero_stage": [0, 1, 2], "tp_degree": [1]}))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({
        "workload": {"kind": "gpt", "preset": "small"}, "seq_len": 1024, "target": {"tokens": 1e10},
        "space": str(tmp_path / "space.yaml")}))
    code, out, err = cli("plan", "spec.yaml", "--gpu", "h100-sxm", "--json", "--top", "500")
    assert code == 0, err
    bills = json.loads(out)["bills"]
    first = [b for b in bills if (b["offer"], b["usd"]) == (bills[0]["offer"], bills[0]["usd"])]
    assert len(first) == 6 and {b["gpus"] for b in first} == {1}  # bf16/fp16 x ZeRO 0-2
    code, out, err = cli("plan", "spec.yaml", "--gpu", "h100-sxm", "--top", "3")
    lines = out.split("cheapest\n", 1)[1].split("fastest\n", 1)[0].splitlines()
    ranked = [ln for ln in lines if ln.lstrip()[:1].isdigit()]
    assert len(ranked) == 3 and ranked[0].lstrip().startswith("1-6. ")
    assert lines[1].strip().startswith("the same estimate with zero1; zero2; fp16; fp16 zero1; +1 more")
    # Each line shown is another bill: no two lines the same offer at the same price.
    assert len({(ln.split(" on ")[1].split()[0], ln.split("  $")[1].split()[0]) for ln in ranked}) == 3


@pytest.mark.parametrize("space,global_batch,first", [
    # 7b at seq 4096 (140 GB on one GPU): ZeRO-3 over 8 GPUs, as of this test's writing.
    ({"num_gpus": [1], "micro_batch_size": [1]}, 8, ("`zero_stage: [0, 3]`", "`num_gpus: [1, ")),
    # A global batch of 12 splits over 12 ranks, not 8: the plan bills only counts that split it.
    ({"num_gpus": [1], "micro_batch_size": [1]}, 12, ("`zero_stage: [0, 3]`", "`num_gpus: [1, 12]`")),
    # TP 2: FSDP2 shards with it (the worker runs no ZeRO with TP), over dp x tp GPUs (8).
    ({"num_gpus": [2], "micro_batch_size": [4], "tp_degree": [2]}, 64,
     ("`fsdp: [none, full_shard]`", "`num_gpus: [2, ")),
])
def test_when_no_config_fits_the_plan_names_the_space_choices_that_make_one_fit(
        cli, tmp_path, monkeypatch, space, global_batch, first):
    """The plan said only "add more GPUs (num_gpus), ZeRO-3 or activation checkpointing to the
    space": now the changes `autotune estimate --gpu` finds for the smallest config, as the
    space's lists to type, each with its estimate per GPU. Typed into the space file, the
    first one is billed, at that estimate; the offload one loads, and the plan says it leaves
    offload out."""
    import re

    monkeypatch.chdir(tmp_path)
    space = {"precision": ["bf16"], "checkpointing": ["none"], "zero_stage": [0], "offload": ["none"], **space}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({
        "workload": {"kind": "gpt", "preset": "7b"}, "seq_len": 4096, "target": {"tokens": 1e10},
        "batch": {"global_batch_samples": global_batch}, "space": "space.yaml"}))
    code, out, err = cli("plan", "spec.yaml", "--gpu", "a100-40gb")
    assert code == 0, err  # the plan says why it bills nothing; it does not fail
    text = " ".join(out.split())
    assert "no config fits in memory (the smallest needs: a100-40gb" in text and "ZeRO-3 or activation" not in text
    changes = re.findall(r"((?:`[^`]+`(?: and )?)+) \(an estimated ([\d.]+) GB per GPU([^)]*)\)",
                         text.split("To fix: add to the space, for a100-40gb (36 GB usable): ", 1)[1])
    assert changes and all(part in changes[0][0] for part in first), text
    assert "tp_degree" not in space or "zero_stage" not in " ".join(c[0] for c in changes), text
    offload = [c for c in changes if "`offload: [none, optimizer+params]`" in c[0]]
    assert offload and re.match(r", \d+ GB of host memory each; the plan leaves offload out", offload[0][2]), text

    def planned(change: str) -> dict:
        typed = dict(space)
        for snippet in re.findall(r"`([^`]+)`", change):
            typed.update(yaml.safe_load(snippet))
        (tmp_path / "space.yaml").write_text(yaml.safe_dump(typed))
        code, out, err = cli("plan", "spec.yaml", "--gpu", "a100-40gb", "--json", "--top", "50")
        assert code == 0, err
        return json.loads(out)

    doc = planned(changes[0][0])
    assert doc["bills"] and doc["why_none"] is None, doc["why_none"]
    assert any(f"memory {changes[0][1]} GB of 40 GB" in b["throughput_basis"] for b in doc["bills"])
    doc = planned(offload[0][0])
    assert any(a.startswith("offload configs left out") for a in doc["assumptions"])


def test_the_space_changes_name_only_gpu_counts_the_global_batch_and_the_offers_allow():
    """A sharding change ran over the config's ranks doubled (8 for the 7b at seq 4096 on 36 GB),
    which a global batch of 12 cannot split, and up to 1,024 GPUs whatever the catalog sold.
    Now the fewest ranks that split the global batch, within the most GPUs an offer sells;
    where only more would fit, the change says so."""
    from autotune.estimate.compute import model_from_preset
    from autotune.estimate.memory import MemoryConfig
    from autotune.search.plan_fits import dp_choices, space_changes
    from autotune.search.space_file import SearchSpace

    mcfg = MemoryConfig(seq_len=4096, micro_batch_size=1, precision="bf16", checkpointing="none",
                        zero_stage=0, dp_degree=1, tp_degree=1, fsdp="none")
    assert dp_choices(mcfg, 12, 64)(1) == [1, 2, 3, 4, 6, 12]
    assert dp_choices(mcfg, 12, 64)(8) == []  # 12 samples do not split into micro-batches of 8
    assert dp_choices(mcfg, None, 64)(1) == [1, 2, 4, 8, 16, 32, 64]
    space = SearchSpace.model_validate({"precision": ["bf16"], "checkpointing": ["none"], "zero_stage": [0],
                                        "offload": ["none"], "num_gpus": [1], "micro_batch_size": [1]})
    model, gpu = model_from_preset("7b"), "a100-40gb"

    def said(usable_gb: float, global_batch: int | None, most: int) -> str:
        return space_changes(model, {gpu: mcfg}, {gpu: usable_gb * 1e9}, space, global_batch, {gpu: most}) or ""

    assert "`num_gpus: [1, 8]`" in said(36, None, 64) and "`num_gpus: [1, 12]`" in said(36, 12, 64)
    # Within 4 GPUs only offloading fits 36 GB: no ZeRO-3 over more GPUs than an offer sells.
    capped = said(36, 12, 4)
    assert "num_gpus" not in capped and "`offload: [none, optimizer+params]`" in capped, capped
    # At 6 GB nothing fits on 4; the change over 6 GPUs is named, with what it needs.
    assert said(6, 12, 4).endswith("(more GPUs than any a100-40gb offer sells, 4 at most: add a multi-node "
                                   "offer with --catalog FILE)")
    assert "`num_gpus: [1, 6]`" in said(6, 12, 4) and "offer sells" not in said(6, 12, 8)


def test_the_multi_node_counts_the_plan_adds_are_those_the_global_batch_splits_over(cli, tmp_path, monkeypatch):
    """The default space adds multi-node GPU counts for a model beyond one node; DeepSeek-V3
    (TP 1 only) at a global batch of 64 got 128-512 GPUs too, which no micro-batch splits it
    over, and the plan stopped with "no micro-batch in [1, 2, 4, 8, 16] meets global batch 64
    with 128 data-parallel ranks" (exit 2). Now those counts are left out, and it says so."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dsv3.json").write_text(json.dumps({
        "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 256,
        "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "q_lora_rank": 1536,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "vocab_size": 129280, "tie_word_embeddings": False, "hidden_act": "silu"}))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({
        "workload": {"kind": "hf", "config_path": "dsv3.json"}, "seq_len": 4096, "target": {"tokens": 1e10},
        "batch": {"global_batch_samples": 64}, "space": "default"}))
    code, out, err = cli("plan", "spec.yaml", "--gpu", "h100-sxm", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert any("also tries 16, 32, 64 GPUs" in a for a in doc["assumptions"]), doc["assumptions"]
    assert any(a.startswith("left out of the multi-node GPU counts: 128, 256, 512: the global batch (64 samples)")
               for a in doc["assumptions"]), doc["assumptions"]
