"""`autotune export` from REAL small studies (tests/report_study.py), and the exported files
run by the REAL tools: `accelerate launch --config_file` (DDP and DeepSpeed ZeRO, from a moved
folder), `deepspeed.initialize`, torchrun through launch.sh and Hugging Face `Trainer`, on CPU
ranks, with the very batch, accumulation and precision the trial measured."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotune.contract import TrialConfig
from autotune.run.argv import free_port
from tests.report_study import ddp_study, fsdp_study, selective_study, zero_study

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
acc.wait_for_everyone()
torch.distributed.destroy_process_group()  # a rank leaving with the group alive can abort the other (gloo)
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
           "global_steps": engine.global_steps, "thp": os.environ.get("THP_MEM_ALLOC_ENABLE"),
           # DeepSpeed's CPU all-reduce buffers of this run, which launch.sh removes at its end
           "shm": sorted(os.listdir("/dev/shm"))},
          open(os.path.join(args.out, f"rank{dist.get_rank()}.json"), "w"))
dist.barrier()
dist.destroy_process_group()  # a rank leaving with the group alive can abort the other (gloo)
"""


def _venv_python() -> str:
    import sys

    return sys.executable


def _run_launch_script(folder: Path, results: Path, *args: Path | str,
                       env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess:
    """launch.sh of an export, run in `results` with `args` ("--check": autotune's own worker)."""
    results.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHON": _venv_python(), "MASTER_PORT": str(free_port()),
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent), **(env or {})}
    env = {k: v for k, v in env.items() if v is not None}  # None: left out of the environment
    return subprocess.run(["bash", str(folder / "launch.sh"), *map(str, args)], cwd=results,
                          capture_output=True, text=True, timeout=300, env=env)


# The scripts leave without the interpreter's teardown once their JSON is written: torch
# 2.13's gloo teardown at exit aborts some runs on this project's CPU machines ("terminate
# called without an active exception": 3 of 10 runs of a bare 2-rank DDP script, 2026-11-30),
# which the launcher reports as a failure after the work was done (trials/worker.py does the same).
LEAVE = "\nimport os as _os, sys as _sys\n_sys.stdout.flush(); _sys.stderr.flush(); _os._exit(0)\n"


def _ranks(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("rank*.json"))]


