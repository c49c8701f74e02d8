"""`autotune plan`: the whole search on the analytic models alone, for hardware you don't have.

    result = plan(spec, catalog, hfu=0.35)           # no trial is run
    result.bills[:10], result.not_fitting, result.assumptions

For every GPU type with an offer and every config of the spec's search space: memory from
`autotune.estimate.memory` (configs over the GPU's memory are dropped), time from the FLOPs
of `autotune.estimate.compute` at a stated fraction of the GPU's dense peak, communication
from `autotune.estimate.scaling` (ring collectives, no overlap assumed), and the bill from
`autotune.pricing.cost`. Every figure is an estimate and says so.

The spec's limits apply as in a sweep: configs over `memory.limit_bytes_per_rank` (less
`memory.safety_margin`) are not planned (the sweep's prescreen would not launch them), and
bills over `budget.max_usd` or past `budget.deadline_hours` are not recommended
(`PlanResult.over_limits`, as the sweep's report leaves infeasible options out of its
cheapest and fastest).

Large models reach beyond one node: with the default space, a GPU type whose largest node
cannot hold the model's training state (16 bytes/param, mixed-precision Adam) also gets the
counts 16, 32, ... 512 its multi-node offers sell. When nothing can be billed,
`PlanResult.why_none` says why (memory, no offer with that many GPUs, no known inter-node
bandwidth) and what to add.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.contract import FSDPMode, Offload, Precision
from autotune.errors import UserError
from autotune.estimate.compute import (
    FP8_SPEEDUP_OVER_BF16,
    FP8_SPEEDUP_SOURCE,
    ModelShape,
    flops_per_token,
    hardware_flops_per_token,
    tp_rank_flops_share,
)
from autotune.estimate.memory import MemoryConfig, estimate_memory
from autotune.estimate.scaling import CommModel, comm_s, grad_bytes_per_param, link_for, tp_bytes
from autotune.estimate.workload import model_from_workload
from autotune.format import fmt_bytes, fmt_hours, fmt_usd
from autotune.pricing.catalog import Catalog
from autotune.pricing.cost import Bill, Infeasible, Skipped, Throughput, compute_bill, rank
from autotune.pricing.target import tokens_to_target
from autotune.search.plan_fits import memory_config, space_changes, split_counts
from autotune.search.plan_memory import MEMORY_MARGIN, capacity, margin_counts, spec_fix, spec_memory, usable
from autotune.search.plan_types import plan_types
from autotune.search.score import job_from_model
from autotune.search.space import RestrictedSpace, unrestricted
from autotune.search.space_file import SearchSpace, load_space
from autotune.search.space_walk import enumerate_configs
from autotune.spec import MemorySpec, SweepSpec

# The stated default: torchtitan's Llama 3.1 8B FSDP runs on 8 and 128 H100 reach 33-39% MFU
# without Float8 (github.com/pytorch/torchtitan, benchmarks/llama3_h100_202412_torchtitan.md,
# torchtitan commit 9dec370, Dec 2024).
DEFAULT_HFU = 0.35
# Training state per parameter with mixed-precision Adam: 2 (16-bit weights) + 2 (gradients)
# + 12 (fp32 master, two moments) bytes (Rajbhandari et al. 2019, ZeRO, sec. 3.1).
STATE_BYTES_PER_PARAM = 16
# Multi-node GPU counts the default space reaches, up to what the catalog's offers sell.
MULTI_NODE_COUNTS = (16, 32, 64, 128, 256, 512)


@dataclass
class PlanResult:
    bills: list[Bill]            # within the spec's budget and deadline, cheapest first
    skipped: list[Skipped]
    configs: int                 # (config, GPU type) pairs considered
    not_fitting: int             # of those, over the GPU's memory (or the spec's limit per rank)
    assumptions: list[str] = field(default_factory=list)
    why_none: str | None = None  # when no bill: why, and what to add (a UserError's text)
    over_limits: list[Bill] = field(default_factory=list)  # billed, not recommended: cheapest first
    limit_notes: list[str] = field(default_factory=list)   # what the spec's limits left out


def model_of(spec: SweepSpec) -> ModelShape:
    model = model_from_workload(spec.workload)
    if model is not None:
        return model
    raise UserError("`autotune plan` needs the model's shape; an entry-point workload has none",
                    fix="use a gpt or hf workload in the spec (or `autotune cost --mfu --params`)")


def _configs(rs: RestrictedSpace, global_batch_samples: int | None):
    """Every config a sweep of this space could launch (space_walk.enumerate_configs, the sweep's
    own rules: FSDP2 at stage 0, TP without ZeRO, the batch's accumulation), less offload (see the
    assumptions); compile only where it decides (fp8): the FLOPs model has no compile speed-up."""
    seen = set()
    for _, v in enumerate_configs(rs, global_batch_samples) or []:
        if v["offload"] is not Offload.none:
            continue
        c = {k: v[k] for k in ("num_gpus", "micro_batch_size", "grad_accum_steps", "precision",
                               "checkpointing", "zero_stage", "tp_degree", "fsdp")}
        key = tuple(c.values())
        if key not in seen:
            seen.add(key)
            yield c


def _label(c: dict, gpu: str) -> str:
    parts = [f"{c['num_gpus']}x {gpu}", f"mb{c['micro_batch_size']}", f"ga{c['grad_accum_steps']}",
             c["precision"].value + ("+compile" if c["precision"] is Precision.fp8 else ""),
             f"ckpt:{c['checkpointing'].value}"]
    if c["zero_stage"]:
        parts.append(f"zero{c['zero_stage']}")
    if c["fsdp"] is not FSDPMode.none:
        parts.append(f"fsdp:{c['fsdp'].value}")
    if c["tp_degree"] > 1:
        parts.append(f"tp{c['tp_degree']}")
    return " ".join(parts)


def _beyond_one_node(model: ModelShape, catalog: Catalog, types: list[str]) -> dict[str, list[int]]:
    """GPU type -> multi-node counts its offers sell, for the types whose largest node cannot
    hold the model's training state (an empty list: no offer of that type sells more)."""
    out = {}
    for gpu in types:
        offers = catalog.offers_for(gpu)
        mem = catalog.gpus[gpu].memory_bytes
        node = max((o.gpus_per_node for o in offers), default=0)
        if not node or not mem or model.params * STATE_BYTES_PER_PARAM <= node * mem:
            continue
        top = max(o.max_gpus for o in offers)
        out[gpu] = [n for n in MULTI_NODE_COUNTS if node < n <= top]
    return out


