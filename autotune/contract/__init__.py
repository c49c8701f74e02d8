"""The JSON contract between the controller (`autotune/`) and the worker (`trials/`).

This is the only module the worker imports from the controller, and it imports nothing
heavier than pydantic, so a trial process pays nothing for the controller.

    cfg = TrialConfig(workload=GPTWorkload(preset="tiny"), seq_len=128, micro_batch_size=4)
    cfg.write(folder / "config.json")
    result = TrialResult.read(folder / "result.json")

Every change to a field is a change to `SCHEMA_VERSION`; `tests/test_contract.py` pins the
JSON schema so the surface changes on purpose only.
"""

from __future__ import annotations

import json
import os
import tempfile
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 1


class Precision(str, Enum):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"


class Checkpointing(str, Enum):
    """Activation checkpointing: `selective` recomputes every `checkpoint_every`-th block."""

    none = "none"
    selective = "selective"
    full = "full"


class Offload(str, Enum):
    none = "none"
    optimizer = "optimizer"
    optimizer_params = "optimizer+params"


class Launcher(str, Enum):
    torchrun = "torchrun"
    deepspeed = "deepspeed"
    accelerate = "accelerate"


class DeviceKind(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


class TrialStatus(str, Enum):
    ok = "ok"
    oom = "oom"
    timeout = "timeout"
    crash = "crash"
    nan = "nan"
    unsupported = "unsupported"


class MemorySource(str, Enum):
    """Where a memory figure came from; a report always says which."""

    cuda_allocator = "cuda_allocator"  # torch.cuda.max_memory_allocated / reserved
    nvml = "nvml"  # device-level used memory, sampled by a background thread
    host_rss = "host_rss"  # peak resident set size of the rank's process (CPU trials)
    not_measured = "not_measured"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_enum_values=False)


# ---------------------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------------------


class GPTShape(_Model):
    """Shape of the built-in GPT decoder (pre-LN, learned positions, GELU MLP, tied head)."""

    n_layers: int = Field(gt=0)
    d_model: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_seq_len: int = Field(default=2048, gt=0)
    ffn_mult: int = Field(default=4, gt=0, description="MLP hidden = ffn_mult * d_model")

    @model_validator(mode="after")
    def _heads_divide(self) -> "GPTShape":
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}. "
                "To fix: pick n_heads that divides d_model."
            )
        return self

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def num_params(self, include_embeddings: bool = True) -> int:
        """Exact parameter count of `trials.workloads.gpt.GPT` for this shape."""
        d, f = self.d_model, self.ffn_mult * self.d_model
        per_layer = (
            2 * 2 * d  # two LayerNorms (weight + bias)
            + d * 3 * d + 3 * d  # qkv projection
            + d * d + d  # attention output projection
            + d * f + f  # MLP up
            + f * d + d  # MLP down
        )
        body = self.n_layers * per_layer + 2 * d  # + final LayerNorm
        if not include_embeddings:
            return body
        # token embedding (tied with the LM head) + learned positions
        return body + self.vocab_size * d + self.max_seq_len * d


# Presets from ~1M parameters (tests) up to 7B shapes (planning only: `estimate`, `plan`).
GPT_PRESETS: dict[str, GPTShape] = {
    "tiny": GPTShape(n_layers=2, d_model=128, n_heads=4, vocab_size=2048, max_seq_len=256),
    "mini": GPTShape(n_layers=4, d_model=256, n_heads=8, vocab_size=8192, max_seq_len=512),
    "small": GPTShape(n_layers=12, d_model=768, n_heads=12, vocab_size=50304, max_seq_len=1024),
    "medium": GPTShape(n_layers=24, d_model=1024, n_heads=16, vocab_size=50304, max_seq_len=1024),
    "large": GPTShape(n_layers=36, d_model=1280, n_heads=20, vocab_size=50304, max_seq_len=1024),
    "1b": GPTShape(n_layers=24, d_model=2048, n_heads=16, vocab_size=50304, max_seq_len=2048),
    "7b": GPTShape(n_layers=32, d_model=4096, n_heads=32, vocab_size=32000, max_seq_len=4096),
}


