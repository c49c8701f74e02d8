"""What to measure besides the sampler's proposals: baselines first, then local moves.

    enqueue_baselines(ctx)                    # a few sensible first configs, once per machine kind
    moves = LocalMoves(ctx, seed=0)           # ctx: autotune.search.context.SweepContext
    moves.enqueue_next(study)                 # an untried neighbour of the best configs
    moves.exhausted(study)                    # every config of a listable space tried?

Local moves: every second trial after the baselines, and whenever TPE proposes a config
already measured here (reused) or held back by the prescreen, the sweep queues an untried
neighbour of the best configs, so a sampler that has settled keeps finding new configs near
the best ones.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from autotune.contract import HardwareFingerprint
from autotune.record import TrialRecord
from autotune.run.processes import owner_attrs
from autotune.run.storage import claim
from autotune.search.machine import MachineSpace, preferred_precision
from autotune.search.objective import trial_config_for
from autotune.search.pareto import fronts
from autotune.search.reuse import config_key, key_on

if TYPE_CHECKING:
    from autotune.search.context import SweepContext

# Proposals in a row that launch nothing (reused, prescreened) before a sweep gives up on a
# space it cannot list (autotune.search.space_walk.enumerate_configs caps the listing).
MAX_IDLE_PROPOSALS = 50
# After the baselines, every second launched trial is a local move and the others are TPE's:
# TPE models the whole space, the moves try what is next to the best configs measured
# (scripts/bench_search.py compares a move every 1, 2 or 3 trials, or only on a repeat).
LOCAL_MOVE_EVERY = 2
ENUMERATE_LIMIT = 5000


# ---------------------------------------------------------------------------------------
# Baselines
# ---------------------------------------------------------------------------------------


def baseline_params(ms: MachineSpace, global_batch_samples: int | None,
                    num_nodes: int = 1) -> list[dict[str, Any]]:
    """A few sensible first configs on this machine, as Optuna params. The objective's
    structure, as DeepSpeed's autotuner uses it: throughput grows with the micro-batch until
    the device saturates or memory runs out, and memory savers (checkpointing, ZeRO, offload,
    TP) cost speed, so the sweep starts at the largest micro-batch of the space on all ranks
    with no memory saver (the memory prescreen holds it back, at no cost, when it cannot fit),
    then half of it (local moves carry on in the direction that improved,
    `LocalMoves.enqueue_next`); then one rank, and the memory-saving corner (full
    checkpointing at the largest micro-batch). Where accumulation is free (no fixed global
    batch) the largest is taken: more samples per optimizer step, for the same tokens. The
    precision that runs fastest on this machine (`autotune.search.machine.preferred_precision`).
    On `num_nodes` nodes (a fixed global batch is met over all of them)."""
    from autotune.search.space_walk import params_for

    rs = ms.restricted
    prefer = preferred_precision(ms.hardware)
    prec = prefer if prefer in rs.precision else rs.precision[0]
    micros = sorted(rs.micro_batch_size)
    base = dict(tp_degree=1, zero_stage=min(rs.zero_stage), offload="none",
                grad_accum_steps=max(rs.grad_accum_steps), precision=prec, checkpointing="none",
                num_gpus=max(rs.num_gpus))
    _, largest = params_for({**base, "micro_batch_size": micros[-1]}, rs, global_batch_samples, ms.full,
                            num_nodes)
    top = largest["micro_batch_size"]
    wanted = [
        {**base, "micro_batch_size": top},
        {**base, "micro_batch_size": max([m for m in micros if m < top], default=top)},
        {**base, "num_gpus": min(rs.num_gpus), "micro_batch_size": micros[len(micros) // 2]},
        {**base, "micro_batch_size": top, "checkpointing": "full"},
    ]
    out: list[dict[str, Any]] = []
    for w in wanted:
        params, _ = params_for(w, rs, global_batch_samples, ms.full, num_nodes)
        if params not in out:
            out.append(params)
    return out


def enqueue_baselines(ctx: "SweepContext") -> int:
    """Enqueue the baselines once per study and machine kind (an atomic claim, so two workers
    starting at once do not enqueue them twice): 0 if another worker already did."""
    study = ctx.study
    nodes = ctx.spec.launcher.num_nodes
    baselines = baseline_params(ctx.machine, ctx.spec.batch.global_batch_samples, nodes[0])
    if len(nodes) > 1:  # the node count their accumulation was derived for
        baselines = [{**params, "num_nodes": nodes[0]} for params in baselines]
    sig = hashlib.sha256(json.dumps(baselines, sort_keys=True, default=str).encode()).hexdigest()[:16]
    if not claim(study._storage, f"{study.study_name}/baselines/{sig}", owner_attrs()):
        return 0
    for params in baselines:
        study.enqueue_trial(params, user_attrs=TrialRecord.attrs(baseline=True))
    return len(baselines)


# ---------------------------------------------------------------------------------------
# Local moves: what to measure when the sampler repeats itself
# ---------------------------------------------------------------------------------------


def ranked_by_front(trials, hw: HardwareFingerprint) -> list:
    """This hardware's feasible complete trials (one per config), Pareto front first, then the
    front of the rest, and so on; cheapest first within a front."""
    from optuna.trial import TrialState

    done: dict[Any, Any] = {}
    for t in trials:
        rec = TrialRecord.of(t)
        if (t.state is TrialState.COMPLETE and t.values and rec.on(hw)
                and all(v <= 0 for v in t.constraints.values())):
            done.setdefault(key_on(rec, hw), t)
    ranked: list = []
    for front in fronts(done.values(), key=lambda t: tuple(t.values)):
        ranked += sorted(front, key=lambda t: (t.values[-1], t.values[0], t.number))
    return ranked


class LocalMoves:
    """When the sampler proposes a config this hardware has measured already (its model has
    settled on a region it knows) or one the memory prescreen holds back (TPE proposes those
    again and again: they carry no objective values to learn from), the sweep queues an
    untried neighbour (one dimension moved to the adjacent choice:
    `autotune.search.space_walk.neighbours`, in a seeded random order) of the best config that has
    one left: the Pareto front first, then the next front. A single measurement is noisy
    (docs/benchmarks.md: runs of one config differ by tens of percent on a shared CPU), so the
    runner-up's neighbours matter as much as the incumbent's. TPE keeps re-proposing its
    incumbent on a small space; without this, those proposals are spent measuring nothing
    (docs/benchmarks.md). The sweep also queues a move after every `LOCAL_MOVE_EVERY`-th
    launched trial past the baselines. On a space small enough to list, it also tells when
    every config has been tried."""

    def __init__(self, ctx: "SweepContext", seed: int):
        import random

        self.spec, self.ms, self.hw_key = ctx.spec, ctx.machine, ctx.hardware.key()
        self.rng = random.Random(seed)
        self.queued: set[str] = set()
        self._all_keys: set[str] = set()
        self._listed: dict[int, list] = {}  # by node count

    def key_for(self, values: dict[str, Any], num_nodes: int) -> str:
        """The config key these suggested values measure on this machine."""
        return config_key(trial_config_for(values, self.spec, self.ms, num_nodes, seed=0), self.hw_key)

    def tried(self, trials) -> set[str]:
        out = set()
        for t in trials:
            key = key_on(TrialRecord.of(t), self.ms.hardware)
            if key is not None:
                out.add(key)
        return out

    def outcomes(self, trials) -> dict[str, tuple[float, ...] | None]:
        """This hardware's measured configs: their objective values, None when the config
        failed or broke a constraint (out of memory, over the budget)."""
        from optuna.trial import TrialState

        out: dict[str, tuple[float, ...] | None] = {}
        for t in trials:
            key = key_on(TrialRecord.of(t), self.ms.hardware)
            if key is None or not t.state.is_finished() or TrialRecord.of(t).status == "prescreened":
                continue
            ok = (t.state is TrialState.COMPLETE and t.values
                  and all(v <= 0 for v in t.constraints.values()))
            out.setdefault(key, tuple(t.values) if ok else None)
        return out

    def enqueue_next(self, study) -> bool:
        """Queue one untried neighbour of the front; False when the front has none left.

        The objective's structure: along an ordered dimension (micro-batch, accumulation,
        ranks, ZeRO stage, ...) throughput usually rises to one peak and falls (or stops
        fitting), so a step that improved on a measured neighbour, or moved away from one
        that failed, is continued first in the same direction (a pattern search), before the
        other neighbours in a seeded random order."""
        from autotune.search.space_walk import steps

        trials = study.get_trials(deepcopy=False)
        tried = self.tried(trials) | self.queued
        seen = self.outcomes(trials)
        gb, rs, full = self.spec.batch.global_batch_samples, self.ms.restricted, self.ms.full
        for t in ranked_by_front(trials, self.ms.hardware):
            cfg = TrialRecord.of(t).config or {}
            nodes = int(cfg.get("num_nodes", 1))
            moves = steps(cfg, rs, gb, full, nodes)
            self.rng.shuffle(moves)
            keys = {(dim, d): self.key_for(values, nodes) for dim, d, _, values in moves}

            def continues(move, keys=keys, t=t) -> bool:
                behind = keys.get((move[0], -move[1]))
                if behind not in seen:
                    return False
                worse = seen[behind]
                return worse is None or all(a <= b for a, b in zip(t.values, worse))

            candidates = [(p, v) for _, _, p, v in sorted(moves, key=lambda m: not continues(m))]
            for params, values in candidates:
                key = self.key_for(values, nodes)
                if key in tried:
                    continue
                if len(self.spec.launcher.num_nodes) > 1:
                    params = {**params, "num_nodes": nodes}
                study.enqueue_trial(params, user_attrs=TrialRecord.attrs(local_move_from=t.number))
                self.queued.add(key)
                return True
        return False

    def exhausted(self, study) -> int | None:
        """The number of configs when every config this machine can run has been tried; None
        otherwise, or when the space is too large to list."""
        nodes = self.spec.launcher.num_nodes
        if not all(self.listed(n) for n in nodes):
            return None
        if not self._all_keys:
            self._all_keys = {self.key_for(v, n) for n in nodes for _, v in self.listed(n)}
        if not self._all_keys <= self.tried(study.get_trials(deepcopy=False)):
            return None
        return len(self._all_keys)

    def listed(self, num_nodes: int | None = None) -> list:
        """Every (Optuna params, TrialConfig values) of this machine's space on `num_nodes` nodes
        (default: the spec's first choice), listed once; [] when the space is too large to list
        (autotune.search.space_walk.enumerate_configs)."""
        from autotune.search.space_walk import enumerate_configs

        n = self.spec.launcher.num_nodes[0] if num_nodes is None else num_nodes
        if n not in self._listed:
            self._listed[n] = enumerate_configs(self.ms.restricted, self.spec.batch.global_batch_samples,
                                                self.ms.full, limit=ENUMERATE_LIMIT, num_nodes=n) or []
        return self._listed[n]