@dataclass
class _Tally:
    """What the plan found over every config and GPU type."""

    fits: dict[str, set[int]] = field(default_factory=dict)  # GPU type -> counts that fit
    smallest_mem: dict[str, float] = field(default_factory=dict)  # GPU type -> least memory needed
    smallest_cfg: dict[str, MemoryConfig] = field(default_factory=dict)  # GPU type -> that config's knobs
    no_network: dict[str, set[str]] = field(default_factory=dict)  # GPU type -> offers, link unknown
    bills: list[Bill] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    configs: int = 0
    not_fitting: int = 0
    over_spec_memory: int = 0  # of not_fitting, those within the GPU's memory but not the spec's limit


@dataclass
class _Planning:
    """One plan's inputs, read by every config."""

    spec: SweepSpec
    catalog: Catalog
    model: ModelShape
    types: list[str]
    hfu: float
    tally: _Tally
    mem_cache: dict[tuple, int] = field(default_factory=dict)
    tokens_cache: dict[int, tuple[float, str]] = field(default_factory=dict)

    @property
    def seq(self) -> int:
        return self.spec.seq_len


def plan(spec: SweepSpec, catalog: Catalog, hfu: float = DEFAULT_HFU,
         gpu_types: list[str] | None = None) -> PlanResult:
    if not 0 < hfu <= 1:
        raise UserError(f"--mfu {hfu} is not in (0, 1]", fix="give a fraction, e.g. --mfu 0.35")
    model = model_of(spec)
    space = load_space(spec.space, spec.source)
    types = plan_types(catalog, gpu_types, [p.value for p in space.precision])
    large = _beyond_one_node(model, catalog, types)
    reach = {gpu: counts for gpu, counts in large.items() if counts} if spec.space == "default" else {}
    reach, unsplit = split_counts(reach, unrestricted(space, model.tp_heads, model.tp_why),
                                  spec.batch.global_batch_samples)
    if reach:
        space = space.model_copy(update={"num_gpus": sorted(set(space.num_gpus).union(*reach.values()))})
    rs = unrestricted(space, model.tp_heads, model.tp_why)
    assumptions = _assumptions(model, rs, hfu, reach, spec.memory) + unsplit
    if rs.dropped:  # as the sweep's start says which choices it cannot run
        assumptions.append("left out, as a sweep of this space leaves them out: " + rs.dropped_text())
    p = _Planning(spec, catalog, model, types, hfu, _Tally())
    for c in _configs(rs, spec.batch.global_batch_samples):
        _plan_config(p, c)
    if len({t for t, _ in p.tokens_cache.values()}) == 1 and p.tokens_cache:
        assumptions.insert(1, f"target: {next(iter(p.tokens_cache.values()))[1]}")
    else:
        assumptions.insert(1, "target: depends on each config's global batch (steps or loss target)")
    tally = p.tally
    within, over, notes = _within_limits(tally.bills, spec)
    if tally.over_spec_memory:
        notes.insert(0, f"{tally.over_spec_memory} (config, GPU type) pair(s) fit the GPU's memory but not "
                        f"{spec_memory(spec.memory, exact=True)}: not planned, as a sweep would not launch them")
    why = None if within else _no_limits_met(spec, over) if over else _why_none(
        catalog, types, tally, [gpu for gpu, counts in large.items() if not counts], model, spec, space)
    return PlanResult(rank(within), tally.skipped, tally.configs, tally.not_fitting, assumptions, why,
                      rank(over), notes)


