"""DeepSpeed ZeRO stage 0-3 with CPU offload of the optimizer (stages 1-3) and of the
parameters (stage 3), through `deepspeed.initialize` with the full config of the trial.

    engine = DeepSpeedEngine(cfg, model, device, world_size)
    loss = engine.train_step(batches)    # grad_accum_steps micro-batches, one optimizer step

The config is `autotune.contract.deepspeed_config(cfg)`, the same JSON `export` writes for
the long run, so the trial measures what the long run will run. Launched by the DeepSpeed
launcher (`python -m deepspeed.launcher.runner --num_gpus N --module trials.worker ...`), or
by any launcher that sets RANK / WORLD_SIZE / MASTER_ADDR (torchrun, accelerate).
On CPU DeepSpeed JIT-builds two C++ ops on first use (its shared-memory all-reduce, and
DeepSpeedCPUAdam when the optimizer is offloaded); they are cached in
~/.cache/torch_extensions (TORCH_EXTENSIONS_DIR), so only a machine's first trial pays.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import torch

from autotune.contract import TrialConfig, deepspeed_config
from trials.engines.ddp import loss_of
from trials.engines.observe import ActivationDtype, observe_optimizer, observe_params
from trials.errors import UnsupportedConfig

ZERO_WITH_TP = ("ZeRO (zero_stage > 0) with tensor parallel (tp_degree > 1) is not implemented: "
                "DeepSpeed's ZeRO partitions plain tensors, not the DTensor shards of PyTorch "
                "tensor parallel. To fix: use zero_stage 0 with tp_degree > 1, or tp_degree 1 "
                "with ZeRO.")

# Printing the loss scale and learning rate every step would fill the trial's logs.
_QUIET = {"steps_per_print": 1 << 30, "wall_clock_breakdown": False}


class DeepSpeedEngine:
    def __init__(self, cfg: TrialConfig, model: torch.nn.Module, device: torch.device, world_size: int):
        if cfg.tp_degree > 1:
            raise UnsupportedConfig(ZERO_WITH_TP)
        _ensure_rendezvous_env(world_size)
        import deepspeed
        from deepspeed.accelerator import get_accelerator

        accelerator = get_accelerator().device_name()
        if accelerator != device.type:
            # DeepSpeed picks its accelerator once per process; a mismatch would put the
            # model on one device and the optimizer on another.
            raise UnsupportedConfig(
                f"DeepSpeed selected accelerator '{accelerator}' but the trial runs on "
                f"{device.type}. To fix: set DS_ACCELERATOR={device.type} (autotune's launcher does)")
        self.cfg = cfg
        self.device = device
        self.raw_model = model
        self.ds_config = {**deepspeed_config(cfg), **_QUIET}
        self._activations = ActivationDtype(model)
        params = [p for p in model.parameters() if p.requires_grad]
        try:
            self.engine, self.optimizer, _, _ = deepspeed.initialize(
                model=model, model_parameters=params, config=self.ds_config)
        except ValueError as exc:
            # DeepSpeed's own check, e.g. "Type fp16 is not supported on your device." on CPU.
            if "not supported on your device" in str(exc):
                raise UnsupportedConfig(f"DeepSpeed on {accelerator}: {exc}") from exc
            raise
        self.micro_steps = 0

    @property
    def optimizer_steps(self) -> int:
        # DeepSpeed's own count: it steps the optimizer at accumulation boundaries only.
        return int(self.engine.global_steps)

    def train_step(self, batches: Iterator[Any]) -> torch.Tensor:
        accum = self.cfg.grad_accum_steps
        total = torch.zeros((), device=self.device)
        for _ in range(accum):
            loss = loss_of(self.engine, next(batches))
            # backward() divides by the accumulation steps and, at the boundary, reduces
            # (ZeRO 1/2: reduce-scatters) the gradients; step() steps only at the boundary.
            self.engine.backward(loss)
            self.engine.step()
            total += loss.detach().float() / accum
            self.micro_steps += 1
        return total

    def observations(self) -> dict[str, Any]:
        zero = self.ds_config["zero_optimization"]
        return {
            "engine": "deepspeed",
            "zero_stage": int(self.engine.zero_optimization_stage()),
            "dp_world_size": int(self.engine.dp_world_size),
            "offload_optimizer": bool(self.engine.zero_offload_optimizer()),
            "offload_param": bool(self.engine.zero_offload_param()),
            "ds_zero_config": zero,
            "ds_train_batch_size": int(self.engine.train_batch_size()),
            "ds_gradient_accumulation_steps": int(self.engine.gradient_accumulation_steps()),
            "bf16": bool(self.engine.bfloat16_enabled()),
            "fp16": bool(self.engine.fp16_enabled()),
            "linear_output_dtype": self._activations.dtype,
            "optimizer_steps": self.optimizer_steps,
            "micro_steps": self.micro_steps,
            **observe_params(self.raw_model),
            **observe_optimizer(self.engine.optimizer),
        }


def _ensure_rendezvous_env(world_size: int) -> None:
    """A single process started without a distributed launcher (accelerate's one-process
    path) has no RANK / MASTER_ADDR; deepspeed.initialize would then look for MPI."""
    if world_size == 1 and "MASTER_ADDR" not in os.environ:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(port))
