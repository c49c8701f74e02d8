"""Trials run by a pool of long-lived workers (trials/pool.py): the launcher, the imports and
the rendezvous are paid once per pool, not once per trial.

    runner = pool_runner()                       # a TrialRunner (autotune.run.launch)
    result = runner(cfg, trial_dir, on_start)    # same files and classification as run_trial
    runner.close()                               # stops the pools; a sweep does it at its end

One pool per launch key (the launcher's argv without paths and port, the environment the
trial gets, the timeout); on CPU two keys' pools are kept (a sweep alternates between
torchrun's and DeepSpeed's), on CUDA one: a trial with another key ends the least recently
used pool and starts one for itself.
A trial's folder gets what `run_trial` writes (config.json, command.json, stdout.log and
stderr.log: the pool's output while it ran, result.json), and its result is read by the same
`read_result`. Isolation: a trial that fails ends its pool (the workers exit after writing the
classified result) and a timeout kills the pool's process group, so the next trial starts a
fresh pool. `wall_s` runs from submitting the trial to its result; the trial that started a
pool is charged the pool's start. Multi-node trials, accelerate (its Accelerator state is
process-wide) and anything `fallback` handles run unpooled.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from autotune.contract import (
    Launcher,
    TrialConfig,
    TrialResult,
    TrialStatus,
    write_json_atomic,
)
from autotune.contract.trial_files import (
    FATAL_LOGS,
    QUEUE_PREFIX,
    TrialFiles,
    queue_trial_file,
    rank_pid_files,
    remove_own_outputs,
    stop_file,
)
from autotune.run.argv import WORKER_MODULE, build_argv, free_port, launch_env
from autotune.run.launch import TrialRunner, launcher_runner
from autotune.run.process_group import KILL_GRACE_S, group_alive, kill_group
from autotune.run.results import read_result
from autotune.run.shm import remove_deepspeed_shm

POOL_MODULE = "trials.pool"
POOLED_LAUNCHERS = (Launcher.torchrun, Launcher.deepspeed)
# A pool idle this long ends by itself (the controller is gone or forgot it); the controller
# does not hand a trial to a pool idle for half of it, so the two never race.
IDLE_TIMEOUT_S = 600.0
# A pool is recycled after this many trials: what the libraries keep per trial (process
# subgroups of device meshes, caches) stays bounded.
MAX_TRIALS_PER_POOL = 50
# Pools kept alive at once, one per launch key, by device. A sweep's trials alternate between
# launch keys (ZeRO 0 runs under torchrun, ZeRO 1-3 under DeepSpeed's launcher), and a pool's
# start costs more than a pooled trial (docs/benchmarks.md, pooled trials), so on CPU
# the other key's pool waits, dormant (trials/pool.py polls every 0.1 s): its ranks hold host
# memory, which is per process and not in the running trial's peak. On CUDA a waiting pool
# would hold a CUDA context on every device, which NVML's device-wide used memory (the trial's
# peak) would count: one pool at a time there.
MAX_POOLS = {"cpu": 2, "cuda": 1}
POLL_S = 0.02


def launch_key(cfg: TrialConfig, python: str = sys.executable) -> tuple:
    """What must be equal for two trials to share a pool: the launcher argv (paths and port
    left out), the environment the ranks get, the device and the timeout (the process group's
    collective timeout is set from it once)."""
    argv = build_argv(cfg, Path("config"), Path("result"), 0, python=python)
    env = launch_env(cfg)
    env.pop("AUTOTUNE_LAUNCH_TIME", None)  # a time stamp, different at every call
    return tuple(argv), tuple(sorted(env.items())), cfg.device.value, cfg.timeout_s


def pool_argv(cfg: TrialConfig, queue: Path, port: int, idle_timeout_s: float,
              python: str = sys.executable) -> list[str]:
    """The launcher argv of a trial with the worker swapped for the pool: the same launcher
    flags, ranks and rendezvous, so a pooled trial runs under what an unpooled one would."""
    placeholder = TrialFiles(queue)  # the worker's paths, replaced by the queue's
    argv = build_argv(cfg, placeholder.config, placeholder.result, port, python=python)
    i = argv.index(WORKER_MODULE)
    if argv[i + 1:] != ["--config", str(placeholder.config), "--result", str(placeholder.result)]:
        raise ValueError(f"unexpected worker arguments in {argv}")
    return [*argv[:i], POOL_MODULE, "--queue", str(queue),
            "--idle-timeout-s", f"{idle_timeout_s:g}"]


class _Pool:
    """One running pool: its launcher's process group, its queue folder and its logs."""

    def __init__(self, cfg: TrialConfig, key: tuple, python: str, idle_timeout_s: float):
        self.key = key
        self.queue = Path(tempfile.mkdtemp(prefix=QUEUE_PREFIX))
        self.port = free_port()
        self.argv = pool_argv(cfg, self.queue, self.port, idle_timeout_s, python)
        self.out_path, self.err_path = TrialFiles(self.queue).stdout, TrialFiles(self.queue).stderr
        self.seq = 0  # trials handed to it
        self.started_at = time.monotonic()
        self.idle_since = self.started_at
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         env=launch_env(cfg), cwd=self.queue, start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def end(self, graceful: bool = True) -> None:
        """Ask the ranks to leave (the stop file), then kill what is left of the group."""
        if graceful and self.alive():
            stop_file(self.queue).touch()
            try:
                self.proc.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        if self.alive() or group_alive(self.proc.pid):
            kill_group(self.proc)
        self.proc.wait()
        _kill_ranks(self.queue)
        remove_deepspeed_shm(self.port)

    def close(self, graceful: bool = True) -> None:
        self.end(graceful)
        shutil.rmtree(self.queue, ignore_errors=True)  # made by mkdtemp above: ours alone


