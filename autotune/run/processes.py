"""Who runs a trial, and whether they are still alive: process identity that survives pid
reuse, the trial's processes by group and folder, and recovery of trials whose controller died.

    record = controller_record()                 # stored with each trial (TrialRecord.controller)
    failed = recover_dead_trials(study, note)    # at the start of every sweep on this host

A trial records the controller that runs it (`controller`, with its Slurm job inside one) and
its launcher's process group (`launch`), so a sweep that finds a RUNNING trial whose controller
on this host is dead kills its orphaned process group, fails it and re-queues it; one whose
controller's Slurm job has ended (cancelled, preempted, out of time) is failed and re-queued
from any host (Slurm killed its processes); other trials of dead machines elsewhere are failed
by the storage's heartbeat (autotune/run/storage.py).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable

from autotune.contract import TrialConfig, TrialResult, TrialStatus
from autotune.contract.process import process_alive, start_ticks
from autotune.contract.trial_files import TrialFiles
from autotune.record import ControllerRef, LaunchRef, TrialRecord
from autotune.run.process_group import group_alive
from autotune.run.slurm import SlurmJobRef, job_ended


def trial_processes(pgid: int, trial_dir: str) -> list[int]:
    """Live processes of group `pgid` that belong to the trial (working directory inside its
    folder): a recycled group id of an unrelated program is never touched."""
    import psutil

    root = os.path.realpath(trial_dir)
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) != pgid:
                continue
            cwd = os.path.realpath(proc.cwd())  # a zombie has none: it is gone already
        except (psutil.Error, OSError):
            continue
        if cwd == root or cwd.startswith(root + os.sep):
            found.append(proc.pid)
    return found


def kill_trial_processes(pgid: int, trial_dir: str, grace_s: float = 3.0) -> int:
    """SIGTERM, then SIGKILL, the trial's processes left in group `pgid`; how many there were."""
    import psutil

    procs = []
    for pid in trial_processes(pgid, trial_dir):
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    if not procs:
        return 0
    for signal_of in (psutil.Process.terminate, psutil.Process.kill):
        for proc in procs:
            try:
                signal_of(proc)  # psutil checks the pid is still this process first
            except psutil.NoSuchProcess:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and trial_processes(pgid, trial_dir):
            time.sleep(0.1)
        if not trial_processes(pgid, trial_dir):
            break
    return len(procs)


def controller_record() -> ControllerRef:
    """This process, as a trial's or a claim's owner (with its Slurm job, inside one)."""
    pid = os.getpid()
    job = SlurmJobRef.from_env()
    return ControllerRef(host=socket.gethostname(), pid=pid, start_ticks=start_ticks(pid),
                         slurm_job_id=job.job_id if job else None,
                         slurm_restarts=job.restarts if job else None)


def controller_gone(ctl: ControllerRef, host: str) -> bool:
    """Whether a trial's controller is known dead: by its pid on this host; elsewhere, when it
    ran in a Slurm job that has ended (Slurm killed its processes). Unknown: alive (the
    storage's heartbeat decides then)."""
    if ctl.host == host:
        return not process_alive(ctl.pid, ctl.start_ticks)
    if ctl.slurm_job_id is None:
        return False
    return job_ended(SlurmJobRef(job_id=ctl.slurm_job_id, restarts=ctl.slurm_restarts or 0)) is True


def gone_notes(trials) -> list[str]:
    """For a report: each RUNNING trial whose controller is known dead (`controller_gone`), which
    no sweep runs any more; the next sweep of the study fails it and queues it again."""
    from optuna.trial import TrialState

    host, out = socket.gethostname(), []
    for t in trials:
        ctl = TrialRecord.of(t).controller if t.state is TrialState.RUNNING else None
        if ctl is not None and controller_gone(ctl, host):
            what = f"its Slurm job {ctl.slurm_job_id} ended" if ctl.host != host else \
                f"its controller (pid {ctl.pid} on {ctl.host}) is gone"
            out.append(f"trial {t.number} is not running: {what}; the next sweep of the study "
                       f"{'' if ctl.host != host else 'on ' + ctl.host + ' '}fails it and queues it again")
    return out


