"""A real sweep end to end on CPU: real launched trials, results read back from storage,
and a resumed sweep that adds trials without losing the first ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.pricing.load import load_catalog
from tests.fixtures.bills import bill_of

pytestmark = pytest.mark.e2e

SPEC = """
workload: {kind: gpt, preset: tiny}
seq_len: 64
target: {tokens: 1.0e8}
space: SPACE
trial: {warmup_steps: 1, measure_steps: 2, max_measure_steps: 3, timeout_s: 180}
study: e2e
"""

# Two ranks on every trial: the 2-rank DDP path is the one that must not break (no machine
# here offers 4096 ranks: the sweep says it leaves them out).
SPACE = """
num_gpus: [2, 4096]
micro_batch_size: [1, 2, 4]
grad_accum_steps: [1, 2]
precision: [fp32]
checkpointing: [none, full]
"""


def _report(run_cli, cwd: Path) -> dict:
    p = run_cli("report", "--study", "e2e", "--json", cwd=cwd)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_sweep_then_resume(tmp_path, run_cli):
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "spec.yaml").write_text(SPEC.replace("SPACE", str(tmp_path / "space.yaml")))

    p = run_cli("sweep", "spec.yaml", "--trials", "3", env={"COLUMNS": "80"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("  trial ") >= 3, p.stdout  # one progress line per finished trial
    assert "\n  not offered on this machine: num_gpus 4096\n" in p.stdout, p.stdout
    # The end of the sweep is a short answer at 80 columns (on main: 216 lines for the default
    # sweep): the pick, the Pareto set in short, the next command; names never folded.
    lines = p.stdout.splitlines()
    end = lines[max(i for i, ln in enumerate(lines) if ln.startswith("Study 'e2e'")):]
    assert len(end) <= 25 and all(len(ln) <= 80 for ln in end), "\n".join(end)
    pick_at = next(i for i, ln in enumerate(end) if ln.startswith("Pick: trial "))
    assert end[pick_at].endswith(" on aws-c7i-ondemand, cheapest within limits"), end
    # The pick's hours and dollars are projected to the target; what was measured is tokens/s.
    assert end[pick_at + 1].endswith(", from measured tokens/s"), end
    assert "MFU not computed: no peak for a CPU" in p.stdout
    assert end[-2] == "Next: autotune export --pick cheapest --out launch/ --study e2e"

    first = _report(run_cli, tmp_path)
    # --trials counts launched trials; a proposal of a config already measured reuses it.
    ran = [t for t in first["trials"] if t["reused_from"] is None]
    assert len(ran) == 3
    assert all(t["state"] == "COMPLETE" for t in first["trials"])
    for t in ran:
        assert t["state"] == "COMPLETE", t
        assert t["status"] == "ok" and t["tokens_per_s"] > 0
        assert t["config"]["num_gpus"] == 2
        assert t["hours"] > 0 and t["usd"] > 0
        folder = Path(t["trial_dir"])
        for name in ("config.json", "command.json", "stdout.log", "stderr.log", "result.json"):
            assert (folder / name).is_file(), name
        result = json.loads((folder / "result.json").read_text())
        assert result["world_size"] == 2
        # The stored score is the result priced: the shipped bill's wall clock on the offer
        # (autotune.pricing.cost.compute_bill: setup + tokens / (tokens/s) + checkpoint writes)
        # of the target's 1e8 tokens at the measured tokens/s.
        assert t["offer"] == "aws-c7i-ondemand"
        bill = bill_of(folder, tmp_path / "spec.yaml", t["offer"])
        assert bill.tokens == 1.0e8 and bill.tokens_per_s == result["tokens_per_s"]
        assert t["hours"] == pytest.approx(bill.hours, rel=1e-9)
        # ... which is, by the formula itself: the offer's setup + the tokens at the measured
        # rate, plus checkpoint writes (a tiny model's: under 0.1%).
        floor_h = load_catalog().offer(t["offer"]).setup_hours + 1.0e8 / result["tokens_per_s"] / 3600
        assert floor_h <= t["hours"] <= floor_h * 1.001
    assert first["pareto"], "a study with completed trials has a Pareto front"

    p = run_cli("sweep", "spec.yaml", "--trials", "1", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "(3 trials measured so far)" in p.stderr  # with --json, progress goes to stderr
    result = json.loads(p.stdout)  # and stdout is one JSON document
    assert result["sweep"]["trials_run"] == 1 and result["report"]["cheapest"]["trial"] is not None
    second = _report(run_cli, tmp_path)
    assert len([t for t in second["trials"] if t["reused_from"] is None]) == 4
    # The report it prints is `autotune report --json`'s, its storage too (it was null).
    assert result["report"]["storage"] == second["storage"] and second["storage"].startswith("sqlite:///")
    # The first ones are untouched by the resume.
    assert second["trials"][:len(first["trials"])] == first["trials"]
    keys = [json.dumps(t["config"], sort_keys=True) for t in second["trials"] if t["reused_from"] is None]
    assert len(keys) == len(set(keys)), "a config was measured twice"


SMALL_SPACE = """
num_gpus: [1]
micro_batch_size: [1, 2, 4]
precision: [fp32]
checkpointing: [none]
"""


def test_sweep_stops_when_every_config_is_tried(tmp_path, run_cli):
    """A space of 3 configs and --trials 10: each config runs once, proposals of measured ones
    are reused (free); then the leader is measured again back to back with its rivals (a
    single run is never crowned) until none is within the noise, when the sweep stops by
    itself saying why, or until the 10 trials are spent (a noisy machine)."""
    (tmp_path / "space.yaml").write_text(SMALL_SPACE)
    (tmp_path / "spec.yaml").write_text(SPEC.replace("SPACE", str(tmp_path / "space.yaml")))
    p = run_cli("sweep", "spec.yaml", "--trials", "10")
    assert p.returncode == 0, p.stdout + p.stderr
    trials = _report(run_cli, tmp_path)["trials"]
    launched = [t for t in trials if t["reused_from"] is None]
    assert ("stopped: every config this machine can run has been tried (3 configs)" in p.stdout
            or len(launched) == 10), p.stdout
    ran = [t for t in trials if t["reused_from"] is None and t["repeat_of"] is None]
    assert sorted(t["config"]["micro_batch_size"] for t in ran) == [1, 2, 4]
    repeats = [t for t in trials if t["repeat_of"] is not None]
    assert 2 <= len(repeats) <= 7 and all(t["race_block"] for t in repeats)
    assert all(trials[t["repeat_of"]]["config"] == t["config"] for t in repeats)
    assert all(t["status"] == "ok" and t["state"] == "COMPLETE" for t in trials)
    for t in trials:
        if t["reused_from"] is not None:  # a reused proposal points at the trial that ran it
            src = trials[t["reused_from"]]
            assert src["reused_from"] is None and src["config"] == t["config"]
            assert t["search_gpu_hours"] == 0.0


def test_the_budget_flags_stop_the_sweep_each_with_its_reason(tmp_path, run_cli):
    """--max-gpu-hours, --max-search-usd and --total-trials stop the sweep (this invocation's
    --trials left unspent), each saying what was spent, in the units of this machine: on CPU
    ranks the hours are rank-hours (they read "GPU-hours" before). A budget already spent stops a
    resumed sweep before it launches anything."""
    (tmp_path / "space.yaml").write_text(SMALL_SPACE)
    (tmp_path / "spec.yaml").write_text(SPEC.replace("SPACE", str(tmp_path / "space.yaml")))
    p = run_cli("sweep", "spec.yaml", "--trials", "3", "--max-gpu-hours", "0.00001")
    assert p.returncode == 0, p.stdout + p.stderr
    def finished() -> list[dict]:  # a baseline queued for later waits in the study (WAITING)
        return [t for t in _report(run_cli, tmp_path)["trials"] if t["state"] != "WAITING"]

    trials = finished()
    assert len(trials) == 1, p.stdout  # a trial takes seconds: over 0.036 rank-seconds at once
    used = trials[0]["search_gpu_hours"]
    assert f"stopped: trials have used {used:.4g} rank-hours, wall time x CPU ranks (budget.search_gpu_hours = " \
           "1e-05: a CPU rank counts as a GPU)" in p.stdout, p.stdout
    p = run_cli("sweep", "spec.yaml", "--trials", "3", "--max-search-usd", "0.000000001")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "stopped: trials have cost $" in p.stdout and "(budget.search_usd = $1e-09)" in p.stdout, p.stdout
    assert len(finished()) == 1
    p = run_cli("sweep", "spec.yaml", "--trials", "3", "--total-trials", "2")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "stopped: the study holds 2 finished trials (budget.total_trials = 2)" in p.stdout, p.stdout
    assert len(finished()) == 2


def test_a_setting_the_workload_cannot_run_is_tried_once(tmp_path, run_cli):
    """A user's own model with no TP plan and no checkpointing switch (tests/fixtures/
    entry_points.py): the first trial with TP 2, and the first with checkpointing, end
    `unsupported`, and the worker names what the workload allows (tp_degree 1; checkpointing
    none). Before, the sweep went on launching other configs with those settings (a sweep of
    such a model on the default space spent 4 of its 14 trials so); now it holds them back,
    unlaunched and at no cost, naming the trial that found it."""
    import optuna

    from autotune.record import TrialRecord
    from autotune.search.study import open_study

    fixtures = Path(__file__).resolve().parent / "fixtures"
    (tmp_path / "space.yaml").write_text("num_gpus: [2]\nmicro_batch_size: [1, 2]\ngrad_accum_steps: [1]\n"
                                         "precision: [fp32]\ncheckpointing: [none, full]\ntp_degree: [1, 2]\n")
    (tmp_path / "spec.yaml").write_text(
        f"workload: {{kind: entry_point, entry_point: 'entry_points:build', python_path: ['{fixtures}']}}\n"
        "seq_len: 32\ntarget: {tokens: 1.0e7}\nspace: space.yaml\n"
        "trial: {warmup_steps: 1, measure_steps: 2, max_measure_steps: 2, timeout_s: 180}\nstudy: ep\n")
    url = f"sqlite:///{tmp_path}/ep.db"
    st = open_study(url, "ep")
    for tp, mb, ckpt in ((2, 1, "none"), (2, 2, "none"), (1, 1, "full"), (1, 2, "full"), (1, 1, "none")):
        st.enqueue_trial({"tp_degree": tp, "micro_batch_size": mb, "checkpointing": ckpt})
    p = run_cli("sweep", "spec.yaml", "--trials", "3", "--storage", url)
    assert p.returncode == 0, p.stdout + p.stderr
    trials = optuna.load_study(study_name="ep", storage=url).trials
    recs = [TrialRecord.of(t) for t in trials]
    states = [(t.number, t.state.name, r.status, r.held_back_by) for t, r in zip(trials, recs)]
    assert recs[0].status == "unsupported" and recs[0].launched and recs[0].workload_allows == {"tp_degree": [1]}, states
    assert recs[2].status == "unsupported" and recs[2].launched, states
    assert recs[2].workload_allows == {"checkpointing": ["none"]}, states
    for held, by, setting in ((1, 0, "tp_degree 1"), (3, 2, "checkpointing none")):
        assert trials[held].state.name == "PRUNED" and recs[held].status == "unsupported", states
        assert recs[held].held_back_by == by and not recs[held].launched, states
        assert not (tmp_path / "autotune_runs" / "ep" / f"trial_{held:04d}" / "launch.json").exists()
        assert f"KnownUnsupported: not launched: trial {by} found that this workload runs {setting} only" \
            in p.stdout, p.stdout
    assert recs[4].status == "ok" and recs[4].launched, states  # the third launched trial
    # An entry point gives no shape to predict memory from: the sweep says once that it measures.
    assert p.stdout.count("memory prescreen off: the workload gives no model shape") == 1, p.stdout
    shown = run_cli("report", "--study", "ep", "--storage", url)
    assert shown.returncode == 0, shown.stderr
    row = next(ln for ln in shown.stdout.splitlines() if ln.startswith("1 "))
    assert "pruned: unsupported (not launched: as #0)" in row, shown.stdout


def test_a_limit_below_what_the_runtime_holds_ends_saying_no_config_can_fit(tmp_path, run_cli):
    """A per-rank limit of 64 MiB on CPU ranks: Python and torch alone hold more before any
    model is built. The sweep stops after its first trial and says so, from what that trial
    measured before its build, not "add checkpointing" (which no saver can reach); exit 1.
    The limit is written as a user writes a size, with its unit, and the header says how it was read."""
    (tmp_path / "space.yaml").write_text("num_gpus: [1]\nmicro_batch_size: [1, 2]\nprecision: [fp32]\n"
                                         "checkpointing: [none]\n")
    spec = SPEC.replace("SPACE", str(tmp_path / "space.yaml")) + "memory: {limit_bytes_per_rank: 64 MiB}\n"
    (tmp_path / "spec.yaml").write_text(spec)
    p = run_cli("sweep", "spec.yaml", "--trials", "3", env={"COLUMNS": "80"})
    assert p.returncode == 1, p.stdout + p.stderr
    assert "\n  memory limit per rank: 64.0 MiB (67,108,864 bytes)\n" in p.stdout, p.stdout
    # It stops after its first trial: no budget spent on configs none of which can fit.
    assert p.stdout.count("  trial ") == 1, p.stdout
    assert "\nstopped: no config can fit the memory limit of 64.0 MiB per rank: before building the " \
           "model, trial 0's ranks already held " in p.stdout, p.stdout
    end = p.stdout[p.stdout.index("Study 'e2e'"):]
    assert "No pick: no completed trial yet." in end
    flat = " ".join(end.split())
    assert "no config fits the memory limit: the closest was trial 0 (1x mb" in flat, end
    assert "No config can fit: before building the model, trial 0's ranks already held" in flat
    trial = next(t for t in _report(run_cli, tmp_path)["trials"] if t["number"] == 0)
    assert trial["status"] == "oom" and trial["mem_before_build_bytes"] > 64 * 2**20
    assert "To make it fit" not in flat
