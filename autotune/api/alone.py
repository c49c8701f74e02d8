"""The alone phase of `autotune sweep --side-by-side K`: in one slot, with the other slots
idle, the picks are measured again before they are recommended, and the rest of the reserve
races the leaders one at a time. Run by the side-by-side sweep's worker 0 (its trial pool is
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
    """Measure again each pick (cheapest, fastest) that has no run alone; race with what is
    left of the reserve (as a sweep one at a time does); again once if the last trials changed
    the pick (its run alone then comes beyond the reserve). Returns the runs' summaries and
    the picks re-measured."""
    out: dict = {"runs": [], "remeasured": [], "interrupted": False}
    left, raced, over = reserve, False, False
    while not out["interrupted"]:
        picks = picks_without_alone_run(study)
        said = f"the pick(s) {', '.join(f'#{n}' for n in picks)} measured again"
        if left > 0 and not raced:  # one run: the picks' repeats first, then racing
            if picks:
                enqueue_repeats(study, picks)
            else:
                enqueue_race(spec, study, left, hw, catalog)
            n, remeasure, raced = max(left, waiting(study)), left, True
            note(f"alone: {n} trial(s) one at a time" + (f"; {said} first" if picks else ""))
        elif picks and not over:
            enqueue_repeats(study, picks)
            n, remeasure, over = waiting(study), 0, True
            note(f"alone: {said} (the pick changed at the end of the reserve)")
        else:
            if picks:
                note(f"{said.replace('measured again', 'have no run alone')}: the reserve is spent; "
                     "more --trials would measure them alone")
            return out
        done = run(spec.with_overrides(**{"budget.remeasure_trials": remeasure}), n)
        out["runs"].append(done)
        out["remeasured"] += picks
        out["interrupted"] = bool(done.get("interrupted"))
        left -= done.get("trials_run", 0)
        if not done.get("trials_run"):
            return out  # it ran nothing (it failed): do not loop on it
    return out


def picks_without_alone_run(study) -> list[int]:
    """The cheapest and the fastest config (their first trials) that have no successful run
    alone yet (autotune.report.neighbours)."""
    from autotune.record import TrialRecord
    from autotune.report.build import collect
    from autotune.report.neighbours import neighbours

    frozen = study.get_trials(deepcopy=False)
    nbrs = neighbours(frozen)
    by_number = {t.number: t for t in frozen}
    alone = {TrialRecord.of(t).config_key for t in frozen
             if t.number in nbrs and not nbrs[t.number] and TrialRecord.of(t).status == "ok"}
    doc = collect(study)
    firsts: list[int] = []
    for key in ("cheapest", "fastest"):
        n = doc[key]["trial"] if doc[key] is not None else None
        if n is not None and n not in firsts and TrialRecord.of(by_number[n]).config_key not in alone:
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
