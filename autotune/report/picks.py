"""A config measured several times is one option, priced at its estimate over all its runs,
and the recommended configs say how sure they are.

    models = run_models(frozen)                              # one RunModel per hardware
    options = config_options(frozen, rows, catalog, models)  # one option set per config
    cheapest, fastest, notes = recommended(feasible, runs_fit(frozen))   # memory headroom
    rows = pick_rows(cheapest, fastest, feasible, models)

The estimate and its interval come from autotune.search.estimates (the same model the sweep's
re-measuring races with, autotune.search.racing), so the report names the config the sweep
raced for, with the runs behind it.
"""

from __future__ import annotations

import math
from typing import Literal

from autotune.contract import HardwareFingerprint
from autotune.format import fmt_bytes
from autotune.record import TrialRecord
from autotune.report.nothing_fits import what_would_fit
from autotune.report.options import options_for
from autotune.report.schema import OptionRow, PickRow, RunRow, TrialRow
from autotune.search.estimates import Z_SHOWN, ConfigEstimate, RunModel, how_sure, margin
from autotune.search.racing import TOLERANCE

# A recommended config without memory headroom (autotune.search.verdict.RunsFit.headroom) gives
# way to the best config with it that costs (takes) at most this much more: the gap the benchmark
# counts as none. Larger gaps trade one knife-edge truth against another (docs/benchmarks.md,
# "The headroom rule's constants": scripts/bench_headroom.py).
GIVE_WAY = TOLERANCE
# ... and up to this much where some of its own runs already ran out of memory: then the long
# run's risk has been seen, not read from a spread's tail. A flat larger give-way would also move
# picks whose runs never went over, which the truth often shows to fit (docs/benchmarks.md, "The
# headroom rule's constants": scripts/bench_headroom.py; tests/test_fit.py has the 389.5M case).
GIVE_WAY_AFTER_OOM = 0.10


def run_models(frozen) -> list[tuple[HardwareFingerprint, RunModel]]:
    """One model per hardware in the study. Records written before the hardware key named
    versions join the model of the machine they match (autotune.record.TrialRecord.on)."""
    machines: dict[str, HardwareFingerprint] = {}
    for t in frozen:
        rec = TrialRecord.of(t)
        if rec.hardware and rec.machine and rec.hardware not in machines:
            try:
                machines[rec.hardware] = HardwareFingerprint.model_validate(rec.machine)
            except ValueError:
                continue
    # Current keys first, so that older records join them rather than a model of their own.
    order = sorted(machines.items(), key=lambda kv: kv[0] != kv[1].key())
    out: list[tuple[HardwareFingerprint, RunModel]] = []
    covered: set[int] = set()
    for _, hw in order:
        mine = [t for t in frozen if t.number not in covered and TrialRecord.of(t).on(hw)]
        model = RunModel.fit(mine, hw)
        if model.configs:
            out.append((hw, model))
            covered |= {n for est in model.configs.values() for n in est.trials}
    return out


def _estimates(models) -> dict[int, tuple[RunModel, ConfigEstimate]]:
    """Each config's first trial -> (its model, its estimate)."""
    return {est.first_trial: (model, est) for _, model in models for est in model.configs.values()}


def config_options(frozen, rows: list[TrialRow], catalog, models) -> list[OptionRow]:
    """The priced options, one set per config and hardware: a config measured again is priced
    at its estimate over its runs, under its first trial. A reused trial repeats its source's
    measurement: its options are the source's."""
    first = _estimates(models)
    merged = {n for _, model in models for est in model.configs.values() for n in est.trials[1:]}
    out: list[OptionRow] = []
    for t, r in zip(frozen, rows):
        if r.reused_from is not None or t.number in merged:
            continue
        est = first.get(t.number)
        out += options_for(t, r, catalog, est[1] if est else None)
    return out


def _sd_between(models, a: int, b: int) -> float:
    """sd of the log throughput ratio of the configs first measured by trials a and b."""
    ests = _estimates(models)
    (ma, ea), (mb, eb) = ests[a], ests[b]
    if ma is mb:
        return ma.compare(ea.key, eb.key).sd
    return math.hypot(ea.log_sd, eb.log_sd)  # different hardware: independent estimates


def pick_row(by: Literal["cost", "time"], chosen: OptionRow | None, feasible: list[OptionRow],
             models, remeasures: bool = True) -> PickRow | None:
    """The runs, interval and certainty of a recommended option (`by`: "cost" or "time");
    `remeasures`: whether the study's sweep re-measures leaders (how_sure's hint)."""
    ests = _estimates(models)
    if chosen is None or chosen.trial not in ests:
        return None
    model, est = ests[chosen.trial]
    metric = "usd" if by == "cost" else "hours"

    def value(o: OptionRow) -> float:
        return getattr(o, metric)

    # The runner-up is the best of the rest; a cheaper (faster) config passed over for want of
    # memory headroom (with_headroom) is not one, and the report's note names it.
    others = [o for o in feasible if o.trial != chosen.trial and o.trial in ests and value(o) >= value(chosen)]
    runner = min(others, key=lambda o: (value(o), o.trial), default=None)
    m = margin(value(chosen), value(runner), _sd_between(models, chosen.trial, runner.trial)) \
        if runner else None
    lo_tps, hi_tps = est.interval()
    spread = math.exp(Z_SHOWN * est.log_sd)
    return PickRow(
        by=by, trial=chosen.trial, offer=chosen.offer,
        runs=[RunRow(trial=r.trial, tokens_per_s=r.tokens_per_s,
                     block=None if r.block == f"t{r.trial}" else r.block) for r in est.runs],
        tokens_per_s=est.tokens_per_s, tokens_per_s_low=lo_tps, tokens_per_s_high=hi_tps,
        value=value(chosen), value_low=value(chosen) / spread, value_high=value(chosen) * spread,
        runner_up=runner.trial if runner else None, margin=m[0] if m else None,
        margin_low=m[1] if m else None, margin_high=m[2] if m else None,
        how_sure=how_sure("cheaper" if by == "cost" else "faster", chosen.trial,
                          runner.trial if runner else None, m, TOLERANCE, remeasures),
        run_sd=model.noise.run_sd, paired_sd=model.noise.paired_sd)


