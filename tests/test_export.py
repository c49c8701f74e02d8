"""`autotune export` from REAL small studies (tests/report_study.py), and the exported files
run by the REAL tools: `accelerate launch --config_file` and `deepspeed.initialize` on CPU
ranks, with the very batch, accumulation and precision the trial measured."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from autotune.contract import TrialConfig, deepspeed_config
from autotune.run.launch import free_port
from tests.report_study import ddp_study, zero_study

pytestmark = pytest.mark.e2e

# A tiny training script as a user would write it: it applies what launch.sh exports.
ACCELERATE_SCRIPT = """
import json, os, sys
import torch
from accelerate import Accelerator

acc = Accelerator()  # accumulation and precision come from the launcher / environment
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = acc.prepare(model, opt)
micro = int(os.environ["AUTOTUNE_MICRO_BATCH_SIZE"])
samples = 0
for _ in range(2 * acc.gradient_accumulation_steps):  # two real optimizer steps
    with acc.accumulate(model):
        loss = model(torch.randn(micro, 8)).pow(2).mean()
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
    samples += micro
json.dump({"num_processes": acc.num_processes, "accum": acc.gradient_accumulation_steps,
           "mixed_precision": acc.mixed_precision, "micro": micro, "samples_per_rank": samples,
           "distributed_type": str(acc.distributed_type)},
          open(os.path.join(sys.argv[1], f"rank{acc.process_index}.json"), "w"))
"""

DEEPSPEED_SCRIPT = """
import argparse, json, os
import torch, deepspeed
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--local_rank", type=int, default=-1)  # the DeepSpeed launcher passes it
ap.add_argument("out")
args = ap.parse_args()

model = torch.nn.Linear(16, 16)
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                       config=os.environ["AUTOTUNE_DEEPSPEED_CONFIG"])
micro = engine.train_micro_batch_size_per_gpu()
for _ in range(engine.gradient_accumulation_steps()):  # one real optimizer step
    loss = engine(torch.randn(micro, 16)).pow(2).mean()
    engine.backward(loss)
    engine.step()
json.dump({"train_batch_size": engine.train_batch_size(), "micro": micro,
           "accum": engine.gradient_accumulation_steps(), "world_size": dist.get_world_size(),
           "zero_stage": engine.zero_optimization_stage(), "bf16": engine.bfloat16_enabled(),
           "global_steps": engine.global_steps},
          open(os.path.join(args.out, f"rank{dist.get_rank()}.json"), "w"))
