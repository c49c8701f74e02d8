"""Search spaces: `autotune/data/search_spaces/*.yaml` -> define-by-run suggestions for an Optuna trial.

    space = load_space("default")                       # autotune.search.space_file; or a YAML path
    choices = restrict(space, capabilities_for(hw), n_heads=4)
    values = suggest(trial, choices, global_batch_samples=32)   # dict of TrialConfig fields

Only what this machine and the worker can run is offered. Every dimension keeps its plain
name (`num_gpus`, `tp_degree`, `offload`), so optuna-dashboard plots one parameter across all
machines and conditions. Optuna needs one fixed choice list per name ("CategoricalDistribution
does not support dynamic value space"), so each name is suggested with the study's
unrestricted list (`unrestricted()`: the space file with every capability on, the same on
every machine); what this machine allows for this trial (its GPU count, the TP degrees that
divide the GPUs chosen, offload for the ZeRO stage chosen, micro-batches that meet a fixed
global batch) is kept by the study's sampler wrapper (autotune.search.sampler.MachineSampler),
which draws within it. `params_for()` is the inverse of `suggest()`: the params of a known
config (baselines and local moves to enqueue).

Studies written by earlier versions named a restricted or dependent parameter after its list
or condition (`num_gpus|of=1,2`, `tp_degree|gpus=2`); they resume as they are: those trials
keep their names, new trials use the plain ones, and measurements are found by config key,
not by parameter name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.contract import Checkpointing, DeviceKind, FSDPMode, HardwareFingerprint, Offload, Precision
from autotune.errors import UserError
from autotune.run.hardware import max_ranks
from autotune.search.space_file import SearchSpace


@dataclass(frozen=True)
class Capabilities:
    """What this machine plus the worker can run."""

    device: DeviceKind
    max_ranks: int
    precisions: frozenset[Precision]
    # What the worker implements (trials/engines/): ZeRO 0-3 and offload through DeepSpeed,
    # tensor parallel through DTensor, on CPU (gloo) and CUDA alike.
    zero_stages: frozenset[int] = frozenset({0, 1, 2, 3})
    tensor_parallel: bool = True
    offload: bool = True
    # FSDP2 (trials/engines/fsdp.py): fully_shard, on CPU (gloo) and CUDA, torch >= 2.6.
    fsdp: bool = True


def capabilities_for(hw: HardwareFingerprint, threads_per_rank: int = 1,
                     compute_capability: tuple[int, int] | None = None,
                     fp8_library: bool = False) -> Capabilities:
    if hw.device_kind is DeviceKind.cpu:
        # fp16 on CPU has no maintained loss-scaled training path worth measuring, and fp8
        # needs Hopper/Ada tensor cores: neither is offered on a CPU machine.
        precisions = {Precision.fp32, Precision.bf16}
    else:
        precisions = {Precision.fp32, Precision.fp16}
        if compute_capability is None or compute_capability >= (8, 0):
            precisions.add(Precision.bf16)
        if fp8_library and compute_capability is not None and compute_capability >= (8, 9):
            precisions.add(Precision.fp8)
    return Capabilities(device=hw.device_kind, max_ranks=max_ranks(hw, threads_per_rank),
                        precisions=frozenset(precisions))


@dataclass
class RestrictedSpace:
    """The choices left after the hardware and the model shape have had their say."""

    num_gpus: list[int]
    micro_batch_size: list[int]
    grad_accum_steps: list[int]
    precision: list[Precision]
    checkpointing: list[Checkpointing]
    zero_stage: list[int]
    offload: list[Offload]
    tp_degree: list[int]
    dropped: dict[str, list[Any]] = field(default_factory=dict)
    fsdp: list[FSDPMode] = field(default_factory=lambda: [FSDPMode.none])
    compile: list[bool] = field(default_factory=lambda: [False])
    # Why a dropped choice is left out, where the choice alone does not say: by "name value"
    # ("precision fp8": "runs only compiled ..."); shown beside it by dropped_text().
    why_dropped: dict[str, str] = field(default_factory=dict)
    # The dropped choices ("name value") that the model or the space itself leaves out, not
    # this machine: another machine would leave them out too (the sweep says them apart).
    not_machine: set[str] = field(default_factory=set)

    def dropped_text(self, machine: bool | None = None) -> str:
        """The choices left out, as the sweep's start and the plan show them:
        `num_gpus 4, 8; precision fp8 (why)`; values that share a reason say it once
        (`tp_degree 2, 4, 8 (why)`). `machine`: True, only those this machine leaves out;
        False, only those the model or the space does (`not_machine`); None, all."""
        def shown(name: str, vs: list[Any]) -> str:
            groups: dict[str | None, list[str]] = {}  # reason -> its values, in their order
            for v in vs:
                text = str(getattr(v, "value", v))
                if machine is None or (f"{name} {text}" in self.not_machine) != machine:
                    groups.setdefault(self.why_dropped.get(f"{name} {text}"), []).append(text)
            return ", ".join(", ".join(texts) + (f" ({why})" if why else "") for why, texts in groups.items())

        return "; ".join(f"{k} {text}" for k, vs in self.dropped.items() if (text := shown(k, vs)))

    def compile_choices(self) -> list[bool]:
        """Eager only where every precision left is fp8 would leave nothing to run."""
        if any(p is not Precision.fp8 for p in self.precision):
            return list(self.compile)
        return [c for c in self.compile if c] or list(self.compile)

    def precision_choices(self, compiled: bool) -> list[Precision]:
        """fp8 only together with compile: torchao's float8 casts and scales are fused into
        the matmuls' neighbours by Inductor; eager, they cost more than the fp8 matmul saves."""
        return [p for p in self.precision if compiled or p is not Precision.fp8] or list(self.precision)

    def tp_choices(self, num_gpus: int) -> list[int]:
        return [t for t in self.tp_degree if num_gpus % t == 0]

    def fsdp_choices(self, zero_stage: int, precision: Precision) -> list[FSDPMode]:
        """FSDP2 is an alternative to ZeRO (zero_stage 0 only); fp16 with it is not
        implemented (trials/engines/fsdp.py FP16_REASON)."""
        if zero_stage or precision is Precision.fp16:
            return [FSDPMode.none]
        return list(self.fsdp)

    def offload_choices(self, zero_stage: int, fsdp: FSDPMode = FSDPMode.none) -> list[Offload]:
        if zero_stage == 0:
            # FSDP2's CPUOffloadPolicy moves parameters, gradients and optimizer state together.
            allowed = [Offload.none] + ([Offload.optimizer_params] if fsdp is not FSDPMode.none else [])
            return [o for o in self.offload if o in allowed] or [Offload.none]
        allowed = [Offload.none, Offload.optimizer] + ([Offload.optimizer_params] if zero_stage == 3 else [])
        return [o for o in self.offload if o in allowed] or [Offload.none]