def recover_dead_trials(study, note: Callable[[str], None] | None = None) -> list[int]:
    """Fail (and re-queue) RUNNING trials whose controller on THIS host is dead, killing the
    processes they left behind; also kill leftovers of this host's trials already failed by a
    heartbeat. Trials of other hosts are the heartbeat's job. Returns the trial numbers failed."""
    import copy

    import optuna
    from optuna.trial import TrialState

    from autotune.run.storage import retry_callback

    host = socket.gethostname()
    storage = study._storage
    failed: list[int] = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.FAIL)):
        rec = TrialRecord.of(t)
        ctl = rec.controller
        if ctl is None or (ctl.host != host and t.state is not TrialState.RUNNING):
            continue
        if t.state is TrialState.RUNNING and not controller_gone(ctl, host):
            continue  # a live sweep runs it (or, on another host outside Slurm, the heartbeat decides)
        pgid = rec.launch.pgid if rec.launch else None
        if t.state is TrialState.FAIL and not (pgid and group_alive(int(pgid))):
            continue
        killed = 0
        if pgid and rec.trial_dir and ctl.host == host:  # elsewhere Slurm killed them
            killed = kill_trial_processes(int(pgid), rec.trial_dir)
        if t.state is TrialState.FAIL:
            if killed and note:  # failed by a heartbeat elsewhere; its processes lived on here
                note(f"trial {t.number}: killed {killed} leftover process(es)")
            continue
        job = f" (Slurm job {ctl.slurm_job_id})" if ctl.slurm_job_id else ""
        how = ("ended before recording the trial, whose run had measured (its retry records the "
               "result from the trial's folder)" if result_left_by(rec) else "died during the trial")
        why = (f"controller pid {ctl.pid} on {ctl.host}{job} {how}; a later sweep failed it and "
               f"killed {killed} leftover process(es)")
        try:  # two workers starting at once both find the dead trial: the first one fails it
            TrialRecord.write_stored(storage, t._trial_id, error=why, leftovers_killed=killed)
            if not storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another sweep got there first
        failed.append(t.number)
        if note:
            note(f"trial {t.number}: {why}; re-queued")
        retry_callback()(study, copy.deepcopy(storage.get_trial(t._trial_id)))
    return failed


def result_left_by(rec: TrialRecord) -> TrialResult | None:
    """The successful result that a lost trial's run left in its folder, or None (nothing
    there, a failure, or a folder another run has written since). The folder must prove to be
    that run's: its config.json is the config the trial stored, and its launch.json names the
    trial's controller and launcher. Rank 0 writes its result atomically once its steps are
    measured, so a result there is whole. Where the controller died before timing the trial,
    `wall_s` is read from the folder (launch.json written at the launch, result.json at its
    end) and a note says so."""
    if rec.trial_dir is None or rec.launch is None or rec.controller is None or rec.config is None:
        return None
    files = TrialFiles(Path(rec.trial_dir))
    try:
        launch = json.loads(files.launch.read_text())
        group = {k: launch.get(k) for k in ("pgid", "start_ticks")} if isinstance(launch, dict) else {}
        same_run = (bool(group) and LaunchRef.model_validate(group) == rec.launch
                    and ControllerRef.model_validate(launch.get("controller")) == rec.controller
                    and TrialConfig.read(files.config) == rec.trial_config())
        result = TrialResult.read(files.result) if same_run else None
        launched_at, ended_at = files.launch.stat().st_mtime, files.result.stat().st_mtime
    except (OSError, ValueError):  # a missing or unreadable file: nothing to take
        return None
    if result is None or result.status is not TrialStatus.ok:
        return None
    if result.wall_s is None:
        result.wall_s = max(ended_at - launched_at, 0.0)
        result.notes.append("wall_s read from the trial folder's file times (launch.json to "
                            "result.json): its controller died before timing the trial")
    return result


def owner_attrs() -> dict[str, Any]:
    """This process as the owner written on a claim (autotune.run.storage.claim)."""
    return controller_record().model_dump(mode="json")
