"""PyTorch FSDP2 (`torch.distributed.fsdp.fully_shard`), the sharding torchtitan and
accelerate's `fsdp_version: 2` run; with tensor parallel on a 2-D (dp, tp) DeviceMesh.

    engine = FSDP2Engine(cfg, model, device, world_size, init_module=GPT.init_module)
    loss = engine.train_step(batches)    # grad_accum_steps micro-batches, one optimizer step

Each repeated block (the GPT's blocks, a Hugging Face model's decoder layers) is its own FSDP
unit and the root holds the rest (embeddings, final norm). Parameters, gradients and
optimizer state are sharded over the data-parallel ranks; a block's parameters are gathered
to compute and resharded after its forward (`fsdp full_shard`) or kept until its backward
(`shard_grad_op`). The model arrives built on the meta device and is sharded there, so each
rank allocates only its shard (`trials.workloads.materialize`). Knobs: bf16 runs under
`MixedPrecisionPolicy` (16-bit compute and gathers, fp32 master shards and gradient
reduction); `offload optimizer+params` is `CPUOffloadPolicy` (shards, gradients and the
optimizer step in host memory). All of it runs on CPU ranks over gloo (torch 2.13); fp16 is
`unsupported` (see FP16_REASON).
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
import torch.distributed as dist

from autotune.contract import FSDPMode, Offload, Precision, TrialConfig
from trials.engines.ddp import loss_of, make_optimizer
from trials.engines.observe import ActivationDtype, observe_optimizer, observe_params
from trials.errors import UnsupportedConfig
from trials.precision import apply_fp8, autocast_dtype
from trials.workloads.materialize import ensure_materialized, repeated_blocks

try:  # public since torch 2.6 (torch.distributed._composable.fsdp before)
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
except ImportError:  # pragma: no cover - older torch
    fully_shard = None

# torch's GradScaler checks only the gradients a rank holds: with sharded gradients each rank
# sees a different shard, so ranks would disagree on skipping a step (FSDP1 needed its own
# ShardedGradScaler for this; FSDP2 has none, and torchtitan offers no fp16).
FP16_REASON = ("fp16 with FSDP2 is not implemented: loss scaling needs every rank to agree on "
               "overflow, and torch's GradScaler sees only this rank's gradient shard. To fix: "
               "use bf16 (no loss scaling) or DDP / DeepSpeed for fp16")


class FSDP2Engine:
    def __init__(self, cfg: TrialConfig, model: torch.nn.Module, device: torch.device, world_size: int,
                 init_module=None):
        from torch.distributed.device_mesh import init_device_mesh

        from trials.engines.tp import apply_tp, check_tp_shape, grad_summed_params, qkv_transforms

        if fully_shard is None:
            raise UnsupportedConfig(f"FSDP2 needs torch >= 2.6 (torch.distributed.fsdp."
                                    f"fully_shard); this is torch {torch.__version__}")
        if cfg.precision is Precision.fp16:
            raise UnsupportedConfig(FP16_REASON)
        tp = cfg.tp_degree
        if tp > 1:
            if cfg.precision is Precision.fp8:
                raise UnsupportedConfig("fp8 with tensor parallel is not implemented (torchao "
                                        "float8 needs its own TP styles). To fix: use bf16 "
                                        "with tp_degree > 1")
            check_tp_shape(model, tp, world_size)
        self.cfg, self.device, self.raw_model = cfg, device, model
        self.tp, self.dp = tp, world_size // tp
        # gloo on CPU, NCCL on CUDA; one dimension when there is no TP.
        self.mesh = init_device_mesh(device.type, (self.dp, tp), mesh_dim_names=("dp", "tp"))
        if cfg.precision is Precision.fp8:
            model = apply_fp8(model)  # before sharding, as torchtitan orders it (GPU only)
            self.raw_model = model
        self.tp_group = self.mesh["tp"].get_group() if tp > 1 else None
        self.tp_src = dist.get_global_rank(self.tp_group, 0) if tp > 1 else 0
        if tp > 1:
            apply_tp(model, self.mesh["tp"], tp)
        dtype = autocast_dtype(cfg.precision)
        self.reshard_after_forward = cfg.fsdp is FSDPMode.full_shard
        kwargs: dict[str, Any] = {"mesh": self.mesh["dp"],
                                  "reshard_after_forward": self.reshard_after_forward}
        if dtype is not None:
            # 16-bit gathers and compute; gradients reduced and kept in fp32 (torchtitan's default).
            kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        if cfg.offload is Offload.optimizer_params:
            kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=device.type == "cuda")
        self.compiled_blocks = 0
        if cfg.compile:
            # Per block, after TP and checkpointing and before fully_shard (torchtitan's order):
            # FSDP2's gathers and reshards stay outside the compiled graphs.
            from trials.compile import compile_blocks

            self.compiled_blocks = compile_blocks(model, cfg)
            if not self.compiled_blocks:
                raise UnsupportedConfig("compile with FSDP2 compiles each repeated block, and "
                                        "this model has none (no ModuleList of blocks). To fix: "
                                        "set compile false, or use DDP")
        self.blocks = repeated_blocks(model)
        for block in self.blocks:
            fully_shard(block, **kwargs)
        fully_shard(model, **kwargs)
        # Only this rank's shards get memory; with CPU offload they live in host memory from
        # the start (as torchtitan initialises them), buffers on the compute device.
        self.weights_mark = ensure_materialized(
            model, device, init_module, transforms=qkv_transforms(model, tp) if tp > 1 else None,
            param_device=torch.device("cpu") if "offload_policy" in kwargs else None)
        self._activations = ActivationDtype(model)
        self.summed = grad_summed_params(model) if tp > 1 else []  # qwen3's q/k norms (tp.SUMMED)
        self.optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad], cfg)
        self.optimizer_steps = self.micro_steps = 0

    def train_step(self, batches: Iterator[Any]) -> torch.Tensor:
        from trials.engines.tp import group_batch, sum_over_tp

        accum = self.cfg.grad_accum_steps
        total = torch.zeros((), device=self.device)
        for _ in range(accum):
            batch = group_batch(next(batches), self.tp_group, self.tp_src)
            loss = loss_of(self.raw_model, batch)
            # Gradients are reduce-scattered after every micro-batch (FSDP2's default): the
            # rank keeps only its gradient shard, accumulated in fp32.
            (loss / accum).backward()
            total += loss.detach().float() / accum
            self.micro_steps += 1
        sum_over_tp(self.summed, self.tp_group)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer_steps += 1
        return total

    def observations(self) -> dict[str, Any]:
        from trials.engines.tp import summed_drift

        dtype = autocast_dtype(self.cfg.precision)
        return {
            "engine": "fsdp2",
            "fsdp": self.cfg.fsdp.value,
            "reshard_after_forward": self.reshard_after_forward,
            "fsdp_units": len(self.blocks) + 1,
            "compiled_blocks": self.compiled_blocks,
            "cpu_offload": self.cfg.offload is Offload.optimizer_params,
            "mp_param_dtype": str(dtype) if dtype else None,
            "mesh_shape": list(self.mesh.shape),
            "tp_degree": self.tp,
            "dp_degree": self.dp,
            "grad_summed_weights": len(self.summed),
            "grad_summed_max_abs_diff": summed_drift(self.summed, self.tp_group, self.tp_src, self.device),
            "linear_output_dtype": self._activations.dtype,
            "optimizer_steps": self.optimizer_steps,
            "micro_steps": self.micro_steps,
            **observe_params(self.raw_model),
            **observe_optimizer(self.optimizer),
        }
