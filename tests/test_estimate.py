"""The analytic models against their sources: the ZeRO paper's worked example, Korthikanti
et al.'s per-layer formulas, exact parameter counts, and the `autotune estimate` CLI."""

from __future__ import annotations

import json

import pytest

from autotune.api.plan import DEFAULT_SAFETY_MARGIN
from autotune.contract import GPT_PRESETS, Checkpointing, Offload, Precision
from autotune.estimate.compute import (
    flops_per_token,
    hardware_flops_per_token,
    mfu,
    model_from_hf_config,
    model_from_params,
    model_from_preset,
)
from autotune.estimate.memory import (
    MemoryConfig,
    estimate_memory,
    korthikanti_layer_bytes,
    layer_activation_bytes,
    model_state_bytes,
)
from autotune.pricing.load import load_catalog

GB = 1e9


# --- ZeRO paper (Rajbhandari et al. 2019), sec. 5 / Figure 1: 7.5B parameters, Nd = 64,
# mixed-precision Adam (K = 12): 120 GB, 31.4 GB, 16.6 GB, 1.9 GB for stages 0..3.
@pytest.mark.parametrize("stage,expected_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_model_states_match_zero_paper_worked_example(stage, expected_gb):
    m = model_from_params(int(7.5e9))
    cfg = MemoryConfig(seq_len=1024, precision=Precision.fp16, zero_stage=stage, dp_degree=64,
                       engine="deepspeed")
    s = model_state_bytes(m, cfg)
    total_gb = (s["weights"] + s["gradients"] + s["optimizer"]) / GB
    assert total_gb == pytest.approx(expected_gb, abs=0.05)
    # and the split: 2 bytes fp16 weights, 2 bytes fp16 gradients, 12 bytes Adam (master + m + v)
    if stage == 0:
        assert (s["weights"], s["gradients"], s["optimizer"]) == (15 * GB, 15 * GB, 90 * GB)


def test_torch_autocast_layout_has_same_16_bytes_split_differently():
    # DDP + autocast: fp32 weights (4) and gradients (4), Adam m and v (8): still 16 bytes.
    m = model_from_params(10**9)
    s = model_state_bytes(m, MemoryConfig(seq_len=8, precision=Precision.bf16))
    assert (s["weights"], s["gradients"], s["optimizer"]) == (4 * 10**9, 4 * 10**9, 8 * 10**9)


def test_offload_moves_optimizer_and_params_to_host():
    m = model_from_params(10**9)
    base = dict(seq_len=8, precision=Precision.bf16, zero_stage=3, dp_degree=4)
    on_device = model_state_bytes(m, MemoryConfig(**base))
    opt = model_state_bytes(m, MemoryConfig(**base, offload=Offload.optimizer))
    both = model_state_bytes(m, MemoryConfig(**base, offload=Offload.optimizer_params))
    assert opt["optimizer"] == 0 and opt["host"] == on_device["optimizer"] + 4 * 10**9 // 4
    assert both["weights"] == 0 and both["host"] == opt["host"] + on_device["weights"]
    with pytest.raises(ValueError, match="needs ZeRO"):
        MemoryConfig(seq_len=8, offload=Offload.optimizer)


def test_optimizers_sgd_and_adafactor_hold_less_state_than_adamw():
    m = model_from_preset("1b")
    per = {o: model_state_bytes(m, MemoryConfig(seq_len=8, precision=Precision.fp32, optimizer=o))["optimizer"]
           for o in ("adamw", "sgd", "adafactor")}
    assert per["adamw"] == 8 * m.params and per["sgd"] == 4 * m.params
    # factored second moment: rows + columns per matrix, well under 1% of the parameters
    assert 0 < per["adafactor"] < 0.01 * 4 * m.params


def test_tp_divides_model_states():
    m = model_from_params(8 * 10**9)
    one = model_state_bytes(m, MemoryConfig(seq_len=8, tp_degree=1))
    four = model_state_bytes(m, MemoryConfig(seq_len=8, tp_degree=4))
    assert four["weights"] * 4 == one["weights"]


# --- DeepSpeed buffers sized to the model, ZeRO-3's gathered working set, FSDP2
def test_deepspeed_buffers_follow_the_hugging_face_auto_rules():
    from autotune.contract import TrialConfig, deepspeed_buffer_sizes, deepspeed_config

    h = 4096  # transformers' trainer_config_finalize: h², 0.9·h², 10·h
    assert deepspeed_buffer_sizes(h, 2) == {"reduce_bucket_size": 16_777_216}
    z3 = deepspeed_buffer_sizes(h, 3)
    assert (z3["reduce_bucket_size"], z3["stage3_prefetch_bucket_size"],
            z3["stage3_param_persistence_threshold"]) == (16_777_216, 15_099_494, 40_960)
    assert z3["stage3_max_reuse_distance"] == z3["stage3_max_live_parameters"] == 12 * h * h
    cfg = TrialConfig(num_gpus=2, zero_stage=3)
    assert deepspeed_config(cfg, hidden_size=h)["zero_optimization"] == {"stage": 3, **z3}
    # No hidden size (an entry point that does not state it): DeepSpeed's defaults.
    assert deepspeed_config(cfg)["zero_optimization"] == {"stage": 3}


def test_zero3_gathered_parameters_are_their_own_figure_not_weights():
    """ZeRO-3 holds Ψ/Nd of the weights (the paper's model state); what it gathers to compute
    is reported apart. Sized to the model: about one layer (12h² + 0.9h²) or the largest
    module, the 7B preset's embedding (32000 x 4096); with DeepSpeed's defaults (no hidden
    size) a model under 1e9 parameters stays gathered whole."""
    m = model_from_preset("7b")
    est = estimate_memory(m, MemoryConfig(seq_len=1024, precision=Precision.bf16, zero_stage=3, dp_degree=8))
    assert est.weights_bytes == int(m.params * 2 / 8)  # 16-bit partition, own share only
    h = m.d_model
    assert est.gathered_bytes == int(max(12.9 * h * h, 32000 * h) * 2)
    doc = est.as_dict()
    assert doc["detail"]["gathered_params_bytes"] == est.gathered_bytes <= doc["other_bytes"]
    small = model_from_params(300_000_000)  # no shapes: DeepSpeed's defaults, whole model live
    whole = estimate_memory(small, MemoryConfig(seq_len=8, precision=Precision.bf16, zero_stage=3, dp_degree=8))
    assert whole.gathered_bytes == 300_000_000 * 2


def test_fsdp2_shards_states_like_zero3_and_gathers_a_block_at_a_time():
    from autotune.contract import FSDPMode

    m = model_from_preset("1b")
    base = dict(seq_len=1024, precision=Precision.bf16, dp_degree=8)
    full = estimate_memory(m, MemoryConfig(**base, fsdp=FSDPMode.full_shard))
    # fp32 shards of weights, gradients and Adam's two moments: 16 bytes / 8 ranks
    assert (full.weights_bytes, full.gradients_bytes, full.optimizer_bytes) == (
        int(m.params * 4 / 8), int(m.params * 4 / 8), int(m.params * 8 / 8))
    block = m.block_params
    root = m.params - m.n_layers * block  # embeddings and final norm
    assert block == 12 * 2048**2 + 13 * 2048
    assert full.gathered_bytes == int((root + 2 * block) * 2)  # bf16 gathers: root + 2 blocks
    grad_op = estimate_memory(m, MemoryConfig(**base, fsdp=FSDPMode.shard_grad_op))
    assert grad_op.gathered_bytes == m.params * 2  # every block stays gathered until backward
    off = estimate_memory(m, MemoryConfig(**base, fsdp=FSDPMode.full_shard, offload=Offload.optimizer_params))
    assert off.weights_bytes == off.optimizer_bytes == 0 and off.host_bytes == int(m.params * 16 / 8)
    with pytest.raises(ValueError, match="FSDP2.s CPU offload moves"):
        MemoryConfig(**base, fsdp=FSDPMode.full_shard, offload=Offload.optimizer)


def test_a_model_given_by_params_and_shape_gathers_blocks_under_fsdp2_like_a_preset():
    """`estimate --params N --layers L --hidden d` knew no block size, so FSDP2 full_shard
    counted the whole model as gathered, the same as shard_grad_op (an audit: 13.48 GB gathered
    for 6.74e9 parameters, where the same shape from a config gathers two blocks). Given the
    1b preset's count and shape, the gathers now match the preset's."""
    from autotune.contract import FSDPMode

    preset = model_from_preset("1b")
    given = model_from_params(preset.params, n_layers=preset.n_layers, d_model=preset.d_model,
                              n_heads=preset.n_heads, vocab_size=preset.vocab_size)
    assert given.block_params == preset.block_params
    base = dict(seq_len=1024, precision=Precision.bf16, dp_degree=8)
    full, grad_op = (estimate_memory(given, MemoryConfig(**base, fsdp=f))
                     for f in (FSDPMode.full_shard, FSDPMode.shard_grad_op))
    assert full.gathered_bytes == estimate_memory(preset, MemoryConfig(**base, fsdp=FSDPMode.full_shard)).gathered_bytes
    assert full.gathered_bytes < grad_op.gathered_bytes / 4
    assert model_from_params(preset.params).block_params is None  # no shape: nothing assumed


# --- Korthikanti et al. 2022, sec. 4, for a GPT-3-sized layer (s=2048, h=12288, a=96, t=8).
GPT3 = dict(s=2048, b=1, h=12288, a=96)


def test_activation_count_reproduces_korthikanti_closed_forms_for_gpt3_layer():
    s, b, h, a = GPT3.values()
    sbh = s * b * h
    assert 5 * a * s / h == 80  # the paper's point: the attention term dwarfs the 34 for GPT-3
    # Under the paper's assumptions (16-bit, dropout, eager attention) our tensor-by-tensor
    # count equals each closed form.
    no_tp = layer_activation_bytes(s, b, h, a, 1)
    assert no_tp == korthikanti_layer_bytes(s, b, h, a, 1) == sbh * (34 + 80)
    tp8 = layer_activation_bytes(s, b, h, a, 8)
    assert tp8 == pytest.approx(korthikanti_layer_bytes(s, b, h, a, 8)) == pytest.approx(sbh * (10 + 24 / 8 + 80 / 8))
    sp8 = layer_activation_bytes(s, b, h, a, 8, sequence_parallel=True)
    assert sp8 == pytest.approx(korthikanti_layer_bytes(s, b, h, a, 8, sequence_parallel=True))
    sel = layer_activation_bytes(s, b, h, a, 8, attention="recompute", sequence_parallel=True)
    assert sel == pytest.approx(korthikanti_layer_bytes(s, b, h, a, 8, "selective", True)) == pytest.approx(34 * sbh / 8)
    assert korthikanti_layer_bytes(s, b, h, a, 8, "full") == 2 * sbh
    # GPT-3 layer, t=8 with SP and selective recompute: 34 * 2048 * 12288 / 8 bytes = 107 MB
    assert sel / 1e6 == pytest.approx(106.95, abs=0.01)


def test_built_in_gpt_term_is_fused_attention_without_dropout():
    # torch SDPA keeps the output and a fp32 log-sum-exp, never the s x s scores; no dropout.
    s, b, h, a = GPT3.values()
    fused = layer_activation_bytes(s, b, h, a, 1, attention="fused", dropout=False)
    assert fused == 32 * s * b * h + 4 * a * s * b


def test_activation_estimate_follows_checkpointing():
    m = model_from_preset("small")
    base = dict(seq_len=1024, micro_batch_size=4, precision=Precision.bf16)
    none, sel, full = (estimate_memory(m, MemoryConfig(**base, checkpointing=c)).activations_bytes
                       for c in (Checkpointing.none, Checkpointing.selective, Checkpointing.full))
    assert none > sel > full > 0
    four = estimate_memory(m, MemoryConfig(**{**base, "micro_batch_size": 8})).activations_bytes
    assert four == pytest.approx(2 * none, rel=1e-6)  # linear in the micro-batch


# --- parameter counts and FLOPs
def test_preset_counts_are_exact_gpt_counts():
    for name, shape in GPT_PRESETS.items():
        assert model_from_preset(name).params == shape.num_params()


def test_hf_config_counts_match_transformers_on_meta_device():
    """Instantiate each family with transformers (meta device, no weights) and compare."""
    import torch
    import transformers
    cases = {
        "llama": dict(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=500, tie_word_embeddings=False),
        "qwen2": dict(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=500, tie_word_embeddings=True),
        "gpt2": dict(n_embd=64, n_layer=2, n_head=4, vocab_size=500, n_positions=128,
                     bos_token_id=0, eos_token_id=0),
        "gpt_neox": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, vocab_size=500),
    }
    for mt, kw in cases.items():
        cfg = transformers.AutoConfig.for_model(mt, **kw)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg)
        real = sum(p.numel() for p in model.parameters())
        assert model_from_hf_config(cfg.to_dict()).params == real, mt


