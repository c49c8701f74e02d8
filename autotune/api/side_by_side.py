"""Trials side by side on one node: K sweep workers on one study, each pinned to its own
disjoint device set, then the picks re-measured alone.

    summary = run_side_by_side(session, n_trials=8, runs_dir=Path("autotune_runs"), count=2)
    autotune sweep spec.yaml --trials 8 --side-by-side 2 --storage journal:///abs/study.log

How: the space's largest trial sets the slot size (GPUs: max num_gpus; CPU: max num_gpus x
threads_per_rank cores; autotune.run.slots packs them). The budget splits in two phases:
1. Side by side: `n_trials` minus the re-measure reserve (`remeasure_reserve`, as a sweep
   one at a time keeps) is shared between K workers (autotune.api.slot_worker), each a
   `run_sweep` on the same study; claims and reuse keep two of them from measuring one config.
   They do not race (racing measures rivals back to back, which a neighbour would disturb).
2. Alone (autotune.api.alone): once the others have ended, worker 0, in slot 0 with its trial
   pool warm, measures again the leaders of phase 1 (the cheapest and the fastest configs in
   turn, up to the reserve, back to back; recorded as repeats, `repeat_of`), so that the pick
   is measured alone and compared with rivals measured alike; what is left of the reserve
   races as a sweep one at a time does. Trials phase 1 left queued run first.
   With `budget.remeasure_trials: 0` ("never re-measure") there is no alone phase: all
   `n_trials` run side by side, and the sweep says once what that leaves in the figures.
Every trial stores its slot; the report derives each trial's neighbours (same host, overlapping
run) and the interference: a config's tokens/s beside another trial against alone.

Storage: journal files and server databases (PostgreSQL) take several workers; SQLite does not
(Optuna hands a queued trial to two SQLite writers at once: SELECT ... FOR UPDATE is a no-op
there), so it is refused with the fix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from autotune.contract import DeviceKind
from autotune.errors import UserError
from autotune.run.slots import Slot, pack_slots, slot_env, visible_devices
from autotune.run.storage import STORAGE_ENV, storage_kind
from autotune.search.interrupt import (
    EXIT_CODES,
    EXIT_OUTPUT_CLOSED,
    OUTPUT_CLOSED_REASON,
    Terminated,
    stop_signal,
    terminating,
    termination_raises,
)


@dataclass
class SideBySideSummary:
    slots: list[Slot]
    workers: list[dict] = field(default_factory=list)  # each worker's summary file
    alone: list[dict] = field(default_factory=list)  # the alone phase's workers' summaries
    remeasured: list[int] = field(default_factory=list)  # configs (first trials) re-measured alone
    interrupted: bool = False
    terminated: bool = False  # SIGTERM or SIGHUP: the workers each cut their trial and re-queued it
    output_closed: bool = False  # the pipe's reader left: the workers stopped after their trials (interrupted too)

    @property
    def trials_run(self) -> int:
        return sum(w.get("trials_run", 0) for w in self.workers + self.alone)

    @property
    def stop_reason(self) -> str | None:
        if self.terminated:
            return f"{stop_signal()}: each worker failed its running trial and re-queued it"
        if self.output_closed:
            return OUTPUT_CLOSED_REASON
        if self.interrupted:
            return "interrupted (Ctrl-C)"
        # Each worker says why it stopped; several often stop for one reason, said once.
        reasons = dict.fromkeys(r for w in self.workers + self.alone if (r := w.get("stop_reason")))
        return "; ".join(reasons) or None


def check_storage(url: str, count: int) -> None:
    if count > 1 and storage_kind(url) == "sqlite":
        raise UserError("--side-by-side needs a storage several processes can write at once; "
                        "SQLite can hand one queued trial to two workers",
                        fix="use --storage journal:///ABS/PATH/study.log on one node, or "
                            "postgresql://... on a cluster")


def plan_slots(spec, count: int) -> list[Slot]:
    """`count` disjoint slots that each hold the space's largest trial on this machine;
    UserError (before any study is touched) when they do not fit."""
    from autotune.run.hardware import local_hardware
    from autotune.search.machine import restricted_space

    hw = local_hardware()
    ranks = max(restricted_space(spec, hw).num_gpus)  # as the workers' sweeps will restrict it
    size = ranks * spec.trial.threads_per_rank if hw.device_kind is DeviceKind.cpu else ranks
    devices = visible_devices(hw.device_kind, device_count=hw.device_count)
    return pack_slots(devices, size, count, hw.device_kind)


def check(spec, count: int) -> list[Slot]:
    """Everything `--side-by-side` can refuse, checked before the study is touched."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        # From Python (run_side_by_side) nothing else stops it: 0 wrote the work folder, then
        # raised IndexError.
        raise UserError(f"--side-by-side {count!r} is not a count of workers", fix="give 1 or more")
    check_storage(spec.storage, count)
    return plan_slots(spec, count)


