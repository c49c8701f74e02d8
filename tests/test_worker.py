"""The worker applies every knob for real and measures honestly: each knob is shown to have
changed what ran by an effect observed inside the trial, never by timings.

Real launched trials (torchrun, tiny models, few steps) shared across assertions. The
estimator and the meters are also checked in-process against known answers.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch

from autotune.contract import GPT_PRESETS, Checkpointing, Precision, TrialStatus
from autotune.estimate.compute import flops_per_token, model_from_preset
from tests.fixtures.trials import FIXTURES, entry, run_many, tiny
from trials.measure import LinearCallCounter, SavedTensorMeter, percentile, summarize
from trials.noise_scale import NoiseScale

PEAK = 1e11  # a stand-in device peak (FLOP/s), so that MFU/HFU are computed on CPU


@pytest.fixture(scope="module")
def trials(tmp_path_factory):
    root = tmp_path_factory.mktemp("knobs")
    configs = {
        "base": tiny(device_peak_flops=PEAK),
        # Also asks for a window longer than any 6 of its steps: it must stop at the cap.
        "full_accum2": tiny(device_peak_flops=PEAK, checkpointing=Checkpointing.full,
                            grad_accum_steps=2, min_measure_s=600.0, max_measure_steps=6),
        # Selective on the 2-layer preset: every 2nd block = block 0 only. Also asks for the
        # CV-based extension with a threshold no run can meet: it must stop at the cap.
        "bf16_selective": tiny(device_peak_flops=PEAK, precision=Precision.bf16,
                               checkpointing=Checkpointing.selective, checkpoint_every=2,
                               max_step_time_cv=1e-9, max_measure_steps=5),
        # measure_steps above the cap: all 4 are measured, and the note names 4 (it named 2).
        "cap_under_measure": tiny(max_step_time_cv=1e-9, measure_steps=4, max_measure_steps=2),
        # A finite list of 3 batches per rank (like a DataLoader), restarted by the worker.
        "fp16_2ranks": tiny(workload=entry("build_list"), num_gpus=2, precision=Precision.fp16,
                            measure_steps=6),
        "accum4": tiny(workload=entry(), grad_accum_steps=4, measure_steps=6),
    }
    results = run_many(configs, root)
    for name, r in results.items():
        assert r.status is TrialStatus.ok, f"{name}: {r.error_type}: {r.error}\n{r.log_tail}"
    return results, configs


# --- measurement ---------------------------------------------------------------------------


def test_warmup_is_excluded_and_stats_follow_from_the_step_times(trials):
    results, configs = trials
    r, cfg = results["base"], configs["base"]
    assert r.warmup_steps == 1 and r.measured_steps == 3 and len(r.step_times_s) == 3
    assert r.optimizer_steps == 4  # warm-up + measured: the warm-up step ran, untimed
    assert not r.measure_extended
    s = summarize(r.step_times_s)
    assert r.step_time_median_s == pytest.approx(s["median_s"])
    assert r.step_time_p90_s == pytest.approx(percentile(r.step_times_s, 90))
    assert r.step_time_cv == pytest.approx(s["cv"])
    assert r.tokens_per_s == pytest.approx(cfg.global_batch_tokens / r.step_time_median_s)
    assert r.samples_per_s == pytest.approx(cfg.global_batch_samples / r.step_time_median_s)


def test_high_cv_extends_the_measured_steps_up_to_the_cap_and_says_so(trials):
    r = trials[0]["bf16_selective"]
    assert r.measure_extended and r.measured_steps == 5
    assert any("measured 5 steps instead of 3" in n for n in r.notes)
    assert any("even at the cap of 5 steps" in n for n in r.notes)
    under = trials[0]["cap_under_measure"]
    assert not under.measure_extended and under.measured_steps == 4
    assert any("even at the cap of 4 steps" in n for n in under.notes), under.notes


def test_a_short_window_extends_until_it_lasts_min_measure_s_or_reaches_the_cap(trials):
    results, configs = trials
    r, short = results["full_accum2"], configs["full_accum2"]
    assert r.measure_extended and r.measured_steps == short.max_measure_steps == 6
    assert sum(r.step_times_s) < short.min_measure_s  # the cap stopped it, not the floor
    assert any("the window was under 600 s" in n for n in r.notes)
    # A window already long enough is not extended (min_measure_s=0 in the other trials).
    assert results["base"].measured_steps == configs["base"].measure_steps


def test_flops_mfu_and_hfu_without_recompute(trials):
    results, configs = trials
    r = results["base"]
    shape = GPT_PRESETS["tiny"]
    assert r.params == shape.num_params()
    # 6N on the matmul parameters: the learned positions are a lookup table, the token
    # embedding counts once (as the tied LM head). The estimate applies the same rule.
    matmul = r.params - shape.max_seq_len * shape.d_model
    assert r.observations["matmul_params"] == matmul
    assert r.flops_per_token == pytest.approx(6 * matmul + 12 * shape.n_layers * shape.d_model * 32)
    assert r.flops_per_token == pytest.approx(flops_per_token(model_from_preset("tiny"), 32))
    assert r.mfu == pytest.approx(r.tokens_per_s * r.flops_per_token / PEAK)
    assert r.observations["linear_forward_passes_per_micro_step"] == pytest.approx(1.0)
    assert r.hfu == pytest.approx(r.mfu)  # nothing recomputed: hardware FLOPs = model FLOPs


def test_mfu_is_null_when_the_peak_is_unknown(trials):
    r = trials[0]["accum4"]
    assert r.mfu is None and r.hfu is None
    assert any("peak FLOP/s is unknown" in n for n in r.notes)


def test_cpu_memory_is_host_rss_and_says_so(trials):
    r = trials[0]["fp16_2ranks"]
    assert r.peak_mem_source.value == "host_rss"
    assert len(r.memory.host_rss_peak_bytes) == 2 and r.peak_mem_bytes == max(r.memory.host_rss_peak_bytes)
    assert all(p > b > 0 for p, b in zip(r.memory.host_rss_peak_bytes, r.memory.host_rss_baseline_bytes))
    assert r.memory.allocator_allocated_peak_bytes is None and r.memory.nvml_device_peak_bytes is None


def test_per_rank_throughput(trials):
    r = trials[0]["fp16_2ranks"]
    assert r.world_size == 2
    assert r.tokens_per_s_per_rank == pytest.approx(r.tokens_per_s / 2)
    assert r.observations["samples_per_s_per_rank"] == pytest.approx(r.samples_per_s / 2)
    # The job's step time is the slowest rank's, step by step.
    assert r.step_time_median_s >= min(r.observations["step_time_median_s_by_rank"])


# --- knobs ---------------------------------------------------------------------------------


def test_checkpointing_lowers_activation_bytes_and_recomputes_the_forward(trials):
    results, _ = trials
    base, full = results["base"], results["full_accum2"]
    assert full.observations["checkpointed_layers"] == [0, 1]
    # Activations: only the checkpointed blocks' inputs stay alive.
    assert full.observations["activation_saved_bytes"] < 0.6 * base.observations["activation_saved_bytes"]
    # Recompute evidence: the blocks' linear layers ran again in backward (torch stops the
    # recompute once the last saved tensor is rebuilt, so the block's last linear is spared).
    passes = full.observations["linear_forward_passes_per_micro_step"]
    assert 1.5 < passes <= 2.0
    # The hardware FLOPs add what was re-run: the blocks' linears (2 FLOPs per weight element
    # per token) and at most one attention forward. The tied LM head (F.linear, no nn.Linear)
    # is never recomputed: the re-run share of the linears is no share of all of N.
    shape = GPT_PRESETS["tiny"]
    block_linears = shape.n_layers * (4 + 2 * shape.ffn_mult) * shape.d_model ** 2
    rerun = 2 * (passes - 1.0) * block_linears
    extra = full.observations["hardware_flops_per_token"] - full.flops_per_token
    assert rerun <= extra <= rerun + 4 * shape.n_layers * shape.d_model * 32
    assert full.observations["linear_weight_elements"] == block_linears
    assert full.observations["recompute_fraction"] == pytest.approx(
        (passes - 1.0) * block_linears / full.observations["matmul_params"])
    # The estimate (`autotune estimate`, `plan`) re-runs every block's linears once, the
    # measured figure's upper end (torch spares the last), and never the LM head: with it
    # (8N + 16Lds) a tiny model's estimate lay above what any trial can run.
    from autotune.estimate.compute import flops_per_token, hardware_flops_per_token, model_from_preset

    model = model_from_preset("tiny")
    assert flops_per_token(model, 32) == pytest.approx(full.flops_per_token)
    estimated = hardware_flops_per_token(model, 32, "full") - full.flops_per_token
    assert extra <= estimated <= 1.01 * (2 * block_linears + 4 * shape.n_layers * shape.d_model * 32)
    # ... which is what makes a checkpointed step slower: counted in HFU, not in MFU.
    assert full.hfu / full.mfu == pytest.approx(full.observations["hardware_flops_per_token"]
                                                / full.flops_per_token)
    assert full.hfu > 1.1 * full.mfu


def test_selective_checkpointing_recomputes_only_some_blocks(trials):
    results, _ = trials
    sel, full = results["bf16_selective"], results["full_accum2"]
    assert sel.observations["checkpointed_layers"] == [0]
    passes = sel.observations["linear_forward_passes_per_micro_step"]
    assert 1.0 < passes < full.observations["linear_forward_passes_per_micro_step"]


def test_accumulation_changes_optimizer_steps_per_sample(trials):
    results, configs = trials
    for name, accum in (("base", 1), ("full_accum2", 2), ("accum4", 4)):
        r, cfg = results[name], configs[name]
        micro = r.observations["micro_steps"]
        assert micro == accum * r.optimizer_steps
        samples = micro * cfg.micro_batch_size
        assert r.optimizer_steps / samples == pytest.approx(1 / (accum * cfg.micro_batch_size))


def test_precision_changes_the_activation_dtype(trials):
    results, _ = trials
    assert results["base"].observations["activation_dtype"] == "float32"
    assert results["bf16_selective"].observations["activation_dtype"] == "bfloat16"
    fp16 = results["fp16_2ranks"].observations
    assert fp16["activation_dtype"] == "float16" and fp16["loss_scaling"] is True
    for name in ("base", "bf16_selective", "fp16_2ranks"):  # master weights stay fp32
        assert results[name].observations["param_dtype"] == "torch.float32"


def test_noise_scale_from_ranks_and_from_accumulation(trials):
    results, configs = trials
    ranks, accum, base = results["fp16_2ranks"], results["accum4"], results["base"]
    assert ranks.observations["noise_scale"]["source"] == "ranks"
    assert (ranks.observations["noise_scale"]["b_small"], ranks.observations["noise_scale"]["b_big"]) == (2, 4)
    assert accum.observations["noise_scale"]["source"] == "micro_batches"
    assert (accum.observations["noise_scale"]["b_small"], accum.observations["noise_scale"]["b_big"]) == (2, 8)
    for r in (ranks, accum):  # learnable data: a clear gradient signal, a finite noise scale
        assert r.gradient_noise_scale is not None and 0 < r.gradient_noise_scale < 1e6
        ns = r.observations["noise_scale"]
        assert ns["steps"] == r.optimizer_steps
        assert r.gradient_noise_scale == pytest.approx(ns["trace_sigma_ema"] / ns["grad_sq_ema"])
    assert base.gradient_noise_scale is None
    assert any("noise scale not measured" in n for n in base.notes)


# --- in-process checks of the estimator and the meters ----------------------------------------


def test_noise_scale_estimator_recovers_a_known_answer():
    """Per-sample gradients g = G + noise, noise ~ N(0, σ²I): B_simple = dσ²/|G|²."""
    rng = random.Random(0)
    d, sigma, b_small, b_big = 50, 2.0, 4, 32
    G = [rng.gauss(0, 1) for _ in range(d)]
    true = d * sigma**2 / sum(g * g for g in G)
    est = NoiseScale(b_small, b_big, ema_beta=0.99)
    for _ in range(600):
        samples = [[g + rng.gauss(0, sigma) for g in G] for _ in range(b_big)]
        small = [sum(s[i] for s in samples[:b_small]) / b_small for i in range(d)]
        big = [sum(s[i] for s in samples) / b_big for i in range(d)]
        est.add(sum(x * x for x in small), sum(x * x for x in big))
    assert est.value == pytest.approx(true, rel=0.2)
    est.add(math.inf, 1.0)  # an fp16 overflow step is skipped, not averaged in
    assert math.isfinite(est.value)


def test_saved_tensor_meter_counts_activations_once_and_not_parameters():
    lin = torch.nn.Linear(16, 16)
    x = torch.randn(4, 16, requires_grad=True)
    with SavedTensorMeter(lin) as m:
        y = lin(x)
        z = y.view(-1) * y.view(-1)  # saves the same storage twice (two views of y)
        z.sum().backward()
    # linear saves x (and W, a parameter: excluded); the product saves y's storage once.
    assert m.saved_bytes == 2 * 4 * 16 * 4
    assert m.bytes_by_dtype == {"float32": 2 * 4 * 16 * 4}


def test_linear_counter_sees_checkpoint_recompute():
    from torch.utils.checkpoint import checkpoint

    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.Tanh())
    x = torch.randn(2, 8, requires_grad=True)
    with LinearCallCounter(net) as c:
        net(x).sum().backward()
    assert c.forward_passes(1) == pytest.approx(1.0)
    with LinearCallCounter(net) as c:
        checkpoint(net, x, use_reentrant=False).sum().backward()
    assert c.forward_passes(1) == pytest.approx(2.0)  # tanh needs the 2nd linear's output


# --- the CLI -------------------------------------------------------------------------------


def test_cli_trial_prints_a_useful_result(run_cli, tmp_path):
    (tmp_path / "c.json").write_text(tiny(measure_steps=2).model_dump_json())
    p = run_cli("trial", "c.json", "--out", "one")
    assert p.returncode == 0, p.stderr
    for words in ("status: ok", "tokens/s:", "per rank", "over 2 steps after 1 warm-up",
                  "MFU n/a", "peak memory:", "(host_rss)", "activations saved for backward",
                  "gradient noise scale: not measured", "note:"):
        assert words in p.stdout, f"{words!r} missing from:\n{p.stdout}"
    assert (tmp_path / "one" / "result.json").is_file()


def test_cli_trial_json_of_a_failed_trial_exits_1(run_cli, tmp_path):
    # (fp8 on CPU ranks, the failure this used, is now refused before launching: exit 2)
    (tmp_path / "c.json").write_text(tiny(workload=entry(fail="nan", fail_at_call=2)).model_dump_json())
    p = run_cli("trial", "c.json", "--json", "--out", "nan")
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert doc["status"] == "nan" and doc["error_type"] == "NonFiniteLoss"
    assert doc["tokens_per_s"] is None and doc["step_times_s"] == []  # nothing shown as measured


def test_cli_trial_prints_an_error_with_brackets_as_it_is(run_cli, tmp_path):
    # Errors quote paths and addresses in brackets (gloo: "Connection closed by peer
    # [127.0.0.1]:6843", after "[/__w/pytorch/.../pair.cc:553]"): text, not console markup.
    message = "[/data/shard_0001.bin] unreadable [bold]"
    cfg = tiny(workload=entry(fail="raise", fail_at_call=2, message=message))
    (tmp_path / "c.json").write_text(cfg.model_dump_json())
    p = run_cli("trial", "c.json", "--out", "raised")
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert f"status: crash (ValueError: {message})" in p.stdout


def test_cli_trial_reads_the_workloads_relative_paths_from_the_config_files_folder(run_cli, tmp_path):
    """As a spec's are read from the spec's folder. The worker runs in the trial folder: a
    relative config_path the command had checked from the working folder was 'does not exist'
    there (unsupported, exit 1), and a module beside the config did not import."""
    folder = tmp_path / "cfgs"
    folder.mkdir()
    (folder / "llama.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 128}))
    (folder / "mine.py").write_text(Path(FIXTURES, "entry_points.py").read_text())
    hf = json.loads(tiny(measure_steps=1, measure_noise_scale=False).model_dump_json())
    for name, workload in (("hf", {"kind": "hf", "config_path": "llama.json"}),
                           ("entry", {"kind": "entry_point", "entry_point": "mine:build"})):
        (folder / f"{name}.json").write_text(json.dumps({**hf, "workload": workload}))
        p = run_cli("trial", f"cfgs/{name}.json", "--out", name)
        assert p.returncode == 0 and "status: ok" in p.stdout, p.stdout + p.stderr
        ran = json.loads((tmp_path / name / "config.json").read_text())["workload"]
        assert str(folder) in (ran.get("config_path") or ran["python_path"][-1])


def test_cli_trial_bad_file_exits_2_naming_it(run_cli, tmp_path):
    p = run_cli("trial", "missing.json")
    assert p.returncode == 2 and "missing.json" in p.stderr and "Traceback" not in p.stderr
    (tmp_path / "bad.json").write_text('{"micro_batch_size": 0}')
    p = run_cli("trial", "bad.json")
    assert p.returncode == 2 and "bad.json" in p.stderr and "micro_batch_size" in p.stderr
    (tmp_path / "garbled.json").write_text("{not json")
    p = run_cli("trial", "garbled.json")
    assert p.returncode == 2 and "garbled.json" in p.stderr
    assert not (tmp_path / "autotune_runs").exists()  # nothing half-written