def test_llama2_7b_config_json(tmp_path):
    # meta-llama/Llama-2-7b-hf config.json fields; 6,738,415,616 parameters (HF model card).
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
                             "num_hidden_layers": 32, "num_attention_heads": 32,
                             "num_key_value_heads": 32, "vocab_size": 32000,
                             "tie_word_embeddings": False}))
    m = model_from_hf_config(p)
    assert m.params == 6_738_415_616
    # 6N (N without the input embedding lookup) + 12 L d s
    assert flops_per_token(m, 4096) == 6 * (m.params - 32000 * 4096) + 12 * 32 * 4096 * 4096


def test_flops_hfu_and_mfu():
    m = model_from_preset("1b")
    s = 2048
    f = flops_per_token(m, s)
    assert f == 6 * m.matmul_params + 12 * m.n_layers * m.d_model * s
    # Full recompute re-runs the blocks' forward, not the LM head: the blocks' share of N.
    share = m.n_layers * m.block_params / m.matmul_params
    assert 0.5 < share < 1.0
    assert hardware_flops_per_token(m, s, "full") == pytest.approx(
        f + share * (2 * m.matmul_params + 4 * m.n_layers * m.d_model * s))
    assert hardware_flops_per_token(m, s, "none") == f
    # Known by its count alone: all of one forward again (8N, as PaLM's Appendix B counts it).
    n = model_from_params(int(1e9))
    assert hardware_flops_per_token(n, s, "full") == 8 * n.matmul_params
    assert mfu(1000.0, f, 2, 1e12) == pytest.approx(1000.0 * f / 2e12)
    assert mfu(1000.0, f, 2, None) is None