def pick_rows(cheapest: OptionRow | None, fastest: OptionRow | None, feasible: list[OptionRow],
              models, remeasures: bool = True) -> list[PickRow]:
    rows = [pick_row("cost", cheapest, feasible, models, remeasures),
            pick_row("time", fastest, feasible, models, remeasures)]
    return [r for r in rows if r is not None]


def headroom_note_start(by: Literal["cost", "time"]) -> str:
    """How with_headroom's notes on the pick by `by` begin (the sweep's summary prints them)."""
    return f"by {by}, trial "


def recommended(feasible: list[OptionRow], fits) -> tuple[OptionRow | None, OptionRow | None, list[str]]:
    """(cheapest, fastest, notes): the options the report recommends (`recommend`), and the
    notes of those that gave way for memory headroom or kept their place without it."""
    cheapest, cost_note = recommend(feasible, fits, "cost")
    fastest, time_note = recommend(feasible, fits, "time")
    return cheapest, fastest, [n for n in (cost_note, time_note) if n]


def recommend(feasible: list[OptionRow], fits, by: Literal["cost", "time"]) -> tuple[OptionRow | None, str | None]:
    """The option recommended by `by`: the best of `feasible` unless it gives way for memory
    headroom (with_headroom), and the note that says so. `autotune export` applies it to one
    offer's options too (`fits`: RunsFit, or the report rows' MemoryFitRow, by trial)."""
    key = (lambda o: (o.usd, o.hours)) if by == "cost" else (lambda o: (o.hours, o.usd))
    return with_headroom(min(feasible, key=key, default=None), feasible, fits, by)


def with_headroom(chosen: OptionRow | None, feasible: list[OptionRow], fits,
                  by: Literal["cost", "time"]) -> tuple[OptionRow | None, str | None]:
    """The option to recommend, and a note where the best one lacks memory headroom.

    A config whose runs peaked within their own spread of the memory limit (`fits`:
    autotune.search.verdict.runs_fit; RunsFit.headroom) may run out of memory in the long run.
    Where a config with headroom is within GIVE_WAY of it (the gap the benchmark counts as
    none), that one is recommended instead: a few percent are not worth a long run that may
    stop. A config that saves more is still recommended, and the note says how likely its long
    run is to fit and what the best config with headroom would cost, so that the user can
    weigh the two (its runs may never have gone over the limit, and then no other note says so).
    Where some of its own runs ran out of memory, it gives way up to GIVE_WAY_AFTER_OOM."""
    if chosen is None:
        return None, None
    tight = fits.get(chosen.trial)
    if tight is None or tight.headroom:
        return chosen, None
    metric = "usd" if by == "cost" else "hours"

    def value(o: OptionRow) -> float:
        return getattr(o, metric)

    safe = [o for o in feasible if o.trial not in fits or fits[o.trial].headroom]
    alt = min(safe, key=lambda o: (value(o), o.trial), default=None)
    more = "costs" if by == "cost" else "takes"
    limit = fmt_bytes(tight.limit_bytes)
    peaked = (f"{tight.oom_runs} of trial {chosen.trial}'s {tight.runs} runs ran out of memory under the "
              f"limit {limit}" if tight.oom_runs else
              f"trial {chosen.trial}'s runs peaked within their spread of the memory limit {limit}")
    peaked += f" (one more run fits with {tight.p_run:.0%} chance)"
    if alt is None:
        savers = what_would_fit(chosen.config or {})[:2]
        return chosen, (f"{headroom_note_start(by)}{chosen.trial} is recommended though {peaked}; no config "
                        f"measured has headroom. To give it some: {'; or '.join(savers)}")
    gap = f"{value(alt) / value(chosen) - 1:.1%} more"
    if value(alt) > value(chosen) * (1 + (GIVE_WAY_AFTER_OOM if tight.oom_runs else GIVE_WAY)):
        return chosen, (f"{headroom_note_start(by)}{chosen.trial} is recommended though {peaked}; trial "
                        f"{alt.trial}, the best config with headroom, {more} {gap}")
    return alt, (f"{headroom_note_start(by)}{alt.trial} is recommended over trial {chosen.trial}, though it "
                 f"{more} {gap}: {peaked}, trial {alt.trial}'s have headroom")
