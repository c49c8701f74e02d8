"""One sweep worker of `autotune sweep --side-by-side K`, pinned to its slot: started by
autotune.api.side_by_side, never by hand.

    AUTOTUNE_STORAGE=journal:///abs/study.log python -m autotune.api.slot_worker \\
        --spec-json WORK/spec_slot0_x2.json --trials 3 \\
        --slot-json '{"index": 0, "kind": "cpu", "devices": [0], "side_by_side": 2}' \\
        --runs-dir /abs/autotune_runs --summary-json WORK/summary_slot0_x2.json \\
        --alone-reserve 4 --others-done WORK/others_done     # worker 0 only

WORK is the sweep's RUNS_DIR/STUDY/side_by_side_<id>/ (autotune.api.side_by_side).

It pins itself to the slot's cores (before anything reads the hardware: the hardware key then
names the slot's cores, so every slot of one size is the same hardware and their measurements
compare), runs `run_sweep` on the shared study, and stores the slot with every trial it runs.
Worker 0 then waits until the parent says the others have ended and runs the alone phase
(autotune.api.alone) in its slot, with its trial pool still warm.
The storage URL comes through the environment, never the command line or a file (it may hold
a password). The summary file tells the parent what this worker did.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path

from autotune.contract import DeviceKind, write_json_atomic
from autotune.run.slots import Slot, pin_to


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m autotune.api.slot_worker")
    p.add_argument("--spec-json", type=Path, required=True)
    p.add_argument("--trials", type=int, required=True)
    p.add_argument("--slot-json", required=True)
    p.add_argument("--runs-dir", type=Path, required=True)
    p.add_argument("--summary-json", type=Path, required=True)
    p.add_argument("--alone-reserve", type=int, default=0,
                   help="then, once --others-done exists, the alone phase with this reserve")
    p.add_argument("--others-done", type=Path, default=None,
                   help="a file the parent writes when every other worker has ended")
    return p.parse_args(argv)


def slot_from_json(text: str) -> tuple[Slot, int]:
    """(the slot, how many run side by side) from the parent's --slot-json."""
    d = json.loads(text)
    return Slot(int(d["index"]), DeviceKind(d["kind"]), tuple(int(x) for x in d["devices"])), int(d["side_by_side"])


def slot_json(slot: Slot, side_by_side: int) -> str:
    return json.dumps({"index": slot.index, "kind": slot.kind.value, "devices": list(slot.devices),
                       "side_by_side": side_by_side})


class SlotWorker:
    """A sweep pinned to one slot: its share side by side, then (worker 0) the alone phase."""

    def __init__(self, args: argparse.Namespace, slot: Slot, side_by_side: int, session):
        from autotune.record import SlotRecord

        self.args, self.slot, self.session, self.study = args, slot, session, session.study
        self.prefix = f"[{slot.label()}]"
        self.record = SlotRecord(host=socket.gethostname(), kind=slot.kind.value,
                                 devices=list(slot.devices), index=slot.index, side_by_side=side_by_side)
        self.runner, self.close_runner = kept_open_runner(session.spec)

    def say(self, message: str) -> None:
        from autotune.search.interrupt import reader_left

        try:
            print(f"{self.prefix} {message}", flush=True)
        except BrokenPipeError:  # the parent's pipe lost its reader: stop once this trial is in
            reader_left(sys.stdout.fileno())

    def on_trial(self, outcome) -> None:
        # Called while the trial is still RUNNING (before the objective returns): the slot is
        # stored on it through the storage, as recovery stores on trials it does not run.
        from autotune.record import TrialRecord
        from autotune.report.labels import outcome_line

        st = self.study
        trial_id = st._storage.get_trial_id_from_study_id_trial_number(st._study_id, outcome.number)
        TrialRecord.write_stored(st._storage, trial_id, slot=self.record)
        self.say(outcome_line(outcome, 10_000))

    def sweep(self, spec, n: int, baselines: bool) -> dict:
        from autotune.search.sweep import run_sweep

        summary = run_sweep(spec, self.study, n, self.args.runs_dir / spec.study, on_trial=self.on_trial,
                            note=lambda m: self.say(f"  {m}"), runner=self.runner,
                            catalog=self.session.catalog, baselines=baselines)
        return {"trials_run": summary.trials_run, "trials_ok": summary.trials_ok,
                "stop_reason": summary.stop_reason, "interrupted": summary.interrupted}

    def run(self) -> dict:
        """This worker's share; then, for worker 0 once the others have ended, the alone phase
        (in this slot, its trial pool still warm: its trials start as fast as one at a time)."""
        args, spec = self.args, self.session.spec
        try:
            done = self.sweep(spec, args.trials, True) if args.trials else {"trials_run": 0}
            if args.alone_reserve and not done.get("interrupted") and wait_for(args.others_done):
                from autotune.api.alone import alone_phase

                self.record = self.record.model_copy(update={"side_by_side": 1})
                done["alone"] = alone_phase(spec, self.study, args.alone_reserve,
                                            lambda sp, n: self.sweep(sp, n, False), self.say,
                                            self.session.hardware, self.session.catalog)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM while waiting for the others
            done = {"trials_run": 0, "interrupted": True}
        finally:
            self.close_runner()
        return done


