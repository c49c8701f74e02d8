"""Data parallel and mixed precision through Hugging Face accelerate's `Accelerator`, for
users whose long run is an accelerate script: the trial runs what theirs runs.

    accelerate launch --multi_gpu --num_processes 2 --mixed_precision bf16 -m trials.worker ...
    engine = AccelerateEngine(cfg, model, device, world_size)
    loss = engine.train_step(batches)    # grad_accum_steps micro-batches, one optimizer step

Precision comes from the launcher (`--mixed_precision`, as in the user's run) and is checked
against the config; gradient accumulation goes through `accelerator.accumulate`, which skips
the all-reduce and the optimizer step until the last micro-batch. On CPU the launcher must
start the ranks with ACCELERATE_USE_CPU=true, else every rank trains alone (checked here).
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

from autotune.contract import ACCELERATE_MIXED_PRECISION, Precision, TrialConfig
from trials.engines.ddp import loss_of, make_optimizer
from trials.engines.observe import ActivationDtype, observe_optimizer, observe_params
from trials.errors import UnsupportedConfig


class AccelerateEngine:
    def __init__(self, cfg: TrialConfig, model: torch.nn.Module, device: torch.device, world_size: int,
                 init_module=None):
        from accelerate import Accelerator

        from trials.workloads.materialize import ensure_materialized

        if cfg.precision is Precision.fp8:
            raise UnsupportedConfig("fp8 under the accelerate launcher is not implemented. "
                                    "To fix: use launcher torchrun for fp8 trials")
        want = ACCELERATE_MIXED_PRECISION[cfg.precision]
        try:
            self.accelerator = Accelerator(gradient_accumulation_steps=cfg.grad_accum_steps)
        except ValueError as exc:  # e.g. a precision accelerate refuses on this device
            raise UnsupportedConfig(f"accelerate: {exc}") from exc
        acc = self.accelerator
        if acc.num_processes != world_size:
            raise RuntimeError(
                f"accelerate sees {acc.num_processes} process(es) but {world_size} ranks were "
                "launched: each rank would train alone. To fix: on CPU launch with "
                "ACCELERATE_USE_CPU=true and --multi_gpu (autotune's launcher does)")
        if acc.mixed_precision != want:
            raise RuntimeError(
                f"accelerate runs mixed_precision={acc.mixed_precision!r} but the trial asks for "
                f"{cfg.precision.value} ({want!r}). To fix: launch with --mixed_precision {want}")
        dynamo = str(acc.state.dynamo_plugin.backend.value).lower()
        if (dynamo != "no") != cfg.compile:
            raise RuntimeError(
                f"accelerate runs dynamo_backend={dynamo!r} but the trial asks for compile="
                f"{cfg.compile}. To fix: launch with --dynamo_backend "
                f"{'inductor' if cfg.compile else 'no'}")
        if cfg.compile:
            from trials.compile import configure

            configure(cfg)
        # Data parallel: every rank holds the whole model.
        self.weights_mark = ensure_materialized(model, device, init_module)
        self.cfg, self.device, self.raw_model = cfg, device, model
        self._activations = ActivationDtype(model)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = make_optimizer(params, cfg)
        # prepare(): DDP when several processes, autocast around forward, a GradScaler for fp16,
        # torch.compile last when its dynamo backend is set (the launcher's --dynamo_backend).
        self.model, self.optimizer = acc.prepare(model, optimizer)
        self.optimizer_steps = 0
        self.micro_steps = 0

    def train_step(self, batches: Iterator[Any]) -> torch.Tensor:
        acc = self.accelerator
        accum = self.cfg.grad_accum_steps
        total = torch.zeros((), device=self.device)
        for _ in range(accum):
            with acc.accumulate(self.model):
                loss = loss_of(self.model, next(batches))
                acc.backward(loss)  # divides by the accumulation steps
                self.optimizer.step()  # a no-op until the accumulation boundary
                self.optimizer.zero_grad(set_to_none=True)
            if acc.sync_gradients and not self.optimizer.step_was_skipped:
                self.optimizer_steps += 1
            total += loss.detach().float() / accum
            self.micro_steps += 1
        return total

    def observations(self) -> dict[str, Any]:
        acc = self.accelerator
        return {
            "engine": "accelerate",
            "distributed_type": str(acc.distributed_type.value),
            "num_processes": int(acc.num_processes),
            "mixed_precision": acc.mixed_precision,
            "wrapped_model": type(self.model).__name__,
            "dynamo_backend": str(acc.state.dynamo_plugin.backend.value).lower(),
            "linear_output_dtype": self._activations.dtype,
            "loss_scaling": acc.scaler is not None,
            "optimizer_steps": self.optimizer_steps,
            "micro_steps": self.micro_steps,
            **observe_params(self.raw_model),
            **observe_optimizer(self.optimizer),
        }
