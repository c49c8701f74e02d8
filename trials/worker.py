"""The trial worker: TrialConfig JSON in -> train a few real steps -> TrialResult JSON out.

Launched by `autotune.launch` exactly as a long run would be, e.g.:

    python -m torch.distributed.run --nproc-per-node 2 -m trials.worker \\
        --config trial/config.json --result trial/result.json

Every rank trains; rank 0 writes the result (atomically). A rank that fails writes
`result.rankN.json` with what it saw and exits non-zero, so the launcher tears the others
down and the controller reads the cause from the file, never from the logs.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path


_wall_at_start = time.time()


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("--local_rank", type=int, default=None, help="set by the DeepSpeed launcher")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    import faulthandler
    import signal

    # A trial killed at its timeout leaves each rank's stack in stderr.log: where it hung.
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    global _wall_at_start
    _wall_at_start = time.time()

    from autotune.contract import TrialConfig, TrialResult, TrialStatus

    rank = _env_int("RANK", 0)
    cfg = TrialConfig.read(args.config)
    result_path = Path(args.result)
    try:
        result = run(cfg, t_start)
    except BaseException as exc:  # noqa: BLE001 - every ending becomes a result
        status, error_type = classify(exc)
        result = TrialResult(status=status, error_type=error_type, error=str(exc)[:2000],
                             world_size=_env_int("WORLD_SIZE", 1),
                             log_tail="".join(traceback.format_exception(exc))[-4000:])
        _attach_peak_memory(result, cfg)
        path = result_path if rank == 0 else result_path.with_name(
            f"{result_path.stem}.rank{rank}.json")
        result.write(path)
        sys.stdout.flush()
        sys.stderr.flush()
        # Exit at once: peers blocked in a collective would otherwise wait for the
        # process-group timeout; the launcher kills them when this rank exits non-zero.
        os._exit(1)
    if rank == 0:
        result.wall_s = time.perf_counter() - t_start
        result.write(result_path)
    return 0 if result.status is TrialStatus.ok else 1


def classify(exc: BaseException):
    from autotune.contract import TrialStatus
    from trials.errors import NonFiniteLoss, UnsupportedConfig

    import torch

    if isinstance(exc, torch.OutOfMemoryError) or isinstance(exc, MemoryError):
        return TrialStatus.oom, type(exc).__name__
    if isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc):
        return TrialStatus.oom, type(exc).__name__  # the CPU allocator's out-of-memory
    if isinstance(exc, UnsupportedConfig):
        return TrialStatus.unsupported, type(exc).__name__
    if isinstance(exc, NonFiniteLoss):
        return TrialStatus.nan, type(exc).__name__
    return TrialStatus.crash, type(exc).__name__


def _attach_peak_memory(result, cfg) -> None:
    from autotune.contract import MemorySource
    from trials.measure import cuda_peaks, host_rss_peak_bytes

    try:
        import torch

        if cfg.device.value == "cuda" and torch.cuda.is_available():
            alloc, reserved = cuda_peaks(torch.device("cuda", _env_int("LOCAL_RANK", 0)))
            result.peak_mem_bytes, result.peak_mem_source = alloc, MemorySource.cuda_allocator
        else:
            result.peak_mem_bytes = host_rss_peak_bytes()
            result.peak_mem_source = MemorySource.host_rss
    except Exception:  # noqa: BLE001 - a failed trial still reports its cause
        pass


def run(cfg, t_start: float):
    """Train warm-up + measured steps and return rank 0's TrialResult."""
    import torch
    import torch.distributed as dist

    from autotune.contract import (MemoryReport, MemorySource, Precision, TrialResult,
                                   TrialStatus)
    from trials.engines import build_engine
    from trials.errors import NonFiniteLoss, UnsupportedConfig
    from trials.hardware import fingerprint
    from trials.measure import StepTimer, cuda_peaks, host_rss_now_bytes, host_rss_peak_bytes, summarize
    from trials.workloads.build import build_workload

    phase: dict[str, float] = {}
    launched_at = os.environ.get("AUTOTUNE_LAUNCH_TIME")
    if launched_at:  # wall clock when the controller started the launcher
        phase["launch_to_worker"] = _wall_at_start - float(launched_at)
    phase["worker_imports"] = time.perf_counter() - t_start
    t = time.perf_counter()
    rank, world, local_rank = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1), _env_int("LOCAL_RANK", 0)
    torch.set_num_threads(cfg.threads_per_rank)
    if cfg.device.value == "cuda":
        if not torch.cuda.is_available():
            raise UnsupportedConfig("device cuda requested but torch sees no CUDA device")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world != cfg.num_gpus:
        raise RuntimeError(f"launcher started {world} ranks, config asks for {cfg.num_gpus}")
    if cfg.precision is Precision.fp8:
        raise UnsupportedConfig("fp8 needs Hopper/Ada GPUs and torchao or Transformer Engine")
    if cfg.precision is Precision.fp16 and device.type == "cpu":
        raise UnsupportedConfig("fp16 training with loss scaling is not supported on CPU here")
    if world > 1 and not dist.is_initialized():
        from datetime import timedelta

        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                timeout=timedelta(seconds=max(60.0, cfg.timeout_s)))
    torch.manual_seed(cfg.seed)
    rss_baseline = host_rss_now_bytes()
    model, batches, info = build_workload(cfg, device)
    engine = build_engine(cfg, model, device, world)
    phase["build"] = time.perf_counter() - t

    timer = StepTimer(device)
    losses: list[float] = []

    def one_step() -> None:
        with timer.step():
            loss = engine.train_step(batches)
        value = float(loss)  # a sync point; after the timer, so it does not count
        if not math.isfinite(value):
            raise NonFiniteLoss(f"loss became {value} at step {len(losses)}")
        losses.append(value)

    t = time.perf_counter()
    for _ in range(cfg.warmup_steps):
        one_step()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    timer.reset()
    phase["warmup"] = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(cfg.measure_steps):
        one_step()
    extended = False
    # A noisy window says little: extend up to the cap until the CV settles.
    while (len(timer.times_s) < cfg.max_measure_steps
           and summarize(timer.times_s)["cv"] > cfg.max_step_time_cv):
        extended = True
        one_step()
    phase["measure"] = time.perf_counter() - t

    # Every rank's view, gathered at rank 0: step times (the slowest rank sets the pace),
    # memory peaks.
    local = {
        "times": timer.times_s,
        "rss_peak": host_rss_peak_bytes(),
        "rss_base": rss_baseline,
        "cuda": cuda_peaks(device) if device.type == "cuda" else None,
    }
    gathered = [local]
    if world > 1:
        gathered = [None] * world
        dist.all_gather_object(gathered, local)
    if world > 1:
        dist.barrier()
    step_times = [max(ts) for ts in zip(*(g["times"] for g in gathered))]
    stats = summarize(step_times)
    tokens_per_step = cfg.global_batch_tokens
    tokens_per_s = tokens_per_step / stats["median_s"]
    mem = MemoryReport(host_rss_peak_bytes=[g["rss_peak"] for g in gathered],
                       host_rss_baseline_bytes=[g["rss_base"] for g in gathered])
    if device.type == "cuda":
        mem.allocator_allocated_peak_bytes = [g["cuda"][0] for g in gathered]
        mem.allocator_reserved_peak_bytes = [g["cuda"][1] for g in gathered]
        per_rank, source = mem.allocator_allocated_peak_bytes, MemorySource.cuda_allocator
    else:
        per_rank, source = mem.host_rss_peak_bytes, MemorySource.host_rss
    params = info["params"]
    flops_per_token = _flops_per_token(params, info.get("shape"), cfg.seq_len)
    mfu = hfu = None
    if cfg.device_peak_flops and flops_per_token:
        achieved = tokens_per_s * flops_per_token
        mfu = achieved / (world * cfg.device_peak_flops)
    result = TrialResult(
        status=TrialStatus.ok,
        tokens_per_s=tokens_per_s,
        samples_per_s=cfg.global_batch_samples / stats["median_s"],
        tokens_per_s_per_rank=tokens_per_s / world,
        step_time_median_s=stats["median_s"],
        step_time_p90_s=stats["p90_s"],
        step_time_cv=stats["cv"],
        step_times_s=step_times,
        warmup_steps=cfg.warmup_steps,
        measured_steps=len(step_times),
        measure_extended=extended,
        optimizer_steps=engine.optimizer_steps,
        peak_mem_bytes=max(per_rank),
        peak_mem_bytes_per_rank=per_rank,
        peak_mem_source=source,
        memory=mem,
        final_loss=losses[-1],
        world_size=world,
        params=params,
        flops_per_token=flops_per_token,
        mfu=mfu,
        hfu=hfu,
        hardware=fingerprint(device, world),
        phase_s=phase,
        observations=engine.observations(),
    )
    if extended:
        result.notes.append(f"step-time CV above {cfg.max_step_time_cv:g}: measured "
                            f"{len(step_times)} steps instead of {cfg.measure_steps}")
    if world > 1:
        dist.destroy_process_group()
    return result


def _flops_per_token(params: int, shape: dict | None, seq_len: int) -> float | None:
    """6N (forward + backward) + attention 12 * L * d * s (Kaplan et al. 2020; PaLM App. B)."""
    if not params:
        return None
    attn = 12 * shape["n_layers"] * shape["d_model"] * seq_len if shape else 0
    return 6.0 * params + attn


if __name__ == "__main__":
    sys.exit(main())
