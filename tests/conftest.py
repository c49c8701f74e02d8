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