def shares(n: int, k: int) -> list[int]:
    """`n` trials split between `k` workers, the first ones taking one more."""
    return [n // k + (i < n % k) for i in range(k)]


def alone_reserve(spec, n_trials: int, count: int) -> int:
    """Of `n_trials`, how many the alone phase takes: the re-measure reserve a sweep one at a
    time keeps, at least one (the pick is measured alone before it is recommended); none with
    one worker (a sweep one at a time), with no more trials than workers, or where the user set
    `budget.remeasure_trials: 0` ("never re-measure": the alone phase re-measures, and beyond
    its reserve too, so it does not run and every trial of `n_trials` goes side by side)."""
    from autotune.search.sweep import remeasure_reserve

    if count < 2 or n_trials <= count or spec.budget.remeasure_trials == 0:
        return 0
    return max(remeasure_reserve(spec, n_trials), 1)


def plan_note(spec, n_trials: int, count: int, slots: list[Slot], reserve: int) -> str:
    """What the side-by-side sweep is about to do, said once; where nothing is measured again
    alone (`budget.remeasure_trials: 0`, or no trial left for it), also what the figures are."""
    head = f"{count} trials side by side ({', '.join(s.label() for s in slots)}): "
    if reserve:
        return head + f"{n_trials - reserve} trials together, then {reserve} alone (the leaders re-measured)"
    if count < 2:
        return head + f"{n_trials} trials"
    why = ("budget.remeasure_trials: 0" if spec.budget.remeasure_trials == 0
           else f"--trials {n_trials} leaves none after one each side by side")
    return head + (
        f"all {n_trials} trials together, none measured again alone ({why}). Each figure, the "
        f"picks' too, is of a run beside up to {count - 1} other trial(s), slower by the "
        "interference than the long run alone will be; a run with none beside it (once the other "
        "workers had ended) is not slowed, which favours it. The report lists each trial's "
        "neighbours; budget.remeasure_trials above 0 has the leaders measured again alone")


def run_side_by_side(session, n_trials: int, runs_dir: Path, count: int,
                     note: Callable[[str], None] = print, stdout=None) -> SideBySideSummary:
    """Run the two phases (module docstring); `stdout`: where the workers' lines go. Launches at
    most `n_trials`, except that the alone phase may measure a pick alone beyond its reserve
    (autotune.api.alone), never where `budget.remeasure_trials` is 0 (`alone_reserve`)."""
    spec = session.spec
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise UserError(f"n_trials={n_trials!r} is not a count of trials to launch", fix="give 1 or more")
    slots = check(spec, count)
    reserve = alone_reserve(spec, n_trials, count)
    side = shares(n_trials - reserve, count)
    work = Path(runs_dir) / spec.study / f"side_by_side_{uuid.uuid4().hex[:6]}"
    work.mkdir(parents=True, exist_ok=True)
    note(plan_note(spec, n_trials, count, slots, reserve))
    summary = SideBySideSummary(slots)
    if count > 1:
        spec = spec.with_overrides(**{"budget.remeasure_trials": 0})  # racing waits for the alone phase
    others_done = work / "others_done"
    others = [_start(spec, work, slots[i], count, side[i], runs_dir, stdout)
              for i in range(1, count) if side[i] > 0]
    first = _start(spec, work, slots[0], count, side[0], runs_dir, stdout,
                   alone=(reserve, others_done) if reserve else None)
    with termination_raises():
        summary.interrupted = _wait(others, note, [first])
        others_done.touch()  # worker 0 goes on alone
        summary.interrupted = _wait([first], note) or summary.interrupted
    summary.terminated = terminating() or any(p.returncode in EXIT_CODES for p in [first, *others])
    summary.output_closed = any(p.returncode == EXIT_OUTPUT_CLOSED for p in [first, *others])
    summary.workers = [_read(p) for p in [first, *others]]
    alone = summary.workers[0].pop("alone", None) or {}
    summary.alone, summary.remeasured = alone.get("runs", []), alone.get("remeasured", [])
    return summary


def _start(spec, work: Path, slot: Slot, side_by_side: int, trials: int, runs_dir: Path, stdout,
           alone: tuple[int, Path] | None = None) -> subprocess.Popen:
    from autotune.api.slot_worker import slot_json

    tag = f"slot{slot.index}_x{side_by_side}"
    spec_file = work / f"spec_{tag}.json"
    # The storage URL may hold a password: it goes to the worker through the environment.
    spec_file.write_text(json.dumps(spec.model_dump(mode="json") | {"storage": None}))
    summary_file = work / f"summary_{tag}.json"
    summary_file.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "autotune.api.slot_worker", "--spec-json", str(spec_file),
            "--trials", str(trials), "--slot-json", slot_json(slot, side_by_side),
            "--runs-dir", str(Path(runs_dir).resolve()), "--summary-json", str(summary_file)]
    if alone:
        argv += ["--alone-reserve", str(alone[0]), "--others-done", str(alone[1])]
    env = slot_env(slot, os.environ) | {STORAGE_ENV: spec.storage}
    proc = subprocess.Popen(argv, env=env, stdout=stdout, stderr=subprocess.STDOUT if stdout else None)
    proc.summary_file = summary_file  # type: ignore[attr-defined]
    return proc