def _within_limits(bills: list[Bill], spec: SweepSpec) -> tuple[list[Bill], list[Bill], list[str]]:
    """(within, over, notes): the bills within the spec's budget.max_usd and
    budget.deadline_hours (at most each, as autotune.report.options.apply_limits judges a
    sweep's options), those over either, and a note per limit that left some out."""
    max_usd, deadline = spec.budget.max_usd, spec.budget.deadline_hours
    dear = {id(b) for b in bills if max_usd is not None and b.usd > max_usd}
    late = {id(b) for b in bills if deadline is not None and b.hours > deadline}
    notes = []
    if dear:
        notes.append(f"{len(dear)} option(s) over budget.max_usd {fmt_usd(max_usd)} not recommended")
    if late:
        notes.append(f"{len(late)} option(s) past budget.deadline_hours {deadline:g} ({fmt_hours(deadline)}) "
                     "not recommended")
    return ([b for b in bills if id(b) not in dear | late], [b for b in bills if id(b) in dear | late], notes)


def _no_limits_met(spec: SweepSpec, over: list[Bill]) -> str:
    """Why nothing is recommended when every bill breaks a limit: the limits, and what the
    cheapest and the fastest bill over them would take (the report's best_by_cost / _time)."""
    cheap = min(over, key=lambda b: (b.usd, b.hours))
    fast = min(over, key=lambda b: (b.hours, b.usd))
    budget = spec.budget
    limits = ", ".join(([f"budget.max_usd {fmt_usd(budget.max_usd)}"] if budget.max_usd is not None else [])
                       + ([f"budget.deadline_hours {budget.deadline_hours:g} ({fmt_hours(budget.deadline_hours)})"]
                          if budget.deadline_hours is not None else []))
    return str(UserError(
        f"no option meets the spec's limits ({limits}): none recommended; over them, the "
        f"cheapest is {cheap.config} on {cheap.offer} ({fmt_usd(cheap.usd)}, {fmt_hours(cheap.hours)}) and "
        f"the fastest {fast.config} on {fast.offer} ({fmt_hours(fast.hours)}, {fmt_usd(fast.usd)})",
        fix="raise budget.max_usd / budget.deadline_hours in the spec, or add GPUs or GPU types to "
            "plan on (--gpu)"))


