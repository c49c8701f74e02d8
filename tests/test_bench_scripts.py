"""The search benchmark's logic on a small synthetic ground truth (pure Python, no trials
launched): scripts/bench_truth.py (the table, held-out truth), scripts/bench_replay.py (the
strategies, the shipped sweep through its TrialRunner) and the statistics helpers of
scripts/bench_common.py.

The ground truth here is synthetic on purpose: the replay is a pure function of the table,
and the real table is measured by the benchmark scripts themselves (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

import bench_common  # noqa: E402
import bench_limits  # noqa: E402
import bench_replay  # noqa: E402
import bench_truth  # noqa: E402

from autotune.contract import MemoryReport, TrialResult, TrialStatus  # noqa: E402

MiB = 2**20


def _args(tmp_path: Path, space: Path) -> argparse.Namespace:
    return argparse.Namespace(preset="tiny", seq_len=64, global_batch=8, space=space, warmup_steps=1,
                              measure_steps=2, max_measure_steps=2, min_measure_s=0.0, timeout_s=60.0,
                              cache=tmp_path / "gt.json", remeasure=False, replay_only=True,
                              runner="launcher", repeats=1)


def _space(tmp_path, space_text: str):
    """(bench args, spec, this machine's space, its configs) for a space file of `space_text`."""
    from autotune.search.machine import MachineSpace

    space = tmp_path / "space.yaml"
    space.write_text(space_text)
    args = _args(tmp_path, space)
    spec = bench_truth.make_spec(args)
    ms = MachineSpace.for_spec(spec)
    return args, spec, ms, bench_truth.enumerate_space(ms.restricted, spec.batch.global_batch_samples)


@pytest.fixture()
def world(tmp_path):
    """A 2-rank CPU space (12 configs) and a synthetic table: throughput grows with the
    micro-batch and halves under checkpointing; peak RSS = 300 MiB of runtime + a part that
    grows with the micro-batch (a quarter of it under checkpointing). Each config has 4 runs:
    its true speed x 0.9, 1.0, 1.0, 1.1, each with a wall time of its own (10 s + the
    micro-batch + run index / 8), so a replay's steps show which run they observed."""
    args, spec, ms, configs = _space(tmp_path, "num_gpus: [1, 2]\nmicro_batch_size: [1, 2, 4]\n"
                                     "precision: [fp32]\ncheckpointing: [none, full]\nzero_stage: [0]\n")
    entries = {}
    for _, values in configs:
        cfg = bench_truth.trial_config(values, spec, ms, seed=0)
        mb, n = cfg.micro_batch_size, cfg.num_gpus
        ckpt = cfg.checkpointing.value == "full"
        tps = 1000.0 * n ** 0.8 * mb ** 0.5 / (2.0 if ckpt else 1.0)
        peak = (100 + 40 * mb // (4 if ckpt else 1)) * MiB
        runs = [TrialResult(status=TrialStatus.ok, tokens_per_s=tps * f, wall_s=10.0 + mb + i / 8,
                            phase_s={"measure": 2.0},
                            memory=MemoryReport(host_rss_peak_bytes=[peak + 300 * MiB] * n,
                                                host_rss_baseline_bytes=[300 * MiB] * n))
                for i, f in enumerate((0.9, 1.0, 1.0, 1.1))]
        entries[bench_truth.config_key(values)] = {
            "config": cfg.model_dump(mode="json"), "results": [r.model_dump(mode="json") for r in runs],
            "runs_meta": [{"round": i} for i in range(4)]}
    doc = {"identity": {}, "entries": entries}
    return args, spec, ms, configs, doc


def test_enumeration_matches_what_suggest_can_return(world):
    _, _, _, configs, _ = world
    keys = [bench_truth.config_key(v) for _, v in configs]
    # 1 rank: micro 1, 2, 4 (accumulation 8, 4, 2); 2 ranks: micro 1, 2, 4 (4, 2, 1); x 2 ckpt
    assert len(keys) == len(set(keys)) == 12
    assert {v["grad_accum_steps"] * v["micro_batch_size"] * v["num_gpus"] for _, v in configs} == {8}


def test_emulated_limit_marks_oom_and_grid_picks_the_best_it_saw(world):
    _, spec, _, configs, doc = world
    limit = 500 * MiB  # micro 4 without checkpointing peaks at 560 MiB: OOM; the rest fit
    table = bench_truth.build_table(doc, configs, spec, limit)
    ooms = {k for k, e in table.items() if e.oom}
    assert ooms == {k for k in table if "-mb4-" in k and "ckpt:none" in k}
    order = sorted(table)
    rep = bench_replay.replay_grid(table, order, seed=0, n_trials=5, holdout=True)
    assert [s.key for s in rep.steps] == order[:5]
    seen = {k: table[k].observed(0, 0, True) for k in order[:5]}
    assert rep.pick_usd == min((k for k in seen if seen[k].feasible), key=lambda k: seen[k].usd)
    # An OOM trial costs its wall time without the measured steps.
    oom = next(iter(ooms))
    assert table[oom].runs[0].trial_s == pytest.approx(table[oom].runs[0].result.wall_s - 2.0)


def test_held_out_truth_is_never_observed_and_repeats_see_other_runs(world):
    _, spec, _, configs, doc = world
    table = bench_truth.build_table(doc, configs, spec, None)
    e = next(iter(table.values()))
    for seed in range(10):
        obs, held = e.split(seed, holdout=True)
        assert len(obs) == 2 and len(held) == 2 and not {id(m) for m in obs} & {id(m) for m in held}
        # The nth launch sees the nth observable run, cycling when they are used up.
        assert [e.observed(seed, n, True) for n in range(3)] == [obs[0], obs[1], obs[0]]
    assert len({tuple(id(m) for m in e.split(s, True)[0]) for s in range(20)}) > 1  # seeds differ
    truth = bench_truth.truth_for(table, 3, holdout=True)
    _, held = e.split(3, True)
    assert truth.usd[e.key] == pytest.approx(sum(m.usd for m in held) / 2)  # median of two
    # The optimum a pick is judged against is the best held-out score, and `within` tells a
    # pick from a worse one by the tolerance: the dearest config is within its own gap of it
    # and not within half of that.
    assert truth.best_usd == min(truth.usd.values()) and truth.best_hours == min(truth.hours.values())
    dearest = max(truth.usd, key=truth.usd.get)
    gap = truth.usd[dearest] / truth.best_usd - 1
    assert gap > 0
    assert truth.within(dearest, "usd", gap * 1.001) and not truth.within(dearest, "usd", gap / 2)


def test_the_shipped_sweep_replays_through_its_runner_and_the_report_picks(world):
    from autotune.search.study import make_sampler

    _, spec, ms, configs, doc = world
    table = bench_truth.build_table(doc, configs, spec, None)
    rep = bench_replay.replay_sweep(table, spec, make_sampler(0, worker=0), 0, 8, None, True)
    assert rep.trials == 8  # repeats count against --trials
    truth = bench_truth.truth_for(table, 0, True)
    assert truth.within(rep.pick_usd, "usd", 0.03) and truth.within(rep.pick_hours, "hours", 0.03)
    # A repeat of a config saw another observable run than its first launch: each launch's
    # step costs the wall time of the run it observed, and the runs' wall times differ.
    launches: dict[str, list[float]] = {}
    for s in rep.steps:
        assert s.repeat == (s.key in launches)
        launches.setdefault(s.key, []).append(s.trial_s)
    repeated = {k: seen for k, seen in launches.items() if len(seen) > 1}
    assert repeated
    for k, seen in repeated.items():
        obs, _ = table[k].split(0, True)
        assert len({m.trial_s for m in obs}) == len(obs) == 2  # the fixture's runs tell apart
        assert seen == [obs[n % 2].trial_s for n in range(len(seen))]  # the nth observable run
        assert seen[1] != seen[0]


def test_the_bound_re_measures_only_the_two_best_configs_in_turn(world):
    _, spec, _, configs, doc = world
    table = bench_truth.build_table(doc, configs, spec, None)
    truth = bench_truth.truth_for(table, 1, True)
    best_two = sorted(truth.usd, key=truth.usd.get)[:2]
    rep = bench_replay.replay_oracle(table, truth, seed=1, n_trials=5, holdout=True)
    assert [s.key for s in rep.steps] == [best_two[0], best_two[1]] * 2 + [best_two[0]]
    assert [s.repeat for s in rep.steps] == [False, False, True, True, True]
    # Its pick is the better median of what it observed of those two.
    med = {k: sorted(table[k].observed(1, n, True).usd for n in range(3 if k == best_two[0] else 2))
           for k in best_two}
    medians = {k: v[len(v) // 2] if len(v) % 2 else (v[0] + v[1]) / 2 for k, v in med.items()}
    assert rep.pick_usd == min(best_two, key=medians.get)


def test_deepspeed_style_binary_search_finds_largest_fitting_micro(world):
    _, spec, ms, configs, doc = world
    table = bench_truth.build_table(doc, configs, spec, 500 * MiB)
    rep = bench_replay.replay_deepspeed_style(table, 0, "hours", holdout=False)
    launched = [s.key for s in rep.steps]
    assert len(launched) == len(set(launched))  # each config measured once
    # Without checkpointing micro 4 does not fit: micro 2 is the largest that does, found by
    # probing 1 (the smallest must fit), then 2 (the middle: fits), then 4 (OOM).
    none_1rank = [k for k in launched if k.startswith("g1-") and "ckpt:none" in k]
    assert [k.split("-")[2] for k in none_1rank] == ["mb1", "mb2", "mb4"]
    assert rep.pick_hours is not None and not table[rep.pick_hours].oom


def test_the_heuristic_at_the_sweeps_budget_stops_there_and_picks_what_it_saw(world):
    _, spec, ms, configs, doc = world
    table = bench_truth.build_table(doc, configs, spec, 500 * MiB)
    full = bench_replay.replay_deepspeed_style(table, 0, "usd", holdout=False)
    capped = bench_replay.replay_deepspeed_style(table, 0, "usd", holdout=False, max_trials=3)
    assert len(full.steps) > 3
    assert [s.key for s in capped.steps] == [s.key for s in full.steps[:3]]  # the same scan, cut
    seen = {s.key for s in capped.steps}
    fitting = [k for k in seen if not table[k].oom]
    assert capped.pick_usd in seen if fitting else capped.pick_usd is None


def test_a_cache_of_the_first_benchmark_reads_and_other_machines_are_refused(tmp_path, monkeypatch):
    from autotune.run.hardware import local_hardware

    hw = local_hardware()
    args = _args(tmp_path, tmp_path / "space.yaml")
    # Measured before trials had huge pages and a window floor: read by trials without them.
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")
    ident = bench_truth.cache_identity(args, hw)
    old = {"identity": {"version": 1, "hardware_key": hw.kind_key(), "cpu_count": hw.cpu_count,
                        "device_count": hw.device_count, "preset": "tiny", "seq_len": 64,
                        "global_batch": 8, "warmup_steps": 1, "measure_steps": 2,
                        "max_measure_steps": 2},
           "entries": {"k": {"config": {}, "result": {"status": "ok"}}}}
    path = tmp_path / "gt.json"
    path.write_text(json.dumps(old))
    doc = bench_truth.load_cache(path, ident, log=lambda *a: None)
    assert doc["entries"]["k"]["results"] == [{"status": "ok"}]  # version 1: one run
    # Trials with huge pages (the default now) measure otherwise: not topped up with them.
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE")
    assert bench_truth.load_cache(path, bench_truth.cache_identity(args, hw), log=lambda *a: None)["entries"] == {}
    old["identity"]["cpu_count"] = hw.cpu_count + 62
    path.write_text(json.dumps(old))
    assert bench_truth.load_cache(path, ident, log=lambda *a: None)["entries"] == {}


def test_percentile_and_spearman():
    assert bench_common.percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert bench_common.percentile([1, 2, math.inf], 90) == math.inf
    assert bench_common.percentile([5.0], 90) == 5.0
    assert bench_common.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert bench_common.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties share their mean rank: ranks (1.5, 1.5, 3) vs (1, 2, 3) -> r = 0.866
    assert bench_common.spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(math.sqrt(3) / 2)
    assert bench_common.spearman([1, 1, 1], [1, 2, 3]) is None


def test_a_space_measured_in_part_is_reported_as_such_not_replayed(tmp_path, monkeypatch):
    """A ground truth that lacks configs of its space is not replayed (the optimum may be among
    the missing): the section and the summary say how far the measurement got and how to finish."""
    import bench_search

    real = json.loads((bench_search.BENCHES["ds"]["cache"]).read_text())
    first = next(iter(real["entries"]))
    part = tmp_path / "truth_part.json"
    part.write_text(json.dumps({**real, "entries": {first: real["entries"][first]}}))
    monkeypatch.setitem(bench_search.BENCHES, "ds", {**bench_search.BENCHES["ds"], "cache": part})
    out_json, out_md = tmp_path / "s.json", tmp_path / "s.md"
    assert bench_search.main(["--bench", "ds", "--json-out", str(out_json), "--md-out", str(out_md)]) == 0
    data = json.loads(out_json.read_text())
    assert data["n_configs"] == 48 and "1 of 48 configs measured" in data["incomplete"]
    assert "replays not run" in out_md.read_text() and "--bench ds --measure" in out_md.read_text()
    head = bench_search.summary_section([out_json])
    assert "Not replayed: `ds` (48 configs)" in head and "Not run yet." in head


@pytest.mark.e2e
def test_the_ground_truth_is_measured_with_the_sweeps_worker_pool(tmp_path):
    """`--runner pool` measures with real pooled trials (what `autotune sweep` runs), in rounds,
    records the runner of every run, and leaves no pool behind."""
    from autotune.search.machine import MachineSpace

    space = tmp_path / "space.yaml"
    space.write_text("num_gpus: [1]\nmicro_batch_size: [1, 2]\nprecision: [fp32]\n")
    args = _args(tmp_path, space)
    args.runner, args.repeats, args.replay_only, args.global_batch = "pool", 2, False, None
    spec = bench_truth.make_spec(args)
    ms = MachineSpace.for_spec(spec)
    configs = bench_truth.enumerate_space(ms.restricted, None)
    doc = bench_truth.measure(configs, spec, ms, args, log=lambda *a, **k: None)
    assert len(doc["entries"]) == 2
    for entry in doc["entries"].values():
        assert [r["status"] for r in entry["results"]] == ["ok", "ok"]
        assert [m["round"] for m in entry["runs_meta"]] == [0, 1]
        assert {m["runner"] for m in entry["runs_meta"]} == {"pool"}
    notes = [n for e in doc["entries"].values() for r in e["results"] for n in r["notes"]]
    assert sum("started its pool" in n for n in notes) == 1  # one pool ran all four
    cached = json.loads(args.cache.read_text())
    assert cached["identity"]["runner"] == "pool"
    import psutil

    left = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
    assert not [c for c in left if "trials.pool" in c], left  # the pool ended with the measurement


def test_runs_needed_to_separate_two_configs_follows_the_normal_rule():
    """n = 2 (z sd / gap)^2 with z the 90% one-sided quantile: the DeepSpeed-style space's
    noise (sd 0.057) against a 4% gap needs 7 runs of each (6.9); double the gap, a quarter."""
    import bench_search

    assert bench_search.runs_to_separate(0.057, math.log(1.04)) == 7
    assert bench_search.runs_to_separate(0.057, 2 * math.log(1.04)) == 2
    assert bench_search.runs_to_separate(0.01, 0.5) == 1
    assert bench_search.runs_to_separate(None, 0.1) is None and bench_search.runs_to_separate(0.05, None) is None


def test_noise_levers_tell_a_run_level_from_step_jitter():
    """Synthetic runs: each run holds its own level (steps differ little within a run), so the
    sd between runs does not shrink with the window, and huge pages change the level only."""
    import bench_noise_levers as lev

    runs = []
    for i, level in enumerate([0.150, 0.160, 0.170, 0.155, 0.165]):
        for thp, scale in (("off", 1.0), ("on", 0.8)):
            steps = [level * scale * (1 + 0.002 * ((j % 3) - 1)) for j in range(20)]
            runs.append({"round": i, "thp": thp, "key": "mb8", "status": "ok",
                         "tokens_per_s": 4096 / statistics.median(steps), "step_times_s": steps})
    runs.append({"round": 9, "thp": "off", "key": "mb8", "status": "oom", "tokens_per_s": None,
                 "step_times_s": []})  # failed runs are left out
    rows = {r["thp"]: r for r in lev.analyse({"runs": runs})}
    assert rows["off"]["runs"] == 5 and rows["off"]["steps"] == 20
    assert rows["off"]["sd_between_all"] == pytest.approx(rows["off"]["sd_between_first"], rel=0.1)
    assert rows["off"]["sd_within_median"] < 0.2 * rows["off"]["sd_between_first"]
    assert rows["on"]["tokens_per_s_median"] / rows["off"]["tokens_per_s_median"] == pytest.approx(1.25)
    # What a default trial measures of these 0.12-0.17 s steps: until 2 s have passed.
    assert lev.shipped_steps([0.15] * 20) == 14 and lev.shipped_steps([0.5] * 20) == 5
    assert lev.shipped_steps([0.01] * 30) == 15  # the cap
    assert rows["on"]["sd_between_shipped"] == pytest.approx(rows["on"]["sd_between_first"], rel=0.1)
    text = lev.reading(list(rows.values()))
    assert "runs settle at levels of their own" in text and "1.25x" in text
    assert "What a trial measures now (at least 2 s of steps, up to 15" in text


def test_noise_levers_refuse_a_raw_file_that_is_not_theirs(tmp_path, capsys):
    import bench_noise_levers as lev

    other = tmp_path / "other.json"
    other.write_text('{"entries": {}}')
    assert lev.main(["--raw", str(other), "--rounds", "1"]) == 2
    assert other.read_text() == '{"entries": {}}'  # neither topped up nor overwritten
    assert "not a record of this script's runs" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# Memory limits, the baseline rows and the heuristic's FSDP2 stages (issue 28)
# ---------------------------------------------------------------------------------------


def _table(tmp_path, space_text: str, tps_of, peak_mib_of, limit_mib: float | None):
    """A synthetic table over `space_text` (2 runs per config: x0.95 and x1.05 of its speed)."""
    args, spec, ms, configs = _space(tmp_path, space_text)
    entries = {}
    for _, values in configs:
        cfg = bench_truth.trial_config(values, spec, ms, seed=0)
        peak = int(peak_mib_of(cfg) * MiB)
        runs = [TrialResult(status=TrialStatus.ok, tokens_per_s=tps_of(cfg) * f, wall_s=5.0, phase_s={"measure": 1.0},
                            memory=MemoryReport(host_rss_peak_bytes=[peak] * cfg.num_gpus,
                                                host_rss_baseline_bytes=[100 * MiB] * cfg.num_gpus))
                for f in (0.95, 1.05)]
        entries[bench_truth.config_key(values)] = {
            "config": cfg.model_dump(mode="json"), "results": [r.model_dump(mode="json") for r in runs],
            "runs_meta": [{"round": i} for i in range(2)]}
    doc = {"identity": {}, "entries": entries}
    limit = None if limit_mib is None else int(limit_mib * MiB)
    return bench_truth.build_table(doc, configs, spec, limit), spec, ms, configs


FSDP_SPACE = ("num_gpus: [2]\nmicro_batch_size: [1, 2, 4]\nprecision: [fp32]\nzero_stage: [0, 1]\n"
              "fsdp: [none, full_shard]\n")


def test_the_heuristic_scans_fsdp2_as_a_stage_after_the_zero_stages_fsdp_off_first(tmp_path):
    """FSDP2's configs used to share a ZeRO stage's slot with its FSDP-off ones (the last one
    read won), so the heuristic could never try the FSDP-off optimum."""
    import bench_replay

    table, *_ = _table(tmp_path, FSDP_SPACE,
                       tps_of=lambda c: 1000.0 * c.micro_batch_size * (0.5 if c.fsdp.value != "none" else 1.0),
                       peak_mib_of=lambda c: 200, limit_mib=None)
    assert bench_replay.sharding_stages({(1, "none"), (0, "full_shard"), (0, "none")}) == [
        (0, "none"), (1, "none"), (0, "full_shard")]
    rep = bench_replay.replay_deepspeed_style(table, 0, "usd", holdout=False)
    launched = [s.key for s in rep.steps]
    assert "fsdp" not in launched[0]  # ZeRO 0 with FSDP2 off is scanned first
    assert rep.pick_usd == "g2-tp1-mb4-acc1-fp32-ckpt:none-z0-off:none"
    # FSDP2 off at ZeRO 0 runs out of memory at micro-batch 2 and up: FSDP2 is reached, as a stage.
    table, *_ = _table(tmp_path, FSDP_SPACE,
                       tps_of=lambda c: 1000.0 * c.micro_batch_size * (0.9 if c.fsdp.value != "none" else 1.0),
                       peak_mib_of=lambda c: 150 + 100 * c.micro_batch_size * (0.25 if c.fsdp.value != "none"
                                                                               or c.zero_stage else 1.0),
                       limit_mib=300)
    rep = bench_replay.replay_deepspeed_style(table, 0, "usd", holdout=False)
    assert any("fsdp:full_shard" in s.key for s in rep.steps)


def test_baseline_rows_and_where_the_optimum_lies_under_a_limit(tmp_path):
    """The rows "first baseline only" and "baselines only" use the shipped baseline order; a
    limit at a quantile of the peaks; the optimum's place among the baselines; and a space
    where nothing fits is reported as such, where no pick is the right answer."""
    import bench_limits
    import bench_replay
    import bench_search

    space = "num_gpus: [2]\nmicro_batch_size: [1, 2, 4]\nprecision: [fp32]\ncheckpointing: [none, full]\n"
    def tps(c):
        return 1000.0 * c.micro_batch_size ** 0.5 / (2.5 if c.checkpointing.value == "full" else 1.0)

    def peak(c):
        return 100 + 50 * c.micro_batch_size / (4 if c.checkpointing.value == "full" else 1)

    table, spec, ms, configs = _table(tmp_path, space, tps, peak, limit_mib=190)  # mb2, mb4 without ckpt: OOM
    keys = bench_limits.baseline_keys(ms, spec, configs)
    # The largest micro-batch without a saver, half of it, then full checkpointing.
    assert keys == ["g2-tp1-mb4-acc1-fp32-ckpt:none-z0-off:none", "g2-tp1-mb2-acc2-fp32-ckpt:none-z0-off:none",
                    "g2-tp1-mb4-acc1-fp32-ckpt:full-z0-off:none"]
    first = bench_replay.replay_baselines(table, keys[:1], seed=0, holdout=False)
    assert first.trials == 1 and first.pick_usd is None  # it ran out of memory: no pick
    every = bench_replay.replay_baselines(table, keys, seed=0, holdout=False)
    assert every.trials == 3 and every.pick_usd == keys[2]
    place = bench_limits.optimum_place(table, keys, ms, spec)
    assert place["optimum"] == "g2-tp1-mb1-acc4-fp32-ckpt:none-z0-off:none"  # 1000 tok/s; mb4 ckpt 800
    assert place["baseline"] is None and place["moves"] == 1 and place["baselines_fit"] == [False, False, True]
    assert "not among the baselines; it is 1 local move from the nearest" in bench_limits.place_sentence(place)
    # Quantiles of the configs' peaks.
    assert bench_limits.limit_bytes(table, None) is None
    assert bench_limits.limit_bytes(table, 1.0) == max(e.emulated_peak_bytes for e in table.values())
    assert bench_limits.parse_limit("none") is None and bench_limits.parse_limit("0.2") == 0.2
    with pytest.raises(argparse.ArgumentTypeError, match="not a quantile"):
        bench_limits.parse_limit("1.5")
    # Nothing fits: the truth is empty, and a strategy that picks nothing is right.
    table, spec, ms, configs = _table(tmp_path, space, tps, peak, limit_mib=50)
    truth = bench_truth.truth_for(table, 0, False)
    assert truth.usd == {} and truth.best_usd == math.inf
    reps = [bench_replay.replay_baselines(table, keys, seed=0, holdout=False)]
    summary = bench_search.summarize(reps, [truth])
    assert summary["usd"]["right"] == 1 and summary["usd"]["no_pick"] == 1
    assert bench_limits.place_sentence(bench_limits.optimum_place(table, keys, ms, spec)).startswith(
        "No config of the space fits")


def test_a_truths_rounds_are_dated_by_their_first_run():
    """bench_truth.rounds_dates: consecutive rounds of one day share a span, days in order; a
    round's date is its first run's; a truth whose runs record no rounds has none."""
    def doc(*runs):
        return {"entries": {"a": {"runs_meta": [{"round": r, "started_utc": at} for r, at in runs[::2]]},
                            "b": {"runs_meta": [{"round": r, "started_utc": at} for r, at in runs[1::2]]}}}

    d = doc((0, "2026-12-01 18:40:07"), (0, "2026-12-01 18:39:00"), (1, "2026-12-01 23:59:59"),
            (1, "2026-12-02 00:00:10"), (2, "2026-12-02 09:00:00"), (2, "2026-12-02 09:01:00"),
            (3, "2026-12-03 05:37:00"), (3, "2026-12-03 05:38:00"))
    assert bench_truth.rounds_dates(d) == "4 rounds: rounds 1-2 on 2026-12-01, 3 on 2026-12-02, 4 on 2026-12-03"
    assert bench_truth.rounds_dates(doc((0, "2026-12-01 18:40:07"))) == "1 round: round 1 on 2026-12-01"
    # Rounds topped up out of order on one day keep their own numbers.
    d = doc((0, "2026-12-01 10:00:00"), (0, "2026-12-01 10:01:00"), (2, "2026-12-01 11:00:00"),
            (2, "2026-12-01 11:01:00"), (1, "2026-12-02 09:00:00"), (1, "2026-12-02 09:01:00"),
            (3, "2026-12-01 12:00:00"), (3, "2026-12-01 12:01:00"))
    assert bench_truth.rounds_dates(d) == "4 rounds: rounds 1, 3-4 on 2026-12-01, 2 on 2026-12-02"
    assert bench_truth.rounds_dates({"entries": {"a": {"runs_meta": [{}], "results": [{}]}}}) is None


def test_the_matrix_replays_each_limit_into_its_own_file_and_summarises_them(tmp_path, monkeypatch,
                                                                            truth_machine_undone):
    """`bench_matrix.py`: one result file per (bench, limit), and the section regenerates from
    those files alone (--summary-only)."""
    import bench_matrix
    import bench_search

    monkeypatch.setattr(bench_search, "RESULTS", tmp_path)
    monkeypatch.setattr(bench_matrix, "KINDS", ("oracle", "first_baseline", "baselines"))
    md_out, json_out = tmp_path / "m.md", tmp_path / "m.json"
    argv = ["--benches", "ds", "--limits", "0.1", "none", "--seeds", "2", "--md-out", str(md_out),
            "--json-out", str(json_out)]
    assert bench_matrix.main(argv) == 0
    low = json.loads((tmp_path / "search_ds_limit0.1.json").read_text())
    assert low["limit_arg"] == "0.1" and low["mem_limit_bytes"] > 0
    assert json.loads((tmp_path / "search_ds_limitnone.json").read_text())["mem_limit_bytes"] is None
    first = md_out.read_text()
    assert "### `ds`" in first and "| none |" in first and "Where the optimum lies" in first
    # When the truth's rounds ran, from its own runs' records (the committed file's first run).
    doc = bench_truth.load_cache(SCRIPTS.parent / low["cache"], None, log=lambda *a: None)
    day = min(m["started_utc"] for e in doc["entries"].values() for m in e["runs_meta"])[:10]
    assert f"Measured in {bench_truth.rounds_dates(doc)}." in first and "rounds 1-" in first and day in first
    md_out.unlink()
    assert bench_matrix.main(argv + ["--summary-only"]) == 0
    assert md_out.read_text() == first


def test_matrix_lists_each_target_a_cell_misses_beside_the_reference(tmp_path, monkeypatch):
    """Issue 28's targets, read off a cell's rows: 55/60 (or the bound minus 5), never below
    random or the heuristic at 8 trials, a worst regret of at most 10%. A cell replayed on
    resampled truths (bench_resample) adds what they say."""
    import bench_matrix
    import bench_search

    monkeypatch.setattr(bench_search, "RESULTS", tmp_path)  # no resampled cells

    def cell(**rights):
        rows = {kind: {"kind": kind, "trials_budget": None,
                       "usd": {"right": right, "regret_max": 0.37 if kind == "exhaustive" else 0.0}}
                for kind, right in rights.items()}
        return {"seeds": 60, "summary": rows, "mem_limit_bytes": 7 << 30, "limit_arg": "0.7"}

    assert bench_matrix.misses(cell(sweep=56, oracle=60, random=32, heuristic_n=41, exhaustive=52)) == []
    # Noise caps the bound at 29: 24 is enough, but not below the heuristic's 31.
    assert bench_matrix.misses(cell(sweep=25, oracle=29, random=24, heuristic_n=31)) == [
        "below heuristic, 8 trials (31/60)"]
    short = cell(sweep=52, oracle=60, random=32, heuristic_n=41, exhaustive=52)
    short["summary"]["sweep"]["usd"]["regret_max"] = 0.37
    assert bench_matrix.misses(short) == ["accuracy 52/60 < 55", "worst regret 37% > 10%"]
    line, = bench_matrix.target_lines("gpt390", short)
    assert line.startswith("- `gpt390` at 0.7 (7,168 MiB): accuracy 52/60 < 55") and line.endswith(
        "the reference gets 52/60 (37%), the bound 60/60 (0%).")
    assert not bench_matrix.bound_misses_regret(short)
    # Where the bound, told the 2 best configs, also picks worse than 10%, the line says so.
    short["summary"]["oracle"]["usd"]["regret_max"] = 0.13
    assert bench_matrix.bound_misses_regret(short)
    line, = bench_matrix.target_lines("gpt390", short)
    assert line.endswith("the bound 60/60 (13%), over 10% too (told the 2 best configs, it still picks from noisy runs).")
    short["summary"]["oracle"]["usd"]["regret_max"] = 0.0
    rows = [{"right": r, "regret_max": w, "no_pick": 0} for r, w in ((30, 0.05), (45, 0.2), (60, 0.0))]
    (tmp_path / "resample_gpt390_limit0.7.json").write_text(json.dumps(
        {"datasets": 3, "seeds": 60, "per_dataset": {"sweep": rows, "exhaustive": rows[::-1]}}))
    line, = bench_matrix.target_lines("gpt390", short)
    assert line.endswith("the reference gets 52/60 (37%), the bound 60/60 (0%); on 3 resampled truths the sweep gets 45/60 "
                         "[33-57] and a worst regret within 10% in 67% of them, the reference 45/60 [33-57].")
    # The cell replayed again at twice the budget (bench_matrix.run_twice): what the sweep gets there.
    bench_matrix.result_path("gpt390", "0.7", 16).write_text(json.dumps({"seeds": 60, "summary": {"s": {
        "kind": "sweep", "trials_budget": 16, "usd": {"right": 57, "regret_max": 0.22}}}}))
    line, = bench_matrix.target_lines("gpt390", short)
    assert "the bound 60/60 (0%); at `--trials 16` the sweep gets 57/60 (22%); on 3 resampled truths" in line


def test_a_missed_cell_says_how_often_its_optimum_ran_out_of_memory():
    """A miss beside an optimum whose own runs ran out of memory half the time is a pick that
    passed over a gamble: the cell's line says how many of the optimum's runs of the committed
    truth peaked over the limit. Not said without a limit, or where the truth no longer gives the
    cell's limit (measured again since the replay)."""
    import bench_matrix

    data = json.loads((SCRIPTS.parent / "benchmarks/results/search_mem_limit0.5.json").read_text())
    key = data["optimum_place"]["optimum"]
    _, table, limit, _ = bench_limits.cell_truth("mem", "0.5")
    assert limit == data["mem_limit_bytes"]
    over = sum(1 for m in table[key].runs if m.emulated_peak_bytes > limit)
    assert 0 < over < len(table[key].runs)  # the knife edge this sentence is for
    assert bench_matrix.optimum_oom_runs("mem", data) == (over, len(table[key].runs))
    line, = bench_matrix.target_lines("mem", data)
    assert f"; the optimum of all runs ran out of memory in {over} of its {len(table[key].runs)} runs" in line
    assert bench_matrix.optimum_oom_runs("mem", {**data, "mem_limit_bytes": limit + 1}) is None
    assert bench_matrix.optimum_oom_runs("mem", {**data, "mem_limit_bytes": None}) is None


def test_a_missed_cell_says_which_configs_straddle_its_limit():
    """A quantile limit can land on a config's own median peak: then about half that config's
    runs are over, and whether it fits is a coin flip of the runs a seed measures. A missed
    cell's line counts the configs of the committed truth whose runs fell on both sides of the
    limit and names the nearest, here mem's optimum at its 0.5 limit (the quantile lies halfway
    between two configs' medians; of the two, the one that fits by its median is named)."""
    import bench_matrix

    data = json.loads((SCRIPTS.parent / "benchmarks/results/search_mem_limit0.5.json").read_text())
    _, table, limit, _ = bench_limits.cell_truth("mem", "0.5")
    peaks = {k: [m.emulated_peak_bytes for m in e.runs] for k, e in table.items()}
    both = sorted(k for k, p in peaks.items() if min(p) <= limit < max(p))
    assert len(both) >= 2
    nearest = min(both, key=lambda k: (abs(table[k].emulated_peak_bytes - limit), table[k].emulated_peak_bytes > limit))
    assert nearest == data["optimum_place"]["optimum"]
    over = sum(p > limit for p in peaks[nearest])
    n, key, gap, got_over, runs = bench_matrix.straddling("mem", data)
    assert (n, key, got_over, runs) == (len(both), nearest, over, len(peaks[nearest]))
    assert gap == (table[nearest].emulated_peak_bytes - limit) / limit <= 0
    line, = bench_matrix.target_lines("mem", data)
    assert (f"; {len(both)} configs' runs fell on both sides of the limit, the nearest (`{nearest}`) with its "
            f"median peak {abs(gap):.2%} under it and {over} of its {len(peaks[nearest])} runs over") in line
    assert bench_matrix.straddle_sentence("mem", {**data, "mem_limit_bytes": None}) == ""


def test_the_truths_own_optimum_is_judged_as_a_pick_is():
    """No search recommends better than the truth's own best config (over all its runs). Judged
    in-sample, it is right in every seed; judged on held-out halves, it misses where two configs
    tie (mem without a limit: its two best are 0.3% apart over 10 runs, and a seed's held-out
    half puts them 12% apart), and a missed cell's line says so: the judge's noise, not the
    search, misses there."""
    import bench_matrix
    import bench_search

    facts = {}
    for bench, limit in (("cpu40", "0.7"), ("mem", "none")):
        _, table, _, holdout = bench_limits.cell_truth(bench, limit)
        truths = [bench_truth.truth_for(table, s, holdout) for s in range(60)]
        facts[bench] = bench_search.truth_facts(table, {}, truths)
    assert facts["cpu40"]["best_judged_right"] == 60 and facts["cpu40"]["best_judged_regret_max"] == 0.0
    mem = facts["mem"]
    assert mem["best_judged_right"] < 55 and mem["best_judged_regret_max"] > 0.10
    data = {"seeds": 60, "holdout": True, "limit_arg": "none", "mem_limit_bytes": None, "truth": mem,
            "summary": {"sweep": {"kind": "sweep", "trials_budget": None,
                                  "usd": {"right": 20, "regret_max": 0.2}}}}
    assert bench_matrix.judge_misses(data)
    line, = bench_matrix.target_lines("mem", data)
    assert (f"the config best over all runs, recommended in every seed, gets {mem['best_judged_right']}/60 "
            f"({mem['best_judged_regret_max']:.0%}) on the seeds' held-out runs") in line
    assert not bench_matrix.judge_misses({**data, "holdout": False})


def test_the_named_benchmark_shape_is_the_issues_389m_gpt():
    w = bench_truth.workload_for("gpt390m")
    assert w.preset is None and w.resolved_shape().num_params() == 389_526_528
    assert bench_truth.workload_for("tiny").preset == "tiny"


def test_real_limit_section_counts_reused_trials_apart_from_launched_ones():
    import bench_real_limit

    row = dict(key="k", status="ok", peak_bytes=5, build_peak_bytes=1, tokens_per_s=10.0, num_gpus=2)
    rows = [dict(row, trial=0, reused_from=None), dict(row, trial=1, reused_from=0),
            dict(row, trial=2, status="prescreened", tokens_per_s=None, peak_bytes=None, reused_from=None)]
    assert [r["trial"] for r in bench_real_limit.reused(rows)] == [1]
    # Kept before rows named it: the same config with the very same figures.
    legacy = [{k: v for k, v in r.items() if k != "reused_from"} for r in rows]
    assert [r["trial"] for r in bench_real_limit.reused(legacy)] == [1]
    doc = {"case": "default", "trials": rows, "peaks_bytes": {"a": [1 << 20]}, "limit_bytes": 2 << 20,
           "wall_s": 1.0, "stop_reason": None, "cheapest": "k", "fastest": "k", "passed": True,
           "criterion": "c", "context": {"date_utc": "d", "git_commit": "g"}}
    text = bench_real_limit.section([doc])
    assert "1 launched (0 out of memory), 1 held back, 1 reused" in text
    # The gpt390 case shows the pick's and the truth's best config's runs beside the truth's
    # median; a reused trial repeats a measurement and is not shown again.
    gpt = dict(doc, case="gpt390", cheapest="k", truth_best="b", truth_tokens_per_s={"k": 9.0, "b": 11.0},
               truth_runners=["pool"], trials=rows + [dict(row, key="b", trial=3, tokens_per_s=12.5,
                                                           reused_from=None)])
    assert bench_real_limit.measured_line(gpt) == (
        "- Tokens/s per run (this sweep's fresh ranks) against the truth's median (runner: pool): "
        "`k` 10.0 here, 9.0 in the truth; `b` 12.5 here, 11.0 in the truth.")


def test_a_resampled_truth_draws_whole_rounds_and_the_section_regenerates(tmp_path, monkeypatch,
                                                                         truth_machine_undone):
    """`bench_resample.py`: a resampled truth gives every config its runs of the drawn rounds,
    renumbered so that the replays split them as measured rounds; each cell's raw file holds
    every row on every resampled truth, and the section regenerates from those files alone."""
    import bench_resample
    import bench_search as bs

    b, _, spec, ms, configs = bs.bench_space("mem")
    doc = bench_truth.load_cache(Path(b["cache"]), None, log=lambda *a: None)
    table = bench_truth.build_table(doc, configs, spec, None)
    rounds = bench_truth.rounds_of(table)
    assert len(rounds) >= 6
    same = bench_truth.resampled(table, [rounds[2]] * len(rounds), None)
    for key, e in same.items():
        (run,) = [m for m in table[key].runs if m.meta["round"] == rounds[2]]
        assert [m.meta["round"] for m in e.runs] == list(range(len(rounds)))
        assert {m.usd for m in e.runs} == {run.usd} and e.usd == run.usd
    # One round drawn for every run: observed and held-out halves are the same figures.
    truth = bench_truth.truth_for(same, 0, True)
    assert all(truth.usd[k] == e.split(0, True)[0][0].usd for k, e in same.items() if k in truth.usd)

    monkeypatch.setattr(bs, "RESULTS", tmp_path)
    monkeypatch.setattr(bench_resample, "KINDS", ("oracle", "exhaustive", "first_baseline"))
    md_out, json_out = tmp_path / "r.md", tmp_path / "r.json"
    argv = ["--benches", "mem", "--limits", "none", "--datasets", "2", "--seeds", "2",
            "--md-out", str(md_out), "--json-out", str(json_out)]
    assert bench_resample.main(argv) == 0
    raw = json.loads((tmp_path / "resample_mem_limitnone.json").read_text())
    assert raw["datasets"] == 2 and all(len(d) == len(rounds) and set(d) <= set(rounds) for d in raw["draws"])
    assert {k: len(v) for k, v in raw["per_dataset"].items()} == {"oracle": 2, "exhaustive": 2, "first_baseline": 2}
    first = md_out.read_text()
    assert "### `mem`" in first and "| none |" in first
    md_out.unlink()
    assert bench_resample.main(argv + ["--summary-only"]) == 0
    assert md_out.read_text() == first


def test_the_headroom_variants_read_one_replay_and_the_shipped_one_is_the_reports(tmp_path, monkeypatch,
                                                                                  truth_machine_undone):
    """`bench_headroom.py`: each seed's sweep is replayed once and its report read under each
    variant of the headroom rule. On the ds truth at its 0.3 limit, seed 6 is a knife edge
    (tests/test_fit.py): with the rule off the pick is the config whose runs peak over the
    limit, with the shipped constants the one with headroom, and the section regenerates from
    the raw files alone. The report's constants are the shipped ones again afterwards."""
    import bench_headroom as bh
    import bench_search as bs

    from autotune.report import picks
    from autotune.search import verdict

    shipped = (verdict.P_HEADROOM, picks.GIVE_WAY, picks.GIVE_WAY_AFTER_OOM)
    monkeypatch.setattr(bs, "RESULTS", tmp_path)
    md_out, json_out = tmp_path / "h.md", tmp_path / "h.json"
    argv = ["--benches", "ds", "--limits", "0.3", "--seeds", "7", "--jobs", "1",
            "--md-out", str(md_out), "--json-out", str(json_out)]
    assert bh.main(argv) == 0
    assert (verdict.P_HEADROOM, picks.GIVE_WAY, picks.GIVE_WAY_AFTER_OOM) == shipped
    raw = json.loads((tmp_path / "headroom_ds_limit0.3.json").read_text())
    v = raw["variants"]
    assert set(v) == set(bh.VARIANTS) and all(len(x["picks"]) == 7 for x in v.values())
    assert (v["shipped"]["p_headroom"], v["shipped"]["give_way"], v["shipped"]["give_way_after_oom"]) == shipped
    assert v["rule off"]["p_headroom"] == 0.0 and v["flat any"]["give_way"] == math.inf
    assert v["after an OOM any"]["give_way_after_oom"] == math.inf == v["flat any"]["give_way_after_oom"]
    assert v["after an OOM any"]["give_way"] == picks.GIVE_WAY
    gate_off = f"after an OOM {picks.GIVE_WAY:.0%}"  # named and set from the shipped GIVE_WAY
    assert v[gate_off]["give_way_after_oom"] == picks.GIVE_WAY == v[gate_off]["give_way"]
    b, _, spec, _, configs = bs.bench_space("ds")
    doc = bench_truth.load_cache(Path(b["cache"]), None, log=lambda *a: None)
    table, _, _, _ = bs.limited_table(b, doc, configs, spec, 0.3)
    off, kept = v["rule off"]["picks"][6], v["shipped"]["picks"][6]
    assert table[off].oom and not table[kept].oom
    # The script replays each seed once because the rule reads only the report: a sweep under
    # other constants launches the same trials.
    from autotune.search.study import make_sampler

    launched = []
    for p_headroom in (None, 1.0):
        with bh.rule(p_headroom, math.inf, math.inf):
            rep = bench_replay.replay_sweep(table, spec, make_sampler(6, worker=0), 6, bh.TRIALS,
                                            raw["mem_limit_bytes"], raw["holdout"])
        launched.append([st.key for st in rep.steps])
    assert launched[0] == launched[1] and len(launched[0]) == bh.TRIALS
    first = md_out.read_text()
    assert "| `ds` 0.3" in first and "rule off" in first and "differs from the matrix" not in first
    md_out.unlink()
    assert bh.main(argv + ["--summary-only"]) == 0
    assert md_out.read_text() == first
    # A file replayed before a variant was added lacks it: the section says so and counts it as
    # meeting no target, rather than failing.
    del raw["variants"]["flat 25%"]
    (tmp_path / "headroom_ds_limit0.3.json").write_text(json.dumps(raw))
    assert bh.main(argv + ["--summary-only"]) == 0
    older = md_out.read_text()
    assert "not replayed" in older and "flat 25% 0" in older and "**flat 25%**: no cell" in older


def test_the_scale_section_says_when_its_builds_counted_an_import():
    """The committed scale runs predate the worker importing torch._dynamo before the build:
    their section says what their build figures include; a file from a newer run does not."""
    import bench_scale

    data = json.loads((SCRIPTS.parent / "benchmarks/results/scale.json").read_text())
    assert "build_counts_imports" not in data  # measured before 6418a4b
    assert "counted the import of torch._dynamo" in bench_scale.render(data)
    assert "torch._dynamo" not in bench_scale.render({**data, "build_counts_imports": False})
    section = (SCRIPTS.parent / "benchmarks/sections/scale.md").read_text()
    assert section == bench_scale.render(data) + "\n"


def test_pool_scale_judges_pooled_against_fresh_runs_and_its_section_is_its_raw_file():
    """scripts/bench_pool_scale.py: a pooled median outside the fresh runs' range, or another
    ranking of the configs, is said; the committed section is the render of the committed runs."""
    import bench_pool_scale as bps

    names = list(bps.CONFIGS)
    runs = [{"config": n, "runner": r, "round": i, "tokens_per_s": tps, "peak_bytes": 1000}
            for n, fresh, pooled in zip(names, ([10, 12], [20, 22], [30, 32]), ([11, 11], [40, 40], [31, 33]))
            for r, tpss in (("fresh", fresh), ("pool", pooled)) for i, tps in enumerate(tpss)]
    s = bps.summarize(runs, {})
    within = {n: s["per_config"][n]["pool_within_fresh_range"] for n in names}
    assert within == {names[0]: True, names[1]: False, names[2]: True}
    assert s["per_config"][names[1]]["tokens_per_s_ratio"] == pytest.approx(40 / 21)
    # Pairs are one round's two runs: 11/10 and 11/12 straddle 1; 40/20 and 40/22 do not.
    assert s["per_config"][names[0]]["paired_ratios"] == pytest.approx([1.1, 11 / 12])
    straddle = {n: s["per_config"][n]["paired_ratios_straddle_1"] for n in names}
    assert straddle == {names[0]: True, names[1]: False, names[2]: False}
    assert not s["same_ranking"] and s["rank_pool"][0] == names[1] and s["rank_fresh"][0] == names[2]
    # Between configs, per round: A's pooled/fresh over B's (round 0: 1.1 / 2, round 1: (11/12) / (40/22)).
    first = s["between_configs"][0]
    assert (first["a"], first["b"]) == (names[0], names[1])
    assert first["per_round"] == pytest.approx([0.55, (11 / 12) / (40 / 22)])
    assert (first["above_1"], first["below_1"], first["sign_test_p"]) == (0, 2, 0.5)
    assert bps._sign_test([1.1] * 6) == pytest.approx(2 / 64) and bps._sign_test([1.0, 1.0]) == 1.0

    data = json.loads((SCRIPTS.parent / "benchmarks/results/pool_scale.json").read_text())
    assert bps.summarize(data["runs"], data["truth_tokens_per_s"]) == data["summary"]
    section = (SCRIPTS.parent / "benchmarks/sections/pool_scale.md").read_text()
    assert section == bps.render(data) + "\n"


def test_the_real_check_names_the_runners_shift_between_its_pick_and_the_truths_best(tmp_path):
    """bench_real_limit: a sweep in fresh ranks judged by a pooled truth says how the runner
    shifts the two configs (bench_pool_scale's per-round ratio), seen from the truth's best."""
    import bench_real_limit as brl

    path = tmp_path / "pool_scale.json"
    assert brl.runner_shift_line("p", "b", path) is None  # not measured
    path.write_text(json.dumps({"configs": {"P": "p", "B": "b"}, "summary": {"between_configs": [
        {"a": "P", "b": "B", "per_round": [0.8, 0.9, 1.1], "median": 0.9, "above_1": 1, "below_1": 2,
         "sign_test_p": 1.0}]}}))
    line = brl.runner_shift_line("p", "b", path)
    assert f"x{1 / 0.9:.3f}" in line and "median of 3 back-to-back rounds, 2 of them above 1" in line
    assert brl.runner_shift_line("b", "b", path) is None  # the pick is the best: nothing to explain
    # Beside a truth measured in fresh ranks: whether it measured the gap as the pooled truth did.
    same = brl.runner_shift_line("p", "b", path, fresh={"tokens_per_s": {"p": 10.0, "b": 11.0}},
                                 pooled_tps={"p": 10.0, "b": 11.05})
    assert "x1.100 of the pick's tokens/s, the pooled truth x1.105" in same and "not borne out" in same
    shifted = brl.runner_shift_line("p", "b", path, fresh={"tokens_per_s": {"p": 10.0, "b": 10.0}},
                                    pooled_tps={"p": 10.0, "b": 11.05})
    assert "part of the pooled truth's gap is its runner" in shifted


def test_the_real_check_is_judged_by_a_truth_measured_with_the_sweeps_runner(tmp_path, monkeypatch):
    """bench_real_limit: where a truth measured in fresh ranks (the sweep's runner under a CPU
    limit) holds every config that fits, the verdict is the pick's regret against it, with a
    bootstrap interval; without one, the pooled truth judges as before."""
    import bench_real_limit as brl

    doc = json.loads((SCRIPTS.parent / "benchmarks/results/real_limit_gpt390.json").read_text())
    pooled = json.loads((SCRIPTS.parent / "benchmarks/results/truth_gpt390_pool.json").read_text())
    fits, best = doc["truth_fitting"], doc["truth_best"]
    # A pick that is not the truth's best: FSDP2 at mb4, which fits (the first run's pick).
    pick = "g2-tp1-mb4-acc1-fp32-ckpt:none-z0-off:none-fsdp:full_shard"
    assert pick in fits and pick != best
    doc = {**doc, "cheapest": pick}
    path = tmp_path / "truth_gpt390_launcher.json"

    def write(entries):
        path.write_text(json.dumps({"identity": pooled["identity"], "entries": entries}))

    # The pooled truth's own runs of the configs that fit: the same regret as the pooled judge.
    write({k: pooled["entries"][k] for k in fits})
    fresh = brl.fresh_judge(doc, fits, path)
    pooled_regret = brl.judge_gpt390({**doc, "build_over_limit_trials": []})["cheapest_regret"]
    assert fresh["best"] == best and fresh["regret"] == pytest.approx(pooled_regret)
    lo, hi = fresh["regret_interval_90"]
    assert lo <= fresh["regret"] <= hi and lo < hi
    assert f"{fresh['regret']:+.1%}" in brl.fresh_line(pick, fresh)
    # A truth that lacks a config that fits cannot say which is best: no verdict from it.
    write({k: pooled["entries"][k] for k in fits if k != best})
    assert brl.fresh_judge(doc, fits, path) is None
    # Where the sweep's runner measured the pick as fast as the best, the verdict follows it.
    write({**{k: pooled["entries"][k] for k in fits}, pick: pooled["entries"][best] | {"config": pooled["entries"][pick]["config"]}})
    monkeypatch.setattr(brl, "FRESH_TRUTH", path)
    judged = brl.judge_gpt390({**doc, "build_over_limit_trials": []})
    assert judged["fresh_truth"]["regret"] <= 0.0 and judged["passed"] and "the sweep's runner" in judged["criterion"]
    assert judged["cheapest_regret"] == pytest.approx(pooled_regret)  # the pooled figure stays shown
    monkeypatch.setattr(brl, "FRESH_TRUTH", tmp_path / "missing.json")
    judged = brl.judge_gpt390({**doc, "build_over_limit_trials": []})
    assert judged["fresh_truth"] is None and judged["passed"] is (pooled_regret <= brl.WITHIN)


def test_a_new_real_limit_run_keeps_what_the_earlier_runs_picked(tmp_path):
    """bench_real_limit: a run of a case replaces its raw file, and carries the earlier runs'
    picks and verdicts forward, so a new run never hides an earlier outcome."""
    import bench_real_limit as brl

    path = tmp_path / "real_limit_gpt390.json"
    assert brl.earlier_runs(path) == []
    first = {"context": {"date_utc": "d1", "git_commit": "c1"}, "cheapest": "a", "fastest": "a",
             "passed": False, "cheapest_regret": 0.102, "fresh_truth": {"regret": 0.08}}
    path.write_text(json.dumps(first))
    second = {**first, "context": {"date_utc": "d2", "git_commit": "c2"}, "cheapest": "b", "passed": True,
              "cheapest_regret": 0.01, "fresh_truth": None, "earlier": brl.earlier_runs(path)}
    path.write_text(json.dumps(second))
    runs = brl.earlier_runs(path)
    assert [(r["date_utc"], r["cheapest"], r["passed"]) for r in runs] == [("d1", "a", False), ("d2", "b", True)]
    assert brl.earlier_line(runs) == (
        "- Earlier runs of this case: d1 (`c1`): cheapest `a` (pooled truth +10.2%, fresh-rank truth +8.0%), no; "
        "d2 (`c2`): cheapest `b` (pooled truth +1.0%), yes.")
    assert brl.tally_line({"passed": False, "earlier": runs}) == "- Runs of this case so far: 1 of 3 passed."


def test_measuring_part_of_a_space_names_a_config_not_in_it(capsys):
    """bench_search --configs: only with --measure-only, and a key not in the bench's space is
    named, with the form keys take, before anything is measured (exit 2)."""
    import bench_search

    with pytest.raises(SystemExit) as e:
        bench_search.main(["--bench", "gpt390", "--configs", "g2-tp1-mb4-acc1-fp32-ckpt:none-z3-off:optimizer"])
    assert e.value.code == 2 and "go with --measure-only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        bench_search.main(["--bench", "gpt390", "--measure-only", "--configs", "g2-mb99"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "not in this bench's space: g2-mb99" in err and "g2-tp1-mb1-acc1-fp32" in err
    known = [(None, v) for v in [dict(num_gpus=2, tp_degree=1, micro_batch_size=m, grad_accum_steps=1,
                                      precision="fp32", checkpointing="none", zero_stage=0, offload="none")
                                 for m in (1, 4)]]
    assert bench_search.only_configs(known, ["g2-tp1-mb4-acc1-fp32-ckpt:none-z0-off:none"], None) == known[1:]


def test_the_race_block_sizes_each_replay_the_sweep_and_the_size_is_applied(tmp_path, monkeypatch,
                                                                            truth_machine_undone):
    """`bench_race_block.py`: each seed's sweep is replayed once per block size, and the size
    reaches the sweep: no race block of a study holds more configs than the size it ran under,
    and on the mem truth at its 0.7 limit, seed 57 launches other trials under blocks of 2 than
    of 3 (the one seed of that cell whose pick they change at 8 trials: 60 seeds, the
    committed race_block_mem_limit0.7.json). The shipped size is restored afterwards and the section
    regenerates from the raw files alone."""
    from collections import Counter

    import bench_race_block as rb
    import bench_search as bs

    from autotune.record import TrialRecord
    from autotune.search import racing
    from autotune.search.study import make_sampler

    shipped = racing.BLOCK_SIZE
    monkeypatch.setattr(bs, "RESULTS", tmp_path)
    md_out, json_out = tmp_path / "r.md", tmp_path / "r.json"
    argv = ["--benches", "mem", "--limits", "0.7", "--seeds", "3", "--budgets", "8", "--jobs", "1",
            "--md-out", str(md_out), "--json-out", str(json_out)]
    assert rb.main(argv) == 0
    assert racing.BLOCK_SIZE == shipped
    raw = json.loads((tmp_path / "race_block_mem_limit0.7.json").read_text())
    assert raw["shipped"] == shipped and list(raw["budgets"]) == ["8"]
    assert set(raw["budgets"]["8"]) == {str(n) for n in rb.SIZES}
    assert all(len(v["picks"]) == 3 for v in raw["budgets"]["8"].values())
    spec, table, _, _ = bench_limits.cell_truth("mem", "0.7")
    launched, largest = {}, {}
    for n in (2, 3):
        with rb.block_size(n):
            rep = bench_replay.replay_sweep(table, spec, make_sampler(57, worker=0), 57, 8,
                                            raw["mem_limit_bytes"], raw["holdout"], keep_study=True)
        launched[n] = [st.key for st in rep.steps]
        blocks = Counter(TrialRecord.of(t).race_block for t in rep.study.trials)
        blocks.pop(None, None)
        largest[n] = max(blocks.values())
    assert racing.BLOCK_SIZE == shipped
    assert launched[2] != launched[3] and len(launched[2]) == len(launched[3]) == 8
    assert largest == {2: 2, 3: 3}
    first = md_out.read_text()
    assert "## The race's block size" in first and "(8 trials; the matrix's is 8; 3 seeds)" in first
    assert f"At 8 trials, seeds right over the 1 cell: block 2 {raw['budgets']['8']['2']['right']}, " \
           f"block {shipped} (shipped) {raw['budgets']['8'][str(shipped)]['right']}" in first
    assert "16 trials" not in first  # only the budgets replayed are shown
    # The verdict names a size only where it beats the shipped one at every budget.
    right = {("8", "2"): 1, ("8", "3"): 2, ("8", "4"): 3, ("16", "2"): 1, ("16", "3"): 2, ("16", "4"): 3}
    assert rb.verdict(right, [8, 16], ["2", "3", "4"], "3").endswith(
        "Block 4 gets more seeds right than the shipped 3 at every budget.")
    right["16", "4"] = 2  # a tie at one budget: the shipped size stays
    assert rb.verdict(right, [8, 16], ["2", "3", "4"], "3") == (
        "Most seeds right: at 8 trials block 4, at 16 trials block 3. "
        "No size gets more seeds right than the shipped 3 at every budget.")
    md_out.unlink()
    assert rb.main(argv + ["--summary-only"]) == 0
    assert md_out.read_text() == first
    # Where a file has the matrix's seeds, its shipped column is checked against the matrix's
    # sweep cell (the same replay), and a difference is named.
    import bench_matrix

    committed = (SCRIPTS.parent / "benchmarks/results/search_mem_limit0.7.json").read_text()
    bench_matrix.result_path("mem", "0.7").write_text(committed)  # under tmp_path (bs.RESULTS)
    matrix = bench_matrix.row(json.loads(committed), "sweep")
    raw["seeds"] = matrix["seeds"]
    raw["budgets"]["8"][str(shipped)]["right"] = matrix["usd"]["right"] - 1
    (tmp_path / "race_block_mem_limit0.7.json").write_text(json.dumps(raw))
    assert rb.main(argv + ["--summary-only"]) == 0
    assert "**The shipped column at 8 trials differs from the matrix** (re-run `scripts/bench_matrix.py`): mem 0.7" \
        in md_out.read_text()


def test_the_race_block_section_sets_the_budgets_side_by_side():
    """`bench_race_block.py`'s paragraph on twice the budget, from the committed raw files: the
    shipped size's seeds right summed at each budget, the cells that move by BUDGET_MOVE_SEEDS or
    more named (big 0.5: 60 -> 42 at 16 trials, with its optimum's OOM runs from the committed
    truth), a smaller move not; nothing with one budget."""
    import bench_matrix
    import bench_race_block as rb

    shipped = "3"
    found = [(b, q, path, json.loads(path.read_text())) for b, q in (("big", "0.5"), ("mem", "0.7"))
             for path in [rb.result_path(b, q)]]
    right = {(b, t): d["budgets"][t][shipped]["right"] for b, _, _, d in found for t in ("8", "16")}
    assert right["big", "8"] - right["big", "16"] >= rb.BUDGET_MOVE_SEEDS
    assert abs(right["mem", "8"] - right["mem", "16"]) < rb.BUDGET_MOVE_SEEDS
    text = rb.budget_paragraph(found, [8, 16], shipped)
    assert text.startswith(f"**16 trials against 8**, block {shipped} (shipped): seeds right over the 2 cells "
                           f"{right['big', '8'] + right['mem', '8']} at 8 trials, "
                           f"{right['big', '16'] + right['mem', '16']} at 16.")
    ooms, runs = bench_matrix.optimum_oom_runs("big", json.loads(bench_matrix.result_path("big", "0.5").read_text()))
    assert f"or more: big 0.5 {right['big', '8']} -> {right['big', '16']} (its optimum ran out of memory in " \
           f"{ooms} of its {runs} runs). " in text and "mem 0.7" not in text
    assert rb.budget_paragraph(found, [8], shipped) == ""


def test_the_level_benchmark_reads_the_reports_pick_three_ways_and_judges_them_on_held_out_runs(
        tmp_path, monkeypatch, truth_machine_undone):
    """`bench_level.py` on the gpt390 truth at its 0.7 limit: the shipped level is the report's
    pick's tokens/s, the rule before is it less the model's level shift, the own runs' level is
    their geometric mean; each is judged against the median of the pick's held-out runs, and the
    section regenerates from the raw file alone."""
    import bench_level as bv
    import bench_search as bs

    monkeypatch.setattr(bs, "RESULTS", tmp_path)
    md_out, json_out = tmp_path / "l.md", tmp_path / "l.json"
    argv = ["--benches", "gpt390", "--limits", "0.7", "--seeds", "6", "--jobs", "1",
            "--md-out", str(md_out), "--json-out", str(json_out)]
    assert bv.main(argv) == 0
    raw = json.loads((tmp_path / "level_gpt390_limit0.7.json").read_text())
    assert raw["holdout"] and len(raw["picks"]) == 6
    spec, table, limit_bytes, holdout = bench_limits.cell_truth("gpt390", "0.7")
    from autotune.report.build import build_report
    from autotune.report.picks import run_models
    from autotune.search.study import make_sampler

    shifted = 0
    for p in raw["picks"]:
        rep = bench_replay.replay_sweep(table, spec, make_sampler(p["seed"], worker=0), p["seed"], bv.TRIALS,
                                        limit_bytes, holdout, keep_study=True)
        pick = next(x for x in build_report(rep.study).picks if x.by == "cost")
        assert (p["pick"], p["trial"]) == (rep.pick_usd, pick.trial)
        assert p["levels"]["shipped"] == pytest.approx(pick.tokens_per_s, rel=1e-12)
        assert p["runs"] == [r.tokens_per_s for r in pick.runs]
        assert p["interval"] == [pick.tokens_per_s_low, pick.tokens_per_s_high]  # the one the report shows
        assert p["levels"]["own runs"] == pytest.approx(statistics.geometric_mean(p["runs"]))
        (model,) = [m for _, m in run_models(rep.study.trials)]
        assert p["levels"]["lone runs"] * math.exp(model.level_shift) == pytest.approx(p["levels"]["shipped"])
        shifted += model.level_shift != 0.0
        held = [m.result.tokens_per_s for m in table[p["pick"]].split(p["seed"], True)[1] if m.result.ok]
        assert p["truth_tokens_per_s"] == statistics.median(held)
    assert shifted  # a seed whose races moved the level: the rules differ there
    first = md_out.read_text()
    assert "| `gpt390` 0.7" in first and "held-out" in first and "the smallest mean error" in first
    inside, below, judged = bv.covered(raw)
    assert judged == 6 and f"holds the truth in {inside}/6 ({below} below)" in first
    md_out.unlink()
    assert bv.main(argv + ["--summary-only"]) == 0
    assert md_out.read_text() == first