def preset_names() -> list[str]:
    return list(GPT_PRESETS)


class GPTWorkload(_Model):
    """The built-in GPT: a preset by name, or explicit shapes."""

    kind: Literal["gpt"] = "gpt"
    preset: str | None = "tiny"
    shape: GPTShape | None = None

    @model_validator(mode="after")
    def _known_preset(self) -> "GPTWorkload":
        if self.shape is None:
            if self.preset not in GPT_PRESETS:
                import difflib

                close = difflib.get_close_matches(str(self.preset), GPT_PRESETS, n=1)
                hint = f" Did you mean '{close[0]}'?" if close else ""
                raise ValueError(
                    f"unknown GPT preset '{self.preset}'.{hint} "
                    f"To fix: use one of {', '.join(GPT_PRESETS)}, or give `shape`."
                )
        return self

    def resolved_shape(self) -> GPTShape:
        return self.shape if self.shape is not None else GPT_PRESETS[str(self.preset)]


class HFWorkload(_Model):
    """A Hugging Face causal LM built from a config with random weights (never a download).

    Either `config_path` (a local config.json) or `model_type` plus `config_overrides`
    (e.g. model_type="llama", overrides {"hidden_size": 256, ...}).
    """

    kind: Literal["hf"] = "hf"
    config_path: str | None = None
    model_type: str | None = None
    config_overrides: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self) -> "HFWorkload":
        if (self.config_path is None) == (self.model_type is None):
            raise ValueError(
                "a Hugging Face workload needs exactly one of `config_path` or `model_type`. "
                "To fix: point config_path at a local config.json, or name model_type."
            )
        return self


class EntryPointWorkload(_Model):
    """The user's own model and data: `module:function` returning (model, batch iterator).

    The function is called on every rank as
    `fn(seq_len=..., micro_batch_size=..., device=torch.device, **kwargs)` and returns
    `(model, batches)` or `(model, batches, info)`:
    - `model`: a torch.nn.Module (fp32 weights; the worker applies precision and parallelism)
      where `model(input_ids, labels=labels)` returns the mean loss of the micro-batch (a
      tensor, or an object with `.loss`, as transformers models do);
    - `batches`: an iterable of one rank's micro-batches, dicts with `input_ids` and `labels`
      (or one tensor of token ids, used as both); a re-iterable (a DataLoader) is restarted;
    - `info` (optional dict): `flops_per_token` (model FLOPs, forward + backward), or
      `n_layers` and `d_model` for the attention term of the 6N + 12·L·d·s estimate.
    Activation checkpointing applies where the model has transformers'
    `gradient_checkpointing_enable`; otherwise such a trial is `unsupported`.
    """

    kind: Literal["entry_point"] = "entry_point"
    entry_point: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    python_path: list[str] = Field(
        default_factory=list, description="folders put on sys.path before the import"
    )

    @model_validator(mode="after")
    def _shape(self) -> "EntryPointWorkload":
        module, sep, fn = self.entry_point.partition(":")
        if not sep or not module or not fn:
            raise ValueError(
                f"entry_point '{self.entry_point}' is not 'module:function'. "
                "To fix: write it as e.g. 'my_pkg.train:build'."
            )
        return self


Workload = Annotated[Union[GPTWorkload, HFWorkload, EntryPointWorkload], Field(discriminator="kind")]


# ---------------------------------------------------------------------------------------
# Trial config and result
# ---------------------------------------------------------------------------------------


