"""Replays of search strategies against a measured ground truth (scripts/bench_truth.py).

    rep = replay_sweep(table, spec, seed, n_trials, holdout=True)     # autotune's own loop
    rep = replay_optuna(table, spec, ms, sampler, seed, n_trials, holdout)  # TPE / random alone
    rep = replay_grid(table, order, seed, n_trials, holdout)
    rep = replay_deepspeed_style(table, seed, "usd", holdout)
    rep = replay_oracle(table, truth, seed, n_trials, holdout)        # a bound: knows the 2 best
    rep = replay_baselines(table, baseline_keys[:1], seed, holdout)   # first baseline only
    rep.pick_usd, rep.pick_hours, rep.steps

autotune's strategies run the shipped code: `autotune.search.sweep.run_sweep` (or the
objective alone) with only its TrialRunner answering from the table, and the pick is what the
report recommends (`autotune.report.build.build_report`: cheapest and fastest). The runner
hands out, for each launch of a config, the next run of that config the seed may observe
(bench_truth.Entry.split): a repeat sees another real run, not the same number again.
Strategies outside autotune (grid, the DeepSpeed-style heuristic) pick the best run they saw.
"""

from __future__ import annotations

import math
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_truth import Entry, Measured, cfg_key

from autotune.contract import TrialConfig, TrialResult
from autotune.record import TrialRecord


@dataclass
class Step:
    key: str
    trial_s: float
    repeat: bool = False  # a re-measurement of a config this replay had launched


@dataclass
class Replay:
    steps: list[Step] = field(default_factory=list)
    pick_usd: str | None = None
    pick_hours: str | None = None
    prescreened: int = 0
    study: Any = None  # the replayed study, where the caller keeps it (replay_sweep keep_study)

    @property
    def trials(self) -> int:
        return len(self.steps)

    @property
    def trial_s(self) -> float:
        return sum(s.trial_s for s in self.steps)


def table_runner(table: dict[str, Entry], rep: Replay, seed: int, holdout: bool):
    """A TrialRunner (autotune.run.launch) answering from the table: the nth launch of a
    config in this replay returns the nth run of it this seed observes."""
    launches: dict[str, int] = {}

    def run_from_table(cfg: TrialConfig, trial_dir, on_start=None) -> TrialResult:
        key = cfg_key(cfg)
        n = launches.get(key, 0)
        launches[key] = n + 1
        seen = table[key].observed(seed, n, holdout)
        rep.steps.append(Step(key, seen.trial_s, repeat=n > 0))
        return seen.result.model_copy(deep=True)

    return run_from_table


def report_picks(study) -> tuple[str | None, str | None]:
    """What the report recommends (cheapest, fastest), as table keys."""
    from autotune.report.build import build_report

    doc = build_report(study)
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}

    def key(option) -> str | None:
        if option is None:
            return None
        return cfg_key(TrialRecord.of(by_number[option.trial]).trial_config())

    return key(doc.cheapest), key(doc.fastest)


def _study(sampler):
    import optuna

    from autotune.search.study import DIRECTIONS

    return optuna.create_study(storage=optuna.storages.InMemoryStorage(), sampler=sampler,
                               directions=DIRECTIONS, study_name="replay")


def _spec_for(spec, limit: int | None, prescreen: bool = True, remeasure: int | None = None):
    spec = spec.model_copy(deep=True)
    spec.memory.limit_bytes_per_rank = limit
    spec.memory.prescreen = prescreen
    spec.budget.remeasure_trials = remeasure
    return spec


def replay_sweep(table, spec, sampler, seed: int, n_trials: int, limit: int | None, holdout: bool,
                 remeasure: int | None = None, baselines: bool = True, keep_study: bool = False) -> Replay:
    """One `autotune sweep --trials n_trials` (the shipped loop) against the table; with
    `keep_study`, the study stays on the Replay (to read its report again: bench_headroom)."""
    from autotune.search.sweep import run_sweep

    rep = Replay()
    study = _study(sampler)
    runner = table_runner(table, rep, seed, holdout)
    with tempfile.TemporaryDirectory(prefix="bench_replay_") as tmp:
        run_sweep(_spec_for(spec, limit, True, remeasure), study, n_trials, Path(tmp), runner=runner,
                  baselines=baselines)
    rep.pick_usd, rep.pick_hours = report_picks(study)
    rep.prescreened = sum(TrialRecord.of(t).status == "prescreened" for t in study.trials)
    rep.study = study if keep_study else None
    return rep


