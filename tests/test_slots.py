"""Packing trials onto disjoint device sets (autotune.run.slots) and what `--side-by-side`
refuses before a study is touched (autotune.api.side_by_side)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from autotune.api.side_by_side import SideBySideSummary, check_storage, shares
from autotune.contract import DeviceKind
from autotune.errors import UserError
from autotune.run.slots import CUDA_ENV, Slot, pack_slots, slot_env, visible_devices


def test_eight_gpus_hold_four_two_gpu_trials_or_eight_one_gpu_trials():
    gpus = list(range(8))
    two = pack_slots(gpus, 2, kind=DeviceKind.cuda)
    assert [s.devices for s in two] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    one = pack_slots(gpus, 1, kind=DeviceKind.cuda)
    assert len(one) == 8 and len({d for s in one for d in s.devices}) == 8


def test_slots_stay_inside_the_visible_devices_and_never_overlap():
    # A Slurm allocation of GPUs 4-7: slots name those, never 0-3.
    visible = visible_devices(DeviceKind.cuda, {CUDA_ENV: "4,5,6,7"}, device_count=8)
    slots = pack_slots(visible, 2, kind=DeviceKind.cuda)
    assert [slot_env(s, {})[CUDA_ENV] for s in slots] == ["4,5", "6,7"]
    assert visible_devices(DeviceKind.cuda, {}, device_count=3) == [0, 1, 2]


def test_more_slots_than_fit_is_refused_with_what_would():
    with pytest.raises(UserError, match="room for 1") as exc:
        pack_slots([0, 1, 2], 2, count=2)
    assert "at most 1" in exc.value.fix


def test_gpus_named_by_uuid_are_refused():
    with pytest.raises(UserError, match="UUID"):
        visible_devices(DeviceKind.cuda, {CUDA_ENV: "GPU-1a2b,GPU-3c4d"})


def test_a_cpu_slot_sizes_the_thread_pools_and_a_gpu_slot_sets_visible_devices():
    cpu = slot_env(Slot(0, DeviceKind.cpu, (2, 3)), {"PATH": "/bin"})
    assert cpu["OMP_NUM_THREADS"] == "2" and CUDA_ENV not in cpu and cpu["PATH"] == "/bin"
    assert slot_env(Slot(1, DeviceKind.cuda, (2, 3)), {})[CUDA_ENV] == "2,3"
    assert Slot(0, DeviceKind.cpu, (0, 1, 2, 3)).label() == "cores 0-3"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity API on this OS")
def test_a_pinned_process_and_its_children_run_on_the_slots_cores_only():
    core = sorted(os.sched_getaffinity(0))[-1]
    code = ("import os, subprocess, sys\n"
            "from autotune.contract import DeviceKind\n"
            "from autotune.run.slots import Slot, pin_to\n"
            f"pin_to(Slot(0, DeviceKind.cpu, ({core},)))\n"
            "child = subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'],"
            " capture_output=True, text=True).stdout.strip()\n"
            "print(sorted(os.sched_getaffinity(0)), child)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [f"[{core}]", f"[{core}]"]


def test_the_budget_is_shared_between_workers_and_sqlite_is_refused_for_several():
    assert shares(5, 2) == [3, 2] and shares(4, 2) == [2, 2] and sum(shares(7, 3)) == 7
    with pytest.raises(UserError, match="SQLite") as exc:
        check_storage("sqlite:///autotune.db", 2)
    assert "journal:///" in exc.value.fix
    check_storage("sqlite:///autotune.db", 1)  # one worker: SQLite is fine
    check_storage("journal:///tmp/x.log", 2)


def test_workers_that_stop_for_one_reason_say_it_once():
    """Found running a side-by-side sweep again over a 4-config space: 'stopped:' repeated
    'every config this machine can run has been tried' three times (two workers and the alone
    phase's)."""
    tried = "every config this machine can run has been tried (4 configs)"
    summary = SideBySideSummary([], workers=[{"stop_reason": tried}, {"stop_reason": tried}, {}],
                                alone=[{"stop_reason": tried}, {"stop_reason": "budget spent"}])
    assert summary.stop_reason == f"{tried}; budget spent"
    assert SideBySideSummary([], workers=[{}, {"stop_reason": None}]).stop_reason is None


@pytest.mark.parametrize("count, n_trials, named", [(0, 3, "--side-by-side 0 is not a count of workers"),
                                                     (-1, 3, "--side-by-side -1 is not a count of workers"),
                                                     (2, 0, "n_trials=0 is not a count of trials")])
def test_run_side_by_side_from_python_refuses_no_workers_or_no_trials_before_writing(tmp_path, count, n_trials,
                                                                                       named):
    """`run_side_by_side(session, n_trials=3, runs_dir=..., count=0)` (its docstring's call, from
    Python, where no --side-by-side min=1 guards it) wrote its work folder, then raised IndexError;
    n_trials=0 wrote it and started a worker process to run no trial ("all 0 trials together")."""
    from pathlib import Path

    from autotune.api.side_by_side import run_side_by_side
    from autotune.api.sweep import Session, load

    (tmp_path / "space.yaml").write_text("num_gpus: [1]\nprecision: [fp32]\n")  # two slots fit here
    spec = load({"workload": {"kind": "gpt", "preset": "tiny"}, "storage": f"journal:///{tmp_path}/s.log",
                 "space": str(tmp_path / "space.yaml")})
    with pytest.raises(UserError, match=named):
        run_side_by_side(Session(spec, None, None, None, 0), n_trials=n_trials, runs_dir=Path(tmp_path / "runs"),
                         count=count)
    assert not (tmp_path / "runs").exists()