class TrialConfig(_Model):
    """Everything a worker needs to run one trial. Written by the controller, read by the worker.

    `num_gpus` is the number of ranks: GPUs on CUDA, processes (each with
    `threads_per_rank` CPU threads) on CPU.
    """

    schema_version: int = SCHEMA_VERSION
    workload: Workload = Field(default_factory=GPTWorkload)
    seq_len: int = Field(default=128, gt=0)
    micro_batch_size: int = Field(default=1, gt=0)
    grad_accum_steps: int = Field(default=1, gt=0)
    num_gpus: int = Field(default=1, gt=0, description="ranks (GPUs, or CPU processes)")
    num_nodes: int = Field(default=1, gt=0)
    precision: Precision = Precision.fp32
    checkpointing: Checkpointing = Checkpointing.none
    checkpoint_every: int = Field(default=2, gt=0, description="selective: every k-th block")
    zero_stage: int = Field(default=0, ge=0, le=3)
    offload: Offload = Offload.none
    tp_degree: int = Field(default=1, gt=0)
    launcher: Launcher = Launcher.torchrun
    device: DeviceKind = DeviceKind.cpu
    optimizer: Literal["adamw", "sgd"] = "adamw"
    lr: float = Field(default=3e-4, gt=0)
    warmup_steps: int = Field(default=2, ge=0)
    measure_steps: int = Field(default=5, gt=0)
    max_measure_steps: int = Field(default=20, gt=0, description="cap when CV is high")
    max_step_time_cv: float = Field(default=0.15, gt=0, description="extend steps above this")
    threads_per_rank: int = Field(default=1, gt=0, description="CPU threads per rank")
    seed: int = 0
    timeout_s: float = Field(default=600.0, gt=0)
    device_peak_flops: float | None = Field(
        default=None, description="dense peak FLOP/s of one device at this precision (catalog)"
    )
    measure_noise_scale: bool = True

    @model_validator(mode="after")
    def _parallel_shape(self) -> "TrialConfig":
        if self.num_gpus % self.tp_degree:
            raise ValueError(
                f"tp_degree={self.tp_degree} does not divide num_gpus={self.num_gpus}. "
                "To fix: choose a tp_degree that divides the GPU count."
            )
        if self.offload is not Offload.none and self.zero_stage == 0:
            raise ValueError("offload needs ZeRO. To fix: set zero_stage >= 1 or offload none.")
        if self.offload is Offload.optimizer_params and self.zero_stage != 3:
            raise ValueError(
                "parameter offload needs ZeRO stage 3. To fix: set zero_stage 3 or offload optimizer."
            )
        return self

    @property
    def world_size(self) -> int:
        """All ranks of the trial: `num_gpus` per node on each of `num_nodes` nodes."""
        return self.num_gpus * self.num_nodes

    @property
    def dp_degree(self) -> int:
        return self.world_size // self.tp_degree

    @property
    def global_batch_samples(self) -> int:
        return self.micro_batch_size * self.grad_accum_steps * self.dp_degree

    @property
    def global_batch_tokens(self) -> int:
        return self.global_batch_samples * self.seq_len

    def write(self, path: str | Path) -> None:
        write_json_atomic(path, self.model_dump(mode="json"))

    @classmethod
    def read(cls, path: str | Path) -> "TrialConfig":
        return cls.model_validate_json(Path(path).read_text())


class MemoryReport(_Model):
    """Peak memory per rank (index = rank), each figure with its source. None = not measured."""

    allocator_allocated_peak_bytes: list[int] | None = None
    allocator_reserved_peak_bytes: list[int] | None = None
    nvml_device_peak_bytes: list[int] | None = None
    host_rss_peak_bytes: list[int] | None = None
    host_rss_baseline_bytes: list[int] | None = Field(
        default=None, description="RSS before the model was built (CPU: memory the trial added)"
    )


class HardwareFingerprint(_Model):
    hostname: str = ""
    device_kind: DeviceKind = DeviceKind.cpu
    device_name: str = ""
    device_count: int = 0
    device_memory_bytes: int | None = None
    cpu_model: str = ""
    cpu_count: int = 0
    host_memory_bytes: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    torch_version: str | None = None
    interconnect: str | None = None

    def key(self) -> str:
        """A short key that separates results measured on different hardware."""
        if self.device_kind is DeviceKind.cuda:
            return f"cuda:{self.device_name}"
        return f"cpu:{self.cpu_model or 'unknown'}"


