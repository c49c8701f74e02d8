"""Plain data parallel (torch DDP over gloo on CPU, NCCL on CUDA), with precision,
activation checkpointing and gradient accumulation applied for real.

    engine = DDPEngine(cfg, model, device, world_size)
    loss = engine.train_step(batches)    # one optimizer step over grad_accum_steps micro-batches
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from autotune.contract import Checkpointing, Precision, TrialConfig

AUTOCAST_DTYPE = {Precision.bf16: torch.bfloat16, Precision.fp16: torch.float16}


def loss_of(model: torch.nn.Module, batch) -> torch.Tensor:
    """The model's loss for a batch: `model(input_ids, labels=labels)` -> tensor or `.loss`."""
    if isinstance(batch, torch.Tensor):
        batch = {"input_ids": batch, "labels": batch}
    out = model(batch["input_ids"], labels=batch["labels"])
    return out.loss if hasattr(out, "loss") else out


class DDPEngine:
    def __init__(self, cfg: TrialConfig, model: torch.nn.Module, device: torch.device, world_size: int):
        self.cfg = cfg
        self.device = device
        self.raw_model = model
        if cfg.checkpointing is not Checkpointing.none:
            self._apply_checkpointing(model)
        self.model = (DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
                      if world_size > 1 else model)
        params = [p for p in model.parameters() if p.requires_grad]
        if cfg.optimizer == "sgd":
            self.optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=0.9)
        else:
            self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.1)
        dtype = AUTOCAST_DTYPE.get(cfg.precision)
        # Mixed precision: fp32 master weights, activations and matmuls in 16 bit.
        self.autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else nullcontext
        self.scaler = (torch.amp.GradScaler(device.type) if cfg.precision is Precision.fp16 else None)
        self.optimizer_steps = 0
        self.micro_steps = 0
        self._activation_dtype: str | None = None

    def _apply_checkpointing(self, model: torch.nn.Module) -> None:
        from trials.workloads.gpt import GPT, checkpointed_blocks

        if not isinstance(model, GPT):
            from trials.errors import UnsupportedConfig

            raise UnsupportedConfig("activation checkpointing is implemented for the built-in GPT only")
        model.set_checkpointing(checkpointed_blocks(model.shape.n_layers, self.cfg.checkpointing.value,
                                                    self.cfg.checkpoint_every))

    def train_step(self, batches) -> torch.Tensor:
        accum = self.cfg.grad_accum_steps
        total = torch.zeros((), device=self.device)
        for i in range(accum):
            batch = next(batches)
            # Gradients are all-reduced once per optimizer step, on the last micro-batch.
            sync = (i == accum - 1) or not isinstance(self.model, DDP)
            with (nullcontext() if sync else self.model.no_sync()):
                with self.autocast():
                    loss = loss_of(self.model, batch)
                if self._activation_dtype is None:
                    self._activation_dtype = str(loss.dtype)
                scaled = loss / accum
                if self.scaler is not None:
                    self.scaler.scale(scaled).backward()
                else:
                    scaled.backward()
            total += loss.detach().float() / accum
            self.micro_steps += 1
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer_steps += 1
        return total

    def observations(self) -> dict:
        p = next(self.raw_model.parameters())
        return {
            "engine": "ddp" if isinstance(self.model, DDP) else "single",
            "param_dtype": str(p.dtype),
            "autocast_dtype": str(AUTOCAST_DTYPE[self.cfg.precision]) if self.cfg.precision in AUTOCAST_DTYPE else None,
            "optimizer_steps": self.optimizer_steps,
            "micro_steps": self.micro_steps,
            "checkpointed_blocks": sorted(getattr(self.raw_model, "checkpointed", set())),
        }
