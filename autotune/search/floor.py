"""A per-rank memory limit below what the runtime itself holds: no config can fit it.

    found = runtime_over_limit(trials, limit_bytes)   # trials: (number, config, bytes held before the build)
    if found:
        print("no config can fit the memory limit: " + held_before_build(*found))

On CPU ranks a trial in fresh ranks records what each rank's process held before its model was
built (TrialRecord.mem_before_build_bytes: Python, torch, the engine's and the workload's
libraries, the process group; trials/worker.py). Every config of the space holds at least what
the lightest engine's ranks hold there, whatever its micro-batch and savers: plain DDP under
torchrun, with no ZeRO, FSDP2, TP or compile (the others import more before their build). So one
such trial over the limit, by more than that figure moves between runs, rules out every config:
the sweep stops
(autotune.search.rules.StopRule) and the report says so (autotune.report.nothing_fits) instead
of advising savers that cannot reach it. A pooled rank (autotune.run.pool) records nothing: it
holds what its earlier trials left: 272 to 459 MiB over the 756 pooled runs of
benchmarks/results/truth_big_pool.json (287 to 458 over one config's 3), against 229 to 232 MiB
over the 120 fresh runs of benchmarks/search_ground_truth.json (cpu40). Only a limit set in the spec comes this low:
without one, a CPU rank's capacity is its share of the host's RAM.
"""

from __future__ import annotations

from typing import Any, Iterable

from autotune.contract import EngineKind, FSDPMode, Launcher, engine_for
from autotune.format import fmt_bytes
from autotune.record import TrialRecord

# The pre-build figure of fresh ranks moves by about 1.5% between runs (cpu40's 229 to 232 MiB,
# above); a limit within 5% of it is left to the trials to settle.
MARGIN = 1.05


def lightest(config: dict[str, Any]) -> bool:
    """The engine that holds the least before its build: plain DDP (or one rank), uncompiled
    (the engine as autotune.contract.engine_for resolves it for the worker)."""
    try:
        engine = engine_for(config.get("zero_stage") or 0, config.get("tp_degree") or 1,
                            Launcher(config["launcher"]) if config.get("launcher") else None,
                            FSDPMode(config.get("fsdp") or "none"))
    except ValueError:  # a value this version does not know: not the engine it knows least of
        return False
    return engine is EngineKind.ddp and not config.get("compile")


def runtime_over_limit(trials: Iterable[tuple[int, dict[str, Any], int | None]],
                       limit_bytes: int | None) -> tuple[int, int] | None:
    """(trial number, bytes its ranks held before the build) of the lightest engine's trial that
    held the least there, when even that is over the limit; None when it is not, or no trial of
    the lightest engine measured it."""
    held = [(number, before) for number, config, before in trials if before and config and lightest(config)]
    if not limit_bytes or not held:
        return None
    least = min(held, key=lambda t: t[1])
    return least if least[1] >= limit_bytes * MARGIN else None


def held_before_build(number: int, held_bytes: int) -> str:
    """Why no config can fit, after "no config can fit ...: "."""
    return (f"before building the model, trial {number}'s ranks already held {fmt_bytes(held_bytes)} "
            "(Python, torch, the process group), which every config holds at least: set the limit "
            "above that (memory: limit_bytes_per_rank in the spec), or run on a machine with more memory")


def over_limit_reason(frozen: Any, trials: list[Any]) -> str | None:
    """Why the sweep stops, when the trial just finished ran out of memory under the sweep's
    limit and no trial of the study held less than that limit before building its model;
    else None. `trials`: the study's (Optuna FrozenTrials); those of other hardware (another
    machine of a study shared across machines, another torch) say nothing of this one's runtime."""
    rec = TrialRecord.of(frozen)
    limit = rec.memory_prescreen.limit_bytes if rec.memory_prescreen is not None else None
    if rec.status != "oom" or not limit:
        return None
    records = [(t.number, TrialRecord.of(t)) for t in trials]  # on this trial's hardware only
    found = runtime_over_limit([(n, r.config or {}, r.mem_before_build_bytes) for n, r in records
                                if r.hardware == rec.hardware], limit)
    return None if found is None else (f"no config can fit the memory limit of {fmt_bytes(limit)} "
                                       f"per rank: {held_before_build(*found)}")
