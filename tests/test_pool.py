"""The worker pool (autotune/run/pool.py, trials/pool.py) with real launchers, real ranks and
real training steps: results like unpooled trials', per-trial memory peaks, a failed or timed
out trial ends its pool and the next trial gets a fresh one, a pool outlives neither its
controller nor its launch key."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune.contract import GPTWorkload, Launcher, TrialConfig, TrialStatus
from autotune.run.launch import run_trial
from autotune.run.pool import PoolRunner, launch_key, pool_argv
from autotune.run.process_group import group_alive

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[1]


def _cfg(micro: int = 1, **kw) -> TrialConfig:
    fields = {"workload": GPTWorkload(preset="tiny"), "seq_len": 32, "micro_batch_size": micro,
              "num_gpus": 1, "launcher": Launcher.torchrun, "warmup_steps": 1, "measure_steps": 2,
              "max_measure_steps": 2, "timeout_s": 240}
    return TrialConfig(**{**fields, **kw})


def _wait_gone(pgid: int, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _limited_python(folder: Path, limit_bytes: int = 2 * 1024**3) -> str:
    """A `python` for the launcher that runs under a data-size limit, as tests/test_faults.py's
    launch wrapper does: a too-large micro-batch fails with the allocator's own OOM."""
    path = folder / "python_2gb"
    path.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, resource, sys
        resource.setrlimit(resource.RLIMIT_DATA, ({limit_bytes}, {limit_bytes}))
        os.execv({sys.executable!r}, [{sys.executable!r}, *sys.argv[1:]])
        """))
    path.chmod(0o755)
    return str(path)


def test_the_pool_argv_is_the_trials_launcher_with_the_pool_module(tmp_path):
    for launcher in (Launcher.torchrun, Launcher.deepspeed):
        cfg = _cfg(num_gpus=2, launcher=launcher)
        argv = pool_argv(cfg, tmp_path, 1234, 60.0)
        assert argv[argv.index("trials.pool") + 1:argv.index("trials.pool") + 3] == ["--queue", str(tmp_path)]
        assert "trials.worker" not in argv and "1234" in argv
    # Same launcher, ranks and environment: one key; another world size: another.
    assert launch_key(_cfg(1)) == launch_key(_cfg(64, zero_stage=0))
    assert launch_key(_cfg(1)) != launch_key(_cfg(1, num_gpus=2))


def test_deepspeed_trials_in_one_pool_match_unpooled_ones_with_per_trial_peaks(tmp_path):
    big = _cfg(32, seq_len=128, num_gpus=2, zero_stage=3, launcher=Launcher.deepspeed)
    small = _cfg(1, seq_len=128, num_gpus=2, zero_stage=3, launcher=Launcher.deepspeed)
    runner = PoolRunner()
    starts: list[int] = []
    try:
        first = runner(big, tmp_path / "p0", on_start=starts.append)
        second = runner(small, tmp_path / "p1", on_start=starts.append)
        third = runner(small, tmp_path / "p2", on_start=starts.append)
    finally:
        runner.close()
    # Nothing of a trial stays behind for the next: ZeRO-3 kept each trial's model alive
    # (11 MiB a tiny-GPT trial) until the engine's close() released it.
    at_start = [r.observations["pool"]["host_rss_at_start_bytes"] for r in (second, third)]
    assert third.ok and at_start[1] - at_start[0] < 4 * 2**20, at_start
    fresh = run_trial(small, tmp_path / "u1")
    assert first.status is second.status is fresh.status is TrialStatus.ok, (first.error, second.error)
    assert runner.pools_started == 1 and starts[0] == starts[1] == starts[2]  # one pool ran all
    assert not group_alive(starts[0])  # close() ended it
    # Equal in kind: the same fields measured, the same engine observations.
    def filled(r):
        return {k for k, v in r.model_dump().items() if v not in (None, [], {})}

    assert filled(second) == filled(fresh)
    assert set(second.observations) == set(fresh.observations) | {"pool"}
    assert second.observations["pool"]["trial"] == 2
    assert second.observations["zero_stage"] == fresh.observations["zero_stage"] == 3
    assert second.measured_steps == fresh.measured_steps
    # Each trial's own peak: the small trial after the big one reports less than the big one.
    assert second.peak_mem_bytes < first.peak_mem_bytes
    for name in ("config.json", "command.json", "stdout.log", "stderr.log", "result.json"):
        assert (tmp_path / "p1" / name).is_file(), name
    assert "pooled: trial 2 of its pool" in second.notes


def test_an_oom_is_classified_and_the_next_trial_runs_on_a_fresh_pool(tmp_path):
    runner = PoolRunner(python=_limited_python(tmp_path))
    starts: list[int] = []
    try:
        ok = runner(_cfg(1), tmp_path / "t0", on_start=starts.append)
        oom = runner(_cfg(4096), tmp_path / "t1", on_start=starts.append)
        assert not group_alive(starts[1])  # the failed trial's pool is gone
        after = runner(_cfg(1), tmp_path / "t2", on_start=starts.append)
    finally:
        runner.close()
    assert ok.status is TrialStatus.ok and after.status is TrialStatus.ok, (ok.error, after.error)
    assert oom.status is TrialStatus.oom, (oom.status, oom.error, oom.log_tail[-2000:])
    assert starts[0] == starts[1] != starts[2] and runner.pools_started == 2
    assert oom.error and "Traceback" in oom.log_tail


def test_a_trial_over_its_timeout_kills_the_pool(tmp_path):
    runner = PoolRunner()
    starts: list[int] = []
    try:
        # 25 s: several times what the first trial (the pool's start included) takes on a
        # loaded 2-core machine; every second of it the hung trial below waits out.
        ok = runner(_cfg(1, timeout_s=25), tmp_path / "t0", on_start=starts.append)
        # Same launch key, far more steps than 25 s allow.
        hung = runner(_cfg(1, timeout_s=25, measure_steps=10**6, max_measure_steps=10**6),
                      tmp_path / "t1", on_start=starts.append)
    finally:
        runner.close()
    assert ok.status is TrialStatus.ok, ok.error
    assert hung.status is TrialStatus.timeout and "timeout_s=25" in hung.error
    assert starts[0] == starts[1] and not group_alive(starts[1])
    assert 25 <= hung.wall_s < 55


def test_pools_are_kept_per_launch_key_and_the_least_recently_used_ends(tmp_path):
    # On CPU two launch keys keep a pool each (a sweep alternates torchrun's ZeRO-0 trials and
    # DeepSpeed's ZeRO 1-3 ones); a third key ends the pool used least recently.
    a, b, c = _cfg(1), _cfg(1, threads_per_rank=2), _cfg(1, timeout_s=200)
    runner = PoolRunner()
    starts: list[int] = []
    try:
        results = [runner(cfg, tmp_path / f"t{i}", on_start=starts.append) for i, cfg in enumerate((a, b, a))]
        assert group_alive(starts[0]) and group_alive(starts[1])  # both kept
        results.append(runner(c, tmp_path / "t3", on_start=starts.append))
        assert not group_alive(starts[1]) and group_alive(starts[0]) and group_alive(starts[3])
    finally:
        runner.close()
    assert all(r.ok for r in results), [r.error for r in results]
    assert starts[0] == starts[2] != starts[1] and runner.pools_started == 3
    assert "pooled: trial 2 of its pool" in results[2].notes
    assert not group_alive(starts[0]) and not group_alive(starts[3])  # close() ends them all


def test_a_pool_whose_controller_dies_goes_away(tmp_path):
    # A controller that runs one pooled trial, prints the pool's group and dies without
    # closing it (SIGKILL leaves no chance to).
    script = textwrap.dedent(f"""\
        import os, signal, sys
        from pathlib import Path
        sys.path.insert(0, {str(REPO)!r})
        from tests.test_pool import _cfg
        from autotune.run.pool import PoolRunner
        starts = []
        runner = PoolRunner()
        result = runner(_cfg(1), Path({str(tmp_path / "t0")!r}), on_start=starts.append)
        print(result.status.value, starts[0], next(iter(runner._pools.values())).queue, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """)
    p = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=240,
                       env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=tmp_path)
    status, pgid, queue = p.stdout.split()
    assert status == "ok", p.stdout + p.stderr
    assert _wait_gone(int(pgid), 30), "the pool outlived its controller"
    assert not Path(queue).exists()  # rank 0 removed the folder its controller no longer can


def test_a_pool_whose_controller_dies_mid_trial_goes_away(tmp_path):
    # As above, but the controller dies while its pooled trial trains: the ranks would train on
    # to the trial's end; each sees its controller gone (trials/watchdog.py) and rank 0 removes
    # the queue first.
    script = textwrap.dedent(f"""\
        import os, signal, sys, threading, time
        from pathlib import Path
        sys.path.insert(0, {str(REPO)!r})
        from tests.test_pool import _cfg
        from autotune.run.pool import PoolRunner
        starts = []
        runner = PoolRunner()
        cfg = _cfg(1, measure_steps=100000, max_measure_steps=100000, timeout_s=600)
        threading.Thread(target=runner, args=(cfg, Path({str(tmp_path / "t0")!r})),
                         kwargs=dict(on_start=starts.append), daemon=True).start()
        while not starts or not runner._pools:
            time.sleep(0.1)
        print(starts[0], next(iter(runner._pools.values())).queue, flush=True)
        time.sleep(8)  # into the trial's steps
        os.kill(os.getpid(), signal.SIGKILL)
        """)
    p = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=240,
                       env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=tmp_path)
    pgid, queue = p.stdout.split()
    try:
        assert _wait_gone(int(pgid), 30), "the pool's trial outlived its controller"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(pgid), signal.SIGKILL)
    assert not Path(queue).exists()  # rank 0 removed the folder its controller no longer can
    assert not (tmp_path / "t0" / "result.json").exists()  # nobody is left to read one


def test_the_host_peak_resets_to_what_the_process_holds():
    from trials.measure import host_rss_peak_bytes, reset_host_rss_peak

    block = b"\x01" * (256 * 2**20)  # resident: every page written
    high = host_rss_peak_bytes()
    del block
    if not reset_host_rss_peak():
        pytest.skip("no /proc/self/clear_refs here")
    assert host_rss_peak_bytes() < high - 200 * 2**20


def test_a_pool_killed_between_trials_is_replaced(tmp_path):
    import signal

    runner = PoolRunner()
    starts: list[int] = []
    try:
        one = runner(_cfg(1), tmp_path / "t0", on_start=starts.append)
        # E.g. the OOM killer: the launcher dies outright; its ranks (torchrun gives each its
        # own session) leave as they find themselves orphaned, or the runner kills them.
        os.killpg(starts[0], signal.SIGKILL)
        next(iter(runner._pools.values())).proc.wait()
        two = runner(_cfg(1), tmp_path / "t1", on_start=starts.append)
    finally:
        runner.close()
    assert one.ok and two.ok, (one.error, two.error)
    assert _wait_gone(starts[0])
    assert starts[0] != starts[1] and runner.pools_started == 2
