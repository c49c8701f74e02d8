"""`export --for hf-trainer` of an FSDP2 trial: Trainer's `--fsdp` flag and its fsdp_config.json,
read by a real Trainer through the exported launch.sh on 2 CPU ranks. Before, such a trial was
refused ("Trainer's FSDP flags are not written by this export yet").

What runs here: transformers' own argument parsing, accelerate's FSDP plugin built from what
Trainer hands it, and Trainer's training steps. What cannot: the sharding itself under Trainer,
since accelerate applies FSDP only with a GPU-type backend (on CPU ranks Trainer trains plain data
parallel, as bill.md says); the sharding of the exported settings runs in
tests/test_export.py::test_fsdp2_export_runs_under_accelerate_launch.
"""

from __future__ import annotations

import json

import pytest

from autotune.contract import Checkpointing, FSDPMode, Offload
from autotune.contract.hardware import installed_version
from autotune.errors import UserError
from autotune.report.export import ExportPlan, write_export
from autotune.report.hf_trainer import check_trainer_export
from tests.fixtures.trials import tiny
from tests.report_study import fsdp_study
from tests.test_export import TRAINER_RUN, _ranks, _run_launch_script

# A user's Trainer script: TrainingArguments from the command line (the exported flags), two
# optimizer steps of a tiny GPT-2, and the FSDP plugin as Trainer builds it from those arguments.
SCRIPT = TRAINER_RUN.replace("N_LAYER", "2") + """
from accelerate.utils import FullyShardedDataParallelPlugin
from torch.distributed.fsdp import CPUOffloadPolicy

plugin = FullyShardedDataParallelPlugin(**args.fsdp_plugin_args)  # Trainer's own construction
json.dump({"fsdp_version": plugin.fsdp_version, "reshard_after_forward": plugin.reshard_after_forward,
           "offload_params": isinstance(plugin.cpu_offload, CPUOffloadPolicy),
           "wrap": plugin.transformer_cls_names_to_wrap,
           "fsdp_checkpointing": bool(plugin.activation_checkpointing),
           "trainer_checkpointing": bool(args.gradient_checkpointing),
           "world_size": args.world_size, "micro": args.per_device_train_batch_size,
           "accum": args.gradient_accumulation_steps, "steps": trainer.state.global_step},
          open(os.path.join(args.output_dir, f"rank{args.process_index}.json"), "w"))
if torch.distributed.is_initialized():
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
"""


def _trainer_ranks(out, tmp_path) -> list[dict]:
    script = tmp_path / "train_hf.py"
    script.write_text(SCRIPT)
    run = _run_launch_script(out, tmp_path / "run", script, "--output_dir", tmp_path / "run",
                             "--max_steps", "2", "--report_to", "none", "--save_strategy", "no")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ranks = _ranks(tmp_path / "run")
    assert len(ranks) == 2
    return ranks


def test_an_fsdp2_pick_exports_for_a_real_trainer(tmp_path_factory, tmp_path):
    study = fsdp_study(tmp_path_factory)
    out = tmp_path / "hf"
    p = study.cli("export", "--pick", "cheapest", "--out", str(out), "--for", "hf-trainer", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(json.loads(p.stdout)["files"]) == sorted(str(out / n) for n in [
        "bill.json", "bill.md", "fsdp_config.json", "launch.sh", "trainer_flags.txt", "trial_config.json"])
    assert "--fsdp=full_shard auto_wrap" in (out / "trainer_flags.txt").read_text().splitlines()
    assert "--fsdp_config fsdp_config.json" in (out / "bill.md").read_text()
    # The study's built-in GPT names its `Block`; Trainer's model wraps its own layer class.
    assert "fsdp_transformer_layer_cls_to_wrap" not in json.loads((out / "fsdp_config.json").read_text())
    cfg = json.loads((out / "trial_config.json").read_text())
    for r in _trainer_ranks(out, tmp_path):
        assert r["fsdp_version"] == 2 and r["reshard_after_forward"] is True and not r["offload_params"]
        assert r["world_size"] == 2 and r["steps"] == 2 and r["wrap"] is None  # the model's own
        assert (r["micro"], r["accum"]) == (cfg["micro_batch_size"], cfg["grad_accum_steps"])
        assert not r["fsdp_checkpointing"] and not r["trainer_checkpointing"]  # the trial ran without


def test_shard_grad_op_offload_and_full_checkpointing_reach_trainers_fsdp_plugin(tmp_path):
    # Every block checkpointed: by FSDP's own wrapper, not Trainer's flag (which, under FSDP,
    # all-gathers again in backward); parameters offloaded: `offload`; shard_grad_op: kept
    # gathered after forward.
    cfg = tiny(num_gpus=2, grad_accum_steps=1, fsdp=FSDPMode.shard_grad_op, offload=Offload.optimizer_params,
               checkpointing=Checkpointing.full)
    version = installed_version("transformers")
    plan = ExportPlan(study="s", trial=0, pick="0", cfg=cfg, option=None, trial_row={}, catalog_note=None,
                      launcher=check_trainer_export(cfg, None, version), target="hf-trainer",
                      transformers_version=version)
    write_export(plan, tmp_path / "hf")
    flags = (tmp_path / "hf" / "trainer_flags.txt").read_text().splitlines()
    assert "--fsdp=shard_grad_op auto_wrap offload" in flags
    assert not [f for f in flags if "checkpointing" in f]
    for r in _trainer_ranks(tmp_path / "hf", tmp_path):
        assert r["fsdp_version"] == 2 and r["reshard_after_forward"] is False and r["offload_params"]
        assert r["fsdp_checkpointing"] and not r["trainer_checkpointing"] and r["steps"] == 2


@pytest.mark.parametrize("version, refused", [("4.57.6", True), ("5.0.0", False), (None, False)])
def test_fsdp2_for_trainer_needs_a_transformers_that_reads_its_version(version, refused):
    # 4.x Trainer starts FSDP1 whatever fsdp_config says: refused there, with the way out.
    cfg = tiny(num_gpus=2, fsdp=FSDPMode.full_shard)
    if refused:
        with pytest.raises(UserError, match="transformers 5.0 on, and transformers 4.57.6 is installed"):
            check_trainer_export(cfg, None, version)
    else:
        check_trainer_export(cfg, None, version)
