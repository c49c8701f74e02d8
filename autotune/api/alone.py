"""The alone phase of `autotune sweep --side-by-side K`: in one slot, with the other slots
idle, the leaders (and so the picks) are measured again before they are recommended, and the
rest of the reserve races them one at a time; a pick without a run alone at the end is measured
alone beyond the reserve. Run by the side-by-side sweep's worker 0 (its trial pool is
warm) once every other worker has finished.

    done = alone_phase(spec, study, reserve=4, run=lambda spec, n: {...}, note=print, hw=hw, catalog=catalog)

`run(spec, n)` runs `n` trials of the study here (a `run_sweep` without baselines) and returns
what it did (`trials_run`, `stop_reason`, `interrupted`).
"""

from __future__ import annotations

import uuid
from typing import Any, Callable

Run = Callable[[Any, int], dict]


def alone_phase(spec, study, reserve: int, run: Run, note: Callable[[str], None], hw, catalog) -> dict:
    """First the leaders of the side-by-side phase (the cheapest and the fastest configs, in
    turn, up to the reserve) measured again alone, back to back in one block; then what is
    left of the reserve races (as a sweep one at a time does); then, beyond the reserve, the
    picks again while a pick has no run alone (the last runs can make another config the
    pick). Each config is measured alone once at most in this phase, so it ends: at worst
    every config measured beside others gets one run alone. Returns the runs' summaries and
    the configs (first trials) re-measured.

    Why the leaders and not only the pick: a run beside another trial is slower than alone by
    the interference, so a config with a run alone would beat rivals measured only beside
    others for that reason alone. Each leader gets one run alone, so they compare alike; the
    configs left with runs beside others only were behind them in that same condition. Why
    beyond the reserve: a recommendation measured only beside another trial carries the
    interference, which the user's long run, alone on its machine, does not."""
    out: dict = {"runs": [], "remeasured": [], "interrupted": False}
    if reserve <= 0:
        # No reserve, no phase, not even the picks beyond it: `budget.remeasure_trials: 0` means
        # never re-measure (autotune.api.side_by_side.alone_reserve), and --trials is the limit.
        return out
    left, raced, measured_alone = reserve, False, set()
    while not out["interrupted"]:
        if left > 0 and not raced:
            firsts = leaders_without_alone_run(study, left)
            if firsts:
                enqueue_repeats(study, firsts)
            else:
                enqueue_race(spec, study, left, hw, catalog)
            n, remeasure, raced = max(left, waiting(study)), max(left - len(firsts), 0), True
            note(f"alone: {n} trial(s) one at a time" + (
                f"; first the leaders {_numbers(firsts)} measured again" if firsts else ""))
        else:
            firsts = [n for n in leaders_without_alone_run(study, 2, picks_only=True)
                      if config_key(study, n) not in measured_alone]
            if not firsts:
                return out
            enqueue_repeats(study, firsts)
            n, remeasure = waiting(study), 0
            note(f"alone: the pick(s) {_numbers(firsts)} measured again, beyond the reserve "
                 "(the last runs made a config without a run alone the pick)")
        measured_alone |= {config_key(study, f) for f in firsts}
        done = run(spec.with_overrides(**{"budget.remeasure_trials": remeasure}), n)
        out["runs"].append(done)
        out["remeasured"] += firsts
        out["interrupted"] = bool(done.get("interrupted"))
        left -= done.get("trials_run", 0)
        if not done.get("trials_run"):
            return out  # it ran nothing (it failed): do not loop on it
    return out


def config_key(study, number: int) -> str | None:
    from autotune.record import TrialRecord

    trial = next(t for t in study.get_trials(deepcopy=False) if t.number == number)
    return TrialRecord.of(trial).config_key


def _numbers(ns: list[int]) -> str:
    return ", ".join(f"#{n}" for n in ns)


def leaders_without_alone_run(study, k: int, picks_only: bool = False) -> list[int]:
    """Up to `k` configs (their first trials) with no successful run alone yet: the cheapest
    and the fastest feasible options of the report in turn, the report's picks first (a
    cheapest config short of memory headroom may give way: autotune.report.picks.with_headroom;
    `picks_only`: the picks alone)."""
    from autotune.record import TrialRecord
    from autotune.report.build import collect
    from autotune.report.neighbours import neighbours

    frozen = study.get_trials(deepcopy=False)
    nbrs = neighbours(frozen)
    by_number = {t.number: t for t in frozen}
    alone = {TrialRecord.of(t).config_key for t in frozen
             if t.number in nbrs and not nbrs[t.number] and TrialRecord.of(t).status == "ok"}
    doc = collect(study)
    feasible = [o for o in doc["options"] if o["feasible"]]
    picks = {by: [doc[by]["trial"]] if doc.get(by) else [] for by in ("cheapest", "fastest")}
    by_cost = picks["cheapest"] + [o["trial"] for o in sorted(feasible, key=lambda o: (o["usd"], o["hours"]))]
    by_time = picks["fastest"] + [o["trial"] for o in sorted(feasible, key=lambda o: (o["hours"], o["usd"]))]
    if picks_only:
        by_cost, by_time = by_cost[:1], by_time[:1]
    firsts: list[int] = []
    for n in (n for pair in zip(by_cost, by_time) for n in pair):
        if len(firsts) < k and n not in firsts and TrialRecord.of(by_number[n]).config_key not in alone:
            firsts.append(n)
    return firsts


def enqueue_repeats(study, firsts: list[int]) -> None:
    """One repeat of each config, recorded as the sweep's re-measurements are (`repeat_of`,
    in one block)."""
    from autotune.record import TrialRecord

    block = f"alone-{uuid.uuid4().hex[:8]}"
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    for n in firsts:
        study.enqueue_trial(dict(by_number[n].params),
                            user_attrs=TrialRecord.attrs(repeat_of=n, race_block=block))


def enqueue_race(spec, study, left: int, hw, catalog) -> None:
    """Queue the block a sweep one at a time would race now (autotune.search.racing) on `hw`
    (the slot's hardware: every slot of one size has the same key)."""
    from autotune.search.racing import Racing

    racing = Racing(hw, catalog, left, True, spec.budget.max_usd, spec.budget.deadline_hours)
    members = racing.block(study, left)
    if members:
        racing.enqueue(study, members)


def waiting(study) -> int:
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
