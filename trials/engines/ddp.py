"""Plain data parallel (torch DDP over gloo on CPU, NCCL on CUDA), with precision and
gradient accumulation applied for real, and the gradient-norm pairs behind the noise scale.

    engine = DDPEngine(cfg, model, device, world_size)
    loss = engine.train_step(batches)    # one optimizer step over grad_accum_steps micro-batches
    engine.grad_norm_samples()           # per-step squared norms at two batch sizes, or None

Activation checkpointing is applied to the model by the worker before the engine sees it.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from autotune.contract import Precision, TrialConfig
from trials.precision import apply_fp8, autocast_dtype


def loss_of(model: torch.nn.Module, batch) -> torch.Tensor:
    """The model's loss for a batch: `model(input_ids, labels=labels)` -> tensor or `.loss`."""
    if isinstance(batch, torch.Tensor):
        batch = {"input_ids": batch, "labels": batch}
    out = model(batch["input_ids"], labels=batch["labels"])
    return out.loss if hasattr(out, "loss") else out


def make_optimizer(params, cfg: TrialConfig) -> torch.optim.Optimizer:
    """The trial's optimizer: SGD with momentum 0.9, or AdamW with weight decay 0.1."""
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=0.9)
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.1)


def grad_sq_norm(params) -> torch.Tensor:
    """Σ|g|² over the parameters' gradients, as a device tensor (no host sync)."""
    grads = [p.grad.detach().float() for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    return torch.stack([g.pow(2).sum() for g in grads]).sum()


class _NormPairs:
    """Squared gradient norms at two batch sizes, one pair per optimizer step, kept as device
    tensors so that recording them never synchronises inside the timed step."""

    def __init__(self, source: str, b_small: int, b_big: int):
        self.source, self.b_small, self.b_big = source, b_small, b_big
        self.small: list[torch.Tensor] = []
        self.big: list[torch.Tensor] = []
        self.small_step: torch.Tensor | None = None  # summed over DDP buckets within a step
        self.big_step: torch.Tensor | None = None

    def add_bucket(self, local_sq: torch.Tensor | None = None, reduced_sq: torch.Tensor | None = None):
        if local_sq is not None:
            self.small_step = local_sq if self.small_step is None else self.small_step + local_sq
        if reduced_sq is not None:
            self.big_step = reduced_sq if self.big_step is None else self.big_step + reduced_sq

    def end_step(self, inv_scale_sq: torch.Tensor | float = 1.0) -> None:
        # Loss scaling multiplies every gradient by s: divide the squared norms by s².
        if self.small_step is not None and self.big_step is not None:
            self.small.append(self.small_step * inv_scale_sq)
            self.big.append(self.big_step * inv_scale_sq)
        self.small_step = self.big_step = None

    def export(self) -> dict | None:
        if not self.small:
            return None
        return {"source": self.source, "b_small": self.b_small, "b_big": self.b_big,
                "small_sq": torch.stack(self.small).double().cpu().tolist(),
                "big_sq": torch.stack(self.big).double().cpu().tolist()}


class DDPEngine:
    def __init__(self, cfg: TrialConfig, model: torch.nn.Module, device: torch.device, world_size: int,
                 init_module=None):
        from trials.workloads.materialize import ensure_materialized

        # Data parallel: every rank holds the whole model.
        self.weights_mark = ensure_materialized(model, device, init_module)
        self.cfg = cfg
        self.device = device
        if cfg.precision is Precision.fp8:
            model = apply_fp8(model)  # the worker checked the GPU and torchao first
        self.raw_model = model
        self.model = (DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
                      if world_size > 1 else model)
        # Compiled around DDP: Dynamo runs DDP's forward eagerly and compiles the model inside,
        # split at the gradient buckets so the all-reduce still overlaps backward.
        self.forward_model = self.model
        if cfg.compile:
            from trials.compile import compile_module

            self.forward_model = compile_module(self.model, cfg)
        params = [p for p in model.parameters() if p.requires_grad]
        self._params = params
        self.optimizer = make_optimizer(params, cfg)
        dtype = autocast_dtype(cfg.precision)
        # Mixed precision: fp32 master weights, activations and matmuls in 16 bit.
        self.autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else nullcontext
        # fp16 needs loss scaling so small gradients do not underflow; torch's CPU kernels
        # support the GradScaler too, so this is the same code on both devices.
        self.scaler = torch.amp.GradScaler(device.type) if cfg.precision is Precision.fp16 else None
        self.optimizer_steps = 0
        self.micro_steps = 0
        self.norms = self._noise_scale_probe(world_size)

    def _noise_scale_probe(self, world_size: int) -> _NormPairs | None:
        """Two batch sizes from what a step computes anyway (McCandlish et al. 2018 App. A.1):
        across ranks, a rank's local gradient vs the all-reduced one (read in a DDP comm
        hook); on one rank with accumulation, the first micro-batch vs the accumulated one."""
        if not self.cfg.measure_noise_scale:
            return None
        per_rank = self.cfg.micro_batch_size * self.cfg.grad_accum_steps
        if isinstance(self.model, DDP):
            pairs = _NormPairs("ranks", per_rank, per_rank * world_size)
            self.model.register_comm_hook(pairs, _allreduce_recording_norms)
            return pairs
        if self.cfg.grad_accum_steps > 1:
            return _NormPairs("micro_batches", self.cfg.micro_batch_size, per_rank)
        return None

    def train_step(self, batches) -> torch.Tensor:
        accum = self.cfg.grad_accum_steps
        total = torch.zeros((), device=self.device)
        norms = self.norms
        micro_norms = norms is not None and norms.source == "micro_batches"
        for i in range(accum):
            batch = next(batches)
            # Gradients are all-reduced once per optimizer step, on the last micro-batch.
            sync = (i == accum - 1) or not isinstance(self.model, DDP)
            with (nullcontext() if sync else self.model.no_sync()):
                with self.autocast():
                    loss = loss_of(self.forward_model, batch)
                scaled = loss / accum
                if self.scaler is not None:
                    scaled = self.scaler.scale(scaled)
                scaled.backward()
            if micro_norms and norms is not None and i == 0:
                # The first micro-batch alone (its loss was divided by accum: undo it).
                norms.add_bucket(local_sq=grad_sq_norm(self._params) * accum ** 2)
            total += loss.detach().float() / accum
            self.micro_steps += 1
        if micro_norms and norms is not None:
            norms.add_bucket(reduced_sq=grad_sq_norm(self._params))
        if self.norms is not None:
            self.norms.end_step(self._inv_scale_sq())
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer_steps += 1
        return total

    def _inv_scale_sq(self) -> torch.Tensor | float:
        if self.scaler is None:
            return 1.0
        scale = self.scaler._get_scale_async()  # a device tensor: no host sync in the step
        return 1.0 / scale.double() ** 2 if scale is not None else 1.0

    def grad_norm_samples(self) -> dict | None:
        """{source, b_small, b_big, small_sq: [...], big_sq: [...]} for the noise scale."""
        return self.norms.export() if self.norms is not None else None

    def observations(self) -> dict:
        p = next(self.raw_model.parameters())
        dtype = autocast_dtype(self.cfg.precision)
        return {
            "engine": "ddp" if isinstance(self.model, DDP) else "single",
            "param_dtype": str(p.dtype),
            "autocast_dtype": str(dtype) if dtype else None,
            "loss_scaling": self.scaler is not None,
            "compiled": self.forward_model is not self.model,
            "optimizer_steps": self.optimizer_steps,
            "micro_steps": self.micro_steps,
        }


def _allreduce_recording_norms(pairs: _NormPairs, bucket):
    """DDP comm hook: the default all-reduce (sum, then divide by world size), recording the
    bucket's squared norm before (this rank's gradient) and after (the global mean)."""
    import torch.distributed as dist

    buf = bucket.buffer()
    pairs.add_bucket(local_sq=buf.detach().float().pow(2).sum())
    world = dist.get_world_size()
    buf.div_(world)
    fut = dist.all_reduce(buf, async_op=True).get_future()

    def done(f):
        reduced = f.value()[0]
        pairs.add_bucket(reduced_sq=reduced.detach().float().pow(2).sum())
        return reduced

    return fut.then(done)