def _assumptions(model: ModelShape, space: RestrictedSpace, hfu: float, reach: dict[str, list[int]],
                 memory: MemorySpec) -> list[str]:
    """What every figure of the plan rests on, said once."""
    out = [
        f"every figure is estimated: no trial was run ({model.name}, {model.params:,} parameters, "
        f"{model.source})",
        f"the hardware reaches {hfu:.0%} of its dense peak on the executed FLOPs (stated; "
        f"recomputation adds its FLOPs, so MFU is lower with activation checkpointing)",
        "communication: ring collectives at the datasheet link bandwidth, none hidden behind compute",
        f"memory: analytic estimate + {MEMORY_MARGIN:.0%} headroom (no calibration on this hardware)",
    ]
    if memory.limit_bytes_per_rank:  # as the sweep's prescreen: the smaller of the device's memory and the spec's limit
        out[-1] += (f", under the GPU's memory or memory.limit_bytes_per_rank "
                    f"{fmt_bytes(memory.limit_bytes_per_rank)}, the smaller")
    margin = memory.safety_margin or 0.0
    if margin_counts(memory):  # the sweep's fixed margin keeps more than the plan's headroom
        out[-1] += f"; memory.safety_margin {margin:g}: under that limit / {1 + margin:g}"
    if Precision.fp8 in space.precision:
        # Never the bf16 fraction of the fp8 peak (2x bf16's): fp8 training does not reach it.
        out.append(f"fp8 configs are planned with torch.compile (torchao float8 pays only "
                   f"compiled): the bf16 estimate on the same GPU, {FP8_SPEEDUP_OVER_BF16:g}x "
                   f"faster ({FP8_SPEEDUP_SOURCE}); an upper figure for models under 8B")
    if any(o is not Offload.none for o in space.offload):
        out.append("offload configs left out: their host transfers and CPU optimizer step "
                   "have no analytic model here (measure them with a sweep)")
    for gpu, counts in reach.items():
        out.append(f"{gpu}: the training state ({STATE_BYTES_PER_PARAM} B/param = "
                   f"{model.params * STATE_BYTES_PER_PARAM / 1e9:,.0f} GB) exceeds one node, so the "
                   f"default space also tries {', '.join(map(str, counts))} GPUs (multi-node offers)")
    return out


def _plan_config(p: _Planning, c: dict[str, Any]) -> None:
    """One config's memory, target and communication, then its bill on every GPU type."""
    model, seq = p.model, p.seq
    prec: Precision = c["precision"]
    dp = c["num_gpus"] // c["tp_degree"]
    key = tuple(sorted((k, str(v)) for k, v in c.items()))
    mcfg = memory_config(c, seq)
    if key not in p.mem_cache:
        p.mem_cache[key] = estimate_memory(model, mcfg).total_bytes
    gbt = c["micro_batch_size"] * c["grad_accum_steps"] * dp * seq
    if gbt not in p.tokens_cache:
        target = tokens_to_target(p.spec.target, gbt, None)
        p.tokens_cache[gbt] = (target.tokens, target.basis)
    tokens, _ = p.tokens_cache[gbt]
    act_bytes = 4 if prec is Precision.fp32 else 2
    comm = CommModel(
        params=model.params, grad_bytes_per_param=grad_bytes_per_param(prec.value, c["zero_stage"]),
        param_bytes_per_param=4 if prec is Precision.fp32 else 2, zero_stage=c["zero_stage"], fsdp=c["fsdp"].value,
        tp_degree=c["tp_degree"], grad_accum_steps=c["grad_accum_steps"],
        local_params=model.tp_local_params(c["tp_degree"]),
        tp_bytes_per_step=tp_bytes(model.n_layers or 0, model.d_model or 0,
                                   c["micro_batch_size"] * seq, c["tp_degree"], act_bytes,
                                   c["grad_accum_steps"]))
    job = job_from_model(model.params, prec is not Precision.fp32, "adamw", tokens, p.spec.target.dataset_tokens)
    for gpu in p.types:
        _plan_on_gpu(p, c, gpu, (p.mem_cache[key], mcfg), tokens, comm, job)


