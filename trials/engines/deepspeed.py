"""DeepSpeed ZeRO stage 0-3 with CPU offload of the optimizer (stages 1-3) and of the
parameters (stage 3), through `deepspeed.initialize` with the full config of the trial.

    engine = DeepSpeedEngine(cfg, model, device, world_size)
    loss = engine.train_step(batches)    # grad_accum_steps micro-batches, one optimizer step

The config is `autotune.contract.deepspeed_config(cfg, hidden_size)`, the same JSON `export`
writes for the long run, so the trial measures what the long run will run; ZeRO's buckets
are sized to the model's hidden size as the Hugging Face integration's "auto" values are.
A meta-built model is materialised here: whole at stages 0-2, and at stage 3 partitioned
module by module as it is initialised (`zero3_partitioner`), so no rank holds it whole.
Launched by the DeepSpeed launcher (`python -m deepspeed.launcher.runner --num_gpus N
--module trials.worker ...`), or by any launcher that sets RANK / WORLD_SIZE / MASTER_ADDR
(torchrun, accelerate).
On CPU DeepSpeed JIT-builds two C++ ops on first use (its shared-memory all-reduce, and
DeepSpeedCPUAdam when the optimizer is offloaded); they are cached in
~/.cache/torch_extensions (TORCH_EXTENSIONS_DIR), so only a machine's first trial pays.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import torch

from autotune.contract import Precision, TrialConfig, deepspeed_config
from trials.engines.ddp import loss_of
from trials.engines.observe import ActivationDtype, observe_optimizer, observe_params
from trials.errors import UnsupportedConfig

ZERO_WITH_TP = ("ZeRO (zero_stage > 0) with tensor parallel (tp_degree > 1) is not implemented: "
                "DeepSpeed's ZeRO partitions plain tensors, not the DTensor shards of PyTorch "
                "tensor parallel. To fix: use zero_stage 0 with tp_degree > 1, or tp_degree 1 "
                "with ZeRO.")

# Printing the loss scale and learning rate every step would fill the trial's logs.
_QUIET = {"steps_per_print": 1 << 30, "wall_clock_breakdown": False}


def engine_config(cfg: TrialConfig, hidden_size: int | None) -> dict[str, Any]:
    """The DeepSpeed config the trial runs: `deepspeed_config` (what export writes), its
    buffers sized to the model's hidden size, without per-step logging."""
    return {**deepspeed_config(cfg, hidden_size=hidden_size), **_QUIET}


def zero3_partitioner(cfg: TrialConfig, config: dict[str, Any]):
    """A function(module) that hands one module's new parameters to ZeRO-3 as soon as they
    are initialised (`deepspeed.zero.Init(module=...)`: broadcast from rank 0, then only this
    rank's partition is kept, on the device or, with parameter offload, in host memory), so
    that a meta-built model never exists whole on any rank: what `deepspeed.zero.Init` does
    for a model constructed inside it, module by module, without re-gathering for the init."""
    import deepspeed

    dtype = {Precision.bf16: torch.bfloat16, Precision.fp16: torch.float16}.get(cfg.precision)

    def partition(module: torch.nn.Module) -> None:
        new = [p for p in module.parameters(recurse=False) if not hasattr(p, "ds_id")]
        if not new:
            return
        if dtype is not None:  # 16-bit weights, as zero.Init stores them; fp32 master in the optimizer
            for p in new:
                if p.is_floating_point():
                    p.data = p.data.to(dtype)
        deepspeed.zero.Init(module=module, config_dict_or_path=config)

    return partition


def join_deepspeed(cfg: TrialConfig) -> None:
    """Make DeepSpeed's communication layer use the worker's process group before anything
    of DeepSpeed's is built: zero.Init checks the batch against DeepSpeed's own view of the
    world size (deepspeed.initialize would join later, too late for zero.Init)."""
    _ensure_rendezvous_env(int(os.environ.get("WORLD_SIZE", "1")))
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    deepspeed.init_distributed(dist_backend=get_accelerator().communication_backend_name())


def _check_accelerator(want: str) -> str:
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator().device_name()
    if accelerator != want:
        # DeepSpeed picks its accelerator once per process; a mismatch would put the
        # model on one device and the optimizer on another.
        raise UnsupportedConfig(
            f"DeepSpeed selected accelerator '{accelerator}' but the trial runs on "
            f"{want}. To fix: set DS_ACCELERATOR={want} (autotune's launcher does)")
    return accelerator


