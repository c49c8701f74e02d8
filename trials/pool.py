"""A pool of trial workers: started once by a launcher, it runs trial after trial in the same
ranks, so a sweep pays the launcher start, the imports and the rendezvous once per pool
instead of once per trial. `autotune.run.pool` starts and feeds it, e.g.:

    python -m torch.distributed.run --nproc-per-node 2 -m trials.pool --queue DIR \\
        --idle-timeout-s 300

The controller writes `DIR/000001.trial.json` ({"config": ..., "result": ...}, atomically),
then 000002, ...; every rank reads them in that order and meets the others at a barrier
before each, so the ranks agree on what they run. Each trial goes through the worker's own
code path (`trials.worker.run_one`) with a fresh seed, model, optimizer and engine, and its
memory high-water mark reset; rank 0 writes the trial's result.json once every rank has
released that trial's memory. A failed trial (an exception, an OOM) writes its classified
result as the worker does and ends the pool: the next trial starts a fresh one, so a failure
never leaks into another trial. The pool ends by itself on `DIR/stop`, after
`--idle-timeout-s` without a trial, or when the controller process is gone (trials/watchdog.py,
during a trial as between trials).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import time
from pathlib import Path

from autotune.contract.trial_files import is_pool_queue, queue_trial_file, rank_pid_file, stop_file

# How often an idle rank looks for the next trial: small against a trial (seconds), large
# enough that two idle ranks cost no measurable CPU. A pool idle for longer than DORMANT_AFTER_S
# (the controller keeps it for a later trial while another pool runs: autotune/run/pool.py)
# looks every DORMANT_POLL_S, so that its ranks stay off the cores the running trial measures.
POLL_S = 0.02
DORMANT_AFTER_S = 2.0
DORMANT_POLL_S = 0.1


def wait_for_trial(queue: Path, seq: int, idle_timeout_s: float) -> Path | None:
    """The next trial's file, or None when the pool should end (stop file, idle, launcher or
    queue gone; a gone controller ends the process: trials/watchdog.py)."""
    path = queue_trial_file(queue, seq)
    since = time.monotonic()
    deadline = since + idle_timeout_s
    while True:
        # The launcher gone (a rank is re-parented when it dies: torchrun starts each rank in
        # its own session, so killing the launcher's group leaves the ranks) or the queue gone:
        # nobody will read this pool's results. Checked before taking a trial, too.
        if os.getppid() != _LAUNCHER_PID or not queue.is_dir():
            return None
        if path.exists():
            return path
        if stop_file(queue).exists() or time.monotonic() > deadline:
            return None
        time.sleep(POLL_S if time.monotonic() - since < DORMANT_AFTER_S else DORMANT_POLL_S)


_LAUNCHER_PID = os.getppid()  # at start: the launcher's process that started this rank


def _remove_queue(queue: Path) -> None:
    """The queue folder and what is in it, all written by the controller (autotune/run/pool.py,
    a mkdtemp folder named autotune-pool-*) and this pool; nothing else is touched."""
    import shutil

    if is_pool_queue(queue):
        shutil.rmtree(queue, ignore_errors=True)


def release_memory(device_type: str) -> None:
    """Give back what the last trial left: cycles (engines, hooks), the allocator's free lists
    (glibc keeps freed heap chunks until malloc_trim), CUDA's cached blocks; then the next
    trial's peaks start from what the process really holds."""
    gc.collect()
    if device_type == "cuda":
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    try:
        import ctypes
        import ctypes.util

        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to trim


