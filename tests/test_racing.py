"""Re-measuring before recommending (autotune.search.estimates, autotune.search.racing): the model
of a config's runs, the sentence under a pick, and the racing through the real sweep loop with
a TrialRunner answering from a schedule (the seam the benchmarks replay through). Racing with
real trials is in tests/test_racing_e2e.py."""

from __future__ import annotations

import math

import optuna
import pytest

from autotune.contract import GPTWorkload, TrialResult, TrialStatus
from autotune.record import TrialRecord
from autotune.search.estimates import BOTH_REMEASURED_TRIALS, ConfigEstimate, Run, RunModel, how_sure


def _config(key: str, runs: list[tuple[float, str]]) -> ConfigEstimate:
    est = ConfigEstimate(key, first_trial=0)
    est.runs = [Run(i, tps, block) for i, (tps, block) in enumerate(runs)]
    return est


def test_back_to_back_blocks_separate_two_configs_that_single_runs_cannot():
    """B is 4% faster than A; the machine's spells move whole blocks by up to 25%. Measured
    back to back, their ratio is steady; the same numbers measured apart are not."""
    spells = [1.0, 0.8, 1.15, 0.9, 1.05, 0.85, 1.2, 0.95, 0.75, 1.1]
    paired = {"a": _config("a", [(1000 * s * (1 + 0.005 * (-1) ** i), f"b{i}") for i, s in enumerate(spells)]),
              "b": _config("b", [(1040 * s, f"b{i}") for i, s in enumerate(spells)])}
    apart = {k: _config(k, [(r.tokens_per_s, f"{k}{i}") for i, r in enumerate(c.runs)])
             for k, c in paired.items()}
    with_blocks = RunModel.from_runs(paired, prior_sd=0.10)
    without = RunModel.from_runs(apart, prior_sd=0.10)
    p, a = with_blocks.compare("a", "b"), without.compare("a", "b")
    assert math.exp(p.log_diff) == pytest.approx(1.04, abs=0.01)
    assert p.paired_blocks == 10 and a.paired_blocks == 0
    # The paired comparison is far surer (the prior, which assumes nothing shared, still
    # weighs 3 runs' worth); its interval excludes a tie.
    assert p.sd < a.sd / 2.5
    assert p.ratio_interval()[1] > 1.0 > a.ratio_interval()[1]
    # The noise it learnt: blocks differ a lot, runs within a block hardly.
    assert with_blocks.noise.paired_sd < with_blocks.noise.run_sd / 2


def test_single_runs_take_the_prior_noise_and_repeats_replace_it():
    one = RunModel.from_runs({"a": _config("a", [(1000, "t0")]), "b": _config("b", [(1100, "t1")])}, 0.10)
    assert one.noise.run_sd == pytest.approx(0.10)
    assert one.compare("a", "b").sd == pytest.approx(0.10 * math.sqrt(2))
    steady = {k: _config(k, [(tps * (1 + 0.002 * i), f"{k}{i}") for i in range(8)])
              for k, tps in (("a", 1000), ("b", 1100))}
    learnt = RunModel.from_runs(steady, 0.10)
    assert learnt.noise.run_sd < 0.05  # 14 degrees of freedom of 0.2% spread outweigh the prior
    assert learnt.configs["b"].tokens_per_s == pytest.approx(1100 * 1.007, rel=0.01)


def test_the_level_is_that_of_the_runs_while_the_comparisons_stay_the_polishs():
    """Three configs measured alone, then again back to back in one block that ran slow (the
    pick by 2.5%, the others by 21.6% and 16.1%), and one config measured once. The polish nets
    the block's spell out (its median, 16.1%) against the lone runs, which put the pick 7% above
    both of its runs (the README's sweep at 971383c). The level moves to that of the runs: every
    estimate by the same factor, so no comparison changes."""
    d = {"p": math.log(30042 / 30799), "q": -0.216, "s": -0.161}
    lone = {"p": 30799.0, "q": 28000.0, "s": 26000.0}
    configs = {k: _config(k, [(lone[k], f"t{k}"), (lone[k] * math.exp(d[k]), "r")]) for k in lone}
    configs["u"] = _config("u", [(25000.0, "tu")])
    model = RunModel.from_runs(configs, 0.10)
    est = {k: c.tokens_per_s for k, c in model.configs.items()}
    # The polish by hand: the block's effect e is the median of the three offsets, and each
    # config's estimate the mean (in log) of its lone run and its block run net of e.
    e = sorted(d.values())[1]
    polish = {k: lone[k] * math.exp((d[k] - e) / 2) for k in lone} | {"u": 25000.0}
    assert polish["p"] > max(r.tokens_per_s for r in configs["p"].runs)  # above both its runs
    factors = {k: est[k] / polish[k] for k in est}
    # (10 passes of the polish stop within 1e-4 of its fixed point, which the hand figures are)
    assert max(factors.values()) == pytest.approx(min(factors.values()), rel=1e-3)  # one factor
    # ... the one that makes the re-measured configs' runs average to their estimates (each has
    # one lone run and one in the block, so the factor is exp(e / 2) and each estimate is the
    # geometric mean of its own two runs).
    assert factors["p"] == pytest.approx(math.exp(e / 2), rel=1e-3)
    for k in ("p", "q", "s"):
        assert est[k] == pytest.approx(math.sqrt(math.prod(r.tokens_per_s for r in configs[k].runs)), rel=1e-9)
    assert math.exp(model.compare("u", "p").log_diff) == pytest.approx(polish["p"] / polish["u"], rel=1e-3)


