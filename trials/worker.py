"""The trial worker: TrialConfig JSON in -> train a few real steps -> TrialResult JSON out.

Launched by `autotune.run.launch` exactly as a long run would be, e.g.:

    python -m torch.distributed.run --nproc-per-node 2 -m trials.worker \\
        --config trial/config.json --result trial/result.json

Every rank trains; rank 0 writes the result (atomically). A rank that fails writes
`result.rankN.json` with what it saw and exits non-zero, so the launcher tears the others
down; a rank killed by a fatal signal (a segfault) leaves its stack in `fatal.rankN.log`, and
one killed by SIGKILL (the OOM killer) leaves its `alive.rankN.json` marker behind.
The controller reads the cause from those files and the exit code, never from the logs.

The steps: set up the device and process group -> build the workload on the meta device,
apply activation checkpointing -> build the engine (parallelism, precision), which
materialises only this rank's part of the model -> record the build's time and peak memory
-> warm up, the last warm-up step
probing activation bytes and recompute -> measure (extended while the CV is high) -> gather
every rank's view -> result.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import traceback
from pathlib import Path

from trials.alive import clear_alive, mark_alive
from trials.steps import Steps

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
    global _wall_at_start
    _wall_at_start = time.time()
    rank = _env_int("RANK", 0)
    result_path = Path(args.result)
    install_fault_handlers(result_path, rank)
    from trials.watchdog import watch_controller

    watch_controller()

    from autotune.contract import TrialConfig, TrialStatus

    cfg = TrialConfig.read(args.config)
    if cfg.device.value == "cpu":
        host_memory_like_a_device()
    result = run_one(cfg, result_path, t_start)
    if rank == 0:
        result.wall_s = time.perf_counter() - t_start
        result.write(result_path)
    clear_alive()
    return 0 if result.status is TrialStatus.ok else 1


def run_one(cfg, result_path: Path, t_start: float, keep_group: bool = False):
    """Run one trial and return its result (rank 0's is the trial's). Any failure is
    classified, written to `result_path` (rank 0) or `result.rankN.json` beside it, and ends
    this process: the worker's way, and the pool's (trials/pool.py), so that a failed trial
    never leaves a half-torn-down process to run the next one. `keep_group` leaves the
    process group up for the pool's next trial."""
    from autotune.contract import TrialResult
    from autotune.contract.trial_files import rank_result_path

    rank = _env_int("RANK", 0)
    try:
        if cfg.compile:
            from trials.compile import use_study_cache

            use_study_cache(result_path)
        return run(cfg, t_start, keep_group=keep_group)
    except BaseException as exc:  # noqa: BLE001 - every ending becomes a result
        status, error_type = classify(exc)
        world = _env_int("WORLD_SIZE", 1)
        where = f"rank {rank}: " if world > 1 else ""
        from trials.compile import compile_failure

        reason = compile_failure(exc) or str(exc)
        result = TrialResult(status=status, error_type=error_type,
                             error=(where + reason)[:2000], world_size=world,
                             # The last frames with their header: a deep torch stack under a
                             # long venv path cut at 4,000 characters lost "Traceback".
                             log_tail="".join(traceback.format_exception(exc, limit=-8))[-4000:],
                             # When several ranks fail, the earliest failure is the cause.
                             observations={"rank": rank, "failed_at_unix_s": time.time(),
                                           **_workload_allows(exc)})
        _attach_peak_memory(result, cfg)
        path = result_path if rank == 0 else rank_result_path(result_path, rank)
        result.write(path)
        clear_alive()  # this rank said how it ended: no marker left to name it as killed
        sys.stdout.flush()
        sys.stderr.flush()
        # Exit at once: peers blocked in a collective would otherwise wait for the
        # process-group timeout; the launcher kills them when this rank exits non-zero.
        os._exit(1)


# Allocations of at least this size get their own mapping, returned to the system when freed.
HOST_MMAP_THRESHOLD_BYTES = 1 << 20


def host_memory_like_a_device() -> None:
    """On a CPU trial host memory stands for device memory, measured as the RSS peak. glibc
    serves allocations below its dynamic mmap threshold (it rises to 32 MiB after the first
    large free) from heaps that keep freed chunks, so the RSS peak grows with what a rank
    freed, not with what it holds (docs/benchmarks.md, trials at scale, shows both peaks). A
    fixed 1 MiB threshold (mallopt M_MMAP_THRESHOLD, glibc malloc(3)) returns freed tensors at
    once, as a GPU allocator's allocated peak counts them. Without
    glibc (musl, macOS) nothing changes; AUTOTUNE_HOST_MMAP_THRESHOLD_BYTES=0 keeps glibc's
    default (scripts/bench_scale.py measures both)."""
    import ctypes
    import ctypes.util

    threshold = _env_int("AUTOTUNE_HOST_MMAP_THRESHOLD_BYTES", HOST_MMAP_THRESHOLD_BYTES)
    if threshold <= 0:
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_mmap_threshold = -3  # <malloc.h>
    mallopt(m_mmap_threshold, threshold)