def serve(queue: Path, idle_timeout_s: float) -> int:
    """Run trials from `queue` until told to stop; returns the exit code."""
    from autotune.contract import TrialConfig, TrialStatus
    from trials import worker
    from trials.alive import clear_alive
    from trials.engines import engine_class
    from trials.measure import host_rss_now_bytes, reset_host_rss_peak
    from trials.workloads.build import import_workload_modules

    rank = int(os.environ.get("RANK", "0"))
    # The controller kills a failed pool's ranks by these (they may not be in the launcher's
    # process group), after checking that the pid still runs this queue.
    rank_pid_file(queue, rank).write_text(str(os.getpid()))
    # A dead controller ends every rank, idle or in a trial; rank 0 first removes the queue,
    # which the controller would have.
    from trials.watchdog import watch_controller

    watch_controller(on_gone=(lambda: _remove_queue(queue)) if rank == 0 else None)
    fatal = None
    seq = 1
    mallopt_done = False
    while True:
        path = wait_for_trial(queue, seq, idle_timeout_s)
        if path is None:
            return 0
        spec = json.loads(path.read_text())
        cfg = TrialConfig.read(spec["config"])
        result_path = Path(spec["result"])
        fatal = _enter_trial(cfg, result_path, rank, seq, fatal, mallopt_done)
        mallopt_done = mallopt_done or cfg.device.value == "cpu"
        # The trial's libraries first (as the worker does before its build): the RSS below
        # is then what the trial starts from, its own imports included.
        # A failure here is raised again inside run_one, and classified there.
        with contextlib.suppress(Exception):
            engine_class(cfg)
            import_workload_modules(cfg)
        reset_host_rss_peak()
        rss_bytes = host_rss_now_bytes()
        t_start = time.perf_counter()
        result = worker.run_one(cfg, result_path, t_start, keep_group=True)
        _note_pool(result, seq, rss_bytes)
        # Dynamo keeps the last trial's graphs and guards (on its model): the next compiles its own.
        from trials.compile import reset_compile_state

        reset_compile_state()
        release_memory(cfg.device.value)
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()  # a written result means every rank is ready for the next trial
        if rank == 0:
            result.wall_s = time.perf_counter() - t_start
            result.write(result_path)
        clear_alive()  # the trial ended by this rank's own code
        if result.status is not TrialStatus.ok:
            return 1  # e.g. a NaN loss returned as a result: the next trial gets a fresh pool
        seq += 1


def _enter_trial(cfg, result_path: Path, rank: int, seq: int, fatal, mallopt_done: bool):
    """Make this process the next trial's: its folder, its fatal log (returned), the host
    allocator set up once, and every rank past the last trial before it starts."""
    from trials import worker

    # The trial's processes are found by their working directory (a sweep whose controller
    # died kills them by it: autotune/run/processes.py).
    os.chdir(result_path.parent)
    # The new trial's fatal log first, then the old one closed: faulthandler never holds a
    # closed file descriptor (one reused by another file would get the stack).
    previous, fatal = fatal, worker.install_fault_handlers(result_path, rank)
    if previous is not None:
        previous.close()
    if cfg.device.value == "cpu" and not mallopt_done:
        worker.host_memory_like_a_device()
    if seq > 1:
        # The launch time is the pool's: only its first trial waited for the launcher.
        os.environ.pop("AUTOTUNE_LAUNCH_TIME", None)
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()  # every rank starts the same trial, none still in the last one
    return fatal


def _note_pool(result, seq: int, rss_bytes: int) -> None:
    """Where the trial stood in its pool, and what the process held as it started: a pooled
    host RSS peak includes what earlier trials' libraries built and kept (the first DeepSpeed
    ZeRO 1-3 trial imports torch._inductor and networkx for good: docs/benchmarks.md, pooled
    trials), which a fresh process running this config alone would not hold."""
    result.observations["pool"] = {"trial": seq, "host_rss_at_start_bytes": rss_bytes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queue", required=True, help="folder the controller writes trials to")
    ap.add_argument("--idle-timeout-s", type=float, default=300.0)
    ap.add_argument("--local_rank", type=int, default=None, help="set by the DeepSpeed launcher")
    args = ap.parse_args(argv)
    return serve(Path(args.queue), args.idle_timeout_s)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # As the worker: no interpreter teardown (it sometimes aborts a rank, trials/worker.py).
    os._exit(code)
