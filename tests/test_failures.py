"""Every way a trial can fail, caused for real in real launched trials, and classified from
the result files and the exit code (never from the logs).

The failing models are user entry points (tests/fixtures/entry_points.py) that raise
torch.OutOfMemoryError, hang, return a NaN loss, segfault, kill themselves with SIGKILL, or
raise, on a chosen rank.
"""

from __future__ import annotations

import os

import psutil
import pytest

from autotune.contract import Precision, TrialStatus
from tests.fixtures.trials import entry, run_many, tiny

HOLD_MB = 256
# The hang's timeout: both ranks start and reach the hang within a few seconds (a tiny trial,
# three trials at once on 2 cores: ~10 s); the test checks that both did.
HANG_TIMEOUT_S = 25


@pytest.fixture(scope="module")
def failed(tmp_path_factory):
    root = tmp_path_factory.mktemp("failures")
    pid_dir = root / "hang_pids"
    pid_dir.mkdir()
    groups: dict[str, int] = {}
    configs = {
        # The hang goes first: it mostly sleeps until its timeout, while the others run.
        "hang": tiny(workload=entry(fail="hang", fail_rank=1, fail_at_call=2, pid_dir=str(pid_dir)),
                     num_gpus=2, timeout_s=HANG_TIMEOUT_S),
        "oom": tiny(workload=entry(fail="oom", fail_at_call=3, hold_mb=HOLD_MB)),
        "raise_rank1": tiny(workload=entry(fail="raise", fail_rank=1, fail_at_call=2), num_gpus=2),
        "segfault_rank1": tiny(workload=entry(fail="segfault", fail_rank=1, fail_at_call=2),
                               num_gpus=2),
        "nan": tiny(workload=entry(fail="nan", fail_at_call=3)),
        "sigkill_rank1": tiny(workload=entry(fail="sigkill", fail_rank=1, fail_at_call=3),
                              num_gpus=2),
        "fp8_on_cpu": tiny(precision=Precision.fp8),
    }
    results = run_many(configs, root, parallel=3,
                       on_start={"hang": lambda pid: groups.setdefault("hang", pid)})
    return results, root, pid_dir, groups


def test_oom_is_classified_with_the_peak_seen_before(failed):
    results, root, _, _ = failed
    r = results["oom"]
    assert r.status is TrialStatus.oom, r.error
    assert r.error_type == "OutOfMemoryError"
    assert r.peak_mem_source.value == "host_rss"
    assert r.peak_mem_bytes == r.memory.host_rss_peak_bytes[0]
    # The fixture really held HOLD_MB before raising: the reported peak shows it, against the
    # same model failing another way (NaN) without holding anything.
    same_model_peak = results["nan"].peak_mem_bytes
    assert r.peak_mem_bytes - same_model_peak > 0.8 * HOLD_MB * 2**20


def _group_members(pgid: int) -> list[int]:
    alive = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            pass
    return alive


def test_hang_is_killed_at_the_timeout_and_no_process_survives(failed):
    results, root, pid_dir, groups = failed
    r = results["hang"]
    assert r.status is TrialStatus.timeout
    assert f"timeout_s={HANG_TIMEOUT_S}" in r.error
    rank_pids = [int(p.stem) for p in pid_dir.glob("*.pid")]
    assert len(rank_pids) == 2, "both ranks must have started for this test to mean anything"
    for pid in rank_pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert _group_members(groups["hang"]) == []
    # The ranks left their stacks (SIGTERM -> faulthandler) in the log: where they hung.
    assert "most recent call first" in (root / "hang" / "stderr.log").read_text()


def test_exception_on_rank1_is_a_crash_with_type_message_and_tail(failed):
    results, root, _, _ = failed
    r = results["raise_rank1"]
    assert r.status is TrialStatus.crash
    assert r.error_type == "ValueError"
    assert r.error.startswith("rank 1:") and "the user's model raised" in r.error
    assert "entry_points.py" in r.log_tail  # the traceback of the failing rank
    assert r.observations["rank"] == 1


def test_segfault_of_rank1_is_a_crash_naming_the_rank(failed):
    results, root, _, _ = failed
    r = results["segfault_rank1"]
    assert r.status is TrialStatus.crash
    assert r.error_type == "FatalSignal"
    assert r.error.startswith("rank 1 died:") and "Segmentation fault" in r.error
    assert "_fail" in r.log_tail  # faulthandler's Python stack of the dying rank


def test_sigkill_of_rank1_is_a_crash_naming_the_rank_the_signal_and_its_peak(failed):
    """SIGKILL (the kernel's OOM killer, kill -9) leaves no result and no fatal log; rank 0
    then fails on gloo's closed connection, or is torn down by the launcher first (both
    happen). The result names rank 1 and the signal, not rank 0's connection error."""
    results, root, _, _ = failed
    r = results["sigkill_rank1"]
    assert r.status is TrialStatus.crash and r.error_type == "SIGKILL", r.error
    assert r.error.startswith("rank 1 was killed by SIGKILL (signal 9)"), r.error
    assert r.observations["rank"] == 1 and r.world_size == 2
    # The peak rank 1 had reached, from its alive marker: the same model's whole trial
    # (the NaN one, one rank) reaches about as much.
    assert r.peak_mem_source.value == "host_rss"
    assert r.peak_mem_bytes > 0.5 * results["nan"].peak_mem_bytes
    assert "host RSS peak before" in r.error
    # Rank 0 ended too (a connection error, or the launcher's SIGTERM): a note, not the cause.
    assert any(n.startswith("then rank 0:") for n in r.notes), r.notes


def test_a_rank_killed_by_sigkill_fails_autotune_trial_with_exit_1(run_cli, tmp_path):
    cfg = tiny(workload=entry(fail="sigkill", fail_rank=1, fail_at_call=3), num_gpus=2)
    (tmp_path / "c.json").write_text(cfg.model_dump_json())
    p = run_cli("trial", "c.json", "--out", "killed")
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert "status: crash (SIGKILL: rank 1 was killed by SIGKILL (signal 9)" in p.stdout, p.stdout


def test_nan_loss_is_classified_nan(failed):
    r = failed[0]["nan"]
    assert r.status is TrialStatus.nan and r.error_type == "NonFiniteLoss"
    assert "nan" in r.error


def test_fp8_on_cpu_is_unsupported_with_the_reason(failed):
    r = failed[0]["fp8_on_cpu"]
    assert r.status is TrialStatus.unsupported
    assert "compute capability" in r.error and "CPU" in r.error


@pytest.mark.e2e
def test_a_timed_out_two_node_trial_counts_every_rank(tmp_path):
    """Two torchrun agents on this machine stand in for two nodes (as tests/test_multinode.py
    runs them); rank 1 hangs, so the trial ends at its timeout with no result file: the
    result the controller writes counts both nodes' ranks, not one node's."""
    from autotune.run.launch import run_trial
    from autotune.run.templates import template_argv_builder

    cfg = tiny(workload=entry(fail="hang", fail_rank=1, fail_at_call=2), num_gpus=1, num_nodes=2,
               timeout_s=20)
    build = template_argv_builder(["{launcher_argv}"], per_node=True, rdzv_host="127.0.0.1")
    r = run_trial(cfg, tmp_path / "trial", argv_builder=build)
    assert r.status is TrialStatus.timeout
    assert r.world_size == cfg.world_size == 2


def test_every_failure_wrote_its_folder(failed):
    results, root, _, _ = failed
    for name in results:
        folder = root / name
        for f in ("config.json", "command.json", "stdout.log", "stderr.log", "result.json"):
            assert (folder / f).is_file(), f"{name}: {f} missing"