def install_fault_handlers(result_path: Path, rank: int):
    """Returns the open fatal log (the pool closes it when it moves to the next trial)."""
    import faulthandler
    import signal

    from autotune.contract.trial_files import FATAL_LOGS

    # A trial killed at its timeout leaves each rank's stack in stderr.log: where it hung.
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    # A fatal signal (SIGSEGV, SIGABRT, ...) leaves no Python exception to catch: faulthandler
    # writes the stack to this rank's file, whose presence tells the controller which rank died.
    fatal = open(FATAL_LOGS.path(result_path, rank), "w")  # noqa: SIM115 - lives until exit
    faulthandler.enable(file=fatal, all_threads=True)
    # SIGKILL runs neither: the marker this rank leaves until its own code ends the trial names
    # it as the one killed (trials/alive.py).
    mark_alive(result_path, rank)
    return fatal


def _workload_allows(exc: BaseException) -> dict:
    """An unsupported setting of the workload itself, for the sweep to stop proposing it."""
    from trials.errors import UnsupportedConfig

    allows = exc.workload_allows if isinstance(exc, UnsupportedConfig) else None
    return {"workload_allows": allows} if allows else {}


def classify(exc: BaseException):
    import torch

    from autotune.contract import TrialStatus
    from trials.compile import compile_failure
    from trials.errors import NonFiniteLoss, UnsupportedConfig

    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return TrialStatus.oom, type(exc).__name__
    if isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc):
        return TrialStatus.oom, type(exc).__name__  # the CPU allocator's out-of-memory
    if isinstance(exc, UnsupportedConfig):
        return TrialStatus.unsupported, type(exc).__name__
    if isinstance(exc, NonFiniteLoss):
        return TrialStatus.nan, type(exc).__name__
    if compile_failure(exc) is not None:
        # The compiler could not build this config here: the config's, not the sweep's, end.
        return TrialStatus.unsupported, type(exc).__name__
    return TrialStatus.crash, type(exc).__name__


def _attach_peak_memory(result, cfg) -> None:
    """The peak seen before the failure (an OOM says how far it got)."""
    from autotune.contract import MemoryReport, MemorySource
    from trials.measure import cuda_peaks, host_rss_peak_bytes

    try:
        import torch

        rss = host_rss_peak_bytes()
        result.memory = MemoryReport(host_rss_peak_bytes=[rss])
        if cfg.device.value == "cuda" and torch.cuda.is_available():
            alloc, reserved = cuda_peaks(torch.device("cuda", _env_int("LOCAL_RANK", 0)))
            result.memory.allocator_allocated_peak_bytes = [alloc]
            result.memory.allocator_reserved_peak_bytes = [reserved]
            result.peak_mem_bytes, result.peak_mem_source = alloc, MemorySource.cuda_allocator
        else:
            result.peak_mem_bytes, result.peak_mem_source = rss, MemorySource.host_rss
    except Exception:  # noqa: BLE001 - a failed trial still reports its cause
        pass


def run(cfg, t_start: float, keep_group: bool = False):
    """Train warm-up + measured steps and return rank 0's TrialResult."""
    import torch.distributed as dist

    from trials.trial_result import compose

    phase: dict[str, float] = {}
    device, world, built, engine, weights, rss_baseline = _build(cfg, t_start, phase)
    model = getattr(engine, "raw_model", built.model)  # the engine may swap layers (fp8)
    steps = Steps(cfg, engine, built.batches, device, world)
    probe, warmup_times_s = _warm_up(cfg, steps, model, phase)
    nvml = _measure(cfg, steps, device, phase)
    local = {"times": steps.local_times_s, "rss_base": rss_baseline, "nvml": nvml.peak_used_bytes,
             "nvml_why_not": nvml.why_not, "norms": _grad_norms(engine), "build": weights,
             "built_as": built.built_as}
    local.update(_memory_now(device))
    gathered: list = [local]
    if world > 1:
        gathered = [None] * world
        dist.all_gather_object(gathered, local)
        dist.barrier()
    result = compose(cfg, built, engine, steps, probe, gathered, world, device, phase)
    if cfg.compile:
        from trials.compile import note_compile

        note_compile(result, warmup_times_s)
    if keep_group:
        # The process runs another trial next (trials/pool.py): an engine that keeps state
        # beyond its own references (DeepSpeed's hooks, buffers, caches) releases it here.
        close = getattr(engine, "close", None)
        if callable(close):
            close()
    elif world > 1:
        # The engine goes first. DDP's Reducer holds the process group and its binding frees
        # it holding the GIL: as the last holder, gloo's destructor would join a thread that
        # waits for the GIL to free a finished collective's tensors, a deadlock (pytorch
        # issue 56297; 1 in ~12 fp16 2-rank trials here). The group's own binding, which
        # destroy_process_group leaves last, releases the GIL first.
        del engine, model, steps, built
        gc.collect()
        dist.destroy_process_group()
    return result


