"""What `autotune sweep --slurm-jobs` / `--skypilot-task` refuse, and say, before anything
runs elsewhere: the real CLI in a subprocess, no Slurm needed (tests/test_slurm.py submits to a
real cluster). A flag the workers would not get is refused with exit 2 and nothing written; a
missing `sky` is named, not fatal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.study_tools import cli_env


def _cli(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full = cli_env(**env)
    full.pop("AUTOTUNE_STORAGE", None)
    full.update(env)
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "spec.yaml").write_text("study: llama\nworkload: {kind: gpt, preset: tiny}\n")
    (tmp_path / "db-url").write_text(f"journal:///{tmp_path / 'study.log'}\n")
    return tmp_path


@pytest.mark.parametrize("elsewhere, names", [
    (["--slurm-jobs", "2", "--sbatch-arg=--gres=gpu:1"], "--slurm-jobs N"),
    (["--skypilot-task", "h200:8"], "another --skypilot-task"),
])
def test_side_by_side_is_refused_for_workers_elsewhere(folder, elsewhere, names):
    done = _cli(["sweep", "spec.yaml", "--storage-file", "db-url", "--side-by-side", "2", *elsewhere], folder)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--side-by-side and {elsewhere[0]} given together" in done.stderr and names in done.stderr
    # Nothing written, nothing submitted, no study created.
    assert sorted(p.name for p in folder.iterdir()) == ["db-url", "spec.yaml"]


def test_a_refused_first_job_leaves_no_script_and_an_earlier_one_as_it_was(folder):
    """sbatch (a stand-in that refuses every job, as a cluster without GRES refuses
    --gres=gpu:8) refuses the first job: exit 2, no script or folder left by this command."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: Invalid generic resource (gres) "
                                    "specification' >&2\nexit 1\n")
    (bin_dir / "sbatch").chmod(0o755)
    path = f"{bin_dir}:/usr/bin:/bin"
    done = _cli(["sweep", "spec.yaml", "--storage-file", "db-url", "--slurm-jobs", "2",
                 "--sbatch-arg=--gres=gpu:8"], folder, PATH=path)
    assert done.returncode == 2 and "sbatch refused the job" in done.stderr, done.stdout + done.stderr
    assert not (folder / "autotune_runs").exists()
    earlier = folder / "autotune_runs" / "llama" / "slurm" / "worker.sbatch"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("#!/bin/bash\n# an earlier submission's script\n")
    done = _cli(["sweep", "spec.yaml", "--storage-file", "db-url", "--slurm-jobs", "1"], folder, PATH=path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert earlier.read_text() == "#!/bin/bash\n# an earlier submission's script\n"
    assert sorted(p.name for p in earlier.parent.iterdir()) == ["worker.sbatch"]


@pytest.mark.parametrize("has_sky", [False, True])
def test_the_tasks_say_when_sky_is_not_installed(folder, has_sky):
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    if has_sky:
        (bin_dir / "sky").write_text("#!/bin/sh\n")
        (bin_dir / "sky").chmod(0o755)
    done = _cli(["sweep", "spec.yaml", "--skypilot-task", "h200:8"], folder, PATH=str(bin_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sky launch --secret AUTOTUNE_STORAGE skypilot/autotune-h200x8.yaml" in done.stdout
    assert ("`sky` command is not installed" in done.stdout) is not has_sky
    assert ("pip install skypilot" in done.stdout) is not has_sky


def test_a_runs_dir_with_a_backslash_is_refused_before_anything_is_written(folder):
    """A backslash in sbatch's --output turns off its %j: every job would share one log.
    Refused (exit 2) before sbatch is asked, with no folder or study made."""
    done = _cli(["sweep", "spec.yaml", "--storage-file", "db-url", "--slurm-jobs", "2",
                 "--runs-dir", "runs\\x"], folder)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "holds a backslash" in done.stderr and "--runs-dir" in done.stderr, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["db-url", "spec.yaml"]