def open_session(args: argparse.Namespace, slot: Slot):
    """The spec (storage from the environment) and the sweep's checked session, in the slot."""
    from autotune.api.sweep import load, prepare
    from autotune.errors import UserError
    from autotune.run.storage import resolve_storage

    spec = load(json.loads(args.spec_json.read_text()))
    spec = spec.with_overrides(storage=resolve_storage(None, None, spec.storage))
    session = prepare(spec, args.runs_dir)  # the parent's runs folder: this study's already
    if session.hardware.device_count != len(slot.devices):
        # The hardware is read after pinning: it must see the slot alone, or the space would
        # offer trials larger than the slot (NVML counts every GPU of the node unless the
        # hardware reader honours CUDA_VISIBLE_DEVICES).
        raise UserError(f"this worker sees {session.hardware.device_count} devices in a slot of "
                        f"{len(slot.devices)} ({slot.label()})",
                        fix="use an autotune whose hardware detection honours CUDA_VISIBLE_DEVICES "
                            "(issue 26), or run without --side-by-side")
    return session


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    slot, side_by_side = slot_from_json(args.slot_json)
    pin_to(slot)  # first: the hardware fingerprint reads the affinity mask

    from autotune.errors import UserError
    from autotune.search.interrupt import (
        EXIT_OUTPUT_CLOSED,
        output_closed,
        terminated_exit_code,
        terminating,
        termination_raises,
    )

    try:
        session = open_session(args, slot)
    except UserError as exc:
        print(f"[{slot.label()}] {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        with termination_raises():  # also while waiting for the others, its trial pool warm
            done = SlotWorker(args, slot, side_by_side, session).run()
    except Exception as exc:  # the study's server gone for longer than the wait: said once, no traceback
        from autotune.run.reconnect import storage_lost_in

        if (lost := storage_lost_in(exc)) is None:
            raise
        print(f"[{slot.label()}] error: {lost}", file=sys.stderr, flush=True)
        return 1
    write_json_atomic(args.summary_json, {"slot": slot.index, "devices": list(slot.devices), **done})
    if terminating():
        return terminated_exit_code()
    if output_closed():
        return EXIT_OUTPUT_CLOSED
    return 130 if done.get("interrupted") or (done.get("alone") or {}).get("interrupted") else 0


def kept_open_runner(spec):
    """(runner, close): the runner a sweep would make (autotune.search.objective), kept open
    across this worker's sweeps, so that the alone phase reuses the slot's warm trial pool.
    (None, no-op) where the sweep would not pool: it then makes its own."""
    from autotune.search.objective import default_runner, uses_pool

    if not uses_pool(spec):
        return None, lambda: None
    pool = default_runner(spec)  # the sweep's own pool, over its launcher

    def runner(cfg, trial_dir, on_start=None):  # no `close`: run_sweep leaves it open
        return pool(cfg, trial_dir, on_start=on_start)

    return runner, pool.close


def wait_for(path: Path | None, poll_s: float = 0.5) -> bool:
    """Wait until the parent says every other worker has ended (False: no such file given)."""
    import time

    if path is None:
        return False
    while not path.exists():
        time.sleep(poll_s)
    return True


if __name__ == "__main__":
    sys.exit(main())