def replay_optuna(table, spec, ms, sampler, seed: int, n_trials: int, limit: int | None,
                  holdout: bool, max_proposals: int) -> Replay:
    """The objective alone (autotune.search.objective.Objective) with a sampler: no
    baselines, no prescreen, no local moves, no re-measuring; stops after `n_trials` launched
    trials (a proposal of a measured config reuses it and costs nothing) or `max_proposals`."""
    from autotune.search.context import SweepContext
    from autotune.search.objective import Objective, TrialCrashed

    rep = Replay()
    study = _study(sampler)
    runner = table_runner(table, rep, seed, holdout)

    def stop(st, _trial) -> None:
        if rep.trials >= n_trials:
            st.stop()

    with tempfile.TemporaryDirectory(prefix="bench_replay_") as tmp:
        ctx = SweepContext.build(_spec_for(spec, limit, False), study, Path(tmp), machine=ms)
        study.optimize(Objective(ctx, runner=runner), n_trials=max_proposals, catch=(TrialCrashed,),
                       callbacks=[stop])
    rep.pick_usd, rep.pick_hours = report_picks(study)
    return rep


def _best_seen(table, seen: dict[str, Measured]) -> tuple[str | None, str | None]:
    ok = {k: m for k, m in seen.items() if m.feasible}
    if not ok:
        return None, None
    return min(ok, key=lambda k: ok[k].usd), min(ok, key=lambda k: ok[k].hours)


def replay_grid(table, order: list[str], seed: int, n_trials: int, holdout: bool) -> Replay:
    """The first `n_trials` configs of `order`, one run each; the best run seen is the pick."""
    rep = Replay()
    seen = {}
    for k in order[:n_trials]:
        seen[k] = table[k].observed(seed, 0, holdout)
        rep.steps.append(Step(k, seen[k].trial_s))
    rep.pick_usd, rep.pick_hours = _best_seen(table, seen)
    return rep


def replay_baselines(table, keys: list[str], seed: int, holdout: bool) -> Replay:
    """A fixed guess, not a search: each of `keys` (the sweep's baselines in its order,
    `autotune.search.strategy.baseline_params`) measured once; the pick is the best run that
    fitted, or none when none did. With one key: "first baseline only"."""
    rep = Replay()
    seen = {}
    for k in keys:
        seen[k] = table[k].observed(seed, 0, holdout)
        rep.steps.append(Step(k, seen[k].trial_s))
    rep.pick_usd, rep.pick_hours = _best_seen(table, seen)
    return rep


def replay_exhaustive(table, seed: int, holdout: bool) -> Replay:
    """Every config, every run the seed may observe; the pick is the best median: the best any
    search could recommend from these runs (the reference row)."""
    import statistics

    rep = Replay()
    scores = {}
    for k, e in table.items():
        obs = e.split(seed, holdout)[0]
        rep.steps += [Step(k, m.trial_s, repeat=i > 0) for i, m in enumerate(obs)]
        ok = [m for m in obs if m.feasible]
        if ok and len(ok) * 2 > len(obs):
            scores[k] = (statistics.median(m.usd for m in ok), statistics.median(m.hours for m in ok))
    if scores:
        rep.pick_usd = min(scores, key=lambda k: scores[k][0])
        rep.pick_hours = min(scores, key=lambda k: scores[k][1])
    return rep


def replay_oracle(table, truth, seed: int, n_trials: int, holdout: bool, k: int = 2) -> Replay:
    """A bound, not a strategy: it is told the seed's `k` best configs by its own truth
    (`truth`: bench_truth.truth_for) and spends all `n_trials` re-measuring them in turn, then
    picks the best median, for cost and for time apart (their two best may differ; the steps
    recorded are the cost schedule's). No search can launch fewer configs that matter, so at the same
    budget one that must also find them does no better (up to how it splits the runs): a
    space where this bound misses the target at the default budget is one where the runs'
    noise, not the search, sets pick accuracy."""
    import statistics

    rep = Replay()
    for metric in ("usd", "hours"):
        values = getattr(truth, metric)
        top = sorted((c for c in values if values[c] is not None), key=lambda c: values[c])[:k]
        seen: dict[str, list[float]] = {c: [] for c in top}
        for i in range(n_trials):
            c = top[i % len(top)]
            m = table[c].observed(seed, len(seen[c]), holdout)
            if metric == "usd":
                rep.steps.append(Step(c, m.trial_s, repeat=bool(seen[c])))
            seen[c].append(getattr(m, metric) if m.feasible else math.inf)
        if top:
            setattr(rep, f"pick_{metric}", min(top, key=lambda c: statistics.median(seen[c] or [math.inf])))
    return rep


class _Budget(Exception):
    """The heuristic's trial budget is spent: it stops where it is and picks what it saw."""