def test_the_sentence_says_how_sure():
    assert how_sure("cheaper", 3, 7, (0.04, 0.02, 0.06), 0.03) == \
        "cheaper than the runner-up (trial 7) by 4% ± 2%"
    assert how_sure("cheaper", 3, 7, (0.01, -0.01, 0.02), 0.03) == \
        "not distinguishable from trial 7 (+1% ± 2%): either will do"
    wide = how_sure("faster", 3, 7, (0.05, -0.10, 0.20), 0.03)
    assert wide.startswith("not distinguishable from trial 7 with the runs so far") and "±" in wide
    assert wide.endswith(f"sweeping this study again with {BOTH_REMEASURED_TRIALS} or more --trials "
                         "re-measures both")
    assert "only config" in how_sure("cheaper", 3, None, None, 0.03)


def test_the_trials_the_sentence_names_are_the_fewest_that_re_measure_both():
    """A sweep told `--trials 1` after "either may be the better one" had re-measured nothing
    (its reserve was 0), and `--trials 2` one rival alone; the sentence named no number. Both
    in one block needs a reserve of 2 (Racing.block: with 2 trials left, the leader and its rival)."""
    from autotune.search.sweep import remeasure_reserve
    from autotune.spec import SweepSpec

    spec = SweepSpec()
    assert remeasure_reserve(spec, BOTH_REMEASURED_TRIALS) >= 2 > remeasure_reserve(spec, BOTH_REMEASURED_TRIALS - 1)


# ---------------------------------------------------------------------------------------
# Racing through the real sweep loop, runs from a schedule
# ---------------------------------------------------------------------------------------

TRUE_TPS = {1: 1000.0, 2: 1100.0, 4: 1050.0}  # micro-batch -> tokens/s; micro 2 is the best


def _runner(first_run_of_4: float, log: list, true_tps: dict[int, float] = TRUE_TPS):
    """A TrialRunner: each config's runs at its true speed within 1%, except that micro 4's
    first run is `first_run_of_4` (lucky, unless micro 4 is truly that fast)."""
    spell = iter([1.0, 0.99, 1.01] * 10)
    seen: dict[int, int] = {}

    def run(cfg, trial_dir, on_start=None) -> TrialResult:
        mb = cfg.micro_batch_size
        n = seen.get(mb, 0)
        seen[mb] = n + 1
        tps = first_run_of_4 if (mb == 4 and n == 0) else true_tps[mb] * next(spell)
        log.append((mb, n))
        return TrialResult(status=TrialStatus.ok, tokens_per_s=tps, wall_s=10.0, world_size=1)

    return run


@pytest.fixture()
def spec(tmp_path):
    from autotune.spec import BatchPolicy, SweepSpec

    space = tmp_path / "space.yaml"
    space.write_text("num_gpus: [1]\nmicro_batch_size: [1, 2, 4]\nprecision: [fp32]\n")
    return SweepSpec(workload=GPTWorkload(preset="tiny"), seq_len=32, space=str(space),
                     batch=BatchPolicy(global_batch_samples=4))


def _sweep(spec, tmp_path, n_trials: int, lucky: float, remeasure: int | None = None,
           true_tps: dict[int, float] = TRUE_TPS):
    from autotune.search.study import DIRECTIONS, make_sampler
    from autotune.search.sweep import run_sweep

    spec = spec.model_copy(deep=True)
    spec.budget.remeasure_trials = remeasure
    study = optuna.create_study(directions=DIRECTIONS, sampler=make_sampler(0, worker=0))
    log: list = []
    summary = run_sweep(spec, study, n_trials, tmp_path / "runs", runner=_runner(lucky, log, true_tps))
    return study, summary, log