# Why a space without compile on drops fp8 (eager fp8 casts cost more than its matmuls save).
FP8_NEEDS_COMPILE = "runs only compiled: add true to the space's compile"


def _precision_runs(p: Precision, caps: Capabilities, compiled: list[bool]) -> bool:
    """This machine runs `p`, and fp8 only where the space compiles (RestrictedSpace.precision_choices)."""
    return p in caps.precisions and (p is not Precision.fp8 or True in compiled)


def restrict(space: SearchSpace, caps: Capabilities, n_heads: int | None = None,
             tp_why: str | None = None) -> RestrictedSpace:
    """`n_heads`, `tp_why`: what every TP degree must divide, why the model leaves TP > 1 out
    (ModelShape.tp_heads, tp_why)."""
    dropped: dict[str, list[Any]] = {}

    def keep(name: str, values: list[Any], ok) -> list[Any]:
        kept = [v for v in values if ok(v)]
        gone = [v for v in values if not ok(v)]
        if gone:
            dropped[name] = gone
        if not kept:
            shown = ", ".join(str(getattr(v, "value", v)) for v in values)
            raise UserError(f"search space: no choice of `{name}` ({shown}) can run on this machine: "
                            f"{_runs_here(name, caps, list(space.compile))}",
                            fix=f"list a choice this machine runs in `{name}`")
        return kept

    num_gpus = keep("num_gpus", space.num_gpus, lambda n: n <= caps.max_ranks)
    compiled = list(space.compile)
    precision = keep("precision", space.precision, lambda p: _precision_runs(p, caps, compiled))
    zero = keep("zero_stage", space.zero_stage, lambda z: z in caps.zero_stages)
    # TP runs at ZeRO stage 0 only (ZeRO with TP is not implemented: trials/engines/deepspeed.py).
    tp = keep("tp_degree", space.tp_degree,
              lambda t: t <= max(num_gpus) and (caps.tensor_parallel or t == 1)
              and (n_heads is None or n_heads % t == 0) and (t == 1 or 0 in zero))
    why = _tp_not_machine(dropped.get("tp_degree", []), caps, max(num_gpus), n_heads, tp_why, zero)
    if Precision.fp8 in dropped.get("precision", []) and Precision.fp8 in caps.precisions:
        why["precision fp8"] = FP8_NEEDS_COMPILE
    return RestrictedSpace(
        why_dropped=why,
        not_machine=set(why),
        num_gpus=num_gpus,
        micro_batch_size=list(space.micro_batch_size),
        grad_accum_steps=list(space.grad_accum_steps),
        precision=precision,
        checkpointing=list(space.checkpointing),
        zero_stage=zero,
        offload=keep("offload", space.offload, lambda o: caps.offload or o is Offload.none),
        tp_degree=tp,
        dropped=dropped,
        fsdp=keep("fsdp", space.fsdp, lambda f: caps.fsdp or f is FSDPMode.none),
        compile=compiled,
    )


