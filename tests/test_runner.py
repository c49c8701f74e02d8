"""A sweep measures through the TrialRunner it is given (autotune.run.launch.TrialRunner; the
launcher by default): here a runner that answers from a table, as the benchmark replays do,
drives the real sweep loop (baselines, prescreen, reuse, local moves, scoring) with no launch."""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna

from autotune.contract import GPTWorkload, MemoryReport, TrialConfig, TrialResult, TrialStatus
from autotune.pricing.catalog import DEFAULT_CATALOG
from autotune.pricing.load import load_catalog
from autotune.record import TrialRecord
from autotune.search.study import DIRECTIONS
from autotune.search.sweep import run_sweep
from autotune.spec import BatchPolicy, PlatformSpec, SweepSpec

MiB = 2**20


def _table_runner(calls: list[TrialConfig]):
    def run(cfg: TrialConfig, trial_dir: Path, on_start=None) -> TrialResult:
        calls.append(cfg)
        if on_start is not None:
            on_start(999_999)  # no process: the pgid is recorded, never signalled (never stale)
        tps = 1000.0 * cfg.num_gpus * cfg.micro_batch_size ** 0.5
        peak = (300 + 20 * cfg.micro_batch_size) * MiB
        return TrialResult(status=TrialStatus.ok, tokens_per_s=tps, wall_s=5.0, world_size=cfg.num_gpus,
                           memory=MemoryReport(host_rss_peak_bytes=[peak] * cfg.num_gpus))

    return run


def test_a_sweep_runs_its_runner_and_reads_the_catalog_it_was_given(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("num_gpus: [1, 2]\nmicro_batch_size: [1, 2, 4]\nprecision: [fp32]\n"
                     "checkpointing: [none]\nzero_stage: [0]\n")
    catalog_file = tmp_path / "catalog.yaml"
    shutil.copy(DEFAULT_CATALOG, catalog_file)
    spec = SweepSpec(workload=GPTWorkload(preset="tiny"), seq_len=32, space=str(space),
                     batch=BatchPolicy(global_batch_samples=4),
                     platforms=PlatformSpec(catalog=str(catalog_file)))
    catalog = load_catalog(catalog_file)
    catalog_file.unlink()  # loaded once: nothing in the sweep may read it again
    study = optuna.create_study(directions=DIRECTIONS, sampler=optuna.samplers.RandomSampler(seed=0))
    calls: list[TrialConfig] = []
    summary = run_sweep(spec, study, n_trials=20, runs_dir=tmp_path / "runs",
                        runner=_table_runner(calls), catalog=catalog)
    # The space holds 5 configs at a global batch of 4 (1 rank: micro 1, 2, 4; 2 ranks: micro
    # 1, 2; accumulation derived): each measured once; the leader, ahead on a single run, is
    # measured again back to back with its runner-up (autotune.search.racing); then, nothing
    # left within the noise, the sweep stops by itself.
    assert summary.trials_run == len(calls) == 7
    assert len({(c.num_gpus, c.micro_batch_size) for c in calls}) == 5
    assert "every config this machine can run has been tried" in summary.stop_reason
    records = [TrialRecord.of(t) for t in study.trials]
    assert sum(r.launched for r in records) == 7 and all(r.score for r in records if r.launched)
    assert sum(r.repeat_of is not None for r in records) == 2
    assert all(r.launch.pgid == 999_999 for r in records if r.launched)
