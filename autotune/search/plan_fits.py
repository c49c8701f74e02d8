"""What `autotune plan` says to add to the search space when none of its configs fits a GPU:
the memory savers that make the smallest config fit (autotune.estimate.savers.fitting_changes,
what `autotune estimate --gpu` lists as flags), as the space's lists with the new choices in.

    mcfg = memory_config(c, seq_len=4096)     # a plan config's memory knobs
    space_changes(model, {"a100-40gb": mcfg}, {"a100-40gb": 36e9}, space,
                  global_batch_samples=8, most_gpus={"a100-40gb": 64})
    # "add to the space, for a100-40gb (36 GB usable): `zero_stage: [0, 3]` and
    #  `num_gpus: [1, 8]` (an estimated 32.5 GB per GPU), or ..."; None where nothing fits

A GPU count it names is one the plan can bill: the global batch splits over its data-parallel
ranks at a micro-batch of the change (a global batch of 12 takes ZeRO-3 over 12 GPUs where 8
would fit), and some offer of the type sells that many; where only more GPUs than any offer
sells would fit, it says so.
"""

from __future__ import annotations

from typing import Any

from autotune.estimate.compute import ModelShape
from autotune.estimate.memory import MemoryConfig
from autotune.estimate.savers import FLAGS, MAX_DP, Change, doubling, fitting_changes
from autotune.search.space import RestrictedSpace
from autotune.search.space_file import SearchSpace

# The estimate's flag -> the space dimension it sets; --dp becomes num_gpus (dp x tp).
DIMENSION_OF_FLAG = {flag: "num_gpus" if knob == "dp_degree" else knob for knob, flag in FLAGS.items()}
# Why an offload change is said apart: the plan bills no offload config (its host transfers
# and CPU optimizer step have no analytic model), so only a sweep measures it.
OFFLOAD_NOTE = "the plan leaves offload out: a sweep measures it"