def _tp_not_machine(gone: list[int], caps: Capabilities, most_ranks: int, n_heads: int | None,
                    tp_why: str | None, zero: list[int]) -> dict[str, str]:
    """Why the model or the space leaves out each TP degree in `gone`: {"tp_degree t": why}. A model
    that runs no TP (`tp_why`) leaves out every one; else more ranks than this machine runs, or no
    TP here at all, is the machine's reason, not listed."""
    why = {}
    for t in gone:
        if tp_why:  # the model runs no TP, on any machine
            why[f"tp_degree {t}"] = tp_why
        elif t > most_ranks or not caps.tensor_parallel:
            continue
        elif n_heads is not None and n_heads % t:
            why[f"tp_degree {t}"] = (f"each TP rank holds whole attention and key/value heads: "
                                     f"TP must divide the model's {n_heads}")
        else:  # restrict's last condition: TP > 1 at ZeRO stage 0 only
            why[f"tp_degree {t}"] = "TP runs at ZeRO stage 0 only, which the space's zero_stage does not list"
    return why


def _runs_here(name: str, caps: Capabilities, compiled: list[bool]) -> str:
    """What this machine runs of one dimension of the space, for the error when the space
    lists none of it (`precision: [fp16]` on a CPU, `num_gpus: [8]` on 2 cores)."""
    cpu = caps.device is DeviceKind.cpu
    if name == "num_gpus":
        return f"it runs at most {caps.max_ranks} rank(s) (" + (
            "its usable CPU cores over trial.threads_per_rank" if cpu else "its visible GPUs") + ")"
    if name == "precision":
        runs = [p.value for p in Precision if _precision_runs(p, caps, compiled)]
        if Precision.fp8 in caps.precisions and True not in compiled:
            note = f"; fp8 {FP8_NEEDS_COMPILE}"
        else:
            note = "; fp16 and fp8 are offered on GPUs only" if cpu else ""
        return f"it runs {', '.join(runs)}{note}"
    if name == "zero_stage":
        return f"it runs ZeRO stages {', '.join(str(z) for z in sorted(caps.zero_stages))}"
    if name == "tp_degree":
        return ("TP degrees must divide the model's heads, be at most the largest num_gpus it runs, "
                "and come with 0 in zero_stage (a Hugging Face model whose tensor-parallel plan the "
                "worker does not run, e.g. olmo2, runs 1 only); 1 always runs")
    return "none runs here"


