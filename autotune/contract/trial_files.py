"""The file protocol between the controller and the worker: a trial's folder and a pool's queue.
Both sides name these files through this module only (tests/test_layout.py pins it).

    files = TrialFiles(trial_dir)                 # files.config, files.result, files.stdout, ...
    remove_own_outputs(trial_dir)                 # before a trial runs again in the same folder
    write_json_atomic(queue_trial_file(queue, 1), {"config": ..., "result": ...})

A trial's folder: config.json (the TrialConfig), command.json (the exact argv), stdout.log and
stderr.log (the launcher's output), result.json (rank 0's result, written atomically),
result.rankN.json (a failed rank's own result), fatal.rankN.log (rank N's stack when a fatal
signal killed it; every rank opens its file as it takes the trial), alive.rankN.json (rank N's
pid and host RSS peak, refreshed while it runs and removed when it ends by its own code: one
left behind names a rank killed by a signal it could not catch, SIGKILL), nodes.json (the per-node
argvs of a multi-node trial started once per node), launch.json (a sweep's record of the
launch: the launcher's process group and the controller, so that a later sweep can clean up),
launcher_logs/ (torchrun's --log-dir while the trial runs; removed after it), and for a lone
trial of a compiled config compile_cache/ (Inductor's cache; a study's is in its folder).

A pool's queue (a folder named autotune-pool-*): 000001.trial.json, 000002.trial.json, ...
(the trials in order, each {"config": path, "result": path}), rankN.pid (each rank's pid, so
the controller can kill ranks outside the launcher's process group), stop (asks the ranks to
leave), stdout.log and stderr.log (the pool's output).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CONFIG = "config.json"
RESULT = "result.json"
COMMAND = "command.json"
STDOUT = "stdout.log"
STDERR = "stderr.log"
NODES = "nodes.json"
LAUNCH = "launch.json"  # the sweep's record of the launch: process group and controller
# torchrun's per-run folder (--log-dir), in the trial's folder: without it torch.distributed.elastic
# makes a /tmp/torchelastic_* folder for every run and never removes it.
LAUNCHER_LOGS = "launcher_logs"
# Inductor's cache (trials/compile.py): in a study's folder, beside its trial folders, so that a
# config compiled again loads what an earlier trial compiled; a lone trial's (`autotune trial
# --out`) in its own folder, so that nothing is written beside a folder the user named.
COMPILE_CACHE = "compile_cache"
# What a trial's ranks write beside its config: result.json, result.rankN.json, fatal.rankN.log,
# alive.rankN.json (exactly these names: a user's result_backup.json in the folder is not ours
# to delete).
_OWN_OUTPUT = re.compile(r"result(\.rank\d+)?\.json|fatal\.rank\d+\.log|alive\.rank\d+\.json")
# The files a trial's folder gets from its controller and rank 0, by fixed name.
TRIAL_NAMES = (CONFIG, COMMAND, STDOUT, STDERR, RESULT, NODES, LAUNCHER_LOGS)

QUEUE_PREFIX = "autotune-pool-"
STOP = "stop"
_TRIAL_SUFFIX = ".trial.json"
_PID_PREFIX, _PID_SUFFIX = "rank", ".pid"


@dataclass(frozen=True)
class TrialFiles:
    """The files of one trial's folder (or of a pool's queue, for its logs)."""

    folder: Path

    @property
    def config(self) -> Path:
        return self.folder / CONFIG

    @property
    def result(self) -> Path:
        return self.folder / RESULT

    @property
    def launcher_logs(self) -> Path:
        return self.folder / LAUNCHER_LOGS

    @property
    def command(self) -> Path:
        return self.folder / COMMAND

    @property
    def stdout(self) -> Path:
        return self.folder / STDOUT

    @property
    def stderr(self) -> Path:
        return self.folder / STDERR

    @property
    def nodes(self) -> Path:
        return self.folder / NODES

    @property
    def launch(self) -> Path:
        return self.folder / LAUNCH


def remove_own_outputs(trial_dir: Path) -> None:
    """Remove what an earlier run of a trial wrote in `trial_dir` (results and fatal logs, by
    their exact names), so that a new run is never read with an old run's files."""
    for stale in Path(trial_dir).iterdir():
        if _OWN_OUTPUT.fullmatch(stale.name) and stale.is_file():
            stale.unlink()


def own_output(name: str) -> bool:
    """Whether a file of this name in a trial's folder is one its ranks write."""
    return bool(_OWN_OUTPUT.fullmatch(name))


def rank_result_path(result_path: Path, rank: int) -> Path:
    """Where rank `rank` (not 0) writes its own failed result, beside the trial's result."""
    return result_path.with_name(f"{result_path.stem}.rank{rank}.json")


def rank_result_paths(result_path: Path) -> list[Path]:
    """The rank results written beside `result_path`, in name order."""
    return sorted(result_path.parent.glob(f"{result_path.stem}.rank*.json"))


@dataclass(frozen=True)
class RankFiles:
    """One file per rank beside a trial's result, named `<prefix><rank><suffix>`.

        FATAL_LOGS.path(files.result, 1)       # fatal.rank1.log
        for p in ALIVE_MARKERS.paths(trial_dir): ALIVE_MARKERS.rank_of(p)
    """

    prefix: str
    suffix: str

    def path(self, result_path: Path, rank: int) -> Path:
        """Rank `rank`'s file, beside the trial's result."""
        return result_path.with_name(f"{self.prefix}{rank}{self.suffix}")

    def paths(self, trial_dir: Path) -> list[Path]:
        """Every rank's file in `trial_dir`, in name order."""
        return sorted(Path(trial_dir).glob(f"{self.prefix}*{self.suffix}"))

    def rank_of(self, path: Path) -> int | str:
        """The rank a file belongs to (its name as written when it is not a number)."""
        rank = path.name.removeprefix(self.prefix).removesuffix(self.suffix)
        return int(rank) if rank.isdigit() else rank


# Rank N's stack when a fatal signal killed it (its faulthandler's file; every rank opens its
# own as it takes the trial, so one present says the rank started).
FATAL_LOGS = RankFiles("fatal.rank", ".log")
# Rank N's pid and host RSS peak while it runs the trial, removed when its own code ends it: one
# left behind names a rank killed by a signal it could not catch.
ALIVE_MARKERS = RankFiles("alive.rank", ".json")


def queue_trial_file(queue: Path, seq: int) -> Path:
    """The `seq`-th trial's file in a pool's queue (the controller writes it, ranks read it)."""
    return queue / f"{seq:06d}{_TRIAL_SUFFIX}"


def rank_pid_file(queue: Path, rank: int) -> Path:
    """Where a pool's rank writes its pid."""
    return queue / f"{_PID_PREFIX}{rank}{_PID_SUFFIX}"


def rank_pid_files(queue: Path) -> list[Path]:
    """The pid files a pool's ranks wrote."""
    return sorted(queue.glob(f"{_PID_PREFIX}*{_PID_SUFFIX}"))


def stop_file(queue: Path) -> Path:
    """Touched by the controller to ask a pool's ranks to leave."""
    return queue / STOP


def is_pool_queue(path: Path) -> bool:
    """A folder made for a pool's queue (by its name), which the pool may remove whole."""
    return path.name.startswith(QUEUE_PREFIX)