def replay_deepspeed_style(table, seed: int, metric: str, holdout: bool,
                           max_trials: int | None = None) -> Replay:
    """In the style of DeepSpeed's autotuner: for each setting of the other dimensions (order
    shuffled by the seed), for each sharding stage in turn (`sharding_stages`: ZeRO 0-3 with
    FSDP2 off, then FSDP2's modes), binary-search the largest micro-batch that fits, then try
    smaller micro-batches while one improves the metric by >= 5%; move to the next stage only
    while a stage improves the best by >= 5% (a stage where nothing fits moves on). `metric`:
    "usd" or "hours" (it optimizes what it is scored on); it picks the best run it saw.
    `max_trials`: stop after that many trials (the sweep's budget), else run to its own end."""
    rng = random.Random(seed)
    gain = 0.05
    # Accumulation is an outer setting where it is free (DeepSpeed's tuner fixes it and
    # searches the micro-batch); with a fixed global batch it follows from the micro-batch.
    dims = ["num_gpus", "tp_degree", "precision", "checkpointing", "offload"]
    if _accum_free(table):
        dims.append("grad_accum_steps")
    by_outer: dict[tuple, dict[tuple[int, str], dict[int, str]]] = {}
    for e in table.values():
        outer = tuple(str(getattr(e.values[d], "value", e.values[d])) for d in dims)
        stage = (int(e.values["zero_stage"]), _fsdp(e.values))
        by_outer.setdefault(outer, {}).setdefault(stage, {})[e.values["micro_batch_size"]] = e.key
    outers = sorted(by_outer)
    rng.shuffle(outers)
    rep = Replay()
    tried: dict[str, Measured] = {}

    def probe(key: str) -> Measured:
        if key not in tried:
            if max_trials is not None and len(tried) >= max_trials:
                raise _Budget
            tried[key] = table[key].observed(seed, 0, holdout)
            rep.steps.append(Step(key, tried[key].trial_s))
        return tried[key]

    def value(m: Measured) -> float:
        return getattr(m, metric) if m.feasible else math.inf

    try:
        _scan(outers, by_outer, probe, value, gain)
    except _Budget:
        pass
    rep.pick_usd, rep.pick_hours = _best_seen(table, tried)
    return rep


def _scan(outers, by_outer, probe, value, gain: float) -> None:
    """The heuristic's scan (replay_deepspeed_style)."""
    for outer in outers:
        stage_best = math.inf
        for stage in sharding_stages(by_outer[outer]):
            micros = sorted(by_outer[outer][stage])
            keys = by_outer[outer][stage]
            if not probe(keys[micros[0]]).feasible:
                continue
            lo, hi = 0, len(micros) - 1  # invariant: micros[lo] fits
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if probe(keys[micros[mid]]).feasible:
                    lo = mid
                else:
                    hi = mid - 1
            best = value(probe(keys[micros[lo]]))
            for i in range(lo - 1, -1, -1):
                v = value(probe(keys[micros[i]]))
                if v < best * (1 - gain):
                    best = v
                else:
                    break
            if best > stage_best * (1 - gain):
                break
            stage_best = best


# FSDP2's modes as further sharding stages after ZeRO 3, least sharding first (shard_grad_op
# shards what ZeRO 2 does, full_shard what ZeRO 3 does).
_FSDP_ORDER = {"none": 0, "shard_grad_op": 1, "full_shard": 2}


def _fsdp(values: dict) -> str:
    f = values.get("fsdp") or "none"
    return str(getattr(f, "value", f))


def sharding_stages(stages) -> list[tuple[int, str]]:
    """The order the heuristic scans (ZeRO stage, FSDP2 mode) pairs in. DeepSpeed's autotuner
    has no FSDP2: it scans ZeRO 0, 1, 2, 3 with FSDP2 off, so the fair replay does that first,
    then treats each FSDP2 mode as one more stage (a dimension scanned like the ZeRO stages,
    under the same stop rule), instead of letting the FSDP2 variants of a ZeRO stage shadow
    its FSDP-off configs."""
    return sorted(stages, key=lambda s: (_FSDP_ORDER.get(s[1], 3), s[1], s[0]))


def _accum_free(table) -> bool:
    """Several accumulations for one micro-batch and rank layout: no fixed global batch."""
    by_micro: dict[tuple, set[int]] = {}
    for e in table.values():
        c = e.cfg
        by_micro.setdefault((c.num_gpus, c.tp_degree, c.micro_batch_size), set()).add(c.grad_accum_steps)
    return any(len(v) > 1 for v in by_micro.values())