def _build(cfg, t_start: float, phase: dict[str, float]):
    """Imports, the process group, then the model on the meta device materialised by its
    engine: (device, world, built workload, engine, the weights' memory mark, RSS before)."""
    import torch

    from trials.engines import build_engine, engine_class
    from trials.measure import host_rss_now_bytes, memory_mark
    from trials.workloads.build import apply_checkpointing, build_workload, import_workload_modules

    launched_at = os.environ.get("AUTOTUNE_LAUNCH_TIME")
    if launched_at:  # wall clock when the controller started the launcher
        phase["launch_to_worker"] = _wall_at_start - float(launched_at)
    # The engine's and the workload's libraries too (DeepSpeed, DTensor, transformers): the
    # build's time and memory are the model's, not imports'.
    engine_class(cfg)
    import_workload_modules(cfg)
    phase["worker_imports"] = time.perf_counter() - t_start
    t = time.perf_counter()
    device, world = _setup(cfg)
    phase["setup"] = time.perf_counter() - t  # device, threads, process group (rendezvous)
    t = time.perf_counter()
    # The same seed on every rank: each draws the same weights, and keeps its own part.
    torch.manual_seed(cfg.seed)
    rss_baseline = host_rss_now_bytes()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    # Built on the meta device, so that no rank ever holds more of the model than its config
    # says: the engine materialises its part (trials/workloads/materialize.py).
    built = build_workload(cfg, device, deferred=True)
    built.checkpointed_layers = apply_checkpointing(built, cfg)
    after_workload = memory_mark(device)
    engine = build_engine(cfg, built.model, device, world, init_module=built.init_module,
                          hidden_size=(built.shape or {}).get("d_model"))
    # When this rank's weights were in place (the engine materialised them, or the user's
    # entry point built them whole): the model's build, before the engine's own state.
    weights = getattr(engine, "weights_mark", None) or after_workload
    phase["build_model"] = weights["t"] - t
    phase["build"] = time.perf_counter() - t  # model + engine (optimizer state, buffers, wrappers)
    return device, world, built, engine, weights, rss_baseline


def _warm_up(cfg, steps, model, phase: dict[str, float]):
    """Untimed steps; the last one probes activation memory (not for a compiled model).
    Returns the probe and the warm-up steps' times (a compiled trial's compile seconds)."""
    t = time.perf_counter()
    probe = None
    # A compiled model compiles at its first step: at least one warm-up step pays for it, and
    # the probe's hooks stay out (hooks added to a compiled model recompile it, and would
    # count the eager model's saved tensors, not the compiled graph's).
    warmup_steps = max(1, cfg.warmup_steps) if cfg.compile else cfg.warmup_steps
    for i in range(warmup_steps):
        if i == warmup_steps - 1 and not cfg.compile:
            probe = steps.probe(model)  # untimed: hooks cost Python time
        else:
            steps.run_one()
    phase["warmup"] = time.perf_counter() - t
    return probe, list(steps.times_s)


def _measure(cfg, steps, device, phase: dict[str, float]):
    """The timed steps, with the device's memory sampled; returns the NVML sampler."""
    import torch

    from trials.measure import NvmlSampler

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    steps.start_measuring()
    t = time.perf_counter()
    with NvmlSampler(device) as nvml:
        for _ in range(cfg.measure_steps):
            steps.run_one()
        # A noisy or short window says little: extend up to the cap while the CV stays high
        # or the window is shorter than min_measure_s (every rank decides alike: the times
        # are the slowest rank's).
        while cfg.measure_more(steps.times_s, steps.job_cv()):
            steps.extended = True
            steps.run_one()
    phase["measure"] = time.perf_counter() - t
    return nvml


def _setup(cfg):
    """Device, threads and the process group; configs this machine cannot run stop here."""
    import torch
    import torch.distributed as dist

    from trials.errors import UnsupportedConfig
    from trials.precision import check_precision

    world, local_rank = _env_int("WORLD_SIZE", 1), _env_int("LOCAL_RANK", 0)
    torch.set_num_threads(cfg.threads_per_rank)
    if cfg.device.value == "cuda":
        if not torch.cuda.is_available():
            raise UnsupportedConfig("device cuda requested but torch sees no CUDA device")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world != cfg.world_size:
        raise RuntimeError(f"launcher started {world} ranks, config asks for {cfg.world_size}")
    check_precision(cfg, device)
    if world > 1 and not dist.is_initialized():
        from datetime import timedelta

        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                timeout=timedelta(seconds=max(60.0, cfg.timeout_s)))
    return device, world


def _grad_norms(engine) -> dict | None:
    fn = getattr(engine, "grad_norm_samples", None)
    return fn() if fn is not None else None


def _memory_now(device) -> dict:
    from trials.measure import cuda_peaks, host_rss_peak_bytes

    out: dict = {"rss_peak": host_rss_peak_bytes(), "cuda": None}
    if device.type == "cuda":
        out["cuda"] = cuda_peaks(device)
    return out


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without the interpreter's teardown: the result is written, and with FSDP2 on gloo
    # (torch 2.13) the teardown's garbage collection sometimes aborts a rank ("terminate called
    # without an active exception", SIGABRT), which a launcher reports as the run's failure
    # after it succeeded.
    os._exit(code)
