"""Shared fixtures. Real trials are real subprocesses: keep models tiny and steps few."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def cli(capsys, monkeypatch):
    """The real `autotune` entry point (`autotune.cli.main`), in this process: fast.

    Returns (exit code, stdout, stderr). Subprocess runs are kept for the help text."""
    from autotune.cli import main

    monkeypatch.setenv("COLUMNS", "200")

    def _run(*args: str):
        monkeypatch.setattr(sys, "argv", ["autotune", *args])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run


@pytest.fixture
def run_cli(tmp_path):
    """Run the real `autotune` CLI in a subprocess, in tmp_path; returns CompletedProcess."""

    def _run(*args: str, cwd: Path | None = None, timeout: float = 600, env: dict | None = None):
        e = {**os.environ, "COLUMNS": "200", **(env or {})}
        return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=cwd or tmp_path,
                              capture_output=True, text=True, timeout=timeout, env=e)

    return _run


@pytest.fixture
def truth_machine_undone(monkeypatch, request):
    """Benchmark replays report the machine their truth was measured on (a CPU truth's bf16, a
    GPU truth's whole machine: scripts/bench_search.as_truth_machine); this undoes that after
    the test, so that later tests see this machine's."""
    import autotune.contract.hardware as host
    import autotune.run.hardware as hwmod

    monkeypatch.setattr(host, "cpu_bf16", host.cpu_bf16)
    # A GPU truth's replay reports that machine's GPUs and host (as_truth_machine).
    monkeypatch.setattr(hwmod, "_nvml_gpus", hwmod._nvml_gpus)
    monkeypatch.setattr(hwmod, "host_fingerprint", hwmod.host_fingerprint)
    request.addfinalizer(hwmod.local_hardware.cache_clear)


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server on 127.0.0.1 for this test session (tests/pg.py).

    Without PostgreSQL's binaries the tests that need it are skipped, except where
    AUTOTUNE_REQUIRE_POSTGRES=1 (.ci/run sets it): there a missing server is a failure."""
    from tests.pg import PostgresServer, pg_bin_dir

    if pg_bin_dir() is None:
        msg = "PostgreSQL binaries not found (apt-get install postgresql; .ci/run installs them)"
        if os.environ.get("AUTOTUNE_REQUIRE_POSTGRES") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


# --- test files side by side (pytest-xdist: pyproject.toml's addopts) ----------------------
# Much of the suite waits rather than computes: trials import torch and DeepSpeed, start
# process groups and pools, sleep through timeouts: one file at a time leaves the cores idle
# for part of the run (vmstat, sampled during it). `--dist loadfile` runs each file whole on one
# worker, so that its module fixtures (test_engines' 16 real trials, test_scale's 389.5M GPT)
# run once. (test_engines runs its trials pooled, test_launchers its 3 unpooled: they share
# none, whichever workers they land on.)
# One worker more than the cores, at most three: much of a file's time is spent waiting (a
# hang's timeout, a server's restart, a pool's rendezvous, a Slurm job's start), and a third
# file fills it. On a 2-core machine the whole suite took 1,185 s with two workers and 1,095 s
# with three, every test passing (183% CPU; a run with test_scale beside other files took as
# long: the suite's CPU time, about 2,000 s, is what bounds it). More workers would leave a
# 2-rank trial less than a core at the worst moments; trials' timeouts are sized for about that.
# A file that holds GBs per rank is marked `alone`: test_scale's DDP run of the 389.5M GPT
# holds about 7 GB on each of its 2 ranks, so
# beside another file's trials (test_scale_sweep's hold about 2.4 GB per rank) little of a
# 24 GiB machine would be left; a first try that ran its trials on both workers at once ran
# this machine out of memory.
MAX_WORKERS = 3
# The files that take minutes go first (`--no-loadscope-reorder` keeps this order), so that
# no worker is left with one of them at the end (`pytest --durations=0`, summed per file).
LONGEST_FIRST = ["test_scale", "test_engines", "test_export", "test_pool", "test_safety",
                 "test_faults", "test_compile", "test_scale_sweep"]


# The session's first file, when not `alone`, waits this long before it takes its lock: the
# first file (test_scale, `alone`) starts on the other worker at the same moment and must take
# its lock first, or it waits for this one's minutes with its own worker idle.
FIRST_FILE_DELAY_S = 3.0
_first_file_here = [True]


@pytest.fixture(scope="module", autouse=True)
def _alone_or_beside(request, tmp_path_factory):
    """A file marked `alone` runs with no other file beside it; other files may run two at a
    time. A lock shared by this session's workers: exclusive for an `alone` file, shared
    otherwise, held for the whole file (its module fixtures included: autouse fixtures of a
    scope are set up before the others of it). An `alone` file waiting for it holds a second
    lock (`intent`) that a file must pass to take a shared one: Linux's flock grants shared
    locks while an exclusive one waits, so without it the other worker's files, one after the
    other, kept an `alone` file waiting for minutes, its worker idle (test_scale's setup: 345 s
    in a 1,405 s run)."""
    import fcntl
    import time

    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        yield  # one process: nothing runs beside anything
        return
    # The workers' base folders (popen-gw0, popen-gw1) share this session's parent folder.
    base = tmp_path_factory.getbasetemp().parent
    alone = request.node.get_closest_marker("alone") is not None
    if _first_file_here[0] and not alone:
        time.sleep(FIRST_FILE_DELAY_S)
    _first_file_here[0] = False
    with open(base / "alone.intent", "a") as intent, open(base / "alone.lock", "a") as f:
        fcntl.flock(intent, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(f, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(intent, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def pytest_xdist_auto_num_workers(config):
    return max(1, min(MAX_WORKERS, (os.cpu_count() or 1) + 1))


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).stem, len(rank)))
