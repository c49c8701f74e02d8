"""Launcher argv building and how a trial's ending is classified (no subprocess here)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from autotune.contract import DeviceKind, Launcher, TrialConfig, TrialResult, TrialStatus
from autotune.run.argv import build_argv, free_port, launch_env
from autotune.run.results import read_result

# Each launcher's flags for the ranks per node and the rendezvous port (their own spellings).
RANKS_AND_PORT_FLAGS = {Launcher.torchrun: ("--nproc-per-node", "--master-port"),
                        Launcher.deepspeed: ("--num_gpus", "--master_port"),
                        Launcher.accelerate: ("--num_processes", "--main_process_port")}


@pytest.mark.parametrize("launcher", list(Launcher))
def test_argv_is_a_list_with_ranks_port_and_paths(tmp_path, launcher):
    cfg = TrialConfig(num_gpus=2, launcher=launcher)
    argv = build_argv(cfg, tmp_path / "c.json", tmp_path / "r.json", port=41234, python="/py")
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    assert argv[0] == "/py"
    ranks_flag, port_flag = RANKS_AND_PORT_FLAGS[launcher]
    assert argv[argv.index(ranks_flag) + 1] == "2", argv
    assert argv[argv.index(port_flag) + 1] == "41234", argv
    assert argv[-4:] == ["--config", str(tmp_path / "c.json"), "--result", str(tmp_path / "r.json")]


def test_argv_never_interprets_odd_paths(tmp_path):
    """A path with spaces and shell metacharacters stays one argv element."""
    odd = tmp_path / "a b; rm -rf $HOME" / "c.json"
    argv = build_argv(TrialConfig(), odd, tmp_path / "r.json", port=1, python="/py")
    assert str(odd) in argv


def test_free_port_is_bindable():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_env_pins_threads_and_hides_gpus_on_cpu():
    env = launch_env(TrialConfig(threads_per_rank=3))
    assert env["OMP_NUM_THREADS"] == "3" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["ACCELERATE_USE_CPU"] == "true"


def test_cpu_ranks_get_huge_pages_unless_the_user_says_otherwise(monkeypatch):
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    assert launch_env(TrialConfig())["THP_MEM_ALLOC_ENABLE"] == "1"
    # GPU ranks: the CPU allocator is not what a GPU run's speed depends on; left alone.
    assert "THP_MEM_ALLOC_ENABLE" not in launch_env(TrialConfig(device=DeviceKind.cuda))
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")  # the opt-out the README documents
    assert launch_env(TrialConfig())["THP_MEM_ALLOC_ENABLE"] == "0"


def _logs(tmp_path: Path) -> tuple[Path, Path]:
    err, out = tmp_path / "stderr.log", tmp_path / "stdout.log"
    err.write_text("Traceback ...\nValueError: bad thing\n")
    out.write_text("")
    return err, out


def test_no_result_file_is_a_crash_with_log_tail(tmp_path):
    err, out = _logs(tmp_path)
    r = read_result(tmp_path / "result.json", 1, False, err, out, TrialConfig())
    assert r.status is TrialStatus.crash and "bad thing" in r.log_tail and "exit code 1" in r.error


def test_killed_by_signal_is_named(tmp_path):
    err, out = _logs(tmp_path)
    r = read_result(tmp_path / "result.json", -9, False, err, out, TrialConfig())
    assert "signal 9" in r.error


def test_timeout_wins_over_everything(tmp_path):
    err, out = _logs(tmp_path)
    TrialResult(status=TrialStatus.ok).write(tmp_path / "result.json")
    r = read_result(tmp_path / "result.json", -15, True, err, out, TrialConfig())
    assert r.status is TrialStatus.timeout


def test_failed_rank_file_is_used_when_rank0_wrote_nothing(tmp_path):
    err, out = _logs(tmp_path)
    TrialResult(status=TrialStatus.oom, error="rank 1 ran out").write(tmp_path / "result.rank1.json")
    r = read_result(tmp_path / "result.json", 1, False, err, out, TrialConfig(num_gpus=2))
    assert r.status is TrialStatus.oom and r.error == "rank 1 ran out"


def test_unreadable_result_is_a_crash(tmp_path):
    err, out = _logs(tmp_path)
    (tmp_path / "result.json").write_text("{not json")
    r = read_result(tmp_path / "result.json", 0, False, err, out, TrialConfig())
    assert r.status is TrialStatus.crash and "unreadable" in r.error


def test_prebuild_clears_a_lock_left_by_a_dead_build_only(tmp_path):
    """A DeepSpeed op build killed mid-way leaves torch's lock file; later loads would wait on
    it forever. trials.prebuild removes it when old and no process works in the folder."""
    import subprocess
    import time

    from trials.prebuild import STALE_LOCK_AGE_S, clear_stale_lock

    lock = tmp_path / "lock"
    lock.touch()
    assert not clear_stale_lock(tmp_path)  # fresh: a build may have just taken it
    old = time.time() - STALE_LOCK_AGE_S - 5
    os.utime(lock, (old, old))
    busy = subprocess.Popen(["sleep", "30"], cwd=tmp_path)  # stands for ninja in the folder
    try:
        time.sleep(0.2)
        assert not clear_stale_lock(tmp_path) and lock.exists()
    finally:
        busy.kill()
        busy.wait()
    assert clear_stale_lock(tmp_path) and not lock.exists()
    assert not clear_stale_lock(tmp_path)  # nothing left to remove