# --- the CLI (a real subprocess)
def test_cli_json_keys_and_fits(run_cli):
    r = run_cli("estimate", "--model", "7b", "--seq-len", "4096", "--micro-batch", "2",
                "--zero-stage", "2", "--dp", "8", "--precision", "bf16", "--gpu", "a100-40gb", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for key in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                "other_bytes", "total_bytes", "host_bytes", "params", "flops_per_token", "fits"):
        assert key in doc, key
    parts = sum(doc[k] for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes",
                                 "activations_bytes", "other_bytes"))
    assert parts == doc["total_bytes"]
    assert doc["params"] == GPT_PRESETS["7b"].num_params()
    # `fits`: the total within the catalog GPU's memory less the stated safety margin.
    gpu_mem = load_catalog().gpu_type("a100-40gb").memory_bytes
    usable = gpu_mem * (1 - DEFAULT_SAFETY_MARGIN)
    assert doc["gpu_memory_bytes"] == gpu_mem and doc["safety_margin"] == DEFAULT_SAFETY_MARGIN
    assert doc["total_bytes"] > gpu_mem and doc["fits"] is False
    # Full recompute at micro-batch 4: a total inside the margin band (under the card's memory,
    # over what the margin leaves), so it does not fit; dropping the margin would say it does.
    rb = run_cli("estimate", "--model", "7b", "--seq-len", "4096", "--micro-batch", "4",
                 "--zero-stage", "2", "--dp", "8", "--checkpointing", "full", "--precision", "bf16",
                 "--gpu", "a100-40gb", "--json")
    assert rb.returncode == 0, rb.stderr
    band = json.loads(rb.stdout)
    assert usable < band["total_bytes"] <= gpu_mem and band["fits"] is False
    # ZeRO-3 + full recompute brings the same model under a 40 GB card.
    r3 = run_cli("estimate", "--model", "7b", "--seq-len", "4096", "--zero-stage", "3", "--dp", "8",
                 "--checkpointing", "full", "--gpu", "a100-40gb", "--json")
    doc3 = json.loads(r3.stdout)
    assert doc3["fits"] is True and doc3["total_bytes"] < doc["total_bytes"]
    r4 = run_cli("estimate", "--params", "7e9", "--layers", "32", "--hidden", "4096", "--heads", "32",
                 "--vocab", "32000", "--zero-stage", "3", "--offload", "optimizer+params", "--dp", "8")
    assert r4.returncode == 0 and "host memory" in r4.stdout


