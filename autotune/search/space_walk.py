"""The configs of a restricted space, walked without an Optuna trial: every config
(`enumerate_configs`), the config closest to one wanted (`params_for`, the inverse of
autotune.search.space.suggest), and the configs one step away (`neighbours`, `steps`).

    params, values = params_for({"micro_batch_size": 4}, rs, global_batch_samples=32)
    configs = enumerate_configs(rs, 32, limit=5000)      # None when the space has more
    for params, moved in neighbours(values, rs, 32): ...
"""

from __future__ import annotations

from typing import Any

from autotune.contract import FSDPMode, Precision
from autotune.search.space import RestrictedSpace, suggest


class _Chooser:
    """Stands in for an Optuna trial: answers each suggestion with the wanted value (or the
    closest allowed choice) and records the parameter names used."""

    def __init__(self, wanted: dict[str, Any]):
        self.wanted = {k: getattr(v, "value", v) for k, v in wanted.items()}
        self.params: dict[str, Any] = {}

    def suggest_within(self, name: str, choices: list[Any], _full: list[Any]) -> Any:
        want = self.wanted.get(name)
        if want in choices:
            value = want
        elif isinstance(want, int) and all(isinstance(c, int) for c in choices):
            value = min(choices, key=lambda c: (abs(c - want), c))
        else:
            value = choices[0]
        self.params[name] = value
        return value


def params_for(wanted: dict[str, Any], rs: RestrictedSpace, global_batch_samples: int | None = None,
               full: RestrictedSpace | None = None, num_nodes: int = 1) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Optuna params, TrialConfig values) of the config closest to `wanted` on this machine,
    on `num_nodes` nodes."""
    chooser = _Chooser(wanted)
    values = suggest(chooser, rs, global_batch_samples, full, num_nodes)
    return chooser.params, values


class _PathTrial:
    """Answers each suggestion along a fixed path of allowed-choice indices (for enumeration)."""

    def __init__(self, path: list[int]):
        self.path, self.depth = path, 0
        self.arity: list[int] = []
        self.params: dict[str, Any] = {}

    def suggest_within(self, name: str, choices: list[Any], _full: list[Any]) -> Any:
        i = self.path[self.depth] if self.depth < len(self.path) else 0
        self.arity.append(len(choices))
        self.depth += 1
        self.params[name] = choices[i]
        return choices[i]


def enumerate_configs(rs: RestrictedSpace, global_batch_samples: int | None = None,
                      full: RestrictedSpace | None = None, limit: int | None = None,
                      num_nodes: int = 1) -> list[tuple[dict[str, Any], dict[str, Any]]] | None:
    """Every (Optuna params, TrialConfig values) pair `suggest` can return on `num_nodes` nodes,
    depth first in the space's order; None when there are more than `limit` (a space too large
    to list)."""
    out: list[tuple[dict[str, Any], dict[str, Any]]] = []
    stack: list[list[int]] = [[]]
    while stack:
        path = stack.pop()
        t = _PathTrial(path)
        values = suggest(t, rs, global_batch_samples, full, num_nodes)
        if len(path) < len(t.arity):  # an unexplored decision: branch on it
            stack.extend(path + [i] for i in reversed(range(t.arity[len(path)])))
            continue
        out.append((t.params, values))
        if limit is not None and len(out) > limit:
            return None
    return out


# The dimensions a local move changes, one at a time, to the next choice up or down.
_STEP_DIMS = ("num_gpus", "tp_degree", "micro_batch_size", "grad_accum_steps", "precision",
              "checkpointing", "zero_stage", "offload", "fsdp", "compile")


def neighbours(values: dict[str, Any], rs: RestrictedSpace, global_batch_samples: int | None = None,
               full: RestrictedSpace | None = None, num_nodes: int = 1) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The configs one step away from `values`: one dimension moved to the adjacent choice of
    this machine's list (the others kept where still valid, e.g. accumulation re-derived for a
    fixed global batch), as (Optuna params, TrialConfig values), without `values` itself."""
    return [(params, moved) for _, _, params, moved in steps(values, rs, global_batch_samples, full, num_nodes)]


def steps(values: dict[str, Any], rs: RestrictedSpace, global_batch_samples: int | None = None,
          full: RestrictedSpace | None = None,
          num_nodes: int = 1) -> list[tuple[str, int, dict[str, Any], dict[str, Any]]]:
    """`neighbours` as (dimension, direction -1 or +1, Optuna params, TrialConfig values)."""
    plain = {"fsdp": "none", "compile": False, **{k: getattr(v, "value", v) for k, v in values.items()}}
    lists: dict[str, list[Any]] = {"num_gpus": rs.num_gpus, "tp_degree": rs.tp_choices(int(plain["num_gpus"])),
             "micro_batch_size": rs.micro_batch_size, "grad_accum_steps": rs.grad_accum_steps,
             "precision": [p.value for p in rs.precision_choices(bool(plain["compile"]))],
             "compile": [c for c in rs.compile_choices()
                         if c or Precision(plain["precision"]) is not Precision.fp8],
             "checkpointing": [c.value for c in rs.checkpointing], "zero_stage": rs.zero_stage,
             "offload": [o.value for o in rs.offload_choices(int(plain["zero_stage"]),
                                                             FSDPMode(plain.get("fsdp", "none")))],
             "fsdp": [f.value for f in rs.fsdp_choices(int(plain["zero_stage"]),
                                                       Precision(plain["precision"]))]}
    out: list[tuple[str, int, dict[str, Any], dict[str, Any]]] = []
    seen = {_values_key(values)}
    for dim in _STEP_DIMS:
        choices = lists[dim]
        if plain[dim] not in choices:
            continue
        i = choices.index(plain[dim])
        for j in (i - 1, i + 1):
            if not 0 <= j < len(choices):
                continue
            params, moved = params_for({**plain, dim: choices[j]}, rs, global_batch_samples, full, num_nodes)
            k = _values_key(moved)
            if k not in seen:
                seen.add(k)
                out.append((dim, j - i, params, moved))
    return out


def _values_key(values: dict[str, Any]) -> tuple:
    defaults = {"compile": False}
    return tuple(str(getattr(v, "value", v)) for v in
                 (values.get(k, defaults.get(k, "none")) for k in _STEP_DIMS))