def test_a_lucky_single_run_is_measured_again_and_loses(spec, tmp_path):
    from autotune.report.build import build_report

    # Without re-measuring, micro 4's lucky run (1,300 tokens/s) is recommended.
    study, _, _ = _sweep(spec, tmp_path / "once", 7, lucky=1300.0, remeasure=0)
    once = build_report(study)
    assert TrialRecord.of(study.trials[once.cheapest.trial]).config["micro_batch_size"] == 4

    study, summary, log = _sweep(spec, tmp_path / "race", 7, lucky=1300.0)
    assert summary.trials_run == 7  # repeats count against --trials
    repeats = [TrialRecord.of(t) for t in study.trials if TrialRecord.of(t).repeat_of is not None]
    assert repeats and all(r.launched and r.race_block for r in repeats)
    # Blocks measure the rivals back to back: each block holds 2-3 different configs.
    blocks: dict[str, list[int]] = {}
    for r in repeats:
        blocks.setdefault(r.race_block, []).append(r.config["micro_batch_size"])
    assert all(2 <= len(v) == len(set(v)) for v in blocks.values())
    doc = build_report(study)
    best = TrialRecord.of(study.trials[doc.cheapest.trial])
    assert best.config["micro_batch_size"] == 2
    (cost, time) = doc.picks
    assert cost.by == "cost" and cost.trial == doc.cheapest.trial and len(cost.runs) >= 2
    assert cost.tokens_per_s_low < cost.tokens_per_s < cost.tokens_per_s_high
    assert cost.value_low < doc.cheapest.usd < cost.value_high
    assert f"trial {cost.runner_up}" in cost.how_sure
    # One option per config: the repeats are merged into their config's first trial.
    assert sorted(doc.cheapest.runs) == sorted(r.trial for r in cost.runs)
    firsts = {t.number for t in study.trials
              if TrialRecord.of(t).reused_from is None and TrialRecord.of(t).repeat_of is None}
    assert {o.trial for o in doc.options} == firsts and len(firsts) == 3


def test_the_last_trial_measures_a_leader_that_rests_on_one_run_again(spec, tmp_path):
    """--trials 3: micro 4 (truly 900 tokens/s, the slowest) leads on a lucky first run of
    1,300, micro 2 (1,100) is second, one trial is left. A block does not fit; the trial goes
    to the leader, not to its runner-up, whose second run would leave the lucky run crowned
    (the mem space at its 0.5 limit, 13 of 60 seeds: docs/benchmarks.md)."""
    from autotune.report.build import build_report

    study, _, log = _sweep(spec, tmp_path, 3, lucky=1300.0, true_tps={**TRUE_TPS, 4: 900.0})
    assert log == [(4, 0), (2, 0), (4, 1)]
    doc = build_report(study)
    assert TrialRecord.of(study.trials[doc.cheapest.trial]).config["micro_batch_size"] == 2


def test_a_leader_far_ahead_is_confirmed_once_then_the_sweep_stops(spec, tmp_path):
    """Micro 4 at 3x the others: a single run is never crowned, so it is measured once more,
    back to back with the runner-up; still far ahead, nothing more is re-measured, and the
    sweep stops (every config tried) with budget left."""
    study, summary, log = _sweep(spec, tmp_path, 9, lucky=3300.0, true_tps={**TRUE_TPS, 4: 3300.0})
    repeats = [TrialRecord.of(t) for t in study.trials if TrialRecord.of(t).repeat_of is not None]
    assert len(repeats) == 2 and len({r.race_block for r in repeats}) == 1
    assert {r.config["micro_batch_size"] for r in repeats} == {4, 2}  # leader and runner-up
    assert summary.trials_run == 5 and "every config" in summary.stop_reason