def test_a_config_that_does_not_fit_says_what_would_make_it_fit(cli):
    """Each change `estimate --gpu` lists is one the user can run as typed, and estimated as
    it says: fitting, with the total it shows (autotune.estimate.savers)."""
    base = ["estimate", "--model", "7b", "--seq-len", "4096", "--micro-batch", "2", "--zero-stage", "2",
            "--dp", "8", "--precision", "bf16", "--gpu", "a100-40gb"]
    code, out, err = cli(*base, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["fits"] is False and doc["fits_with"], doc["fits_with"]
    for change in doc["fits_with"]:
        flags = change["flags"].split()
        args = list(base)
        for flag, value in zip(flags[::2], flags[1::2]):  # the change's flags over the config's
            if flag in args:
                args[args.index(flag) + 1] = value
            else:
                args += [flag, value]
        code, out, err = cli(*args, "--json")
        assert code == 0, err
        again = json.loads(out)
        assert again["fits"] is True and again["total_bytes"] == change["total_bytes"], change
        assert again["host_bytes"] == change["host_bytes"]
    code, out, _ = cli(*base)
    assert "does not fit" in out and "it fits with any one of these" in out
    assert doc["fits_with"][0]["flags"] in out
    # Where no saver makes it fit (a 262,144-token sequence's checkpointed activations alone
    # are over an L4's 24 GB), it says so and what is left.
    code, out, _ = cli("estimate", "--params", "7e9", "--layers", "32", "--hidden", "4096", "--heads", "32",
                       "--vocab", "32000", "--seq-len", "262144", "--gpu", "l4")
    assert code == 0 and "no memory saver tried makes it fit" in out


def test_at_tp_above_1_the_estimate_lists_and_notes_only_what_the_worker_runs(cli, tmp_path):
    """The worker runs tensor parallelism with DDP or FSDP2, never with ZeRO
    (trials/engines/deepspeed.py ZERO_WITH_TP), and splits only the models whose plan it runs
    (ModelShape.tp_why): at --tp 2 what would make a config fit shards with FSDP2, and an
    estimate of ZeRO with TP, or of TP of such a model, says a sweep does not run it."""
    code, out, err = cli("estimate", "--model", "7b", "--seq-len", "4096", "--tp", "2", "--gpu", "a100-40gb",
                         "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["fits"] is False and doc["fits_with"] and doc["notes"] == []
    assert [c for c in doc["fits_with"] if "--fsdp full_shard" in c["flags"]]
    assert not [c for c in doc["fits_with"] if "--zero-stage" in c["flags"]], doc["fits_with"]
    code, out, err = cli("estimate", "--model", "7b", "--tp", "2", "--zero-stage", "1", "--json")
    assert code == 0 and [n for n in json.loads(out)["notes"] if "not with ZeRO" in n], out
    gpt2 = tmp_path / "config.json"
    gpt2.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4}))
    code, out, err = cli("estimate", "--model", str(gpt2), "--tp", "2")
    assert code == 0 and "tp 2: the worker does not run this model's tensor-parallel plan" in out, out


