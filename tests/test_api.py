"""The Python API (autotune.sweep / estimate / cost) for notebooks and scripts: the same
answers as the commands, a real sweep from Python, and `import autotune` staying light."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import autotune
from autotune.errors import UserError

REPO = Path(__file__).resolve().parent.parent


def test_import_autotune_loads_no_torch_and_nothing_heavy():
    code = ("import sys, autotune\n"
            "light = sorted(m for m in ('torch', 'optuna', 'pydantic', 'deepspeed') if m in sys.modules)\n"
            "autotune.estimate(model='tiny', seq_len=64)\n"
            "autotune.cost(gpu='h100-sxm', mfu=0.4, params=1e9, target_tokens=1e10)\n"
            "heavy = sorted(m for m in ('torch', 'deepspeed', 'accelerate') if m in sys.modules)\n"
            "print(light, heavy)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert p.stdout.strip() == "[] []"


def test_estimate_and_cost_answer_as_the_commands_do(cli):
    est = autotune.estimate(model="7b", seq_len=4096, micro_batch=2, zero_stage=2, dp=8, gpu="a100-80gb")
    code, out, err = cli("estimate", "--model", "7b", "--seq-len", "4096", "--micro-batch", "2",
                         "--zero-stage", "2", "--dp", "8", "--gpu", "a100-80gb", "--json")
    assert code == 0, err
    assert est == json.loads(out) and est["total_bytes"] > 0
    # 7B with ZeRO-2 over 8 ranks needs ~63 GB a rank: it fits an 80 GB card, margin kept
    # (a 40 GB card does not: tests/test_estimate.py).
    assert est["fits"] is True
    bills = autotune.cost(gpu="h100-sxm", mfu=0.4, params=7e9, target_tokens=1e11, gpus=8,
                          global_batch_tokens=4e6, zero_stage=1)
    code, out, err = cli("cost", "--gpu", "h100-sxm", "--mfu", "0.4", "--params", "7e9", "--target-tokens",
                         "1e11", "--gpus", "8", "--global-batch-tokens", "4e6", "--zero-stage", "1", "--json")
    assert code == 0, err
    assert bills.as_dicts() == json.loads(out) and bills.cheapest == json.loads(out)[0]
    with pytest.raises(UserError, match="exactly one of --tokens-per-s"):
        autotune.cost(gpu="h100-sxm", target_tokens=1e11)


SPACE = """
num_gpus: [1]
micro_batch_size: [1, 2]
precision: [fp32]
checkpointing: [none]
"""


@pytest.mark.e2e
def test_sweep_from_python_returns_the_pick_and_exports_it(tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE)
    spec = {"workload": {"kind": "gpt", "preset": "tiny"}, "seq_len": 32, "target": {"tokens": 1e7},
            "space": str(tmp_path / "space.yaml"),
            "trial": {"warmup_steps": 1, "measure_steps": 2, "max_measure_steps": 2, "timeout_s": 180}}
    seen = []
    result = autotune.sweep(spec, trials=1, study="py", storage=f"sqlite:///{tmp_path}/s.db",
                            runs_dir=tmp_path / "runs", progress=False, on_trial=seen.append)
    assert result.trials_run == 1 and len(seen) >= 1 and result.study_name == "py"
    pick = result.pick
    assert pick is not None and pick["usd"] > 0 and pick["offer"] == "aws-c7i-ondemand"
    assert result.pareto and result.report["trials"][pick["trial"]]["status"] == "ok"
    assert f"Pick: trial {pick['trial']} on aws-c7i-ondemand" in str(result)
    files = result.export(tmp_path / "launch")
    assert (tmp_path / "launch" / "launch.sh") in files
    assert json.loads((tmp_path / "launch" / "bill.json").read_text())["trial"] == pick["trial"]
    with pytest.raises(UserError, match="seq_len"):
        autotune.sweep({**spec, "seq_len": 0}, trials=1, storage=f"sqlite:///{tmp_path}/s.db")


@pytest.mark.e2e
def test_an_on_trial_that_raises_stops_the_sweep_and_keeps_the_trial_it_reported(tmp_path):
    """A caller's on_trial that raises (a bug in it, a full disk under its log) is called while
    the trial it reports is still RUNNING. Before, Optuna then failed that trial, measured as it
    was; now the trial is recorded as measured and the error reaches the caller after it."""
    import optuna
    from optuna.trial import TrialState

    from autotune.record import TrialRecord

    (tmp_path / "space.yaml").write_text(SPACE)
    spec = {"workload": {"kind": "gpt", "preset": "tiny"}, "seq_len": 32, "target": {"tokens": 1e7},
            "space": str(tmp_path / "space.yaml"),
            "trial": {"warmup_steps": 1, "measure_steps": 2, "max_measure_steps": 2, "timeout_s": 180}}
    url = f"sqlite:///{tmp_path}/s.db"

    def broken(outcome):
        raise RuntimeError("the caller's on_trial broke")

    with pytest.raises(RuntimeError, match="the caller's on_trial broke"):
        autotune.sweep(spec, trials=2, study="cb", storage=url, runs_dir=tmp_path / "runs", progress=False,
                       on_trial=broken)
    trials = optuna.load_study(study_name="cb", storage=url).trials
    states = [(t.number, t.state.name, TrialRecord.of(t).status) for t in trials]
    assert trials[0].state is TrialState.COMPLETE and TrialRecord.of(trials[0]).status == "ok", states
    assert all(t.state is TrialState.WAITING for t in trials[1:]), states  # nothing ran after it


def test_a_trial_cut_by_a_signal_is_not_counted_as_measured(tmp_path):
    """A sweep resumed after a SIGTERM (or Ctrl-C twice) cut a trial: its first line said "(2
    trials measured so far)" where one trial had measured and the other was killed before it
    measured anything. A real study in SQLite: one measured trial, one cut, one reused."""
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    from autotune.api.sweep import load, prepare
    from autotune.search.study import open_study

    (tmp_path / "space.yaml").write_text(SPACE)
    url = f"sqlite:///{tmp_path}/s.db"
    spec = load({"workload": {"kind": "gpt", "preset": "tiny"}, "seq_len": 32,
                 "space": str(tmp_path / "space.yaml"), "storage": url, "study": "cut"})
    study = open_study(url, "cut")
    dist = {"micro_batch_size": CategoricalDistribution([1, 2])}
    for state, mb, attrs in [(TrialState.COMPLETE, 1, {"status": "ok"}),
                             (TrialState.FAIL, 2, {"status": "interrupted",
                                                   "error": "stopped by SIGTERM (kill, a scheduler or a "
                                                            "container stopping); its processes were killed"}),
                             (TrialState.COMPLETE, 1, {"status": "ok", "reused_from": 0})]:
        study.add_trial(create_trial(state=state, values=[1.0, 2.0] if state is TrialState.COMPLETE else None,
                                     params={"micro_batch_size": mb}, distributions=dist, user_attrs=attrs))
    assert len(optuna.load_study(study_name="cut", storage=url).trials) == 3
    assert prepare(spec, tmp_path / "runs").measured_before == 1
