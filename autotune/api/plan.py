"""Estimates and bills without running a trial, from Python: what `autotune estimate` and
`autotune cost` print. Parameters mirror the commands' flags (`tokens_per_s` is
`--tokens-per-s`); bad input raises `autotune.errors.UserError` naming the flag.

    autotune.estimate(model="7b", seq_len=4096, micro_batch=2, zero_stage=2, dp=8, gpu="a100-40gb")
    autotune.cost(gpu="h100-sxm", gpus=8, mfu=0.4, params=7e9, target_tokens=1e11,
                  global_batch_tokens=4e6, zero_stage=1)
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

from autotune.errors import UserError, plain_message

# Headroom `fits` keeps below the GPU's memory for what the analytic model does not count
# without a calibration (CUDA context, allocator fragmentation). A sweep fits it instead.
DEFAULT_SAFETY_MARGIN = 0.10
# `estimate`'s sequence length when none is given (a model with fewer positions: its longest).
DEFAULT_SEQ_LEN = 2048


def estimate(model: str | None = None, params: float | str | None = None, layers: int | None = None,
             hidden: int | None = None, heads: int | None = None, vocab: int | None = None,
             seq_len: int | None = None, micro_batch: int = 1, precision: str = "bf16",
             checkpointing: str = "none", zero_stage: int = 0, offload: str = "none", dp: int = 1,
             tp: int = 1, optimizer: str = "adamw", gpu: str | None = None,
             fsdp: str = "none") -> dict[str, Any]:
    """Peak memory per rank (with its breakdown) and FLOPs per token of a config, estimated
    (analytic; the framework overhead a sweep calibrates is not in it). `model`: a GPT preset
    or a Hugging Face config.json; else `params` (and optionally the shapes). `gpu`: a catalog
    GPU type, to say whether it fits. `fsdp`: FSDP2 sharding (full_shard, shard_grad_op)
    instead of ZeRO. `seq_len`: DEFAULT_SEQ_LEN, or the model's longest where shorter."""
    from pydantic import ValidationError

    from autotune.api.args import EstimateArgs
    from autotune.estimate.compute import flops_per_token, hardware_flops_per_token
    from autotune.estimate.memory import MemoryConfig, estimate_memory, recomputed_layers
    from autotune.estimate.savers import fitting_changes

    a = EstimateArgs.checked(**{k: v for k, v in locals().items() if k in EstimateArgs.model_fields})
    seq_len, tp, offload, fsdp = a.seq_len, a.tp, a.offload.value, a.fsdp.value
    shape = resolve_model(a.model, None if params is None else str(params), a.layers, a.hidden, a.heads, a.vocab)
    seq_len = _seq_len_for(shape, seq_len)
    if shape.n_heads and shape.n_heads % tp:
        raise UserError(f"--tp {tp} does not divide the model's {shape.n_heads} attention heads",
                        fix="pick a TP degree that divides the head count")
    try:
        mcfg = MemoryConfig.model_validate(dict(
            seq_len=seq_len, micro_batch_size=a.micro_batch, precision=a.precision, checkpointing=a.checkpointing,
            zero_stage=a.zero_stage, offload=a.offload, dp_degree=a.dp, tp_degree=tp, optimizer=a.optimizer,
            fsdp=a.fsdp))
    except ValidationError as exc:  # each value is checked above: a combination that cannot run
        msg = plain_message(exc.errors()[0]["msg"])
        text, _, fix = msg.partition(". To fix: ")
        # The flags given (not a default the user never typed), and the fix in flags' names.
        given = [f for f, on in ((f"--zero-stage {a.zero_stage}", a.zero_stage),
                                 (f"--offload {offload}", offload != "none"),
                                 (f"--fsdp {fsdp}", fsdp != "none")) if on]
        fix = re.sub(r"\b(zero_stage|offload|fsdp)\b", lambda m: "--" + m.group(1).replace("_", "-"), fix)
        raise UserError(f"{' with '.join(given) or 'this config'}: {text}", fix=fix or "see --help") from None
    gpu_mem = gpu_memory_bytes(gpu) if gpu else None
    est = estimate_memory(shape, mcfg)
    doc = est.as_dict()
    if gpu and a.precision.value == "fp8" and not _catalog_gpu(gpu).peak_flops("fp8"):
        doc["notes"].append(f"the catalog sources no fp8 peak for {gpu}: fp8 training runs on GPUs of compute "
                            "capability 8.9 and later (a sweep there leaves fp8 out; so does `plan`)")
    doc["notes"] += _tp_notes(shape, tp, a.zero_stage)
    doc.update(
        model=shape.name, model_source=shape.source, model_params=shape.params,
        engine=str(mcfg.resolved_engine),
        flops_per_token=flops_per_token(shape, seq_len),
        # The rule behind it: without layers and hidden size the attention term is left out.
        flops_rule=_flops_rule(shape),
        hardware_flops_per_token=hardware_flops_per_token(
            shape, seq_len, mcfg.checkpointing.value,
            None if shape.n_layers is None else recomputed_layers(
                shape.n_layers, mcfg.checkpointing, mcfg.checkpoint_every) / shape.n_layers),
        config=mcfg.model_dump(mode="json"),
        basis="estimated (analytic; framework overhead not calibrated here)",
    )
    if gpu_mem is not None:
        usable = int(gpu_mem * (1 - DEFAULT_SAFETY_MARGIN))
        # Without the model's shapes the total leaves the activations out: it can say "does not
        # fit" (already over without them), never "fits" (None: not decided).
        over = est.total_bytes > usable
        doc.update(gpu=gpu, gpu_memory_bytes=gpu_mem, safety_margin=DEFAULT_SAFETY_MARGIN,
                   fits=False if over else (None if est.activations_bytes is None else True),
                   # What would make it fit (autotune.estimate.savers); empty where it fits.
                   fits_with=[c._asdict() for c in fitting_changes(shape, mcfg, usable)] if over else [])
    return doc


