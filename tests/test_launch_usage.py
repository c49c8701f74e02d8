"""An exported launch.sh run as a new user first runs it: with no argument (or -h / --help
alone) it says what it launches and how to call it, on stderr, exits 2, and launches and
writes nothing; with a script, or --check, its arguments still reach the trial's launcher.

Exports written from a config (no study, no trial run): every launcher, the CPU DeepSpeed
script with its /dev/shm trap, and the Hugging Face Trainer variant."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from autotune.contract import Launcher
from autotune.report.export import ExportPlan, write_export
from autotune.run.argv import free_port
from tests.fixtures.trials import tiny

# name: (config, launcher of launch.sh, --for, the launcher's module as launch.sh runs it)
VARIANTS = {
    "torchrun": (dict(num_gpus=2, launcher=Launcher.torchrun), "script", "torch.distributed.run"),
    "deepspeed": (dict(num_gpus=2, zero_stage=2, launcher=Launcher.deepspeed), "script",
                  "deepspeed.launcher.runner"),  # CPU ZeRO: the script's EXIT trap clears /dev/shm
    "accelerate": (dict(num_gpus=2, launcher=Launcher.accelerate), "script", "accelerate.commands.launch"),
    "hf-trainer": (dict(num_gpus=2, zero_stage=2, launcher=Launcher.deepspeed), "hf-trainer",
                   "deepspeed.launcher.runner"),
}

# Stands in for Python: records the argv it was launched with, outside the working folder.
STUB_PYTHON = """#!/usr/bin/env bash
if [ "$1" = -c ]; then echo /stub/trials/worker.py; exit 0; fi  # launch.sh --check asks for the worker
# ... and after the launcher, has autotune say its result (autotune.report.check_line)
if [ "$2" = autotune.report.check_line ]; then printf '%s\\n' "$@" > "$STUB_ARGV.check"; exit 0; fi
printf '%s\\n' "$@" > "$STUB_ARGV"
"""


def _export(folder: Path, variant: str, study: str = "s", python: str | None = None) -> Path:
    overrides, target, _ = VARIANTS[variant]
    cfg = tiny(**overrides)
    plan = ExportPlan(study=study, trial=3, pick="cheapest", cfg=cfg, option=None, trial_row={},
                      catalog_note=None, launcher=cfg.launcher, target=target,
                      **({"python": python} if python else {}))
    write_export(plan, folder)
    return folder / "launch.sh"


def _run(launch: Path, args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    cwd.mkdir(exist_ok=True)
    e = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "AUTOTUNE_RESULT")}
    e.update(MASTER_PORT=str(free_port()), **env)  # a regression that launches: no clash
    return subprocess.run([str(launch), *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=e)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_no_argument_prints_usage_exits_2_and_launches_nothing(tmp_path, variant):
    launch = _export(tmp_path / "launch", variant)
    exported = sorted(p.name for p in launch.parent.iterdir())
    module = VARIANTS[variant][2]
    for args in ([], ["-h"], ["--help"]):
        cwd = tmp_path / f"cwd{len(args) and args[0]}"
        run = _run(launch, args, cwd)  # the exporting Python: what a new user gets
        assert run.returncode == 2, (args, run.stdout[-2000:], run.stderr[-2000:])
        assert run.stdout == "", args  # no launcher started, nothing of a run printed
        err = run.stderr
        assert f"usage: {launch} train.py --your-args" in err, err
        assert f"python -m {module}), 2 CPU rank(s) per node x 1 node(s) = 2 rank(s)" in err, err
        assert "trial 3 of study 's' (--pick cheapest)" in err
        assert "AUTOTUNE_MICRO_BATCH_SIZE=2" in err and "AUTOTUNE_GRAD_ACCUM_STEPS=1" in err
        assert f"PYTHON=/path/to/python {launch} train.py" in err and "--check" in err
        assert ("AUTOTUNE_ZERO_STAGE=2" in err) == (variant in ("deepspeed", "hf-trainer"))
        assert ("trainer_flags.txt and --deepspeed ds_config.json" in err) == (variant == "hf-trainer")
        assert list(cwd.iterdir()) == [], args  # no check result, no fatal.rank*.log
    assert sorted(p.name for p in launch.parent.iterdir()) == exported


def test_usage_keeps_odd_names_as_text(tmp_path):
    """A study name and a Python path are printed, never run, whatever they hold."""
    study = "it's $(touch pwned) `touch pwned2`; touch pwned3\ntouch pwned4"
    launch = _export(tmp_path / "launch", "torchrun", study=study, python="/opt/my py/$(touch pwned5)")
    run = _run(launch, [], tmp_path / "cwd")
    assert run.returncode == 2 and run.stdout == ""
    assert f"of study {study!r} (--pick" in run.stderr, run.stderr  # as Python writes it: one line
    assert "(default: /opt/my py/$(touch pwned5))" in run.stderr
    assert list((tmp_path / "cwd").iterdir()) == [] and not list(tmp_path.rglob("pwned*"))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_script_and_check_still_reach_the_launcher(tmp_path, variant):
    launch = _export(tmp_path / "launch", variant)
    stub, argv = tmp_path / "python", tmp_path / "argv.txt"
    stub.write_text(STUB_PYTHON)
    stub.chmod(0o755)
    module = VARIANTS[variant][2]

    def launched(*args: str) -> list[str]:
        argv.unlink(missing_ok=True)
        run = _run(launch, list(args), tmp_path / "cwd", PYTHON=str(stub), STUB_ARGV=str(argv))
        assert run.returncode == 0, run.stderr
        assert "usage:" not in run.stderr
        got = argv.read_text().splitlines()
        assert got[:2] == ["-m", module], got
        return got

    got = launched("train.py", "--lr", "1e-3", "--help")  # the script's own --help is the script's
    start = got.index("train.py")
    if variant == "hf-trainer":  # the Trainer flags (and --deepspeed) right after the script
        flags = (launch.parent / "trainer_flags.txt").read_text().split()
        assert got[start:] == ["train.py", *flags, "--deepspeed", str(launch.parent / "ds_config.json"),
                               "--lr", "1e-3", "--help"]
    else:
        assert got[start:] == ["train.py", "--lr", "1e-3", "--help"]
    got = launched("--check")
    result = str(tmp_path / "cwd" / "autotune_check_result.json")
    assert got[got.index("/stub/trials/worker.py"):] == [
        "/stub/trials/worker.py", "--config", str(launch.parent / "trial_config.json"), "--result", result]
    # then the line that says the result, with the launcher's exit code (no sweep figures here)
    said = Path(f"{argv}.check").read_text().splitlines()
    assert said == ["-m", "autotune.report.check_line", result, "0", "", ""], said