def memory_config(c: dict[str, Any], seq_len: int) -> MemoryConfig:
    """The memory knobs of one of the plan's configs (autotune.search.plan's per-config dict)."""
    return MemoryConfig(seq_len=seq_len, micro_batch_size=c["micro_batch_size"], precision=c["precision"],
                        checkpointing=c["checkpointing"], zero_stage=c["zero_stage"],
                        dp_degree=c["num_gpus"] // c["tp_degree"], tp_degree=c["tp_degree"], fsdp=c["fsdp"])


def space_additions(change: Change, tp_degree: int) -> dict[str, Any]:
    """The space dimensions a change sets and their new choice: `--zero-stage 3 --dp 4` at TP 2
    -> {"zero_stage": 3, "num_gpus": 8}."""
    words = change.flags.split()
    out: dict[str, Any] = {}
    for flag, value in zip(words[::2], words[1::2]):
        dim = DIMENSION_OF_FLAG[flag]
        out[dim] = int(value) * (tp_degree if dim == "num_gpus" else 1) if value.isdigit() else value
    return out


def _with_choice(space: SearchSpace, dim: str, value: Any) -> str:
    """`dim: [...]`: the space's choices of `dim` with `value` among them, as YAML."""
    choices = [getattr(v, "value", v) for v in getattr(space, dim)]
    if value not in choices:
        choices = sorted(choices + [value]) if isinstance(value, int) else choices + [value]
    return f"`{dim}: [{', '.join(str(v) for v in choices)}]`"


def _said(change: Change, tp_degree: int, space: SearchSpace) -> str:
    """One change as the space's lists to type, with its estimate per GPU."""
    added = space_additions(change, tp_degree)
    lists = " and ".join(_with_choice(space, dim, v) for dim, v in added.items())
    host_gb = change.host_bytes / 1e9
    offloaded = f", {host_gb:,.0f} GB of host memory each; {OFFLOAD_NOTE}" if "offload" in added else ""
    return f"{lists} (an estimated {change.total_bytes / 1e9:,.1f} GB per GPU{offloaded})"


def dp_choices(mcfg: MemoryConfig, global_batch_samples: int | None, most_dp: int):
    """The data-parallel degrees a sharding change of `mcfg` may use at a micro-batch, fewest
    first: those that split the global batch (autotune.search.space.suggest: samples = micro x
    dp x accumulation), from the config's own up to `most_dp`; without a global batch, the
    config's doubled."""
    def at(micro: int) -> list[int]:
        if global_batch_samples is None:
            return doubling(mcfg.dp_degree, most_dp)
        per_rank = global_batch_samples // micro if global_batch_samples % micro == 0 else 0
        return [dp for dp in range(mcfg.dp_degree, min(per_rank, most_dp) + 1) if per_rank % dp == 0]
    return at


def split_counts(reach: dict[str, list[int]], rs: RestrictedSpace,
                 global_batch_samples: int | None) -> tuple[dict[str, list[int]], list[str]]:
    """The multi-node GPU counts the plan adds to the default space (`reach`: GPU type -> counts)
    that the global batch splits over at every TP degree of the space (`rs`, restricted to what
    the model runs) that divides them, at some micro-batch: the space's configs could not be
    listed with the others (autotune.search.space.suggest: DeepSeek-V3, TP 1 only, at a global
    batch of 64 on 128 GPUs), and a note on those left out."""
    if global_batch_samples is None:
        return reach, []

    def splits(n: int) -> bool:
        return all(any(global_batch_samples % (mb * (n // tp)) == 0 for mb in rs.micro_batch_size)
                   for tp in rs.tp_choices(n))

    kept = {gpu: [n for n in counts if splits(n)] for gpu, counts in reach.items()}
    gone = sorted({n for counts in reach.values() for n in counts if not splits(n)})
    if not gone:
        return kept, []
    return {gpu: counts for gpu, counts in kept.items() if counts}, [
        f"left out of the multi-node GPU counts: {', '.join(map(str, gone))}: the global batch "
        f"({global_batch_samples} samples) does not split over their data-parallel ranks at every TP "
        f"degree (raise batch.global_batch_samples to plan on them)"]


def space_changes(model: ModelShape, smallest: dict[str, MemoryConfig], usable_bytes: dict[str, float],
                  space: SearchSpace, global_batch_samples: int | None = None,
                  most_gpus: dict[str, int] | None = None) -> str | None:
    """What to add to `space` so that its smallest config on each GPU type (`smallest`) fits
    that type's `usable_bytes`, changes the plan can bill first; None where no change fits.
    `most_gpus`: the most GPUs an offer of each type sells (the catalog's; none: no cap)."""
    said: dict[str, list[str]] = {}  # what to add -> the GPU types it fits (one line for types alike)
    for gpu in sorted(smallest):
        mcfg, usable = smallest[gpu], int(usable_bytes[gpu])
        most = (most_gpus or {}).get(gpu) or MAX_DP * mcfg.tp_degree
        changes = fitting_changes(model, mcfg, usable, dp_choices(mcfg, global_batch_samples, most // mcfg.tp_degree))
        beyond = ""
        if not changes and most < MAX_DP * mcfg.tp_degree:  # only more GPUs than any offer sells would do
            changes = fitting_changes(model, mcfg, usable, dp_choices(mcfg, global_batch_samples, MAX_DP))
            beyond = (f" (more GPUs than any {gpu} offer sells, {most} at most: add a multi-node offer "
                      f"with --catalog FILE)")
        # Stable: the changes the plan bills before the offload ones only a sweep measures.
        changes.sort(key=lambda ch: "--offload" in ch.flags)
        if changes:
            key = f"{usable_bytes[gpu] / 1e9:,.0f} GB usable): " + ", or ".join(
                _said(ch, mcfg.tp_degree, space) for ch in changes) + beyond
            said.setdefault(key, []).append(gpu)
    return "; ".join(f"add to the space, for {' and '.join(gpus)} ({text}" for text, gpus in said.items()) or None