class DeepSpeedEngine:
    def __init__(self, cfg: TrialConfig, model: torch.nn.Module, device: torch.device, world_size: int,
                 init_module=None, hidden_size: int | None = None):
        if cfg.tp_degree > 1:
            raise UnsupportedConfig(ZERO_WITH_TP)
        _ensure_rendezvous_env(world_size)
        import deepspeed

        from trials.workloads.materialize import ensure_materialized

        accelerator = _check_accelerator(device.type)
        self.ds_config = engine_config(cfg, hidden_size)
        # A meta-built model gets its weights here: whole at stages 0-2 (every rank holds them),
        # partitioned module by module at stage 3.
        if cfg.zero_stage == 3:
            join_deepspeed(cfg)
            self.weights_mark = ensure_materialized(
                model, device, init_module, after_module=zero3_partitioner(cfg, self.ds_config))
        else:
            self.weights_mark = ensure_materialized(model, device, init_module)
        self.cfg = cfg
        self.device = device
        self.raw_model = model
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
        if cfg.compile:
            # DeepSpeed's own way (DeepSpeedEngine.compile, 0.14+): it compiles the module it
            # wraps, its ZeRO hooks outside the graph; compiled at the first forward.
            if not hasattr(self.engine, "compile"):
                raise UnsupportedConfig(f"DeepSpeed {deepspeed.__version__} has no engine."
                                        "compile(). To fix: pip install 'deepspeed>=0.14'")
            from trials.compile import configure

            configure(cfg)
            self.engine.compile(backend="inductor")
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

    def close(self) -> None:
        """Release what outlives this engine in the process, for a pool's next trial
        (trials/pool.py): DeepSpeed's own teardown, then the method caches that keep every
        module and ZeRO-3 coordinator they saw alive (DeepSpeed 0.19's
        `PartitionedParameterCoordinator.__params_to_release` is an lru_cache on the class,
        so each ZeRO-3 trial would leave its model behind in a pool's ranks), and
        ZeRO-3's module stack, which keeps the model at its bottom for the process's life."""
        import sys

        self.engine.destroy()
        clear_deepspeed_method_caches()
        offload = sys.modules.get("deepspeed.runtime.zero.parameter_offload")
        stack = getattr(offload, "FWD_MODULE_STACK", None)
        if isinstance(stack, list):
            stack.clear()  # between trials no forward is running: nothing else belongs on it

    def observations(self) -> dict[str, Any]:
        zero = self.ds_config["zero_optimization"]
        return {
            "engine": "deepspeed",
            "zero_stage": int(self.engine.zero_optimization_stage()),
            "dp_world_size": int(self.engine.dp_world_size),
            "offload_optimizer": bool(self.engine.zero_offload_optimizer()),
            "offload_param": bool(self.engine.zero_offload_param()),
            "ds_zero_config": zero,
            "ds_config": {k: v for k, v in self.ds_config.items() if k not in _QUIET},
            "ds_train_batch_size": int(self.engine.train_batch_size()),
            "ds_gradient_accumulation_steps": int(self.engine.gradient_accumulation_steps()),
            "bf16": bool(self.engine.bfloat16_enabled()),
            "fp16": bool(self.engine.fp16_enabled()),
            "compiled": bool(getattr(self.engine, "is_compiled", False)),
            "linear_output_dtype": self._activations.dtype,
            "optimizer_steps": self.optimizer_steps,
            "micro_steps": self.micro_steps,
            **observe_params(self.raw_model),
            **observe_optimizer(self.engine.optimizer),
        }


def clear_deepspeed_method_caches() -> int:
    """Empty every functools cache on a class of DeepSpeed's loaded modules (through wrappers
    such as instrument_w_nvtx); returns how many. Caches only: clearing one costs a recompute."""
    import sys

    cleared = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("deepspeed") or module is None:
            continue
        for cls in [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == name]:
            for attr in vars(cls).values():
                cache = _cache_inside(attr)
                if cache is not None:
                    cache.cache_clear()
                    cleared += 1
    return cleared


def _cache_inside(fn, depth: int = 3):
    """The functools cache `fn` is or wraps: through `__wrapped__`, or the closure of a wrapper
    that does not set it (DeepSpeed's instrument_w_nvtx)."""
    if hasattr(fn, "cache_clear"):
        return fn
    if depth == 0 or not callable(fn):
        return None
    inner = [getattr(fn, "__wrapped__", None)]
    inner += [c.cell_contents for c in getattr(fn, "__closure__", None) or () if _filled(c)]
    for f in inner:
        found = _cache_inside(f, depth - 1) if f is not None else None
        if found is not None:
            return found
    return None


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
        return True
    except ValueError:
        return False


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