def _tp_notes(shape, tp: int, zero_stage: int) -> list[str]:
    """Where the worker would not run the tensor parallelism estimated (a sweep leaves it out)."""
    if tp <= 1:
        return []
    notes = [f"tp {tp}: {shape.tp_why}; a sweep runs this model at tp 1"] if shape.tp_why else []
    if zero_stage:
        notes.append("autotune's worker runs tensor parallelism with DDP or FSDP2, not with ZeRO, so a "
                     "sweep never pairs them: --fsdp full_shard shards the states with it")
    return notes


def _flops_rule(shape) -> str:
    """The FLOPs rule behind `flops_per_token`: without layers and hidden size the attention
    term is left out; its width d is heads x head_dim, said where that is not the hidden size."""
    if not (shape.n_layers and shape.d_model):
        return "6N (no layers/hidden: no attention term)"
    if shape.attention_width != shape.d_model:
        return (f"6N + 12Lds, d = {shape.n_heads} heads x {shape.head_width} head_dim = "
                f"{shape.attention_width} (hidden {shape.d_model})")
    return "6N + 12Lds"


def _seq_len_for(shape, seq_len: int | None) -> int:
    """The sequence estimated: given, else DEFAULT_SEQ_LEN or the model's longest where shorter.
    Longer than the model takes is refused: a trial of it refuses the sequence
    (trials/workloads/build.py), and no estimate is of a run that cannot start."""
    if seq_len is None:
        return min(DEFAULT_SEQ_LEN, shape.max_seq_len or DEFAULT_SEQ_LEN)
    if shape.max_seq_len is not None and seq_len > shape.max_seq_len:
        raise UserError(f"--seq-len {seq_len} is longer than {shape.name} takes (it has "
                        f"{shape.max_seq_len} positions)",
                        fix=f"give --seq-len {shape.max_seq_len} or less, or a model with more positions")
    return seq_len


def resolve_model(model: str | None, params: str | None, layers: int | None, hidden: int | None,
                  heads: int | None, vocab: int | None):
    from autotune.contract import GPT_PRESETS
    from autotune.estimate.compute import model_from_params, model_from_preset

    if (model is None) == (params is None):
        raise UserError("give exactly one of --model PRESET|CONFIG.json or --params N",
                        fix=f"e.g. --model 7b (presets: {', '.join(GPT_PRESETS)}) or --params 7e9")
    if model is not None:
        shape_flags = [n for n, v in (("--layers", layers), ("--hidden", hidden), ("--heads", heads),
                                      ("--vocab", vocab)) if v is not None]
        if shape_flags:
            raise UserError(f"{', '.join(shape_flags)} only go with --params",
                            fix="drop them, or describe the model with --params N and its shapes")
        if model in GPT_PRESETS or not (model.endswith(".json") or Path(model).exists()):
            return model_from_preset(model)
        return _config_model(model)
    return model_from_params(_count(params or "0"), layers, hidden, heads, vocab)


