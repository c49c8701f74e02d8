"""Turn what every rank measured into rank 0's TrialResult: throughput, step-time statistics,
FLOPs with MFU/HFU, memory by source, activation bytes, gradient noise scale.

    result = compose(cfg, built, engine, steps, probe, gathered, world, device, phase)

Every figure says where it came from; what could not be measured stays None with a note.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from autotune.contract import MemoryReport, MemorySource, TrialResult, TrialStatus
from autotune.contract.flops import hardware_flops_per_token, model_flops_per_token, utilization
from autotune.contract.rank_env import CPU_HUGE_PAGES
from trials.hardware import fingerprint
from trials.measure import summarize
from trials.noise_scale import NoiseScale


def _rank_env_observed(cfg) -> dict[str, Any]:
    """On CPU ranks, whether this rank ran with the allocator's huge pages (autotune.contract.
    rank_env; `THP_MEM_ALLOC_ENABLE=0 autotune sweep` turns them off): the export keeps it."""
    if cfg.device.value != "cpu":
        return {}
    return {"cpu_huge_pages": all(os.environ.get(k) == v for k, v in CPU_HUGE_PAGES.items())}


def compose(cfg, built, engine, steps, probe, gathered: list[dict], world: int, device,
            phase: dict[str, float]) -> TrialResult:
    notes: list[str] = []
    stats = summarize(steps.times_s)
    tokens_per_s = cfg.global_batch_tokens / stats["median_s"]
    samples_per_s = cfg.global_batch_samples / stats["median_s"]
    obs: dict[str, Any] = {**engine.observations(), **_rank_env_observed(cfg)}
    obs["checkpointed_layers"] = built.checkpointed_layers
    obs["samples_per_s_per_rank"] = samples_per_s / world
    # Each rank's own clock: the job runs at the slowest rank's pace, these show who that is.
    obs["step_time_median_s_by_rank"] = [statistics.median(g["times"]) for g in gathered]
    obs["model_built_as"] = gathered[0]["built_as"]  # meta (materialised per rank) or device

    recompute, recompute_source = _recompute_fraction(cfg, built, probe, obs)
    _observe_activations(probe, obs, notes)
    flops, hw_flops = _flops(cfg, built, recompute, recompute_source, obs, notes)
    mfu = utilization(tokens_per_s, flops, world, cfg.device_peak_flops)
    hfu = utilization(tokens_per_s, hw_flops, world, cfg.device_peak_flops)
    if cfg.device_peak_flops is None:
        notes.append("MFU/HFU not computed: the device's peak FLOP/s is unknown")

    mem, per_rank, source = _memory(gathered, device, notes)
    gns = _noise_scale(gathered, obs, notes)

    result = TrialResult(
        status=TrialStatus.ok,
        tokens_per_s=tokens_per_s,
        samples_per_s=samples_per_s,
        tokens_per_s_per_rank=tokens_per_s / world,
        step_time_median_s=stats["median_s"],
        step_time_p90_s=stats["p90_s"],
        step_time_cv=stats["cv"],
        step_times_s=list(steps.times_s),
        warmup_steps=cfg.warmup_steps,
        measured_steps=len(steps.times_s),
        measure_extended=steps.extended,
        optimizer_steps=engine.optimizer_steps,
        peak_mem_bytes=max(per_rank) if per_rank else None,
        peak_mem_bytes_per_rank=per_rank,
        peak_mem_source=source,
        memory=mem,
        final_loss=steps.losses[-1],
        world_size=world,
        params=built.params,
        flops_per_token=flops,
        mfu=mfu,
        hfu=hfu,
        gradient_noise_scale=gns,
        hardware=fingerprint(device, world),
        phase_s=phase,
        observations=obs,
        notes=notes,
    )
    n = len(steps.times_s)
    if steps.extended:
        result.notes.append(f"measured {n} steps instead of {cfg.measure_steps}: the window was "
                            f"under {cfg.min_measure_s:g} s or its step-time CV above "
                            f"{cfg.max_step_time_cv:g}")
    if stats["cv"] > cfg.max_step_time_cv and n >= cfg.max_measure_steps:
        result.notes.append(f"step-time CV {stats['cv']:.2f} is above {cfg.max_step_time_cv:g} "  # n: the cap,
                            f"even at the cap of {n} steps: a noisy figure")  # or a larger measure_steps
    return result


def _observe_activations(probe, obs: dict[str, Any], notes: list[str]) -> None:
    """What the untimed probe step saw autograd keep for backward, into `obs`."""
    if probe is not None:
        meter = probe[0]
        obs["activation_saved_bytes"] = meter.saved_bytes
        obs["activation_saved_bytes_by_dtype"] = meter.bytes_by_dtype
        obs["activation_saved_tensors"] = meter.saved_tensors
        obs["activation_dtype"] = meter.activation_dtype()
        obs["activation_source"] = ("saved_tensors_hooks: bytes autograd kept for backward in "
                                    "one micro-step on rank 0 (activations and autocast's "
                                    "16-bit weight copies; parameters excluded)")
    else:
        notes.append("activation bytes not measured: warmup_steps is 0, so no untimed step "
                     "was available to probe")


def _flops(cfg, built, recompute: float, recompute_source: str, obs: dict[str, Any],
           notes: list[str]) -> tuple[float | None, float | None]:
    """FLOPs per token: the model's, and the hardware's (with recompute); None when unknown."""
    flops, flops_note = _model_flops(cfg, built)
    if flops_note:
        notes.append(flops_note)
    hw_flops = None
    if flops is not None:
        shape = built.shape or {}
        hw_flops = (flops + recompute * _forward_flops(cfg, built) if built.flops_per_token
                    else hardware_flops_per_token(built.matmul_params, shape.get("n_layers"),
                                                  _attention_width(shape), cfg.seq_len, recompute))
        obs["matmul_params"] = built.matmul_params
        obs["hardware_flops_per_token"] = hw_flops
        obs["recompute_fraction"] = recompute
        obs["recompute_source"] = recompute_source
    return flops, hw_flops


def _model_flops(cfg, built) -> tuple[float | None, str | None]:
    if built.flops_per_token:
        return float(built.flops_per_token), None
    if not built.params:
        return None, None
    shape = built.shape or {}
    flops = model_flops_per_token(built.matmul_params, shape.get("n_layers"), _attention_width(shape),
                                  cfg.seq_len)
    if built.shape is None:
        return flops, "FLOPs per token = 6N only: the model's layer count and width are unknown, " \
                      "so attention FLOPs are left out"
    return flops, None


def _attention_width(shape: dict[str, int]) -> int | None:
    """The FLOPs attention term's width: heads x head_dim where the build knows it (a Hugging
    Face config's, trials/workloads/hf.py `shape_of`), else the hidden size (the built-in GPT,
    an entry point's `d_model`)."""
    return shape.get("attention_width") or shape.get("d_model")