def suggest(trial: Any, rs: RestrictedSpace, global_batch_samples: int | None = None,
            full: RestrictedSpace | None = None, num_nodes: int = 1) -> dict[str, Any]:
    """Suggest one configuration (TrialConfig fields) from an Optuna trial (or from the
    stand-ins below, which answer `suggest_within`).

    `full`: the study's unrestricted space (`unrestricted()`; default `rs`): each name's choice
    list. `num_nodes`: the nodes the trial spans, each with `num_gpus` ranks; a fixed
    `global_batch_samples` is met over all of them. Returns None-free values; raises
    `optuna.TrialPruned` only for a trial another machine queued with values this one cannot run.
    """
    full = full or rs
    within = getattr(trial, "suggest_within", None)
    if within is None:  # an Optuna trial: its study's MachineSampler keeps to `allowed`
        from autotune.search.sampler import machine_sampler

        sampler = machine_sampler(trial)

        def within(name: str, allowed: list[Any], choices: list[Any]) -> Any:
            return sampler.suggest(trial, name, allowed, choices)

    def pick(name: str, allowed: list[Any], choices: list[Any]) -> Any:
        return within(name, allowed, choices)

    num_gpus = pick("num_gpus", rs.num_gpus, full.num_gpus)
    tp_choices = rs.tp_choices(num_gpus)
    tp = tp_choices[0] if len(tp_choices) == 1 else pick("tp_degree", tp_choices, full.tp_degree)
    dp = num_gpus * num_nodes // tp  # data-parallel ranks over every node
    if global_batch_samples is None:
        micro = pick("micro_batch_size", rs.micro_batch_size, full.micro_batch_size)
        accum = pick("grad_accum_steps", rs.grad_accum_steps, full.grad_accum_steps)
    else:
        # Derive accumulation: global = micro x accum x dp, exactly; offer only micros that fit.
        micros = [m for m in rs.micro_batch_size if global_batch_samples % (m * dp) == 0]
        if not micros:
            raise UserError(
                f"no micro-batch in {rs.micro_batch_size} meets global batch "
                f"{global_batch_samples} with {dp} data-parallel ranks",
                fix="change batch.global_batch_samples or the micro_batch_size choices")
        micro = micros[0] if len(micros) == 1 else pick("micro_batch_size", micros,
                                                        full.micro_batch_size)
        accum = global_batch_samples // (micro * dp)
    # Asked only when the space offers both, so spaces without compile keep their parameters.
    compile_choices = rs.compile_choices()
    compiled = compile_choices[0] if len(compile_choices) == 1 else bool(pick(
        "compile", compile_choices, full.compile))
    precision = Precision(pick("precision", [p.value for p in rs.precision_choices(compiled)],
                               [p.value for p in full.precision]))
    ckpt = Checkpointing(pick("checkpointing", [c.value for c in rs.checkpointing],
                              [c.value for c in full.checkpointing]))
    if tp > 1:
        zero = 0  # ZeRO with tensor parallel is not implemented (trials/engines/deepspeed.py)
    else:
        zero = pick("zero_stage", rs.zero_stage, full.zero_stage) \
            if len(rs.zero_stage) > 1 else rs.zero_stage[0]
    fsdp_choices = rs.fsdp_choices(zero, precision)
    fsdp = fsdp_choices[0] if len(fsdp_choices) == 1 else FSDPMode(pick(
        "fsdp", [f.value for f in fsdp_choices], [f.value for f in full.fsdp]))
    off_choices = rs.offload_choices(zero, fsdp)
    offload = off_choices[0] if len(off_choices) == 1 else Offload(pick(
        "offload", [o.value for o in off_choices], [o.value for o in full.offload]))
    return dict(num_gpus=num_gpus, tp_degree=tp, micro_batch_size=micro, grad_accum_steps=accum,
                precision=precision, checkpointing=ckpt, zero_stage=zero, offload=offload, fsdp=fsdp,
                compile=compiled)


ALL_CAPABILITIES = Capabilities(
    device=DeviceKind.cuda, max_ranks=1 << 20, precisions=frozenset(Precision),
    zero_stages=frozenset({0, 1, 2, 3}), tensor_parallel=True, offload=True)


def unrestricted(space: SearchSpace, n_heads: int | None = None, tp_why: str | None = None) -> RestrictedSpace:
    """The space with every capability on: the same on every machine of a study (only the
    model shape, which the whole study shares, still removes TP degrees)."""
    return restrict(space, ALL_CAPABILITIES, n_heads, tp_why)