def _config_model(path: str):
    """A config.json's model; of a family the count does not know, as the sweep counts it: as
    the trials' transformers builds it (autotune.run.preflight.resolve_unknown_family)."""
    from autotune.contract import HFWorkload
    from autotune.estimate.compute import model_from_hf_config
    from autotune.estimate.resolved import resolved_for
    from autotune.estimate.workload import model_from_resolved
    from autotune.run.preflight import resolve_unknown_family
    from autotune.spec import SweepSpec

    workload = HFWorkload(config_path=str(Path(path).resolve()))
    resolve_unknown_family(SweepSpec(workload=workload, seq_len=1))  # nothing where it cannot read it
    resolved = resolved_for(workload)
    # Else the count's own reading, whose errors name the path as given.
    return model_from_resolved(resolved) if resolved is not None else model_from_hf_config(path)


def _count(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"--params '{text}' is not a number", fix="write it as e.g. 7e9 or 6738415616") from None
    if value <= 0 or value != value or value == float("inf"):
        raise UserError(f"--params {text} must be a positive number", fix="write it as e.g. 7e9")
    return int(round(value))


def _catalog_gpu(name: str):
    """The shipped catalog's GPU type `name` (any case); a UserError with "did you mean"."""
    from autotune.pricing.load import load_catalog

    cat = load_catalog()
    gpus = {k.lower(): k for k in cat.gpus}
    key = gpus.get(name.lower())
    if key is None:
        from autotune.errors import did_you_mean

        raise UserError(f"--gpu '{name}' is not in the catalog{did_you_mean(name, list(cat.gpus))}",
                        fix=f"use one of: {', '.join(sorted(cat.gpus))}")
    return cat.gpus[key]


def gpu_memory_bytes(name: str) -> int:
    mem = _catalog_gpu(name).memory_bytes
    if not mem:
        raise UserError(f"--gpu '{name}' has no memory figure in the catalog",
                        fix="pick a GPU type with memory_bytes set")
    return int(mem)


@dataclass
class CostResult:
    """Every matching offer's bill, cheapest first (`bills`: pricing.cost.Bill objects;
    `as_dicts()`: what `autotune cost --json` prints), the offers skipped and why, the job assumed."""

    bills: list[Any]
    skipped: list[Any]
    catalog: Any = field(repr=False)
    job: Any = field(repr=False)

    @property
    def cheapest(self) -> dict[str, Any] | None:
        return self.bills[0].as_dict() if self.bills else None

    def as_dicts(self) -> list[dict[str, Any]]:
        return [b.as_dict() for b in self.bills]