def _forward_flops(cfg, built) -> float:
    """The forward share of a user-given FLOPs figure (a third of forward + backward)."""
    return float(built.flops_per_token) / 3.0


def _recompute_fraction(cfg, built, probe, obs) -> tuple[float, str]:
    """How much of one forward's matmul FLOPs is run again in backward: measured from the
    linear layers' forward calls in the probe step when there was one, else from the config.

    Measured, it is the re-run nn.Linear weight elements over the model's matmul parameters
    (N), the same N the hardware FLOPs multiply it by: a matmul that is no nn.Linear (the
    built-in GPT's tied LM head, `F.linear`) is never recomputed, and counting the re-run
    share of the linears alone as a share of all of N counted it as if it were."""
    if probe is not None:
        counter = probe[1]
        passes = counter.forward_passes(cfg.grad_accum_steps)
        if passes is not None:
            obs["linear_forward_passes_per_micro_step"] = passes
            obs["linear_weight_elements"] = counter.total_elements
            rerun = max(0.0, passes - 1.0) * counter.total_elements
            source = ("measured: nn.Linear weight elements re-run in one step / matmul "
                      "parameters")
            return (rerun / built.matmul_params if built.matmul_params else max(0.0, passes - 1.0)), source
    n_layers = (built.shape or {}).get("n_layers")
    if cfg.checkpointing.value == "none":
        return 0.0, "config: no checkpointing"
    if cfg.checkpointing.value == "full" or not n_layers:
        return 1.0, "config: full recompute assumed"
    return len(built.checkpointed_layers) / n_layers, "config: checkpointed layers / layers"


def _memory(gathered, device, notes) -> tuple[MemoryReport, list[int], MemorySource]:
    rss_peaks = [g["rss_peak"] for g in gathered]
    mem = MemoryReport(host_rss_peak_bytes=rss_peaks,
                       host_rss_baseline_bytes=[g["rss_base"] for g in gathered],
                       build_host_rss_peak_bytes=[g["build"]["rss_peak"] for g in gathered])
    if device.type == "cuda":
        allocated_peaks = [g["cuda"][0] for g in gathered]
        mem.allocator_allocated_peak_bytes = allocated_peaks
        mem.allocator_reserved_peak_bytes = [g["cuda"][1] for g in gathered]
        mem.build_allocator_peak_bytes = [g["build"]["cuda"] for g in gathered]
        if all(g["nvml"] is not None for g in gathered):
            mem.nvml_device_peak_bytes = [g["nvml"] for g in gathered]
        else:
            notes.append(f"NVML device peak not measured: {gathered[0]['nvml_why_not']}")
        return mem, allocated_peaks, MemorySource.cuda_allocator
    notes.append("CPU trial: memory is the host RSS peak of each rank's process "
                 "(NVML and allocator peaks are GPU only)")
    return mem, rss_peaks, MemorySource.host_rss


def _noise_scale(gathered, obs, notes) -> float | None:
    samples = [g["norms"] for g in gathered]
    if not samples[0]:
        notes.append("gradient noise scale not measured: it needs ranks > 1 or accumulation > 1 "
                     "(two batch sizes), an engine that exposes gradient norms, and "
                     "measure_noise_scale")
        return None
    first = samples[0]
    est = NoiseScale(first["b_small"], first["b_big"])
    # A rank's local norm is one sample of the small-batch norm: average over ranks.
    for step in range(len(first["small_sq"])):
        small = statistics.fmean(s["small_sq"][step] for s in samples if s)
        est.add(small, first["big_sq"][step])
    obs["noise_scale"] = {"source": first["source"], **est.details()}
    value = est.value
    if value is None:
        notes.append("gradient noise scale not measurable: the |G|² estimate was not positive "
                     f"after {est.steps} steps (noise swamps the signal at these batch sizes)")
    return value
