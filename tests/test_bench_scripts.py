"""The replay logic of scripts/bench_search.py on a small synthetic ground truth (pure Python,
no trials launched), and the statistics helpers of scripts/bench_common.py.

The ground truth here is synthetic on purpose: the replay is a pure function of the table,
and the real table is measured by the benchmark script itself (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

import bench_common  # noqa: E402
import bench_search  # noqa: E402
from autotune.contract import MemoryReport, TrialResult, TrialStatus  # noqa: E402

MiB = 2**20


def _args(tmp_path: Path, space: Path) -> argparse.Namespace:
    return argparse.Namespace(preset="tiny", seq_len=64, global_batch=8, space=space, warmup_steps=1,
                              measure_steps=2, max_measure_steps=2, timeout_s=60.0,
                              cache=tmp_path / "gt.json", remeasure=False, replay_only=True)


@pytest.fixture()
def world(tmp_path):
    """A 2-rank CPU space (12 configs) and a synthetic table: throughput grows with the
    micro-batch and halves under checkpointing; peak RSS = 300 MiB of runtime + a part that
    grows with the micro-batch (a quarter of it under checkpointing)."""
    from autotune.search.machine import MachineSpace

    space = tmp_path / "space.yaml"
    space.write_text("num_gpus: [1, 2]\nmicro_batch_size: [1, 2, 4]\nprecision: [fp32]\n"
                     "checkpointing: [none, full]\nzero_stage: [0]\n")
    args = _args(tmp_path, space)
    spec = bench_search.make_spec(args)
    ms = MachineSpace.for_spec(spec)
    configs = bench_search.enumerate_space(ms.restricted, spec.batch.global_batch_samples)
    entries = {}
    for _, values in configs:
        cfg = bench_search.trial_config(values, spec, ms, seed=0)
        mb, n = cfg.micro_batch_size, cfg.num_gpus
        ckpt = cfg.checkpointing.value == "full"
        tps = 1000.0 * n ** 0.8 * mb ** 0.5 / (2.0 if ckpt else 1.0)
        peak = (100 + 40 * mb // (4 if ckpt else 1)) * MiB
        result = TrialResult(status=TrialStatus.ok, tokens_per_s=tps, wall_s=10.0 + mb,
                             phase_s={"measure": 2.0},
                             memory=MemoryReport(host_rss_peak_bytes=[peak + 300 * MiB] * n,
                                                 host_rss_baseline_bytes=[300 * MiB] * n))
        entries[bench_search.config_key(values)] = {"config": cfg.model_dump(mode="json"),
                                                    "result": result.model_dump(mode="json")}
    doc = {"identity": {}, "entries": entries}
    return args, spec, ms, configs, doc


def test_enumeration_matches_what_suggest_can_return(world):
    _, _, _, configs, _ = world
    keys = [bench_search.config_key(v) for _, v in configs]
    # 1 rank: micro 1, 2, 4 (accumulation 8, 4, 2); 2 ranks: micro 1, 2, 4 (4, 2, 1); x 2 ckpt
    assert len(keys) == len(set(keys)) == 12
    assert {v["grad_accum_steps"] * v["micro_batch_size"] * v["num_gpus"] for _, v in configs} == {8}


def test_emulated_limit_marks_oom_and_grid_reach_is_its_position(world):
    _, spec, _, configs, doc = world
    limit = 500 * MiB  # micro 4 without checkpointing peaks at 560 MiB: OOM; the rest fit
    table = bench_search.build_table(doc, configs, spec, limit)
    ooms = {k for k, e in table.items() if e.oom}
    assert ooms == {k for k in table if "-mb4-" in k and "ckpt:none" in k}
    feasible = [e for e in table.values() if e.feasible]
    best_usd = min(e.usd for e in feasible)
    order = [bench_search.config_key(v) for _, v in configs]
    run = bench_search.replay_order(table, order)
    n, secs = bench_search.reach(run, table, "usd", best_usd)
    first = next(i for i, k in enumerate(order)
                 if table[k].feasible and table[k].usd <= best_usd * 1.03)
    assert n == first + 1
    assert secs == pytest.approx(sum(table[k].trial_s for k in order[: first + 1]))
    # An OOM trial costs its wall time without the measured steps.
    oom = next(iter(ooms))
    assert table[oom].trial_s == pytest.approx(table[oom].result.wall_s - 2.0)


def test_autotune_replays_run_the_tools_loop_and_reach_the_optimum(world):
    _, spec, ms, configs, doc = world
    from autotune.search.study import make_sampler

    limit = 500 * MiB
    table = bench_search.build_table(doc, configs, spec, limit)
    feasible = [e for e in table.values() if e.feasible]
    best_usd, best_hours = min(e.usd for e in feasible), min(e.hours for e in feasible)
    for mode in ("sweep", "sweep_no_prescreen", "objective"):
        run = bench_search.replay_autotune(table, spec, ms, make_sampler(0), 60, best_usd, best_hours,
                                           mode, limit)
        assert bench_search.reach(run, table, "usd", best_usd)[0] < math.inf, mode
        assert bench_search.reach(run, table, "hours", best_hours)[0] < math.inf, mode
        # The tool reuses a repeated config's measurement: no config is launched twice.
        keys = [s.key for s in run.steps]
        assert len(keys) == len(set(keys)), mode
        # It stopped once both optima were found: the last launch reached one of them.
        last = table[keys[-1]]
        assert last.feasible and (last.usd <= best_usd * 1.03 or last.hours <= best_hours * 1.03)


def test_deepspeed_style_binary_search_finds_largest_fitting_micro(world):
    _, spec, ms, configs, doc = world
    table = bench_search.build_table(doc, configs, spec, 500 * MiB)
    run = bench_search.replay_deepspeed_style(table, ms.restricted, spec, 0, "hours")
    launched = [s.key for s in run.steps]
    assert len(launched) == len(set(launched))  # each config measured once
    # Without checkpointing micro 4 does not fit: micro 2 is the largest that does, found by
    # probing 1 (the smallest must fit), then 2 (the middle: fits), then 4 (OOM).
    none_1rank = [k for k in launched if k.startswith("g1-") and "ckpt:none" in k]
    assert [k.split("-")[2] for k in none_1rank] == ["mb1", "mb2", "mb4"]


def test_percentile_and_spearman():
    assert bench_common.percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert bench_common.percentile([1, 2, math.inf], 90) == math.inf
    assert bench_common.percentile([5.0], 90) == 5.0
    assert bench_common.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert bench_common.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties share their mean rank: ranks (1.5, 1.5, 3) vs (1, 2, 3) -> r = 0.866
    assert bench_common.spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(math.sqrt(3) / 2)
    assert bench_common.spearman([1, 1, 1], [1, 2, 3]) is None


def test_several_runs_truth_is_the_median_and_a_replay_observes_one(world):
    """With runs of different speed per config, the strategies are judged on the median run
    while each replay's trial sees one run, drawn by its seed (the same one every time)."""
    _, spec, _, configs, doc = world
    for entry in doc["entries"].values():
        one = TrialResult.model_validate(entry.pop("result"))
        runs = []
        for factor in (0.8, 1.0, 1.3):  # a slow, a typical and a fast run of the same config
            r = one.model_copy(deep=True)
            r.tokens_per_s = one.tokens_per_s * factor
            runs.append(r.model_dump(mode="json"))
        entry["results"] = runs
    table = bench_search.build_table(doc, configs, spec, None)
    e = next(iter(table.values()))
    assert e.tokens_per_s == pytest.approx(e.runs[1].result.tokens_per_s)  # the median run
    assert e.usd == pytest.approx(e.runs[1].usd) and e.spread == pytest.approx(0.5)
    seen = {bench_search.Entry.observed(e, s).result.tokens_per_s for s in range(40)}
    assert len(seen) == 3  # seeds draw different runs ...
    assert all(e.observed(s) is e.observed(s) for s in range(5))  # ... deterministically