def cost(gpu: str, gpus: int = 1, tokens_per_s: float | None = None, mfu: float | None = None,
         params: float | None = None, precision: str = "bf16", zero_stage: int = 0,
         target_tokens: float | None = None, target_steps: int | None = None,
         global_batch_tokens: float | None = None, run_gpus: list[int] | None = None,
         all_gpus: bool = False, catalog: str | Path | None = None, offers: list[str] | None = None,
         providers: list[str] | None = None, regions: list[str] | None = None,
         checkpoint_gb: float | None = None, dataset_gb: float | None = None,
         final_model_gb: float | None = None, egress_checkpoints: int = 0, checkpoints_kept: int = 2,
         checkpoint_interval_hours: float = 1.0, month_rest_used: bool = False) -> CostResult:
    """Price a training run on every matching offer of the catalog, cheapest first: from a
    measured `tokens_per_s` at `gpus` on `gpu`, or (planning) from `mfu` with `params`."""
    from autotune.api.args import CostArgs
    from autotune.estimate.compute import flops_per_token, model_from_params
    from autotune.estimate.scaling import CommModel, grad_bytes_per_param
    from autotune.pricing.load import load_catalog
    from autotune.pricing.quote import BasePoint, quote
    from autotune.search.score import job_from_model

    a = CostArgs.checked(**{k: v for k, v in locals().items() if k in CostArgs.model_fields})
    gpus, mfu, tokens_per_s, params = a.gpus, a.mfu, a.tokens_per_s, a.params
    zero_stage, run_gpus = a.zero_stage, a.run_gpus
    target_tokens, target_steps, global_batch_tokens = a.target_tokens, a.target_steps, a.global_batch_tokens
    checkpoint_gb, dataset_gb, final_model_gb = a.checkpoint_gb, a.dataset_gb, a.final_model_gb
    cat = load_catalog(catalog).select(providers=a.providers, regions=a.regions)
    cat.gpu_type(gpu)  # "did you mean"
    storage = _stored_precision(precision)
    n_params = None if params is None else int(round(params))
    _check_cost_flags(tokens_per_s, mfu, n_params, target_tokens, target_steps, global_batch_tokens)
    counts = sorted(set(run_gpus or [gpus]))
    per_gpu_step = global_batch_tokens / gpus if global_batch_tokens else None

    def tokens_for(n: int) -> float:
        # A steps target at a global batch that grows with the GPU count (same per-GPU work).
        if target_steps is not None and per_gpu_step is not None:
            return float(target_steps * per_gpu_step * n)
        if target_tokens is None:  # not reached: exactly one target was required above
            raise ValueError("no training target")
        return float(target_tokens)

    fpt = flops_per_token(model_from_params(n_params), seq_len=1) if n_params else None
    base = BasePoint(gpu=gpu, num_gpus=gpus, tokens_per_s=tokens_per_s, mfu=mfu,
                     tokens_per_gpu_step=per_gpu_step, flops_per_token=fpt, precision=precision)
    comm = (CommModel(params=n_params, grad_bytes_per_param=grad_bytes_per_param(storage, zero_stage),
                      zero_stage=zero_stage) if n_params else None)
    types = [gpu]
    if all_gpus:
        if n_params is None:
            raise UserError("--all-gpus needs --params (to move the MFU to other GPU types)", fix="add --params N")
        types += [k for k, g in cat.gpus.items() if k != gpu and g.device_class == cat.gpus[gpu].device_class]
    job = job_from_model(n_params, storage != "fp32", "adamw", tokens_for(counts[0]), None)
    sizes = {f: v * 1e9 for f, v in (("checkpoint_bytes", checkpoint_gb), ("dataset_bytes", dataset_gb),
                                     ("final_model_bytes", final_model_gb)) if v is not None}
    given = tuple(f"given: {k.replace('_bytes', '').replace('_', ' ')} {v / 1e9:g} GB (replaces the "
                  f"default above)" for k, v in sizes.items())
    job = replace(job, **sizes, egress_checkpoints=a.egress_checkpoints, checkpoints_kept=a.checkpoints_kept,
                  checkpoint_interval_hours=a.checkpoint_interval_hours, month_rest_used=month_rest_used,
                  assumptions=job.assumptions + given)
    inputs = {"--tokens-per-s": tokens_per_s, "--mfu": mfu, "--params": params, "--target-tokens": target_tokens,
              "--target-steps": target_steps, "--global-batch-tokens": global_batch_tokens,
              "--checkpoint-gb": checkpoint_gb, "--dataset-gb": dataset_gb, "--final-model-gb": final_model_gb,
              "--checkpoint-interval-hours": a.checkpoint_interval_hours}
    with _finite_figures(inputs):
        bills, skipped = quote(cat, base, counts, types, comm, tokens_for, job, offers=a.offers)
        if n_params:
            # A measured throughput ran, so its own GPU type held it (perhaps at a ZeRO stage not
            # given here); planned figures and other GPU types are checked.
            measured_gpu = gpu if tokens_per_s is not None else None
            bills, skipped = _drop_unfitting(bills, skipped, cat, n_params, storage, zero_stage, measured_gpu)
        if not all(_finite_bill(b) for b in bills):
            raise OverflowError("a bill's figure is not finite")
    return CostResult(bills, skipped, cat, job)


def _check_cost_flags(tokens_per_s: float | None, mfu: float | None, n_params: int | None,
                      target_tokens: float | None, target_steps: int | None,
                      global_batch_tokens: float | None) -> None:
    """UserError unless `cost` was given one throughput (measured or an MFU with the parameter
    count) and one target (tokens, or steps with the batch)."""
    if (tokens_per_s is None) == (mfu is None):
        raise UserError("give exactly one of --tokens-per-s (measured) or --mfu (planning)",
                        fix="e.g. --tokens-per-s 3200, or --mfu 0.4 --params 7e9")
    if mfu is not None and not 0 < mfu <= 1:
        raise UserError(f"--mfu {mfu} is not in (0, 1]", fix="give a fraction, e.g. --mfu 0.4")
    if mfu is not None and n_params is None:
        raise UserError("--mfu needs --params (FLOPs per token = 6 x params)", fix="add --params N")
    if (target_tokens is None) == (target_steps is None):
        raise UserError("give exactly one target: --target-tokens or --target-steps",
                        fix="e.g. --target-tokens 2e10, or --target-steps 50000 --global-batch-tokens 524288")
    if target_steps is not None and global_batch_tokens is None:
        raise UserError("--target-steps needs --global-batch-tokens", fix="add --global-batch-tokens N")