class TrialResult(_Model):
    schema_version: int = SCHEMA_VERSION
    status: TrialStatus
    error_type: str | None = None
    error: str | None = None
    log_tail: str | None = None
    tokens_per_s: float | None = None
    samples_per_s: float | None = None
    tokens_per_s_per_rank: float | None = None
    step_time_median_s: float | None = None
    step_time_p90_s: float | None = None
    step_time_cv: float | None = None
    step_times_s: list[float] = Field(default_factory=list)
    warmup_steps: int = 0
    measured_steps: int = 0
    measure_extended: bool = False
    optimizer_steps: int = 0
    peak_mem_bytes: int | None = Field(default=None, description="max over ranks, see source")
    peak_mem_bytes_per_rank: list[int] | None = None
    peak_mem_source: MemorySource = MemorySource.not_measured
    memory: MemoryReport = Field(default_factory=MemoryReport)
    final_loss: float | None = None
    world_size: int = 0
    params: int | None = None
    flops_per_token: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    gradient_noise_scale: float | None = None
    hardware: HardwareFingerprint = Field(default_factory=HardwareFingerprint)
    wall_s: float | None = None
    phase_s: dict[str, float] = Field(default_factory=dict, description="where the time went")
    observations: dict[str, Any] = Field(
        default_factory=dict, description="what the worker saw applied (dtypes, shard sizes, ...)"
    )
    notes: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status is TrialStatus.ok

    def write(self, path: str | Path) -> None:
        write_json_atomic(path, self.model_dump(mode="json"))

    @classmethod
    def read(cls, path: str | Path) -> "TrialResult":
        return cls.model_validate_json(Path(path).read_text())


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON so a reader sees the old file or the whole new one, never half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def deepspeed_config(cfg: TrialConfig) -> dict[str, Any]:
    """The full DeepSpeed JSON config of a TrialConfig: what the trial's DeepSpeed engine runs
    and what `export` writes for the long run (so both run the same thing).

        json.dump(deepspeed_config(cfg), open("ds_config.json", "w"))

    Keys follow https://www.deepspeed.ai/docs/config-json/ (checked against DeepSpeed 0.19).
    The optimizer is AdamW (or SGD) with the trial's lr; without offload it is torch's own
    (`torch_adam`: no JIT-built kernel), with optimizer offload DeepSpeedCPUAdam, the
    optimizer ZeRO-Offload is built for (DeepSpeed picks it when the config names AdamW).
    """
    pin = cfg.device is DeviceKind.cuda  # pinned host memory speeds GPU<->CPU copies only
    zero: dict[str, Any] = {"stage": cfg.zero_stage}
    if cfg.offload in (Offload.optimizer, Offload.optimizer_params):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": pin}
    if cfg.offload is Offload.optimizer_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": pin}
    offloaded = cfg.offload is not Offload.none
    if cfg.optimizer == "sgd":
        optimizer = {"type": "SGD", "params": {"lr": cfg.lr, "momentum": 0.9}}
    else:
        params: dict[str, Any] = {"lr": cfg.lr, "betas": [0.9, 0.999], "eps": 1e-8,
                                  "weight_decay": 0.1}
        if not offloaded:
            params["torch_adam"] = True
        optimizer = {"type": "AdamW", "params": params}
    config: dict[str, Any] = {
        # DeepSpeed checks train_batch_size == micro x accumulation x data-parallel ranks.
        "train_batch_size": cfg.global_batch_samples,
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": cfg.grad_accum_steps,
        "bf16": {"enabled": cfg.precision is Precision.bf16},
        # loss_scale 0 = dynamic loss scaling, DeepSpeed's default for fp16.
        "fp16": {"enabled": cfg.precision is Precision.fp16, "loss_scale": 0,
                 "initial_scale_power": 16, "loss_scale_window": 1000, "hysteresis": 2,
                 "min_loss_scale": 1},
        "zero_optimization": zero,
        "optimizer": optimizer,
    }
    if cfg.optimizer == "sgd" and cfg.zero_stage > 0:
        # torch's SGD is not on DeepSpeed's list of ZeRO-tested optimizers, and DeepSpeed
        # refuses an offloaded optimizer other than its CPU Adam, unless told to.
        config["zero_allow_untested_optimizer"] = True
        if offloaded:
            config["zero_force_ds_cpu_optimizer"] = False
    return config