def _kill_ranks(queue: Path) -> None:
    """SIGKILL the pool's ranks still running: torchrun starts each rank in its own session, so
    a launcher killed outright (SIGKILL, the OOM killer) leaves them outside its process group.
    A pid is killed only while its command line still names this pool's queue (pid reuse)."""
    import signal

    for pid_file in rank_pid_files(queue):
        try:
            pid = int(pid_file.read_text())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if str(queue).encode() not in f.read():
                    continue
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            continue  # gone already


def _copy_range(src: Path, dst: Path, start: int) -> None:
    """The pool's output from byte `start` on: what the ranks printed during one trial."""
    with open(src, "rb") as f, open(dst, "wb") as out:
        f.seek(start)
        shutil.copyfileobj(f, out)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class PoolRunner:
    """A TrialRunner keeping worker pools alive across trials: one per launch key, at most
    MAX_POOLS[device] at once (the least recently used ends first). Not for concurrent calls
    from several threads (calls are serialised by a lock)."""

    def __init__(self, fallback: TrialRunner | None = None, python: str = sys.executable,
                 idle_timeout_s: float = IDLE_TIMEOUT_S, max_trials_per_pool: int = MAX_TRIALS_PER_POOL):
        self.fallback = fallback or launcher_runner(python=python)
        self.python = python
        self.idle_timeout_s = idle_timeout_s
        self.max_trials_per_pool = max_trials_per_pool
        self.pools_started = 0
        self._pools: dict[tuple, _Pool] = {}  # by launch key, least recently used first
        self._lock = threading.Lock()

    def pooled(self, cfg: TrialConfig) -> bool:
        return cfg.num_nodes == 1 and cfg.launcher in POOLED_LAUNCHERS

    def __call__(self, cfg: TrialConfig, trial_dir: Path,
                 on_start: Callable[[int], None] | None = None) -> TrialResult:
        if not self.pooled(cfg):
            self.close()  # its ranks would compete with the unpooled trial for the cores
            return self.fallback(cfg, trial_dir, on_start=on_start)
        with self._lock:
            result, started = self._run(cfg, Path(trial_dir).resolve(), on_start)
            if result is None and not started:
                # The reused pool died before any rank took the trial (it was going to end,
                # or a rank died after the last result): run it once more on a fresh pool.
                result, _ = self._run(cfg, Path(trial_dir).resolve(), on_start)
            if result is None:  # not reached: a trial on a fresh pool always has a result
                raise RuntimeError("a fresh pool returned no result")
            return result

    def _pool_for(self, cfg: TrialConfig) -> tuple[_Pool, bool]:
        key = launch_key(cfg, self.python)
        pool = self._pools.pop(key, None)
        if pool is not None and (not pool.alive() or pool.seq >= self.max_trials_per_pool
                                 or time.monotonic() - pool.idle_since > self.idle_timeout_s / 2):
            pool.close()
            pool = None
        if pool is None:
            # Room for the new pool first: its start must not race the others' ends for memory.
            while len(self._pools) >= MAX_POOLS.get(cfg.device.value, 1):
                self._pools.pop(next(iter(self._pools))).close()
            pool = _Pool(cfg, key, self.python, self.idle_timeout_s)
            self.pools_started += 1
            fresh = True
        else:
            fresh = False
        self._pools[key] = pool  # most recently used last
        return pool, fresh

    def _run(self, cfg: TrialConfig, trial_dir: Path, on_start) -> tuple[TrialResult | None, bool]:
        """(result, whether a rank took the trial); (None, False) asks for a retry."""
        trial_dir.mkdir(parents=True, exist_ok=True)
        files = TrialFiles(trial_dir)
        config_path, result_path = files.config, files.result
        remove_own_outputs(trial_dir)
        cfg.write(config_path)
        pool, fresh = self._pool_for(cfg)
        t0 = pool.started_at if fresh else time.monotonic()  # a fresh pool's start is this trial's
        out_at, err_at = (0, 0) if fresh else (_size(pool.out_path), _size(pool.err_path))
        pool.seq += 1
        write_json_atomic(files.command, {"argv": pool.argv, "pool_trial": pool.seq})
        if on_start is not None:
            on_start(pool.proc.pid)
        write_json_atomic(queue_trial_file(pool.queue, pool.seq),
                          {"config": str(config_path), "result": str(result_path)})
        timed_out, rc = False, 0
        try:
            while True:
                if pool.proc.poll() is not None:
                    rc = pool.proc.returncode
                    break
                if result_path.is_file() and _ended_ok(result_path):
                    break
                if time.monotonic() - t0 > cfg.timeout_s:
                    timed_out = True
                    kill_group(pool.proc)
                    rc = pool.proc.wait()
                    break
                time.sleep(POLL_S)
        except BaseException:  # Ctrl-C or the controller's own death: take the ranks with us
            self.close(graceful=False)
            raise
        wall_s = time.monotonic() - t0
        pool.idle_since = time.monotonic()
        out_path, err_path = files.stdout, files.stderr
        failed = timed_out or pool.proc.poll() is not None  # the pool ended with the trial
        if failed:
            pool.end()  # a failed trial's pool is not reused; its ranks finish their output
        _copy_range(pool.out_path, out_path, out_at)
        _copy_range(pool.err_path, err_path, err_at)
        if failed:
            self._drop(pool)
        started = bool(FATAL_LOGS.paths(trial_dir))  # each rank opens it as it takes the trial
        if not started and not fresh and not timed_out:
            return None, False
        result = read_result(result_path, rc, timed_out, err_path, out_path, cfg)
        result.wall_s = wall_s
        result.notes.append("pooled: started its pool (the start is in wall_s)" if fresh
                            else f"pooled: trial {pool.seq} of its pool")
        result.write(result_path)
        return result, True

    def _drop(self, pool: _Pool, graceful: bool = True) -> None:
        if self._pools.get(pool.key) is pool:
            del self._pools[pool.key]
        pool.close(graceful)

    def close(self, graceful: bool = True) -> None:
        """End every pool (the sweep's end, or an unpooled trial about to run)."""
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close(graceful)


def _ended_ok(result_path: Path) -> bool:
    """Rank 0 wrote an ok result (atomically): the pool is ready for the next trial. A failed
    result is followed by the pool's exit, which the caller waits for."""
    try:
        return json.loads(result_path.read_text()).get("status") == TrialStatus.ok.value
    except (OSError, ValueError):
        return False


def pool_runner(fallback: TrialRunner | None = None, python: str = sys.executable, **kwargs) -> PoolRunner:
    """The TrialRunner for a local sweep: pooled where it can be, `fallback` (the launcher)
    elsewhere. Close it (`runner.close()`) when the sweep ends."""
    return PoolRunner(fallback=fallback, python=python, **kwargs)
