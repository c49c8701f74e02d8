"""Launch one trial: TrialConfig in a folder -> launcher argv -> process group -> TrialResult.

    result = run_trial(cfg, trial_dir)            # never raises for a failed trial
    runner = launcher_runner(argv_builder)        # a TrialRunner: what a sweep runs trials with

Each trial gets a folder (autotune.contract.trial_files) holding config.json, command.json (the
exact argv), stdout.log and stderr.log, and result.json written atomically by rank 0 of the
worker. How a trial ended is read from that file and the exit code (autotune.run.results),
never by grepping logs. The launcher runs in its own process group, which is killed whole on
timeout (autotune.run.process_group), so no rank survives its trial. The launcher's argv and
environment are autotune.run.argv's; cluster templates and multi-node trials
autotune.run.templates'; DeepSpeed's op prebuild autotune.run.deepspeed_ops'.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from autotune.contract import TrialConfig, TrialResult, write_json_atomic
from autotune.contract.trial_files import TrialFiles, remove_own_outputs
from autotune.run.argv import build_argv, free_port, launch_env
from autotune.run.deepspeed_ops import prebuild_deepspeed_ops
from autotune.run.process_group import group_alive, kill_group
from autotune.run.results import read_result
from autotune.run.runner import FunctionRunner, TrialRunner, as_runner
from autotune.run.shm import SHM_DIR, remove_deepspeed_shm
from autotune.run.templates import template_argv_builder

# Names the sweep imports from here (the launch's public face), defined in the split modules.
__all__ = ["FunctionRunner", "TrialRunner", "as_runner", "launcher_runner", "prebuild_deepspeed_ops",
           "run_trial", "template_argv_builder"]

ArgvBuilder = Callable[..., list[str]]


def run_trial(cfg: TrialConfig, trial_dir: str | Path, python: str = sys.executable,
              on_start: Callable[[int], None] | None = None,
              argv_builder: ArgvBuilder | None = None) -> TrialResult:
    """Run one trial to its end and return its result; a failed trial is a result too."""
    trial_dir = Path(trial_dir).resolve()  # the launcher runs with the trial folder as cwd
    trial_dir.mkdir(parents=True, exist_ok=True)
    files = TrialFiles(trial_dir)
    remove_own_outputs(trial_dir)
    cfg.write(files.config)
    # argv_builder: e.g. a cluster scheduler's template (autotune.run.templates).
    port = free_port()
    argv = (argv_builder or build_argv)(cfg, files.config, files.result, port, python=python)
    write_json_atomic(files.command, {"argv": argv})
    t0 = time.monotonic()
    timed_out = False
    with open(files.stdout, "wb") as out, open(files.stderr, "wb") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                env=launch_env(cfg), cwd=trial_dir, start_new_session=True)
        if on_start is not None:
            on_start(proc.pid)
        try:
            rc = proc.wait(timeout=cfg.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
            rc = proc.wait()
        except BaseException:  # Ctrl-C, SIGTERM or the controller's own death: take the ranks with us
            kill_group(proc)
            remove_deepspeed_shm(port)  # their buffers too (DeepSpeed never unlinks them)
            raise
        # Ranks that outlived a launcher that exited by itself must not outlive the trial.
        if group_alive(proc.pid):
            kill_group(proc)
    removed = remove_deepspeed_shm(port)
    # torchrun's per-rank folders (--log-dir): empty but for its own bookkeeping, and a folder
    # `autotune trial --out` did not list as its own.
    shutil.rmtree(files.launcher_logs, ignore_errors=True)
    wall_s = time.monotonic() - t0
    result = read_result(files.result, rc, timed_out, files.stderr, files.stdout, cfg)
    result.wall_s = wall_s
    if removed:
        result.notes.append(f"removed {removed} shared-memory buffer{'s' if removed > 1 else ''} "
                            f"DeepSpeed's CPU all-reduce left in {SHM_DIR}")
    result.write(files.result)
    return result


def launcher_runner(argv_builder: ArgvBuilder | None = None,
                    python: str = sys.executable) -> TrialRunner:
    """The TrialRunner that launches real trials (`run_trial`), through `argv_builder` when
    given (a cluster template: `template_argv_builder`)."""

    def run(cfg: TrialConfig, trial_dir: Path, on_start: Callable[[int], None] | None = None) -> TrialResult:
        return run_trial(cfg, trial_dir, python=python, on_start=on_start, argv_builder=argv_builder)

    return FunctionRunner(run)