"""


def _venv_python() -> str:
    import sys

    return sys.executable


def _run_launch_script(folder: Path, script: Path, results: Path) -> subprocess.CompletedProcess:
    results.mkdir()
    env = dict(os.environ, PYTHON=_venv_python(), MASTER_PORT=str(free_port()),
               PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    return subprocess.run(["bash", str(folder / "launch.sh"), str(script), str(results)], cwd=results,
                          capture_output=True, text=True, timeout=300, env=env)


def _ranks(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("rank*.json"))]


def test_accelerate_config_runs_the_trials_batch(tmp_path_factory, tmp_path):
    study = ddp_study(tmp_path_factory)
    doc = json.loads(study.cli("report", "--json").stdout)
    trial = next(t for t in doc["trials"] if t["config"]["num_gpus"] == 2)  # data parallel
    out = tmp_path / "exp"
    p = study.cli("export", "--pick", str(trial["number"]), "--out", str(out), "--launcher", "accelerate")
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(f.name for f in out.iterdir()) == [".autotune-files.json", "accelerate_config.yaml", "bill.json", "bill.md",
                                                      "launch.sh", "trial_config.json"]  # no ZeRO: no DS file
    acc_cfg = yaml.safe_load((out / "accelerate_config.yaml").read_text())
    assert acc_cfg["num_processes"] == 2 and acc_cfg["distributed_type"] == "MULTI_GPU" and acc_cfg["use_cpu"]
    assert "accelerate.commands.launch --config_file" in (out / "launch.sh").read_text()
    bill = (out / "bill.md").read_text()
    assert f"trial {trial['number']}" in bill and "+30% time" in bill and "one interruption" in bill

    script = tmp_path / "tiny.py"
    script.write_text(ACCELERATE_SCRIPT)
    run = _run_launch_script(out, script, tmp_path / "res")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ranks = _ranks(tmp_path / "res")
    cfg = trial["config"]
    assert len(ranks) == 2
    for r in ranks:
        assert r["num_processes"] == cfg["num_gpus"] and r["accum"] == cfg["grad_accum_steps"]
        assert r["micro"] == cfg["micro_batch_size"] and r["mixed_precision"] == "no"  # fp32 trial
        # the effective batch the long run would train at is the trial's
        assert r["micro"] * r["accum"] * r["num_processes"] == cfg["global_batch_samples"]
        assert r["samples_per_rank"] == 2 * cfg["micro_batch_size"] * cfg["grad_accum_steps"]


def test_deepspeed_json_initializes_deepspeed_with_the_trials_batch(tmp_path_factory, tmp_path):
    study = zero_study(tmp_path_factory)
    doc = json.loads(study.cli("report", "--json").stdout)
    (trial,) = doc["trials"]
    assert trial["status"] == "ok", trial  # a measured ZeRO-2 trial (DeepSpeed on 2 CPU ranks)
    out = tmp_path / "exp"
    p = study.cli("export", "--pick", "cheapest", "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    ds = json.loads((out / "ds_config.json").read_text())
    stored = TrialConfig.model_validate_json((out / "trial_config.json").read_text())
    assert ds == deepspeed_config(stored)  # the very config the trial's engine ran
    acc_cfg = yaml.safe_load((out / "accelerate_config.yaml").read_text())
    assert acc_cfg["distributed_type"] == "DEEPSPEED"
    assert acc_cfg["deepspeed_config"]["deepspeed_config_file"] == str((out / "ds_config.json").resolve())
    assert "deepspeed.launcher.runner" in (out / "launch.sh").read_text()  # the trial's launcher

    script = tmp_path / "tiny_ds.py"
    script.write_text(DEEPSPEED_SCRIPT)
    run = _run_launch_script(out, script, tmp_path / "res")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ranks = _ranks(tmp_path / "res")
    cfg = trial["config"]
    assert len(ranks) == cfg["num_gpus"] == 2
    for r in ranks:
        assert r["world_size"] == 2 and r["zero_stage"] == 2 and r["global_steps"] == 1
        assert r["bf16"] == (cfg["precision"] == "bf16")
        assert r["micro"] == cfg["micro_batch_size"] and r["accum"] == cfg["grad_accum_steps"]
        assert r["train_batch_size"] == cfg["global_batch_samples"] == r["micro"] * r["accum"] * 2


def test_export_errors_exit_2_and_write_nothing(tmp_path_factory, tmp_path):
    from autotune.errors import UserError
    from autotune.report.export import plan_export
    from autotune.report.build import collect
    from autotune.search.study import open_study

    study = ddp_study(tmp_path_factory)
    st = open_study(study.storage, study.name, create=False)
    doc, trials = collect(st), {t.number: t for t in st.get_trials()}
    for kwargs, msg in ((dict(pick="99"), "no trial 99"),
                        (dict(pick="cheapst"), "not cheapest, fastest or a trial number"),
                        (dict(pick="cheapest", offer="aws-c7i-ondmand"), "Did you mean 'aws-c7i-ondemand'")):
        with pytest.raises(UserError, match=msg):
            plan_export(doc, trials, **kwargs)
    with pytest.raises(UserError, match="no option meets"):
        plan_export(collect(st, max_usd=1e-9), trials, pick="cheapest")
    # --offer takes that offer's cheapest option
    plan = plan_export(doc, trials, pick="cheapest", offer="test-cpu-spot")
    assert plan.option["offer"] == "test-cpu-spot"

    # Through the CLI: exit code 2, one line, nothing written.
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    p = study.cli("export", "--pick", "fastest", "--out", str(tmp_path / "full"))
    assert p.returncode == 2 and "--force" in p.stderr and "To fix:" in p.stderr, p.stderr
    assert [f.name for f in (tmp_path / "full").iterdir()] == ["keep.txt"]
    p = study.cli("export", "--pick", "fastest", "--out", str(tmp_path / "full"), "--force")
    assert p.returncode == 0, p.stderr
    # --force writes autotune's files beside the user's: never deletes what it did not write.
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine" and (tmp_path / "full" / "launch.sh").is_file()
    assert sorted(f.name for f in tmp_path.iterdir()) == ["full"]  # no temporary folder left