def test_once_the_race_starts_the_reserve_goes_to_repeats_not_new_rivals(tmp_path):
    """Eight configs, the four without checkpointing within 10% of each other (a race that
    the budget cannot finish): once the first block of repeats is queued, every trial left is
    a repeat. A local move in between would spend the reserve on a rival measured once, which
    the race would then have to chase (the DeepSpeed-style space lost its optimum that way:
    docs/benchmarks.md)."""
    from autotune.search.study import DIRECTIONS, make_sampler
    from autotune.search.sweep import run_sweep
    from autotune.spec import BatchPolicy, SweepSpec

    space = tmp_path / "space.yaml"
    space.write_text("num_gpus: [1]\nmicro_batch_size: [1, 2, 4, 8]\nprecision: [fp32]\n"
                     "checkpointing: [none, full]\n")
    spec = SweepSpec(workload=GPTWorkload(preset="tiny"), seq_len=32, space=str(space),
                     batch=BatchPolicy(global_batch_samples=8))
    true_tps = {1: 1000.0, 2: 1100.0, 4: 1080.0, 8: 1060.0}
    spell = iter([1.0, 0.97, 1.03, 0.99, 1.02] * 10)

    def run(cfg, trial_dir, on_start=None) -> TrialResult:
        slow = 0.6 if cfg.checkpointing.value == "full" else 1.0
        return TrialResult(status=TrialStatus.ok, tokens_per_s=true_tps[cfg.micro_batch_size] * slow * next(spell),
                           wall_s=10.0, world_size=1)

    study = optuna.create_study(directions=DIRECTIONS, sampler=make_sampler(0, worker=0))
    summary = run_sweep(spec, study, 10, tmp_path / "runs", runner=run)
    assert summary.trials_run == 10
    launched = [(t.number, TrialRecord.of(t)) for t in study.trials if TrialRecord.of(t).launched]
    first_repeat = next(i for i, (_, r) in enumerate(launched) if r.repeat_of is not None)
    assert first_repeat >= 10 - 5  # within the reserve (half the budget)
    assert all(r.repeat_of is not None for _, r in launched[first_repeat:])
    assert len(launched[first_repeat:]) >= 5
    # The last trial cannot hold a block of two: it measures, on its own, the raced rival with
    # the fewest runs (the least certain estimate in the race), not a new config.
    last = launched[-1][1]
    assert [r.race_block for _, r in launched].count(last.race_block) == 1

    def runs(first: int) -> int:
        return sum(1 for n, r in launched[:-1] if first in (n, r.repeat_of))

    raced = {r.repeat_of for _, r in launched[first_repeat:-1]}
    assert runs(last.repeat_of) == min(runs(f) for f in raced)


def test_the_report_prices_every_config_at_the_level_of_the_studys_runs(spec, tmp_path):
    """Lone runs at each config's speed, re-measurements back to back 15% slower. The pick and
    its raced rival are measured twice, micro 1 once; each option (micro 1's too) is priced at
    the level of the study's runs, so the report's ranking is the model's, and the pick's
    tokens/s is that of its own runs, not of its lone one."""
    from autotune.report.build import build_report
    from autotune.search.study import DIRECTIONS, make_sampler
    from autotune.search.sweep import run_sweep

    true_tps = {**TRUE_TPS, 4: 3300.0}
    seen: set[int] = set()

    def run(cfg, trial_dir, on_start=None) -> TrialResult:
        mb = cfg.micro_batch_size
        slow = 0.85 if mb in seen else 1.0
        seen.add(mb)
        return TrialResult(status=TrialStatus.ok, tokens_per_s=true_tps[mb] * slow, wall_s=10.0, world_size=1)

    study = optuna.create_study(directions=DIRECTIONS, sampler=make_sampler(0, worker=0))
    run_sweep(spec, study, 9, tmp_path / "runs", runner=run)
    doc = build_report(study)
    by_mb = {TrialRecord.of(study.trials[o.trial]).config["micro_batch_size"]: o for o in doc.options}
    runs = {mb: len(o.runs) for mb, o in by_mb.items()}
    assert runs == {4: 2, 2: 2, 1: 1}, runs
    # Each raced config has one run alone and one in the slow block. (rel 1e-3: 10 passes of the
    # polish stop within 1e-4 of its fixed point.)
    level = math.sqrt(0.85)
    assert by_mb[4].tokens_per_s == pytest.approx(3300.0 * level, rel=1e-3)
    assert by_mb[2].tokens_per_s == pytest.approx(1100.0 * level, rel=1e-3)
    assert by_mb[1].tokens_per_s == pytest.approx(1000.0 * level, rel=1e-3)  # measured once
    assert by_mb[1].hours > by_mb[2].hours > by_mb[4].hours
    (cost, _) = doc.picks
    assert cost.trial == doc.cheapest.trial == by_mb[4].trial
    assert cost.tokens_per_s == pytest.approx(math.sqrt(3300.0 * 3300.0 * 0.85), rel=1e-3)