def _ranks_of_script(folder: Path, text: str, tmp_path: Path,
                     env: dict[str, str | None] | None = None) -> list[dict]:
    """Run a user's script `text` through the export's launch.sh on 2 ranks; each rank's JSON."""
    script, results = tmp_path / "user_script.py", tmp_path / "res"
    script.write_text(text + LEAVE)
    run = _run_launch_script(folder, results, script, results, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ranks = [json.loads(p.read_text()) for p in sorted(results.glob("rank*.json"))]
    assert len(ranks) == 2
    return ranks


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

    cfg = trial["config"]
    for r in _ranks_of_script(out, ACCELERATE_SCRIPT, tmp_path):
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
    ran = json.loads((Path(trial["trial_dir"]) / "result.json").read_text())["observations"]["ds_config"]
    assert ds == ran  # the very config the trial's engine ran
    # ... with ZeRO's buckets sized to the model (the tiny preset's d_model 128: 128²)
    assert ds["zero_optimization"]["reduce_bucket_size"] == 128 * 128
    acc_cfg = yaml.safe_load((out / "accelerate_config.yaml").read_text())
    assert acc_cfg["distributed_type"] == "DEEPSPEED"
    # the DeepSpeed config itself, not a path that breaks when the folder moves; without the
    # optimizer, which the user's accelerate script brings (autotune.report.optimizer)
    assert json.loads(acc_cfg["deepspeed_config"]["deepspeed_config_file"]) == {
        k: v for k, v in ds.items() if k != "optimizer"}
    assert "optimizer" in ds  # deepspeed.initialize without an optimizer takes the trial's
    assert "deepspeed.launcher.runner" in (out / "launch.sh").read_text()  # the trial's launcher

    cfg = trial["config"]
    assert cfg["num_gpus"] == 2
    port = str(free_port())
    buffers = f"deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*"
    ranks = _ranks_of_script(out, DEEPSPEED_SCRIPT, tmp_path, env={"MASTER_PORT": port, "THP_MEM_ALLOC_ENABLE": None})
    # DeepSpeed's CPU all-reduce made its shared-memory buffers (one per rank) and left them;
    # launch.sh removed them once its launcher ended (they held RAM until reboot before).
    assert len([n for n in ranks[0]["shm"] if Path(n).match(buffers)]) == 2, ranks[0]["shm"]
    assert not list(Path("/dev/shm").glob(buffers))
    for r in ranks:
        assert r["world_size"] == 2 and r["zero_stage"] == 2 and r["global_steps"] == 1
        assert r["bf16"] == (cfg["precision"] == "bf16")
        assert r["micro"] == cfg["micro_batch_size"] and r["accum"] == cfg["grad_accum_steps"]
        assert r["train_batch_size"] == cfg["global_batch_samples"] == r["micro"] * r["accum"] * 2
        assert r["thp"] == "1"  # the CPU allocator's huge pages, as the trial ran (rank_env)


def test_huge_pages_turned_off_in_the_environment_stay_off_in_the_exported_run(tmp_path_factory, tmp_path):
    """`THP_MEM_ALLOC_ENABLE=0 autotune sweep` measures without the CPU allocator's huge pages
    (autotune.contract.rank_env); `THP_MEM_ALLOC_ENABLE=0 launch.sh` runs so too, where
    launch.sh set it back to 1 whatever the environment said. Every rank of torchrun sees it."""
    study = ddp_study(tmp_path_factory)
    doc = json.loads(study.cli("report", "--json").stdout)
    trial = next(t for t in doc["trials"] if t["config"]["num_gpus"] == 2)
    out = tmp_path / "exp"
    p = study.cli("export", "--pick", str(trial["number"]), "--out", str(out), "--launcher", "torchrun")
    assert p.returncode == 0, p.stdout + p.stderr
    # A pick by number is named once: it read "exported trial 2 (2)".
    assert f"exported trial {trial['number']} on " in p.stdout, p.stdout
    assert f"trial {trial['number']} ({trial['number']})" not in p.stdout + (out / "launch.sh").read_text()
    script = ("import json, os, sys\n"
              "json.dump({'thp': os.environ.get('THP_MEM_ALLOC_ENABLE'), 'omp': os.environ['OMP_NUM_THREADS']},"
              " open(os.path.join(sys.argv[1], 'rank' + os.environ['RANK'] + '.json'), 'w'))\n")
    ranks = _ranks_of_script(out, script, tmp_path, env={"THP_MEM_ALLOC_ENABLE": "0"})
    assert [r["thp"] for r in ranks] == ["0", "0"]
    assert {r["omp"] for r in ranks} == {str(trial["config"]["threads_per_rank"])}  # the trial's, as before
    assert trial["cpu_huge_pages"] is True  # its sweep ran with them (the default)


THP_SCRIPT = ("import json, os, sys\n"
              "json.dump({'thp': os.environ.get('THP_MEM_ALLOC_ENABLE')},"
              " open(os.path.join(sys.argv[1], 'rank' + os.environ['RANK'] + '.json'), 'w'))\n")


def test_a_sweep_measured_without_huge_pages_exports_a_run_without_them(tmp_path, run_cli):
    """A trial records whether its ranks ran with the allocator's huge pages (the worker reads its
    own environment): `THP_MEM_ALLOC_ENABLE=0 autotune sweep` measured without, so its export's
    launch.sh runs without them too, in a shell that does not set the variable. Before, launch.sh
    turned them back on there: the long run was not the run measured."""
    (tmp_path / "space.yaml").write_text("num_gpus: [2]\nmicro_batch_size: [1]\nprecision: [fp32]\n"
                                         "checkpointing: [none]\n")
    (tmp_path / "spec.yaml").write_text("workload: {kind: gpt, preset: tiny}\nseq_len: 32\nspace: space.yaml\n"
                                        "trial: {warmup_steps: 1, measure_steps: 2, max_measure_steps: 2, "
                                        "timeout_s: 240}\n")
    p = run_cli("sweep", "spec.yaml", "--trials", "1", env={"THP_MEM_ALLOC_ENABLE": "0"})
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(run_cli("report", "--json").stdout)
    assert [t["cpu_huge_pages"] for t in doc["trials"] if t["state"] == "COMPLETE"] == [False]
    out = tmp_path / "exp"
    p = run_cli("export", "--pick", "0", "--out", str(out), "--launcher", "torchrun")
    assert p.returncode == 0, p.stdout + p.stderr
    assert 'export THP_MEM_ALLOC_ENABLE="${THP_MEM_ALLOC_ENABLE:-0}"' in (out / "launch.sh").read_text()
    ranks = _ranks_of_script(out, THP_SCRIPT, tmp_path, env={"THP_MEM_ALLOC_ENABLE": None})
    assert [r["thp"] for r in ranks] == ["0", "0"]


# A user's script under the exported FSDP2 config: it reads the FSDP2 settings as accelerate's
# own plugin parses them from `accelerate launch --config_file`, and shards as they say.
# (accelerate's Accelerator applies FSDP only with a GPU-type backend: on CPU ranks it would
# run plain data parallel, so the script calls fully_shard itself, as a torchrun script does.)
FSDP_SCRIPT = """
import json, os, sys
import torch
import torch.distributed as dist
from accelerate.utils import FullyShardedDataParallelPlugin
from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

dist.init_process_group("gloo")
plugin = FullyShardedDataParallelPlugin()  # from the FSDP_* environment accelerate launch sets
blocks = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(2))
model = torch.nn.Sequential(*blocks)
kw = {"reshard_after_forward": plugin.reshard_after_forward}
if isinstance(plugin.cpu_offload, CPUOffloadPolicy):
    kw["offload_policy"] = plugin.cpu_offload
for b in blocks:
    fully_shard(b, **kw)
fully_shard(model, **kw)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
accum = int(os.environ["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"])
micro = int(os.environ["AUTOTUNE_MICRO_BATCH_SIZE"])
for _ in range(accum):  # one real optimizer step
    model(torch.randn(micro, 16)).pow(2).mean().backward()
opt.step()
w = next(model.parameters())
json.dump({"fsdp_version": plugin.fsdp_version, "reshard_after_forward": plugin.reshard_after_forward,
           "world_size": dist.get_world_size(), "local_rows": w.to_local().shape[0],
           "rows": w.shape[0], "accum": accum, "micro": micro,
           "mixed_precision": os.environ.get("ACCELERATE_MIXED_PRECISION")},
          open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w"))
"""


def test_fsdp2_export_runs_under_accelerate_launch(tmp_path_factory, tmp_path):
    study = fsdp_study(tmp_path_factory)
    doc = json.loads(study.cli("report", "--json").stdout)
    (trial,) = doc["trials"]
    assert trial["status"] == "ok", trial  # a measured FSDP2 trial on 2 CPU ranks
    out = tmp_path / "exp"
    p = study.cli("export", "--pick", "cheapest", "--out", str(out), "--launcher", "accelerate")
    assert p.returncode == 0, p.stdout + p.stderr
    acc_cfg = yaml.safe_load((out / "accelerate_config.yaml").read_text())
    assert acc_cfg["distributed_type"] == "FSDP" and acc_cfg["num_processes"] == 2
    fsdp = acc_cfg["fsdp_config"]
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_reshard_after_forward"] is True
    assert fsdp["fsdp_transformer_layer_cls_to_wrap"] == "Block" and fsdp["fsdp_offload_params"] is False
    assert not (out / "ds_config.json").exists()
    assert "AUTOTUNE_FSDP=full_shard" in (out / "launch.sh").read_text()

    # 1. a user's script under `accelerate launch --config_file`: 2 ranks, FSDP2 as configured
    cfg = trial["config"]
    for r in _ranks_of_script(out, FSDP_SCRIPT, tmp_path):
        assert r["fsdp_version"] == 2 and r["reshard_after_forward"] is True and r["world_size"] == 2
        assert r["local_rows"] * 2 == r["rows"]  # each rank holds half of every weight
        assert r["accum"] == cfg["grad_accum_steps"] and r["micro"] == cfg["micro_batch_size"]
        assert r["mixed_precision"] == "no"  # an fp32 trial
    # 2. --check: autotune's worker re-runs the measured FSDP2 trial under the same launch
    res = tmp_path / "check"
    # ... from a folder holding a user's own trials/ package, which must not shadow the worker's.
    (res / "trials").mkdir(parents=True)
    (res / "trials" / "__init__.py").write_text("raise SystemExit('the user trials/ was imported')\n")
    run = _run_launch_script(out, res, "--check", env={"AUTOTUNE_RESULT": str(res / "result.json")})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    check = json.loads((res / "result.json").read_text())
    assert check["status"] == "ok" and check["observations"]["engine"] == "fsdp2"
    # ... and it ends with one line: the check's figures beside the sweep's (autotune.report.check_line)
    said = run.stderr.strip().splitlines()[-1]
    assert said.startswith(f"launch.sh --check: ok: {check['tokens_per_s']:,.0f} tokens/s, "), said
    assert f"x the sweep's {trial['tokens_per_s']:,.0f}" in said and said.endswith(f"result: {res / 'result.json'}")
    assert check["observations"]["param_elements_local"] * 2 == check["observations"]["param_elements_total"]


def test_the_check_line_says_why_a_check_failed_or_that_no_result_came(tmp_path):
    """`launch.sh --check` ends with one line (autotune.report.check_line): a failed check by its
    status and the first line of its error, a launcher that ended before the worker wrote a
    result by its exit code. (The ok line is checked on a real --check above.)"""
    from autotune.contract import TrialResult, TrialStatus
    from autotune.report.check_line import check_line

    path = tmp_path / "result.json"
    assert check_line(path, 3) == (f"launch.sh --check: no result: the launcher exited 3 before autotune's "
                                   f"worker wrote {path} (its output is above)")
    path.write_text(TrialResult(status=TrialStatus.oom, error_type="OutOfMemoryError",
                                error="CUDA out of memory. Tried to allocate 2.00 GiB\ntraceback").model_dump_json())
    assert check_line(path, 1, 1000.0, 2**30) == (
        f"launch.sh --check: oom: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB; result: {path}")


def test_export_errors_exit_2_and_write_nothing(tmp_path_factory, tmp_path):
    from autotune.errors import UserError
    from autotune.report.build import collect
    from autotune.report.export import plan_export
    from autotune.search.study import open_study

    study = ddp_study(tmp_path_factory)
    st = open_study(study.storage, study.name, create=False)
    doc, trials = collect(st), {t.number: t for t in st.get_trials()}
    for kwargs, msg in ((dict(pick="99"), "no trial 99"),
                        (dict(pick="cheapst"), "not cheapest, fastest or a trial number"),
                        (dict(pick="cheapest", offer="aws-c7i-ondmand"), re.escape("(did you mean 'aws-c7i-ondemand'?)"))):
        with pytest.raises(UserError, match=msg):
            plan_export(doc, trials, **kwargs)
    with pytest.raises(UserError, match="no option meets"):
        plan_export(collect(st, max_usd=1e-9), trials, pick="cheapest")
    # Narrowed to a provider that prices none of them: said so, not "no priced trial yet".
    with pytest.raises(UserError, match="no completed trial is priced on an offer of --provider runpod") as exc:
        plan_export(collect(st, providers=["runpod"]), trials, pick="cheapest")
    assert "leave out --provider" in str(exc.value)
    # A study with no trial yet: what to do, not "a trial number from 0 to -1" or "one of: (none...)".
    empty = {"study": "new", "options": [], "trials": [], "notes": []}
    for kwargs in (dict(pick="0"), dict(pick="cheapest", offer="aws-c7i-ondemand")):
        with pytest.raises(UserError, match="run autotune sweep first") as exc:
            plan_export(empty, {}, **kwargs)
        assert "-1" not in str(exc.value) and ".." not in str(exc.value)
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


# An ordinary accelerate script: it brings its own torch.optim.AdamW and nothing DeepSpeed-
# specific; the exported DeepSpeed config names no optimizer, so accelerate takes this one.
ACCELERATE_DS_SCRIPT = """
import json, os, sys
import torch
import torch.distributed as dist
from accelerate import Accelerator

acc = Accelerator()
model = torch.nn.Linear(8, 8)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
before = [p.detach().clone() for p in model.parameters()]
model, opt = acc.prepare(model, opt)
plugin = acc.state.deepspeed_plugin
ds = plugin.deepspeed_config
micro = ds["train_micro_batch_size_per_gpu"]
for _ in range(ds["gradient_accumulation_steps"]):  # one real optimizer step
    with acc.accumulate(model):
        x = torch.randn(micro, 8, dtype=next(model.parameters()).dtype)
        acc.backward(model(x).float().pow(2).mean())
        opt.step()
        opt.zero_grad()
after = list(model.module.parameters())
json.dump({"distributed_type": str(acc.distributed_type), "zero_stage": plugin.zero_stage,
           "micro": micro, "accum": ds["gradient_accumulation_steps"],
           "train_batch_size": ds["train_batch_size"], "bf16": ds["bf16"]["enabled"],
           "world_size": dist.get_world_size(), "global_steps": model.global_steps,
           "optimizer_class": type(model.optimizer.optimizer).__name__,
           "weights_moved": any(not torch.equal(b, a.detach().to(b.dtype)) for b, a in zip(before, after))},
          open(os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.json"), "w"))
dist.barrier()
dist.destroy_process_group()  # a rank leaving with the group alive can abort the other (gloo)
"""


def _accelerate_launch(config: Path, tmp_path: Path) -> list[dict]:
    """ACCELERATE_DS_SCRIPT under `accelerate launch --config_file config` on its ranks."""
    script = tmp_path / "tiny_acc_ds.py"
    script.write_text(ACCELERATE_DS_SCRIPT)
    results = tmp_path / "res"
    results.mkdir()
    run = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                          str(config), "--main_process_port", str(free_port()),
                          str(script), str(results)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return _ranks(results)


def test_accelerate_zero_export_runs_a_plain_adamw_script_after_the_folder_moves(tmp_path_factory, tmp_path):
    """On main, accelerate refused this config ("When using `deepspeed_config_file`, the
    following accelerate config variables will be ignored") and pointed at the JSON by an
    absolute path; then it refused any script with its own optimizer ("You cannot specify an
    optimizer in the config file and in the code at the same time")."""
    study = zero_study(tmp_path_factory)
    out = tmp_path / "exp"
    p = study.cli("export", "--pick", "cheapest", "--out", str(out), "--launcher", "accelerate")
    assert p.returncode == 0, p.stdout + p.stderr
    moved = tmp_path / "elsewhere" / "launch"
    moved.parent.mkdir()
    out.rename(moved)
    assert "torch.optim.AdamW" in (moved / "bill.md").read_text()  # what the script does, said
    cfg = TrialConfig.model_validate_json((moved / "trial_config.json").read_text())
    ranks = _accelerate_launch(moved / "accelerate_config.yaml", tmp_path)
    assert len(ranks) == cfg.num_gpus == 2
    for r in ranks:
        # accelerate's own rank count reads 1 on CPU (no GPU backend); DeepSpeed's group has both
        assert r["distributed_type"] == "DistributedType.DEEPSPEED" and r["world_size"] == 2
        assert r["zero_stage"] == cfg.zero_stage == 2 and r["bf16"] == (cfg.precision.value == "bf16")
        assert (r["micro"], r["accum"], r["train_batch_size"]) == (
            cfg.micro_batch_size, cfg.grad_accum_steps, cfg.global_batch_samples)
        # the script's own AdamW stepped the weights once
        assert r["optimizer_class"] == "AdamW" and r["global_steps"] == 1 and r["weights_moved"]


def test_accelerate_zero_offload_export_runs_a_plain_adamw_script_on_deepspeeds_cpu_adam(tmp_path):
    """ZeRO-2 with optimizer offload (written from the config, no study): the same script
    runs unchanged; accelerate puts DeepSpeedCPUAdam in its AdamW's place, as bill.md says."""
    from autotune.contract import Launcher, Offload
    from autotune.report.export import ExportPlan, write_export
    from tests.fixtures.trials import tiny

    cfg = tiny(num_gpus=2, zero_stage=2, offload=Offload.optimizer, launcher=Launcher.accelerate)
    plan = ExportPlan(study="s", trial=0, pick="0", cfg=cfg, option=None, trial_row={},
                      catalog_note=None, launcher=Launcher.accelerate)
    write_export(plan, tmp_path / "exp")
    bill = (tmp_path / "exp" / "bill.md").read_text()
    assert "DeepSpeedCPUAdam" in bill and "DummyOptim" in bill
    for r in _accelerate_launch(tmp_path / "exp" / "accelerate_config.yaml", tmp_path):
        assert r["zero_stage"] == 2 and r["world_size"] == 2
        assert r["optimizer_class"] == "DeepSpeedCPUAdam" and r["global_steps"] == 1 and r["weights_moved"]


# A user's Hugging Face Trainer script: TrainingArguments from the command line (the exported
# flags), a tiny GPT-2, two optimizer steps.
# Its start, shared with the other Trainer scripts (tests/test_export_trainer_fsdp.py): the
# arguments from the command line, the model of N_LAYER blocks and its data, and the Trainer run.
TRAINER_RUN = """
import json, os, sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel, HfArgumentParser, Trainer, TrainingArguments

(args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
model = GPT2LMHeadModel(GPT2Config(n_layer=N_LAYER, n_head=2, n_embd=32, vocab_size=128, n_positions=32,
                                   bos_token_id=0, eos_token_id=0))

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        x = torch.randint(0, 128, (16,))
        return {"input_ids": x, "labels": x}

trainer = Trainer(model=model, args=args, train_dataset=Data())
trainer.train()
"""
TRAINER_SCRIPT = TRAINER_RUN.replace("N_LAYER", "4") + """
out = {"world_size": args.world_size, "micro": args.per_device_train_batch_size,
       "accum": args.gradient_accumulation_steps, "bf16": args.bf16,
       "checkpointed_layers": [i for i, b in enumerate(model.transformer.h) if b.gradient_checkpointing],
       "steps": trainer.state.global_step,
       "deepspeed": trainer.is_deepspeed_enabled}
if trainer.is_deepspeed_enabled:
    ds = trainer.accelerator.deepspeed_plugin.deepspeed_config
    out.update(ds_micro=ds["train_micro_batch_size_per_gpu"], ds_accum=ds["gradient_accumulation_steps"],
               ds_stage=ds["zero_optimization"]["stage"], ds_lr=ds["optimizer"]["params"]["lr"])
json.dump(out, open(os.path.join(args.output_dir, f"rank{args.process_index}.json"), "w"))
if torch.distributed.is_initialized():
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()  # a rank leaving with the group alive can abort the other
# Leave without the interpreter's teardown: after a finished Trainer run a rank sometimes
# aborts there ("terminate called without an active exception", SIGABRT, seen once in CI on
# 2026-12-01 after both ranks had written their results); what this test checks is done.
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
"""


def test_hf_trainer_export_runs_a_real_trainer_with_the_trials_batch(tmp_path_factory, tmp_path):
    """`export --for hf-trainer`: Trainer flags through launch.sh (torchrun, 2 CPU ranks, the
    Python that exported it: no PYTHON set and no torch on PATH), and the DeepSpeed JSON with
    "auto" read by a real Trainer."""
    study = ddp_study(tmp_path_factory)
    doc = json.loads(study.cli("report", "--json").stdout)
    trial = next(t for t in doc["trials"] if t["config"]["num_gpus"] == 2)
    out = tmp_path / "hf"
    p = study.cli("export", "--pick", str(trial["number"]), "--out", str(out), "--for", "hf-trainer", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    written = json.loads(p.stdout)
    assert written["for"] == "hf-trainer" and written["launcher"] == "torchrun"
    assert sorted(Path(f).name for f in written["files"]) == [
        "bill.json", "bill.md", "launch.sh", "trainer_flags.txt", "trial_config.json"]
    script = tmp_path / "train_hf.py"
    script.write_text(TRAINER_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env.update(PATH="/usr/bin:/bin", MASTER_PORT=str(free_port()),  # python3 there has no torch
               PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    run = subprocess.run(["bash", str(out / "launch.sh"), str(script), "--output_dir", str(tmp_path / "run"),
                          "--max_steps", "2", "--report_to", "none", "--save_strategy", "no"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ranks = _ranks(tmp_path / "run")
    cfg = trial["config"]
    assert len(ranks) == 2
    for r in ranks:
        assert r["world_size"] == 2 and r["steps"] == 2 and not r["deepspeed"]
        assert r["micro"] * r["accum"] * r["world_size"] == cfg["global_batch_samples"]
        assert (r["micro"], r["accum"]) == (cfg["micro_batch_size"], cfg["grad_accum_steps"])
        assert r["checkpointed_layers"] == []  # the trial ran without checkpointing

    # ZeRO: the JSON's "auto" values filled by a real Trainer from the exported flags. One
    # process: on CPU accelerate runs Trainer's DeepSpeed on one rank only (a GPU runs all).
    zs = zero_study(tmp_path_factory)
    zout = tmp_path / "hfz"
    p = zs.cli("export", "--pick", "cheapest", "--out", str(zout), "--for", "hf-trainer")
    assert p.returncode == 0, p.stdout + p.stderr
    ds = json.loads((zout / "ds_config.json").read_text())
    assert ds["train_micro_batch_size_per_gpu"] == "auto" and ds["optimizer"]["params"]["lr"] == "auto"
    assert "train_batch_size" not in ds and ds["zero_optimization"]["stage"] == 2
    zcfg = TrialConfig.model_validate_json((zout / "trial_config.json").read_text())
    flags = (zout / "trainer_flags.txt").read_text().split()
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1",
                          "--master-port", str(free_port()), str(script), *flags,
                          "--deepspeed", str(zout / "ds_config.json"),
                          "--learning_rate", "0.001", "--output_dir", str(tmp_path / "zrun"),
                          "--max_steps", "2", "--report_to", "none", "--save_strategy", "no"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, DS_ACCELERATOR="cpu", CUDA_VISIBLE_DEVICES=""))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (r,) = _ranks(tmp_path / "zrun")
    assert r["deepspeed"] and r["ds_stage"] == 2 and r["ds_lr"] == 0.001 and r["steps"] == 2
    assert (r["ds_micro"], r["ds_accum"]) == (zcfg.micro_batch_size, zcfg.grad_accum_steps)


def test_a_selective_checkpointing_pick_checkpoints_the_trials_layers_under_a_real_trainer(tmp_path_factory, tmp_path):
    """A trial that checkpointed every 2nd block, exported `--for hf-trainer` with the installed
    transformers (the test extra asks >= 5.16, where Trainer reads `every_n_layers`): a real
    Trainer, through launch.sh, checkpoints the same blocks of its model, 0 and 2 of 4. Before,
    the flags left checkpointing off, and a long run sized on the trial's memory could run out of it."""
    from autotune.contract.hardware import installed_version

    study = selective_study(tmp_path_factory)
    out = tmp_path / "hf"
    p = study.cli("export", "--pick", "cheapest", "--out", str(out), "--for", "hf-trainer")
    assert p.returncode == 0, p.stdout + p.stderr
    cfg = TrialConfig.model_validate_json((out / "trial_config.json").read_text())
    assert (cfg.checkpointing.value, cfg.checkpoint_every, cfg.num_gpus) == ("selective", 2, 1)
    assert f"written for transformers {installed_version('transformers')}," in (out / "bill.md").read_text()
    assert "checkpointing off" not in (out / "launch.sh").read_text()
    script = tmp_path / "train_hf.py"
    script.write_text(TRAINER_SCRIPT)
    run = _run_launch_script(out, tmp_path / "run", script, "--output_dir", tmp_path / "run",
                             "--max_steps", "1", "--report_to", "none", "--save_strategy", "no")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (r,) = _ranks(tmp_path / "run")
    assert r["steps"] == 1 and r["checkpointed_layers"] == [0, 2]


@pytest.mark.parametrize("version, full, selective", [
    (None, ["--gradient_checkpointing"], []),
    ("4.57.6", ["--gradient_checkpointing"], []),
    ("5.15.1", ["--gradient_checkpointing"], []),
    ("5.16.0", ["--gradient_checkpointing"],
     ["--gradient_checkpointing", '--gradient_checkpointing_kwargs={"every_n_layers":3}']),
    ("5.22.2", ["--gradient_checkpointing"],
     ["--gradient_checkpointing", '--gradient_checkpointing_kwargs={"every_n_layers":3}']),
    ("5.23.0", ["--activation_checkpointing"],
     ["--activation_checkpointing", '--activation_checkpointing_kwargs={"every_n_layers":3}']),
    ("6.0.0.dev0", ["--activation_checkpointing"],
     ["--activation_checkpointing", '--activation_checkpointing_kwargs={"every_n_layers":3}']),
])
def test_checkpointing_flags_follow_the_transformers_release_that_reads_them(version, full, selective):
    """Trainer reads `every_n_layers` from 5.16 on and names the flags activation_* from 5.23 on
    (read from the releases' wheels); where selective checkpointing has no flag, the notes say
    so, and name the version to install."""
    from autotune.contract import Checkpointing
    from autotune.report.hf_trainer import checkpointing_flags, trainer_notes

    cfg = TrialConfig(checkpointing=Checkpointing.full)
    assert checkpointing_flags(cfg, version) == full and not trainer_notes(cfg, version)
    sel = TrialConfig(checkpointing=Checkpointing.selective, checkpoint_every=3)
    assert checkpointing_flags(sel, version) == selective
    notes = trainer_notes(sel, version)
    assert bool(notes) == (not selective)
    if notes:
        assert "transformers 5.16" in notes[0] and (version or "not installed") in notes[0]
    assert checkpointing_flags(TrialConfig(checkpointing=Checkpointing.none), version) == []


def test_trainer_flags_parse_as_training_arguments():
    """bf16, checkpointing and batch flags as Trainer's own parser reads them; a TP trial and
    --launcher accelerate are refused with a fix."""
    import warnings

    from transformers import HfArgumentParser, TrainingArguments

    from autotune.contract import Checkpointing, DeviceKind, Launcher, Precision
    from autotune.contract.hardware import installed_version
    from autotune.errors import UserError
    from autotune.report.hf_trainer import check_trainer_export, trainer_flags

    cfg = TrialConfig(num_gpus=2, micro_batch_size=4, grad_accum_steps=3, precision=Precision.bf16,
                      checkpointing=Checkpointing.full, device=DeviceKind.cuda)
    version = installed_version("transformers")
    flags = trainer_flags(cfg, version)
    assert "--use_cpu" not in flags  # a GPU config
    # TrainingArguments checks bf16 against this machine's hardware (a CPU here): --use_cpu
    # added for the parse only. The flags are this release's own names: no deprecation warning.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(
            args=[*flags, "--use_cpu", "--output_dir", "x"])
    assert not [w for w in caught if "checkpointing" in str(w.message)], [str(w.message) for w in caught]
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (4, 3)
    # gradient_checkpointing: the name every release has (from 5.23 it mirrors activation_*)
    assert args.bf16 and not args.fp16 and args.gradient_checkpointing
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(
        args=[*trainer_flags(cfg.model_copy(update={"checkpointing": Checkpointing.selective}), version),
              "--use_cpu", "--output_dir", "x"])
    kwargs = getattr(args, "activation_checkpointing_kwargs", None) or args.gradient_checkpointing_kwargs
    assert args.gradient_checkpointing and kwargs == {"every_n_layers": cfg.checkpoint_every}
    with pytest.raises(UserError, match="tensor parallel"):
        check_trainer_export(cfg.model_copy(update={"tp_degree": 2}), None)
    with pytest.raises(UserError, match="torchrun"):
        check_trainer_export(cfg, Launcher.accelerate)