def _plan_on_gpu(p: _Planning, c: dict[str, Any], gpu: str, memory: tuple[int, MemoryConfig], tokens: float,
                 comm, job) -> None:
    """The config's throughput on one GPU type from the stated fraction of its peak, and its
    bill on every offer of that type that rents its GPU count."""
    prec: Precision = c["precision"]
    seq, g, t = p.seq, p.catalog.gpus[gpu], p.tally
    # fp8: bf16's peak and fraction, sped up by the stated ratio (assumptions).
    speedup = FP8_SPEEDUP_OVER_BF16 if prec is Precision.fp8 else 1.0
    peak = g.peak_flops("bf16") if prec is Precision.fp8 else g.peak_flops(prec.value)
    if not g.peak_flops(prec.value) or not peak or not g.memory_bytes:
        return  # fp8 on Ampere, or a GPU without sourced peaks
    t.configs += 1
    mem, mcfg = memory
    if mem < t.smallest_mem.get(gpu, float("inf")):  # the config whose changes why_none names
        t.smallest_mem[gpu], t.smallest_cfg[gpu] = mem, mcfg
    cap = capacity(g.memory_bytes, p.spec.memory.limit_bytes_per_rank)
    if mem > cap * usable(p.spec.memory):
        t.not_fitting += 1
        if mem <= g.memory_bytes * (1 - MEMORY_MARGIN):  # the GPU would hold it: the spec's limit did not
            t.over_spec_memory += 1
        return
    t.fits.setdefault(gpu, set()).add(c["num_gpus"])
    hw_fpt = hardware_flops_per_token(p.model, seq, c["checkpointing"].value)
    # Each of a data-parallel replica's tp GPUs runs its share of the micro-batches' FLOPs at
    # hfu x peak: what the TP plan splits, 1/tp of it, and the rest whole (tp_rank_flops_share).
    share = tp_rank_flops_share(p.model, seq, c["tp_degree"])
    split_text = f"({share:.0%} of them on each TP rank) " if c["tp_degree"] > 1 else ""
    compute_s = c["micro_batch_size"] * seq * c["grad_accum_steps"] * hw_fpt * share / (p.hfu * peak * speedup)
    label = _label(c, gpu)
    dp = c["num_gpus"] // c["tp_degree"]
    for o in p.catalog.offers_for(gpu, c["num_gpus"]):
        if p.spec.platforms.offers and o.name not in p.spec.platforms.offers:
            continue
        cs = comm_s(comm, link_for(g, o), c["num_gpus"])
        if cs is None:
            t.no_network.setdefault(gpu, set()).add(o.name)
            t.skipped.append(Skipped(o.name, f"{label}: no bandwidth known between its nodes"))
            continue
        step = compute_s + cs
        tps = dp * c["micro_batch_size"] * seq * c["grad_accum_steps"] / step
        mfu = tps * flops_per_token(p.model, seq) / (c["num_gpus"] * peak)
        nodes = o.nodes_for(c["num_gpus"])
        over = (f"{g.interconnect or 'the GPU link'} within nodes, {o.inter_node_gb_per_s:g} GB/s "
                f"per node between {nodes} nodes" if nodes > 1 else (g.interconnect or "one node"))
        rate = (f"{p.hfu:.0%} of {gpu} bf16 peak x {speedup:g} for fp8+compile (torchao)"
                if speedup != 1.0 else f"{p.hfu:.0%} of {gpu} {prec.value} peak")
        basis = (f"estimated: {rate} on {hw_fpt:.3g} FLOPs/token {split_text}"
                 f"(MFU {mfu:.1%} of the {'bf16' if speedup != 1.0 else prec.value} peak), "
                 f"{cs:.3g} s of collectives per {step:.3g} s step over "
                 f"{over}, memory {mem / 1e9:.1f} GB of {cap / 1e9:g} GB"
                 + (" (memory.limit_bytes_per_rank)" if cap < g.memory_bytes else ""))
        tp_ = Throughput(gpu, c["num_gpus"], tps, basis, compute_s / step, label)
        try:
            t.bills.append(compute_bill(o, tokens, tp_, job, price_unit=p.catalog.unit(gpu)))
        except Infeasible as exc:
            t.skipped.append(Skipped(o.name, f"{label}: {exc}"))