@pytest.mark.parametrize("args,needle", [
    (["--model", "nope"], "unknown model preset"),
    (["--params", "7e9", "--model", "7b"], "exactly one of"),
    ([], "exactly one of"),
    (["--params", "abc"], "not a number"),
    (["--model", "7b", "--offload", "optimizer"], "offload needs ZeRO"),
    # The flags given, and the fix in flags: not "--offload none with ..." nor "set fsdp none".
    (["--model", "7b", "--fsdp", "full_shard", "--zero-stage", "2"],
     "error: --zero-stage 2 with --fsdp full_shard: FSDP2 and DeepSpeed ZeRO both shard the model: pick one. "
     "To fix: set --fsdp none or --zero-stage 0."),
    (["--model", "7b", "--zero-stage", "4"], "zero-stage"),
    (["--model", "7b", "--tp", "3"], "does not divide"),
    (["--model", "7b", "--gpu", "h100"], "did you mean"),
    (["--model", "7b", "--precision", "fp4"], "precision"),
])
def test_cli_bad_flags_exit_2(monkeypatch, capsys, args, needle):
    # In-process through the console script's own entry point (`autotune.cli.main`: the same
    # UserError -> one line, exit 2 path as the subprocess above, without its start-up time).
    from autotune.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr("sys.argv", ["autotune", "estimate", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    assert exc.value.code == 2, (out.out, out.err)
    assert needle in (out.out + out.err)


def test_cli_flags_are_pinned(run_cli):
    """Scripts and docs rely on these flags (issue 4): the surface grows on purpose only."""
    r = run_cli("estimate", "--help")
    assert r.returncode == 0
    for flag in ("--model", "--params", "--layers", "--hidden", "--heads", "--vocab", "--seq-len",
                 "--micro-batch", "--precision", "--checkpointing", "--zero-stage", "--offload",
                 "--dp", "--tp", "--optimizer", "--gpu", "--json", "--fsdp"):
        assert flag in r.stdout, flag


def test_estimate_names_the_flops_rule_it_used(cli):
    """`estimate --params N` alone leaves the attention term out, but printed "(model, 6N + 12Lds)"
    all the same (an audit). The rule printed, and in the JSON, is the one used."""
    code, out, err = cli("estimate", "--params", "7e9", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["flops_rule"].startswith("6N (no layers/hidden") and doc["flops_per_token"] == pytest.approx(6 * 7e9)
    code, out, err = cli("estimate", "--params", "7e9")
    assert "(model, 6N (no layers/hidden: no attention term))" in out and "12Lds" not in out
    code, out, err = cli("estimate", "--model", "7b", "--json")
    assert json.loads(out)["flops_rule"] == "6N + 12Lds"


def test_a_model_given_by_its_count_is_named_once(cli):
    """`estimate --params 7e9` opened "7e+09 parameters: 7,000,000,000 parameters (given by
    --params)", the count twice; a named model keeps its name before the count."""
    code, out, err = cli("estimate", "--params", "7e9")
    assert code == 0, err
    assert out.splitlines()[0] == "7,000,000,000 parameters (given by --params)"
    code, out, err = cli("estimate", "--model", "small")
    assert out.splitlines()[0].startswith("small: 124,475,904 parameters (")


def test_estimate_shows_small_models_in_a_unit_that_reads(cli):
    """A tiny model read "0.00 GiB" on every row of the table (an audit); the gathered
    parameters, a part of "other", were listed under the host memory's row."""
    code, out, err = cli("estimate", "--model", "tiny")
    assert code == 0, err
    assert "0.00 GiB" not in out and " MiB" in out
    code, out, err = cli("estimate", "--model", "7b", "--zero-stage", "3", "--dp", "8")
    rows = [ln.split("│")[1].strip() for ln in out.splitlines() if ln.count("│") >= 2]
    assert rows.index("of which gathered parameters") == rows.index("other (gathered parameters, logits, buckets, casts)") + 1


def test_estimate_without_activations_never_says_fits(cli):
    """`estimate --params 7e9 --zero-stage 3 --dp 64 --seq-len 8192 --gpu l4` said "fits": its
    total left out the activations (not estimated without the model's shapes), ~34 GB here on a
    24 GB card. Without them the verdict is undecided (`fits` null), unless the states alone
    are already over: then it does not fit."""
    code, out, err = cli("estimate", "--params", "7e9", "--zero-stage", "3", "--dp", "64",
                         "--seq-len", "8192", "--gpu", "l4", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["activations_bytes"] is None and doc["fits"] is None
    # The same model with its shapes: the activations are counted, and it does not fit.
    code, out, err = cli("estimate", "--params", "7e9", "--layers", "32", "--hidden", "4096", "--heads", "32",
                         "--vocab", "32000", "--zero-stage", "3", "--dp", "64", "--seq-len", "8192",
                         "--gpu", "l4", "--json")
    shaped = json.loads(out)
    assert shaped["activations_bytes"] > shaped["gpu_memory_bytes"] and shaped["fits"] is False
    code, out, err = cli("estimate", "--params", "7e9", "--zero-stage", "3", "--dp", "64",
                         "--seq-len", "8192", "--gpu", "l4")
    assert "not decided" in out and ": fits" not in out and "total (without activations)" in out
    # Over the card without activations: does not fit, whatever they are.
    code, out, err = cli("estimate", "--params", "7e9", "--gpu", "l4", "--json")
    assert json.loads(out)["fits"] is False


def test_tensor_parallel_keeps_embeddings_and_lm_head_whole_on_every_rank():
    """trials/engines/tp.py splits the blocks' linears only: the embeddings, LM head and
    final norm stay whole on every TP rank. The estimate split the whole model t ways, so a
    real TP-2 trial of this GPT (4 x 1024, vocab 8192) held 33,857,536 parameters per rank
    (its observation `param_elements_local`) where the estimate counted 29.5M: 70 MB of fp32
    model states short, and the estimate fell under the measured peak (590 MB against 646 MB
    of host RSS added). The logits are whole too (the LM head is not split)."""
    from autotune.contract import GPTShape
    from autotune.estimate.compute import model_from_gpt_shape
    from autotune.estimate.memory import activation_parts

    shape = GPTShape(n_layers=4, d_model=1024, n_heads=8, vocab_size=8192, max_seq_len=256)
    m = model_from_gpt_shape(shape)
    d, V = shape.d_model, shape.vocab_size
    block = (shape.num_params(include_embeddings=False) - 2 * d) // shape.n_layers
    # Split by TP: each block's linears (its norms and row-parallel biases, ~0.04% here, too).
    # Whole: token and position embeddings (the tied LM head) and the final LayerNorm.
    local = shape.n_layers * block / 2 + V * d + shape.max_seq_len * d + 2 * d
    cfg = MemoryConfig(seq_len=128, micro_batch_size=2, precision=Precision.fp32, tp_degree=2)
    s = model_state_bytes(m, cfg)
    assert s["weights"] == pytest.approx(4 * local, rel=1e-6)
    assert s["weights"] == pytest.approx(4 * 33_857_536, rel=1e-3)  # what the TP trial held
    assert s["optimizer"] == pytest.approx(8 * local, rel=1e-6)
    whole = activation_parts(m, cfg.model_copy(update={"tp_degree": 1}))
    split = activation_parts(m, cfg)
    assert whole is not None and split is not None and split["logits"] == whole["logits"]


def test_a_sequence_longer_than_the_model_takes_is_refused(tmp_path, run_cli):
    # A trial of it refuses the sequence (trials/workloads/build.py): the estimate of a run
    # that cannot start is refused with the longest it takes, for a preset and a config alike.
    p = run_cli("estimate", "--model", "tiny", "--seq-len", "257")
    assert p.returncode == 2 and "--seq-len 257" in p.stderr and "256 or less" in p.stderr, p.stderr
    assert run_cli("estimate", "--model", "tiny", "--seq-len", "256").returncode == 0
    # Not given: 2048, or the model's longest where shorter (tiny's 256), never a refusal.
    p = run_cli("estimate", "--model", "tiny", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["config"]["seq_len"] == 256, p.stderr
    assert json.loads(run_cli("estimate", "--model", "7b", "--json").stdout)["config"]["seq_len"] == 2048
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                               "num_attention_heads": 4, "vocab_size": 512, "intermediate_size": 128,
                               "max_position_embeddings": 512}))
    p = run_cli("estimate", "--model", str(cfg), "--seq-len", "1024")
    assert p.returncode == 2 and "512 or less" in p.stderr, p.stderr
    assert run_cli("estimate", "--model", str(cfg), "--seq-len", "512").returncode == 0


def test_fp8_on_a_gpu_without_an_fp8_peak_says_so(cli):
    # The memory fits an A100, but fp8 does not run there (a sweep and `plan` leave it out):
    # the verdict alone said "fits" and nothing more.
    code, out, err = cli("estimate", "--model", "7b", "--precision", "fp8", "--gpu", "a100-80gb",
                         "--zero-stage", "3", "--dp", "8", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert any("no fp8 peak for a100-80gb" in n for n in doc["notes"]), doc["notes"]
    code, out, err = cli("estimate", "--model", "7b", "--precision", "fp8", "--gpu", "h100-sxm",
                         "--zero-stage", "3", "--dp", "8", "--json")
    assert not any("fp8" in n for n in json.loads(out)["notes"])
