"""What would make a config that does not fit a GPU's memory fit: the estimate re-run with each
memory saver alone (full checkpointing, micro-batch 1, ZeRO-3 or FSDP2 over more ranks,
offload to host memory), then with them together, as `autotune estimate --gpu` lists them.

    for change in fitting_changes(shape, mcfg, usable_bytes):
        change.flags, change.total_bytes     # "--zero-stage 3 --dp 4", 50.1e9 (and host_bytes)

Estimates, as the rest of `estimate` is: a sweep measures what really fits.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from pydantic import ValidationError

from autotune.estimate.compute import ModelShape
from autotune.estimate.memory import MemoryConfig, estimate_memory

# The command line's name for each knob a change sets (autotune/cli/estimate.py).
FLAGS = {"checkpointing": "--checkpointing", "micro_batch_size": "--micro-batch",
         "zero_stage": "--zero-stage", "fsdp": "--fsdp", "dp_degree": "--dp", "offload": "--offload"}
# The most data-parallel ranks a sharded change is tried over (one 1,024-GPU job).
MAX_DP = 1024


class Change(NamedTuple):
    flags: str  # the options that differ from the config's, as typed
    total_bytes: int  # its estimated peak per rank
    host_bytes: int  # what it offloads to host memory per rank


def _shard(cfg: MemoryConfig) -> dict[str, Any]:
    """Sharding every state: FSDP2 full_shard where the config runs FSDP2 or tensor parallelism
    (the worker runs ZeRO without TP only: trials/engines/deepspeed.py ZERO_WITH_TP), else ZeRO-3."""
    return {"fsdp": "full_shard"} if cfg.fsdp.value != "none" or cfg.tp_degree > 1 else {"zero_stage": 3}


def _tried(cfg: MemoryConfig) -> list[list[dict[str, Any]]]:
    """The changes tried, in rounds of more changes at once: each saver alone; sharding or
    offload with full checkpointing; then at micro-batch 1 too. A sharded one gets its ranks
    in _fitting."""
    full = {"checkpointing": "full"}
    offload = {**_shard(cfg), "offload": "optimizer+params"}
    rounds = [[full, _shard(cfg), offload], [{**_shard(cfg), **full}, {**offload, **full}]]
    if cfg.micro_batch_size > 1:
        rounds[0].insert(1, {"micro_batch_size": 1})
        rounds.append([{**u, "micro_batch_size": 1} for u in rounds[1]])
    return rounds


def _estimate(shape: ModelShape, cfg: MemoryConfig, update: dict[str, Any]) -> tuple[MemoryConfig, Any] | None:
    """The changed config and its estimate; None where the change cannot run."""
    try:
        changed = MemoryConfig.model_validate({**cfg.model_dump(), **update})
    except ValidationError:  # e.g. offload a layout cannot run
        return None
    return changed, estimate_memory(shape, changed)


def _flags(cfg: MemoryConfig, changed: MemoryConfig) -> str:
    before, after = cfg.model_dump(mode="json"), changed.model_dump(mode="json")
    return " ".join(f"{flag} {after[k]}" for k, flag in FLAGS.items() if after[k] != before[k])


# The data-parallel degrees a sharding change may use at a micro-batch, fewest first (a plan's
# global batch admits only its divisors: autotune.search.plan_fits).
DpChoices = Callable[[int], list[int]]


def doubling(start: int, most: int = MAX_DP) -> list[int]:
    """`start`, doubled up to `most`: the ranks a sharding change is tried over by default."""
    out = []
    while start <= most:
        out.append(start)
        start *= 2
    return out


def fitting_changes(shape: ModelShape, cfg: MemoryConfig, usable_bytes: int,
                    dp_choices: DpChoices | None = None) -> list[Change]:
    """The changes whose estimate fits `usable_bytes` per rank, from the first round of
    _tried that has any (the fewest changes at once); empty where none does. A sharding change
    runs over the fewest ranks of `dp_choices(micro_batch)` that fit (default: the config's,
    doubled up to MAX_DP)."""
    choices = dp_choices or (lambda _micro: doubling(cfg.dp_degree))
    for changes in _tried(cfg):
        found = [c for c in (_fitting(shape, cfg, u, usable_bytes, choices) for u in changes) if c and c.flags]
        if found:
            return list(dict.fromkeys(found))  # two changes that come to one config: one line
    return []


def _fitting(shape: ModelShape, cfg: MemoryConfig, update: dict[str, Any], usable_bytes: int,
             dp_choices: DpChoices) -> Change | None:
    """`update` applied to `cfg`, if it fits; a sharding one over the fewest data-parallel
    ranks of `dp_choices` where it does."""
    sharded = "zero_stage" in update or "fsdp" in update
    micro = update.get("micro_batch_size", cfg.micro_batch_size)
    for dp in dp_choices(micro) if sharded else [cfg.dp_degree]:
        got = _estimate(shape, cfg, {**update, "dp_degree": dp} if sharded else update)
        if got is None:
            return None
        changed, est = got
        if est.total_bytes <= usable_bytes:
            return Change(_flags(cfg, changed), est.total_bytes, est.host_bytes)
    return None