def _why_none(catalog: Catalog, types: list[str], tally: _Tally, single_node: list[str], model: ModelShape,
              spec: SweepSpec, space: SearchSpace) -> str:
    """Why no config got a bill, and what to add, as a UserError's text. `single_node`: the
    types whose nodes cannot hold the training state and that no offer sells beyond a node;
    `spec`: its memory limit and margin, and global batch; `space`: the space planned."""
    memory = spec.memory
    state_bytes = model.params * STATE_BYTES_PER_PARAM
    configs, fits, smallest_mem, no_network = tally.configs, tally.fits, tally.smallest_mem, tally.no_network
    if not types or not configs:
        why = (f"{', '.join(types)} {'lacks' if len(types) == 1 else 'lack'} sourced peaks or memory"
               if types else "no GPU type has an offer")
        return str(UserError(f"no GPU type to plan on ({why}, or the space holds no valid config)",
                             fix="pick a GPU type with --gpu (list them: autotune catalog)"))
    clusters = sorted({o.gpu for o in catalog.offers if o.max_nodes > 1 and o.inter_node_gb_per_s})
    if not fits and single_node:
        return str(UserError(
            f"no config fits: the training state ({state_bytes / 1e9:,.0f} GB at {STATE_BYTES_PER_PARAM} "
            f"B/param) needs more than one node of {', '.join(single_node)}, and no offer of "
            f"{'it' if len(single_node) == 1 else 'them'} sells more than one node",
            fix=f"add a multi-node offer of {single_node[0]} (max_nodes, inter_node_gb_per_s) with "
                f"--catalog FILE" + (f", or plan on {', '.join(clusters)} (--gpu), whose offers sell "
                                     f"clusters" if clusters else "")))
    if not fits:
        room = {gpu: capacity(catalog.gpus[gpu].memory_bytes or 0, memory.limit_bytes_per_rank) * usable(memory)
                for gpu in smallest_mem}
        least = ", ".join(f"{gpu} {smallest_mem[gpu] / 1e9:,.0f} GB of {room[gpu] / 1e9:,.0f} GB usable"
                          for gpu in sorted(smallest_mem))
        spec_limit = f"; {spec_memory(memory)} caps every GPU" if tally.over_spec_memory else ""
        most = {gpu: max((o.max_gpus for o in catalog.offers_for(gpu)), default=0) for gpu in smallest_mem}
        changes = space_changes(model, tally.smallest_cfg, room, space, spec.batch.global_batch_samples, most)
        return str(UserError(f"no config fits in memory (the smallest needs: {least}){spec_limit}",
                             fix=(f"{changes}; or plan on" if changes else "add more GPUs (num_gpus), ZeRO-3 or "
                                  "activation checkpointing to the space, or") + " a GPU type with more memory"
                                 + (spec_fix(memory) if spec_limit else "")
                                 + "; `autotune estimate` shows where the memory goes"))
    parts, fixes = [], []
    for gpu in sorted(fits):
        counts = sorted(fits[gpu])
        offers = catalog.offers_for(gpu)
        if no_network.get(gpu):
            parts.append(f"on {gpu}, {', '.join(sorted(no_network[gpu]))} sell(s) {counts[0]}+ GPUs but "
                         f"state no bandwidth between nodes")
            fixes.append("set inter_node_gb_per_s on those offers (--catalog FILE)")
            continue
        top = max((o.max_gpus for o in offers), default=0)
        biggest = max(offers, key=lambda o: o.max_gpus).name if offers else "none"
        parts.append(f"configs fit on {gpu} with {', '.join(map(str, counts))} GPUs, but no {gpu} offer "
                     f"sells that many (the most: {top}, {biggest})")
        fixes.append(f"add a multi-node offer of {gpu} (max_nodes, inter_node_gb_per_s) with "
                     f"--catalog FILE, or try a GPU type whose offers sell {counts[0]}+ GPUs")
    return str(UserError("no bill: " + "; ".join(parts), fix="; or ".join(dict.fromkeys(fixes))))