def _wait(procs: list[subprocess.Popen], note: Callable[[str], None],
          also: list[subprocess.Popen] | None = None) -> bool:
    """Wait for every worker of `procs`. Ctrl-C reaches them too (one process group): each
    finishes its running trial and stops (twice: fails it now); the parent waits for them either
    way. A SIGTERM sent to the parent alone (kill, a container stopping), or the SIGHUP of its
    terminal closing, is passed on to every worker (`procs` and `also`), each of which then cuts
    its trial, ends its pool and exits."""
    interrupted = False
    for p in procs:
        while True:
            try:
                p.wait()
                break
            except Terminated as exc:
                interrupted = True
                note(f"{exc.signum.name}: passed on to every worker; each fails its running trial and re-queues it")
                for q in [*procs, *(also or [])]:
                    if q.poll() is None:
                        q.send_signal(exc.signum)  # Popen checks it has not been reaped
            except KeyboardInterrupt:
                interrupted = True
                note("Ctrl-C: each worker finishes its running trial, then stops")
    return interrupted or any(p.returncode in (130, EXIT_OUTPUT_CLOSED, *EXIT_CODES) for p in procs)


def _read(proc: subprocess.Popen) -> dict:
    try:
        return json.loads(proc.summary_file.read_text())  # type: ignore[attr-defined]
    except (OSError, ValueError):
        return {"trials_run": 0, "stop_reason": f"worker exited with code {proc.returncode}",
                "exit_code": proc.returncode}


