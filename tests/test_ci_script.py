""".ci/run stops at the first failed step. The real script (a copy of it, byte for byte) runs
with its heavy tools stood in for on PATH: `python3 -m venv` makes a virtual environment whose
pip, python and autotune log each call and exit as told, so a step can be made to fail without
installing torch or running the whole suite inside a test. What is under test is the script's
own control flow: which steps run, in which order, and its exit status.

    pytest tests/test_ci_script.py
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# One program plays every tool; the wrapper that calls it passes its role first.
FAKE = r'''
import json, os, re, subprocess, sys
from pathlib import Path

role, argv = sys.argv[1], sys.argv[2:]
log = Path(os.environ["CI_FAKE_LOG"])


def wrapper(path, role):
    path.write_text(f"#!/bin/sh\nexec {sys.executable} {__file__} {role} \"$@\"\n")
    path.chmod(0o755)


def step():
    if role == "python3" and argv[:2] == ["-m", "venv"]:
        return "venv"
    if role == "python" and argv[:1] == ["-c"]:
        return "check"
    if role == "python":
        return {"trials.prebuild": "prebuild", "pytest": "pytest"}[argv[1]]
    if role in ("ruff", "mypy"):
        return role
    if role == "pip":
        return "wheel" if argv[0] == "wheel" else ("install-wheel" if argv[-1].endswith(".whl") else "install")
    return {"--version": "version", "sweep": "sweep"}[argv[0]]


name = step()
with log.open("a") as f:
    f.write(name + "\n")
fail = dict(x.split(":") for x in os.environ.get("CI_FAKE_FAIL", "").split(",") if x)
if name in fail:
    sys.exit(int(fail[name]))
if name == "venv":
    (Path(argv[2]) / "bin").mkdir(parents=True)
    for tool in ("pip", "python", "autotune", "ruff", "mypy"):
        wrapper(Path(argv[2]) / "bin" / tool, tool)
elif name == "wheel":  # the file name setuptools gives the project's distribution name
    name = re.search(r'^name = "([^"]+)"', open("pyproject.toml").read(), re.M).group(1)
    dist = re.sub(r"[-_.]+", "_", name).lower()
    out = Path(argv[argv.index("-w") + 1])
    out.mkdir(parents=True)
    (out / f"{dist}-0.0.0-py3-none-any.whl").write_bytes(b"")
elif name == "install-wheel" and not Path(argv[-1]).is_file():
    sys.exit(f"ERROR: {argv[-1]} is not a file")  # as pip says of a glob that matched nothing
elif name == "sweep":
    print(json.dumps({"report": {"cheapest": {"trial": 0}}}))
elif name == "check":
    sys.exit(subprocess.run([sys.executable, *argv]).returncode)
'''

ALL_STEPS = ["venv", "install", "ruff", "mypy", "prebuild", "pytest", "wheel", "venv", "install-wheel",
             "version", "sweep", "check"]


@pytest.fixture
def ci(tmp_path):
    """A copy of the checkout's .ci/run and pyproject.toml, and a PATH whose python3 is the
    stand-in; returns run(fail) -> (exit status, steps run, stderr)."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy2(REPO / ".ci" / "run", repo / ".ci" / "run")
    shutil.copy2(REPO / ".ci" / "install_slurm.sh", repo / ".ci" / "install_slurm.sh")
    shutil.copy2(REPO / "pyproject.toml", repo / "pyproject.toml")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE)
    (bin_dir / "python3").write_text(f"#!/bin/sh\nexec {sys.executable} {fake} python3 \"$@\"\n")
    for installed in ("initdb", "sbatch", "slurmctld", "munged"):  # skip the apt-get steps
        (bin_dir / installed).write_text("#!/bin/sh\nexit 0\n")
    for f in bin_dir.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "steps.log"

    def run(fail: str = ""):
        log.write_text("")
        env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", CI_FAKE_LOG=str(log),
                   CI_FAKE_FAIL=fail)
        p = subprocess.run(["bash", str(repo / ".ci" / "run")], env=env, capture_output=True,
                           text=True, timeout=60, check=False)
        return p.returncode, log.read_text().split(), p.stderr

    return run


def test_every_step_runs_in_order_when_none_fails(ci):
    rc, steps, err = ci()
    assert (rc, steps) == (0, ALL_STEPS), err


@pytest.mark.parametrize("step,code", [("install", 1), ("ruff", 1), ("mypy", 1), ("prebuild", 1),
                                       ("venv", 1), ("wheel", 1)])
def test_a_failed_step_stops_ci_with_its_status_and_names_it(ci, step, code):
    rc, steps, err = ci(f"{step}:{code}")
    assert rc == code
    assert steps == ALL_STEPS[:ALL_STEPS.index(step) + 1]  # nothing after the failed step ran
    assert "ci: FAILED (exit 1)" in err


def test_pytest_collecting_nothing_fails_ci_loudly(ci):
    """pytest exits 5 when it collects no test: CI fails with 5 and says so."""
    rc, steps, err = ci("pytest:5")
    assert rc == 5 and steps == ALL_STEPS[:ALL_STEPS.index("pytest") + 1]
    assert "ci: FAILED (exit 5)" in err and "pytest" in err


def test_the_wheel_glob_matches_the_distribution_name():
    name = re.search(r'^name = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    wheel_name = re.sub(r"[-_.]+", "_", name).lower()
    assert f"/dist/{wheel_name}-*.whl" in (REPO / ".ci" / "run").read_text()
