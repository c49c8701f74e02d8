"""Trials side by side on this machine, for real: `autotune sweep --side-by-side 2` runs
one-rank CPU trials two at a time on disjoint cores, then re-measures the pick alone (none with
budget.remeasure_trials: 0: then exactly --trials run side by side); the
records say what ran beside what, and the report shows it with the interference."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import optuna
import pytest

from autotune.record import TrialRecord
from autotune.report.neighbours import neighbours
from autotune.run.storage import open_storage

# Two trials at a time need a core each (one rank per trial); the 2-core CI machine has them.
needs_two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores: one per trial")

SPEC = """\
workload: {kind: gpt, preset: tiny}
seq_len: 32
target: {tokens: 1.0e7}
space: space.yaml
trial: {warmup_steps: 1, measure_steps: 2, max_measure_steps: 2, timeout_s: 240, threads_per_rank: 1}
budget: {remeasure_trials: 2}
study: sbs
"""
SPACE = """\
num_gpus: [1]
micro_batch_size: [1, 2, 4]
grad_accum_steps: [1, 2]
precision: [fp32]
checkpointing: [none]
"""


def _write(folder: Path) -> Path:
    (folder / "space.yaml").write_text(SPACE)
    (folder / "spec.yaml").write_text(SPEC)
    return folder / "spec.yaml"


def test_sqlite_and_more_slots_than_cores_are_refused_before_any_study_exists(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = _write(tmp_path)
    code, _, err = cli("sweep", str(spec), "--side-by-side", "2", "--storage", f"sqlite:///{tmp_path}/a.db")
    assert code == 2 and "SQLite" in err and "journal:///" in err
    log = tmp_path / "study.log"
    code, _, err = cli("sweep", str(spec), "--side-by-side", "64", "--storage", f"journal:///{log}")
    assert code == 2 and "room for" in err
    assert not (tmp_path / "a.db").exists() and not log.exists()


@pytest.mark.e2e
@needs_two_cores
def test_two_trials_at_a_time_on_disjoint_cores_finish_the_budget_and_report_neighbours(tmp_path, run_cli):

    spec = _write(tmp_path)
    url = f"journal:///{tmp_path}/study.log"
    p = run_cli("sweep", str(spec), "--trials", "6", "--side-by-side", "2", "--storage", url, "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)["report"]

    trials = optuna.load_study(study_name="sbs", storage=open_storage(url)).trials
    recs = {t.number: TrialRecord.of(t) for t in trials}
    launched = [t for t in trials if recs[t.number].launched]
    # The budget: 4 trials two at a time (2 per worker), then 2 alone; beyond it, only the picks
    # measured alone when the last runs made a config without a run alone the pick, each config
    # once at most.
    side = [t for t in launched if recs[t.number].slot.side_by_side == 2]
    alone = [t for t in launched if recs[t.number].slot.side_by_side == 1]
    assert len(side) == 4 and len(alone) >= 2, [(t.number, recs[t.number].status) for t in trials]
    again = [recs[t.number] for t in alone if (recs[t.number].race_block or "").startswith("alone-")]
    assert all(r.repeat_of is not None for r in again)
    assert len({r.config_key for r in again}) == len(again)  # each config re-measured alone once
    assert len(launched) <= 6 + len({recs[t.number].config_key for t in side})
    assert len({tuple(recs[t.number].slot.devices) for t in side}) == 2  # one core each, disjoint

    nbrs = neighbours(trials)
    # Both workers start together: their first trials ran at the same time.
    assert any(nbrs[t.number] for t in side)
    for t in launched:
        for n in nbrs[t.number]:  # a neighbour ran in the other slot: cores never shared
            assert recs[n].slot.devices != recs[t.number].slot.devices
    assert all(nbrs[t.number] == [] for t in alone)

    # The pick was measured alone before it was recommended: a run with no neighbour (one in the
    # alone phase, or the last of the side-by-side phase after the other worker had finished).
    pick = doc["cheapest"]["trial"]
    key = recs[pick].config_key
    assert any(recs[t.number].config_key == key and not nbrs[t.number] for t in launched), (
        pick, [(t.number, recs[t.number].config_key, recs[t.number].slot.side_by_side, recs[t.number].status)
               for t in launched])
    rows = {r["number"]: r for r in doc["trials"]}
    assert all(rows[t.number]["neighbours"] == nbrs[t.number] for t in launched)
    assert rows[side[0].number]["slot"].endswith("of 2)")
    # Interference: every config measured both ways, with its runs; the pick is one of them
    # whenever its first run had a neighbour. A side-by-side trial had a neighbour (above) and
    # each config ran once there, so the alone phase began with configs measured only beside
    # others; it measured the leaders among them again alone ("again"), and each of those
    # configs is in the table.
    both = {r["trial"]: r for r in doc["interference"]}
    assert again and all(r.status == "ok" for r in again), [(r.config_key, r.status) for r in again]
    assert {r.config_key for r in again} <= {recs[n].config_key for n in both}, (again, both)
    for r in both.values():
        assert r["runs_beside"] and r["runs_alone"]
        assert all(nbrs[n] for n in r["runs_beside"]) and not any(nbrs[n] for n in r["runs_alone"])
        assert r["beside_over_alone"] == pytest.approx(r["tokens_per_s_beside"] / r["tokens_per_s_alone"])
    if nbrs[pick]:
        assert pick in both

    shown = run_cli("report", "--study", "sbs", "--storage", url)
    assert shown.returncode == 0, shown.stderr
    assert "beside" in shown.stdout and "slot 1 of 1" in shown.stdout
    page = tmp_path / "report.html"
    assert run_cli("report", "--study", "sbs", "--storage", url, "--html", str(page)).returncode == 0
    html = page.read_text()
    assert "<th class='l'>beside</th>" in html
    assert "interference (config of #" in shown.stdout and "interference (config of #" in html


@pytest.mark.parametrize("signal_name,code", [("SIGTERM", 143), ("SIGHUP", 129)])
@needs_two_cores
def test_a_signal_to_the_parent_reaches_every_worker_and_leaves_nothing_running(tmp_path, signal_name, code):
    """`kill <pid>` (or a container stopping) signals the parent alone: before, the parent died
    and its workers swept on, orphaned. Now each worker cuts its trial, ends its pool, re-queues
    the trial and exits; the parent exits 143 after them. SIGHUP: the terminal they run in
    closes (the parent leads its session, the kernel signals it), and every write to it fails
    from then on; the same, exit 129."""
    import contextlib
    import os
    import time

    import psutil

    from autotune.contract.trial_files import FATAL_LOGS
    from tests.fixtures.study_tools import in_a_terminal, sigterm_and_wait, started

    spec = _write(tmp_path)  # trials that measure until they are cut:
    spec.write_text(SPEC.replace("measure_steps: 2, max_measure_steps: 2",
                                 "measure_steps: 100000, max_measure_steps: 100000"))
    url = f"journal:///{tmp_path}/study.log"
    runs = tmp_path / "runs"
    argv = [sys.executable, "-m", "autotune.cli", "sweep", str(spec), "--trials", "6", "--side-by-side", "2",
            "--storage", url, "--runs-dir", str(runs)]
    with contextlib.ExitStack() as stack:
        if signal_name == "SIGTERM":
            p = stack.enter_context(started(argv, tmp_path))
        else:
            p, hang_up = stack.enter_context(in_a_terminal(argv, tmp_path))
        deadline = time.monotonic() + 180
        while len([d for d in runs.glob("sbs/trial_*") if FATAL_LOGS.paths(d)]) < 2:  # both slots train
            assert time.monotonic() < deadline and p.poll() is None, "two trials did not start"
            time.sleep(0.3)
        workers = psutil.Process(p.pid).children(recursive=True)
        queues = [json.loads((d / "command.json").read_text())["argv"] for d in runs.glob("sbs/trial_*")]
        queues = [a[a.index("--queue") + 1] for a in queues if "--queue" in a]
        if signal_name == "SIGTERM":
            out = sigterm_and_wait(p, timeout_s=90)  # the parent alone
        else:
            hang_up.set()
            p.wait(timeout=90)
            out = "(the terminal's output)"
    assert p.returncode == code, out
    left = [w.pid for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
    assert left == [], f"processes of the sweep outlived it: {left}\n{out}"
    assert len(queues) == 2 and not any(os.path.exists(q) for q in queues), queues
    trials = optuna.load_study(study_name="sbs", storage=open_storage(url)).trials
    cut = [t for t in trials if TrialRecord.of(t).status == "interrupted"]
    assert len(cut) == 2 and all(f"stopped by {signal_name}" in TrialRecord.of(t).error for t in cut), out
    retried = {t.system_attrs.get("failed_trial") for t in trials if t.state.name == "WAITING"}
    assert {t.number for t in cut} <= retried, out


@pytest.mark.e2e
@needs_two_cores
def test_a_reader_that_leaves_stops_every_worker_after_its_trial(tmp_path):
    """`autotune sweep --side-by-side 2 | head`: the workers print their trial lines into the
    parent's pipe. Before, a worker's print raised BrokenPipeError inside its objective and
    Optuna failed the trial it had just measured. Now each worker keeps that trial, stops before
    its next one and exits 141, and so does the parent: no trial failed or left RUNNING, no
    worker or rank left."""

    from optuna.trial import TrialState

    from tests.fixtures.study_tools import processes_under, read_until_then_leave

    spec = _write(tmp_path)
    url = f"journal:///{tmp_path}/study.log"
    runs = tmp_path / "runs"
    argv = [sys.executable, "-m", "autotune.cli", "sweep", str(spec), "--trials", "6", "--side-by-side", "2",
            "--storage", url, "--runs-dir", str(runs)]
    code, seen, err = read_until_then_leave(argv, tmp_path, r"\]\s+trial\s+\d+\s", timeout_s=180)
    assert code == 141, (seen, err)
    trials = optuna.load_study(study_name="sbs", storage=open_storage(url)).trials
    states = [(t.number, t.state.name, TrialRecord.of(t).status) for t in trials]
    assert all(t.state in (TrialState.COMPLETE, TrialState.WAITING) for t in trials), (states, err)
    assert any(t.state is TrialState.COMPLETE for t in trials), states
    assert processes_under(runs) == [] and processes_under(tmp_path) == []


@pytest.mark.e2e
@needs_two_cores
def test_a_real_side_by_side_sweep_launches_exactly_its_trials(tmp_path, run_cli):
    """3 trials two at a time (the old code kept one back to re-measure the leader alone, then
    measured the pick alone beyond it: up to 4 or 5 launched)."""
    (tmp_path / "space.yaml").write_text(SPACE)
    # budget.remeasure_trials: 0 ("never re-measure"): no alone phase (autotune.api.side_by_side)
    (tmp_path / "spec.yaml").write_text(SPEC.replace("remeasure_trials: 2", "remeasure_trials: 0")
                                        .replace("study: sbs", "study: never"))
    url = f"journal:///{tmp_path}/study.log"
    p = run_cli("sweep", "spec.yaml", "--trials", "3", "--side-by-side", "2", "--storage", url)
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-3000:]
    assert p.stdout.count("none measured again alone (budget.remeasure_trials: 0)") == 1, p.stdout
    trials = optuna.load_study(study_name="never", storage=open_storage(url)).trials
    recs = [TrialRecord.of(t) for t in trials]
    launched = [r for r in recs if r.launched]
    assert len(launched) == 3, [(r.status, r.slot) for r in recs]
    assert all(r.slot is not None and r.slot.side_by_side == 2 and r.repeat_of is None for r in launched)
