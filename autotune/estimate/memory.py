"""Peak memory per rank of a training configuration, as a breakdown, before launching it.

    est = estimate_memory(model_from_preset("7b"), MemoryConfig(seq_len=4096, micro_batch_size=2,
                          precision="bf16", zero_stage=2, dp_degree=8))
    est.total_bytes, est.as_dict()          # weights, gradients, optimizer, activations, other

Model states follow the ZeRO paper (Rajbhandari et al. 2019, "ZeRO: Memory Optimizations
Toward Training Trillion Parameter Models", sec. 3.1 and 5); activations follow Korthikanti
et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", sec. 4),
counted tensor by tensor so the same code gives the paper's closed forms under the paper's
assumptions and the built-in GPT's real figure under its own (see `layer_activation_bytes`).
The framework overhead (CUDA context, allocator, runtime) is not guessed here: it comes from
`autotune.search.calibration`, fitted on this hardware from measured trials.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypedDict

from pydantic import ConfigDict, Field

from autotune.contract import EngineKind, Offload, Precision, TrainingKnobs, TrialConfig, engine_for
from autotune.estimate.activations import (  # noqa: F401 (re-exported: the activation model)
    Attention,
    activation_bytes,
    activation_parts,
    dtype_bytes,
    korthikanti_layer_bytes,
    layer_activation_bytes,
    recomputed_layers,
)
from autotune.estimate.compute import ModelShape
from autotune.estimate.dropout import Device
from autotune.estimate.sharded import deepspeed_transients, fsdp2_transients, gathered_params_bytes

Engine = Literal["ddp", "deepspeed", "fsdp2"]
OptimizerName = Literal["adamw", "sgd", "adafactor"]

class MemoryConfig(TrainingKnobs):
    """The knobs of a configuration that decide its memory: TrialConfig's knobs
    (`autotune.contract.TrainingKnobs`: the same defaults and rules) plus what the estimate
    needs beyond them.

    `engine` decides the mixed-precision layout: "ddp" is torch autocast (fp32 weights and
    gradients, 16-bit copies of the weights cached for the step, fp32 residual stream), as
    the DDP, tensor-parallel and accelerate engines run; "deepspeed" keeps 16-bit weights and
    gradients and an fp32 master copy in the optimizer (the ZeRO paper's layout); "fsdp2"
    (`fsdp` set) keeps fp32 shards of weights, gradients and optimizer state and gathers
    16-bit copies of a block at a time. Default: the layout of the engine the config runs on
    (`autotune.contract.engine_for`).
    `attention`: "fused" = torch SDPA / flash (stores the output and a log-sum-exp, never the
    s x s scores), "eager" = scores and softmax stored, "recompute" = Korthikanti's selective
    recompute of the attention core (stores nothing of it); None (default) = the attention the
    worker runs for the model (ModelShape.attention: fused, eager for gemma2).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # adafactor too: planning for optimizers trials lack (a wider choice than TrialConfig's).
    optimizer: OptimizerName = "adamw"  # type: ignore[assignment]
    dp_degree: int = Field(default=1, gt=0)
    engine: Engine | None = None
    attention: Attention | None = None
    dropout: bool = False
    # Where it runs: what a Hugging Face config's dropout keeps differs (autotune.estimate.dropout).
    # cuda by default: `estimate` and `plan` estimate GPUs; a trial's is its own (from_trial_config).
    device: Device = "cuda"
    sequence_parallel: bool = False
    compile: bool = Field(default=False, description="torch.compile on: the estimate keeps the "
                          "eager activation model (an upper bound: Inductor's fusions save fewer "
                          "intermediates); calibration fits compiled trials apart")

    @property
    def resolved_engine(self) -> Engine:
        if self.engine is not None:
            return self.engine
        return memory_layout(engine_for(self.zero_stage, self.tp_degree, fsdp=self.fsdp))

    @classmethod
    def from_trial_config(cls, cfg: TrialConfig) -> "MemoryConfig":
        knobs = cfg.model_dump(include=set(TrainingKnobs.model_fields))
        engine = engine_for(cfg.zero_stage, cfg.tp_degree, cfg.launcher, cfg.fsdp)
        return cls(**knobs, dp_degree=cfg.dp_degree, engine=memory_layout(engine), compile=cfg.compile,
                   device=cfg.device.value)


def memory_layout(engine: EngineKind) -> Engine:
    """DeepSpeed keeps ZeRO's 16-bit + fp32-master layout; FSDP2 fp32 shards with gathered
    16-bit copies; every other engine is torch autocast."""
    layouts: dict[EngineKind, Engine] = {EngineKind.deepspeed: "deepspeed", EngineKind.fsdp2: "fsdp2"}
    return layouts.get(engine, "ddp")


@dataclass
class MemoryEstimate:
    """Bytes per rank. `weights_bytes` is the rank's own shard (the model state the ZeRO paper
    counts); parameters gathered to compute (ZeRO-3, FSDP2) are `gathered_bytes`, in
    `other_bytes`. `other_bytes` = gathered parameters + logits/loss buffers + communication
    buckets + the 16-bit weight cache + the calibrated overhead (when there is one) +
    optimizer-step temporaries beyond the backward peak. `host_bytes`: host memory per rank
    for offloaded state (on a CPU machine everything is host memory; see `resident_bytes`)."""

    params: int
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int | None
    logits_bytes: int | None
    buckets_bytes: int
    weight_cache_bytes: int
    optimizer_temp_bytes: int
    host_bytes: int
    overhead_bytes: int | None = None
    overhead_basis: str = "not calibrated: framework overhead not included"
    notes: list[str] = field(default_factory=list)
    # Parameters gathered whole to compute, beyond the rank's own shard (ZeRO-3's live
    # parameters, FSDP2's unsharded blocks): not model states in the ZeRO paper's sense.
    gathered_bytes: int = 0

    @property
    def analytic_bytes(self) -> int:
        """Everything the analytic model counts, without the calibrated overhead."""
        states = (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.buckets_bytes
                  + self.gathered_bytes)
        backward = (self.activations_bytes or 0) + (self.logits_bytes or 0) + self.weight_cache_bytes
        # Activations are freed by the time the optimizer steps; its temporaries come after.
        return states + max(backward, self.optimizer_temp_bytes)

    @property
    def total_bytes(self) -> int:
        return self.analytic_bytes + (self.overhead_bytes or 0)

    @property
    def other_bytes(self) -> int:
        return (self.total_bytes - self.weights_bytes - self.gradients_bytes
                - self.optimizer_bytes - (self.activations_bytes or 0))

    def resident_bytes(self) -> int:
        """Device plus offloaded bytes: what a rank holds in host memory on a CPU machine."""
        return self.total_bytes + self.host_bytes

    def with_overhead(self, overhead_bytes: int, basis: str) -> "MemoryEstimate":
        d = asdict(self)
        d.update(overhead_bytes=int(overhead_bytes), overhead_basis=basis)
        return MemoryEstimate(**d)

    def as_dict(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "weights_bytes": self.weights_bytes,
            "gradients_bytes": self.gradients_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "other_bytes": self.other_bytes,
            "total_bytes": self.total_bytes,
            "host_bytes": self.host_bytes,
            "analytic_bytes": self.analytic_bytes,
            "detail": {
                "gathered_params_bytes": self.gathered_bytes,
                "logits_bytes": self.logits_bytes,
                "buckets_bytes": self.buckets_bytes,
                "weight_cache_bytes": self.weight_cache_bytes,
                "optimizer_temp_bytes": self.optimizer_temp_bytes,
                "overhead_bytes": self.overhead_bytes,
                "overhead_basis": self.overhead_basis,
            },
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------------------
# Model states
# ---------------------------------------------------------------------------------------


def optimizer_state_bytes_per_param(optimizer: OptimizerName, model: ModelShape) -> float:
    """fp32 optimizer state per parameter, master copy excluded.

    AdamW: exp_avg + exp_avg_sq = 8 (ZeRO paper's K = 12 includes the 4-byte master copy).
    SGD with momentum: the momentum buffer, 4. Adafactor (Shazeer & Stern 2018), factored
    second moment without momentum (its default): a row and a column vector per matrix, so
    4 * (rows + cols) bytes per matrix instead of 4 * rows * cols.
    """
    if optimizer == "adamw":
        return 8.0
    if optimizer == "sgd":
        return 4.0
    dims = model.dims()
    if dims is not None:
        h, V, L = dims.d_model, dims.vocab_size, dims.n_layers
        f = model.ffn_hidden or 4 * h
        q = model.attention_width or h
        kv = (model.n_kv_heads or dims.n_heads) * (q // dims.n_heads)
        per_layer = (h + q + 2 * (h + kv)) + (q + h)  # q, k, v, o
        per_layer += (3 if model.gated_mlp else 2) * (h + f)
        factored = L * per_layer + (V + h) * (1 if model.tied_embeddings else 2)
        return 4.0 * factored / model.params
    # No shapes: a square-matrix model of this size has ~ 2 * sqrt(N) factored entries.
    return 4.0 * 2.0 * math.sqrt(model.params) / model.params


# Bytes per rank of the model's states, and the bytes per parameter of its weights (w_pp).
ModelStates = TypedDict("ModelStates", {"weights": int, "gathered": int, "gradients": int, "optimizer": int,
                                        "host": int, "w_pp": float})


def model_state_bytes(model: ModelShape, cfg: MemoryConfig) -> ModelStates:
    """Weights (own shard), the gathered working set, gradients, optimizer state per rank on
    the device, and host bytes.

    Under TP each rank holds 1/t of the blocks and the embeddings and LM head whole
    (`ModelShape.tp_local_params`); ZeRO then shards
    over the data-parallel ranks: stage 1 the optimizer state, stage 2 also the gradients,
    stage 3 also the weights (ZeRO paper, Figure 1: 16 / 4 + 12/Nd / 2 + 14/Nd / 16/Nd bytes
    per parameter for mixed-precision Adam). FSDP2 shards all three like stage 3, in fp32
    (its mixed precision casts the gathered copies, not the shards).
    """
    psi = model.tp_local_params(cfg.tp_degree)
    nd = cfg.dp_degree
    mixed = cfg.precision is not Precision.fp32
    c = dtype_bytes(cfg.precision)
    opt_state = optimizer_state_bytes_per_param(cfg.optimizer, model)
    engine = cfg.resolved_engine
    if engine == "deepspeed" and mixed:
        w_pp, g_pp, o_pp = float(c), float(c), opt_state + 4.0  # fp32 master copy lives with the optimizer
    elif engine == "deepspeed" and cfg.zero_stage >= 1:
        # DeepSpeed's ZeRO optimizers keep an fp32 copy of their partition even for an fp32
        # model (stage_1_and_2.py `single_partition_of_fp32_groups`, stage3.py
        # `fp32_partitioned_groups_flat`), so fp32 pays the master copy too.
        w_pp, g_pp, o_pp = 4.0, 4.0, opt_state + 4.0
    else:  # fp32, torch autocast, or FSDP2: fp32 weights and gradients, no separate master copy
        w_pp, g_pp, o_pp = 4.0, 4.0, opt_state
    weights, grads, opt = psi * w_pp, psi * g_pp, psi * o_pp
    z = 3 if engine == "fsdp2" else cfg.zero_stage
    if z >= 1:
        opt /= nd
    if z >= 2:
        grads /= nd
    if z >= 3:
        weights /= nd
    host = 0.0
    gathered = gathered_params_bytes(model, cfg, w_pp, c) if z == 3 else 0.0
    if engine == "fsdp2" and cfg.offload is Offload.optimizer_params:
        # CPUOffloadPolicy: shards, their gradients and the optimizer step in host memory.
        host += weights + grads + opt
        weights = grads = opt = 0.0
    if engine != "fsdp2" and cfg.offload in (Offload.optimizer, Offload.optimizer_params):
        # The optimizer partition (and, for the CPU Adam, an fp32 copy of the gradient
        # partition) live in host memory (ZeRO-Offload, Ren et al. 2021).
        host += opt + psi * 4.0 / nd
        opt = 0.0
    if engine != "fsdp2" and cfg.offload is Offload.optimizer_params:
        host += weights
        weights = 0.0
    return {"weights": int(weights), "gathered": int(gathered), "gradients": int(grads),
            "optimizer": int(opt), "host": int(host), "w_pp": w_pp}


# ---------------------------------------------------------------------------------------
# The whole rank
# ---------------------------------------------------------------------------------------


def estimate_memory(model: ModelShape, cfg: MemoryConfig) -> MemoryEstimate:
    """Analytic peak memory per rank; the calibrated overhead is added by `autotune.search.calibration`."""
    states = model_state_bytes(model, cfg)
    acts, logits = activation_bytes(model, cfg)
    psi = model.tp_local_params(cfg.tp_degree)
    c = dtype_bytes(cfg.precision)
    engine = cfg.resolved_engine
    notes: list[str] = []
    if acts is None:
        notes.append("activations not estimated: give the model's layers, hidden, heads and vocab")
    if cfg.compile:
        notes.append("compiled: activations as eager keeps them, an upper bound (Inductor fuses "
                     "elementwise ops and saves fewer intermediates); compiled trials calibrate "
                     "their own constant")
    buckets = 0.0
    weight_cache = 0.0
    opt_temp = 0.0
    if engine == "ddp":
        if cfg.dp_degree > 1:
            # DDP's reducer copies gradients into flat buckets (gradient_as_bucket_view=False,
            # torch's default): a second full set of fp32 gradients.
            buckets = psi * 4.0
        if cfg.precision is not Precision.fp32:
            # torch autocast caches a 16-bit copy of every weight for the step, kept for backward.
            weight_cache = psi * c
        if cfg.optimizer == "adamw":
            # torch's foreach AdamW builds sqrt(exp_avg_sq) for all parameters at once.
            opt_temp = psi * 4.0
    elif engine == "fsdp2":
        buckets, opt_temp = fsdp2_transients(model, cfg, c)
    else:
        buckets, opt_temp = deepspeed_transients(model, cfg, states["w_pp"])
    return MemoryEstimate(
        params=model.params,
        weights_bytes=states["weights"], gradients_bytes=states["gradients"],
        optimizer_bytes=states["optimizer"], activations_bytes=acts, logits_bytes=logits,
        buckets_bytes=int(buckets), weight_cache_bytes=int(weight_cache),
        optimizer_temp_bytes=int(opt_temp), host_bytes=states["host"], notes=notes,
        gathered_bytes=states["gathered"],
    )