# An input this many powers of ten away from 1 is named as a cause when a bill overflows: no
# real model size, token count or throughput is.
EXTREME_DECADES = 30


def _finite_bill(bill: Any) -> bool:
    return all(math.isfinite(x) for x in (bill.hours, bill.gpu_hours, bill.usd, bill.hours_worst_case,
                                          bill.usd_worst_case, *bill.breakdown.values()))


@contextmanager
def _finite_figures(inputs: dict[str, float | None]) -> Iterator[None]:
    """Around pricing: a figure that overflows (an OverflowError, or a NaN or infinity met where
    an integer is made) is a UserError naming the inputs that made it: those given (flag: value)
    far from any real figure, else the farthest one."""
    try:
        yield
    except (OverflowError, ValueError) as exc:
        if not isinstance(exc, OverflowError) and not any(w in str(exc) for w in ("NaN", "infinity")):
            raise
        given = {f: float(v) for f, v in inputs.items() if v}
        decades = {f: abs(math.log10(abs(v))) if math.isfinite(v) else math.inf for f, v in given.items()}
        named = [f for f, d in decades.items() if d >= EXTREME_DECADES]
        named = named or sorted(decades, key=lambda f: decades[f])[-1:]
        parts = [f"{f} {given[f]:g} (too {'large' if abs(given[f]) > 1 else 'small'})" for f in named]
        raise UserError(f"cannot price this run: its hours or dollars are not a finite number, from "
                        f"{' and '.join(parts) or 'the figures given'}",
                        fix="give figures of a real run, e.g. --params 7e9, --target-tokens 1e11, "
                            "--tokens-per-s 3200") from None


def _stored_precision(precision: str) -> str:
    """The precision the model's states are held, reduced and checkpointed in. tf32 is fp32
    training with TF32 matmuls: fp32 weights, gradients and optimizer states; only its compute
    peak (the GPU's tf32 one, which `precision` itself picks) differs from fp32's."""
    from autotune.pricing.catalog import PRECISIONS

    if precision not in PRECISIONS:
        raise UserError(f"--precision '{precision}' is not one of {', '.join(PRECISIONS)}", fix="pick one of them")
    return "fp32" if precision == "tf32" else precision


def _drop_unfitting(bills, skipped, cat, n_params: int, precision: str, zero_stage: int,
                    measured_gpu: str | None):
    """The bills whose GPUs can hold the model's states (weights, gradients, optimizer state per
    GPU at this ZeRO stage over the bill's GPUs: autotune.estimate.memory.model_state_bytes);
    the others go to `skipped` with the figures. Only a lower bound (no activations: cost knows
    no sequence length), so what passes may still not fit: `autotune estimate` says. Without it,
    `cost --all-gpus` priced a 6.74B model on 8 x 24 GB GPUs at ZeRO-1 (37 GB of states each)."""
    from autotune.contract import Precision
    from autotune.estimate.compute import model_from_params
    from autotune.estimate.memory import MemoryConfig, model_state_bytes
    from autotune.format import fmt_bytes
    from autotune.pricing.cost import Skipped

    model = model_from_params(n_params)
    kept, out = [], list(skipped)
    more = ("ZeRO 1-3 over several GPUs (--zero-stage; ZeRO 0 keeps every state on every GPU)"
            if zero_stage == 0 else "more GPUs or a higher --zero-stage")
    for b in bills:
        capacity = None if b.gpu == measured_gpu else cat.gpus[b.gpu].memory_bytes
        s = model_state_bytes(model, MemoryConfig(precision=Precision(precision), zero_stage=zero_stage,
                                                  dp_degree=b.gpus_used))
        need = s["weights"] + s["gradients"] + s["optimizer"]
        if capacity is not None and need > capacity:
            out.append(Skipped(b.offer, f"does not fit: the model's states alone need {fmt_bytes(need)} per GPU "
                                        f"(ZeRO {zero_stage} over {b.gpus_used} GPU(s)), over its "
                                        f"{fmt_bytes(capacity)}; {more}"))
        else:
            kept.append(b)
    return kept, out
