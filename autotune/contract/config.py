"""What a trial runs: the choices (precision, checkpointing, offload, launcher, device), the
workload, and `TrialConfig`, the file the controller writes and the worker reads.

    cfg = TrialConfig(workload=GPTWorkload(preset="tiny"), seq_len=128, micro_batch_size=4)
    cfg.write(folder / "config.json")

Every change to a field is a change to `SCHEMA_VERSION`; `tests/test_contract.py` pins the
JSON schema so the surface changes on purpose only.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotune.contract.jsonio import write_json_atomic

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


class FSDPMode(str, Enum):
    """PyTorch FSDP2 (`torch.distributed.fsdp.fully_shard`) over the data-parallel ranks:
    parameters, gradients and optimizer state sharded, each block gathered to compute.
    `full_shard` frees a block's gathered parameters after its forward and gathers them again
    for backward (`reshard_after_forward=True`, ZeRO-3's memory); `shard_grad_op` keeps them
    from forward to backward (`reshard_after_forward=False`: FSDP1's SHARD_GRAD_OP, ZeRO-2's
    memory for parameters, one all-gather fewer per step)."""

    none = "none"
    full_shard = "full_shard"
    shard_grad_op = "shard_grad_op"


class Launcher(str, Enum):
    torchrun = "torchrun"
    deepspeed = "deepspeed"
    accelerate = "accelerate"


class DeviceKind(str, Enum):
    cpu = "cpu"
    cuda = "cuda"



class ContractModel(BaseModel):
    model_config = ConfigDict(extra="forbid", use_enum_values=False)


# ---------------------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------------------


class GPTShape(ContractModel):
    """Shape of the built-in GPT decoder (pre-LN, learned positions, GELU MLP, tied head)."""

    n_layers: int = Field(gt=0, description="Transformer blocks.")
    d_model: int = Field(gt=0, description="Hidden size: the width of every block's input and output.")
    n_heads: int = Field(gt=0, description="Attention heads per block; must divide d_model.")
    vocab_size: int = Field(gt=0, description="Token vocabulary: rows of the embedding, tied with the output head.")
    max_seq_len: int = Field(default=2048, gt=0, description=(
        "Rows of the learned position embedding: the longest sequence the model takes; a trial's "
        "seq_len above it is refused."))
    ffn_mult: int = Field(default=4, gt=0, description="MLP hidden size as a multiple of d_model.")

    @model_validator(mode="after")
    def _heads_divide(self) -> "GPTShape":
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}. "
                             "To fix: pick n_heads that divides d_model.")
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


# Presets from 0.7M parameters (`tiny`: tests, the default sweep) up to 7B shapes (planning only: `estimate`, `plan`).
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


class GPTWorkload(ContractModel):
    """The built-in GPT: a preset by name, or explicit shapes."""

    kind: Literal["gpt"] = Field(default="gpt", description="Selects the built-in GPT workload.")
    preset: str | None = Field(default="tiny", description=(
        "A named shape (tiny, mini, small, medium, large, 1b, 7b); "
        "ignored when `shape` is given."))
    shape: GPTShape | None = Field(default=None, description="Explicit shape; wins over `preset`.")

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


class HFWorkload(ContractModel):
    """A Hugging Face causal LM built from a config with random weights (never a download).

    Either `config_path` (a local config.json) or `model_type` plus `config_overrides`
    (e.g. model_type="llama", overrides {"hidden_size": 256, ...}).
    """

    kind: Literal["hf"] = Field(default="hf", description="Selects a Hugging Face causal LM.")
    config_path: str | None = Field(default=None, description=(
        "A local config.json, or the folder holding one (never downloaded); exclusive with "
        "model_type."))
    model_type: str | None = Field(default=None, description=(
        "A transformers model type (e.g. llama) built from its default config plus "
        "config_overrides; exclusive with config_path."))
    config_overrides: dict[str, Any] = Field(default_factory=dict, description=(
        "Config fields set over the file's or the model type's (e.g. hidden_size, num_hidden_layers)."))

    @model_validator(mode="after")
    def _one_source(self) -> "HFWorkload":
        if (self.config_path is None) == (self.model_type is None):
            raise ValueError(
                "a Hugging Face workload needs exactly one of `config_path` or `model_type`. "
                "To fix: point config_path at a local config.json, or name model_type."
            )
        return self

    def config_file(self) -> Path | None:
        """The config.json `config_path` names (a folder stands for the one inside it), as the
        worker builds it and the controller models it; None for a `model_type` workload."""
        if self.config_path is None:
            return None
        path = Path(self.config_path)
        return path / "config.json" if path.is_dir() else path


class EntryPointWorkload(ContractModel):
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
      `n_layers` and `d_model` for the attention term of the 6N + 12·L·d·s estimate;
      `init_module`: a function(module) initialising one module's weights (and buffers), for
      a meta-built model.
    Activation checkpointing applies through transformers' switch
    (`activation_checkpointing_enable`, `gradient_checkpointing_enable` before 5.23): full on
    any version, selective (every `checkpoint_every`-th decoder layer, its `every_n_layers`)
    from transformers 5.16 on; otherwise such a trial is `unsupported`.

    So that no rank holds more of a large model than its config says, build it on the meta
    device: `with torch.device("meta"): model = MyModel(cfg)`, and return it with
    `info["init_module"]`. The worker then allocates, module by module, only what this rank
    holds (FSDP2 / TP shards, ZeRO-3 partitions, or the whole model for DDP) on the trial's
    device, as `to_empty` would, and runs for every module (children first) its own
    `reset_parameters()` and then `init_module` (trials/workloads/materialize.py). Buffers
    come uninitialised: `init_module` must set them (e.g. rotary frequencies). A model built
    on a real device is moved to the trial's device whole, as before.
    """

    kind: Literal["entry_point"] = Field(default="entry_point", description="Selects the user's own model and data.")
    entry_point: str = Field(description="'module:function' returning (model, batches) or (model, batches, info).")
    kwargs: dict[str, Any] = Field(default_factory=dict, description=(
        "Keyword arguments passed to the function after seq_len, micro_batch_size and device."))
    python_path: list[str] = Field(
        default_factory=list, description="Folders put on sys.path before the import."
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


class TrainingKnobs(ContractModel):
    """The knobs of a training configuration that decide its speed and memory. One home for
    their defaults and consistency rules: `TrialConfig` (what a trial runs) and the memory
    estimate's `MemoryConfig` both extend it."""

    seq_len: int = Field(default=128, gt=0, description="Tokens per sequence.")
    micro_batch_size: int = Field(default=1, gt=0, description="Sequences per rank in one forward and backward.")
    precision: Precision = Field(default=Precision.fp32, description=(
        "Compute precision: fp32, bf16 or fp16 autocast over fp32 weights, or fp8 matmuls (torchao "
        "float8, GPUs of compute capability 8.9 and later) with the rest under bf16 autocast."))
    checkpointing: Checkpointing = Field(default=Checkpointing.none, description=(
        "Activation checkpointing: none, selective (every checkpoint_every-th block) or full "
        "(every block); recomputed in backward."))
    checkpoint_every: int = Field(default=2, gt=0, description="Selective checkpointing: every k-th block.")
    zero_stage: int = Field(default=0, ge=0, le=3, description=(
        "DeepSpeed ZeRO stage: 0 none (plain data parallel), 1 optimizer state sharded, 2 and "
        "gradients, 3 and parameters."))
    offload: Offload = Field(default=Offload.none, description=(
        "What lives in host memory: the optimizer state (ZeRO), or the parameters too (ZeRO-3 or "
        "FSDP2)."))
    tp_degree: int = Field(default=1, gt=0, description=(
        "Tensor-parallel ranks each layer is split over; divides num_gpus, the rest is data "
        "parallel."))
    optimizer: Literal["adamw", "sgd"] = Field(default="adamw", description=(
        "AdamW (two fp32 states per parameter) or SGD with momentum (one)."))
    fsdp: FSDPMode = Field(default=FSDPMode.none, description="FSDP2 sharding instead of ZeRO (zero_stage 0 only).")

    @model_validator(mode="after")
    def _offload_needs_zero(self) -> "TrainingKnobs":
        if self.fsdp is not FSDPMode.none:
            if self.zero_stage:
                raise ValueError("FSDP2 and DeepSpeed ZeRO both shard the model: pick one. "
                                 "To fix: set fsdp none or zero_stage 0.")
            if self.offload is Offload.optimizer:
                raise ValueError("FSDP2's CPU offload moves parameters, gradients and optimizer "
                                 "state together. To fix: set offload optimizer+params or none.")
            return self
        if self.offload is not Offload.none and self.zero_stage == 0:
            raise ValueError("offload needs ZeRO or FSDP2. To fix: set zero_stage >= 1, "
                             "fsdp full_shard, or offload none.")
        if self.offload is Offload.optimizer_params and self.zero_stage != 3:
            raise ValueError(
                "parameter offload needs ZeRO stage 3. To fix: set zero_stage 3 or offload optimizer."
            )
        return self


class TrialConfig(TrainingKnobs):
    """Everything a worker needs to run one trial. Written by the controller, read by the worker.

    `num_gpus` is the number of ranks: GPUs on CUDA, processes (each with
    `threads_per_rank` CPU threads) on CPU.
    """

    schema_version: int = Field(default=SCHEMA_VERSION, description=(
        "Version of this file's layout (SCHEMA_VERSION), raised when older configs no longer read."))
    workload: Workload = Field(default_factory=GPTWorkload, description=(
        "What is trained: the built-in GPT, a Hugging Face model, or the user's entry point."))
    grad_accum_steps: int = Field(default=1, gt=0, description="Micro-batches per optimizer step.")
    num_gpus: int = Field(default=1, gt=0, description="Ranks per node (GPUs, or CPU processes).")
    num_nodes: int = Field(default=1, gt=0, description="Nodes; above 1, every node runs a torchrun agent.")
    launcher: Launcher = Field(default=Launcher.torchrun, description=(
        "What starts the ranks: torchrun, DeepSpeed's launcher or accelerate launch."))
    device: DeviceKind = Field(default=DeviceKind.cpu, description=(
        "cuda, or cpu (each rank a process with threads_per_rank threads)."))
    lr: float = Field(default=3e-4, gt=0, description="Learning rate of the optimizer.")
    # The trial's length and patience. The sweep spec's `trial:` section takes its defaults
    # from these (autotune.spec.TrialSettings), so a trial run alone (`autotune trial`) and one
    # run by a sweep are the same trial. The values are the sweep's, which the README
    # documents: a trial is a short run, and 300 s bounds what a hung one costs a sweep.
    warmup_steps: int = Field(default=2, ge=0, description=(
        "Untimed optimizer steps before measuring; the last one probes activation bytes and "
        "recompute."))
    measure_steps: int = Field(default=5, gt=0, description="Timed optimizer steps, at least.")
    max_measure_steps: int = Field(default=15, gt=0, description=(
        "Cap on timed steps when the window is extended (high CV or shorter than min_measure_s); "
        "a larger measure_steps is measured in full."))
    max_step_time_cv: float = Field(default=0.15, gt=0, description=(
        "Extend the window while the step-time coefficient of variation is above this."))
    # A window of a few short steps says little on a shared CPU: runs of one config spread
    # less over a window of a few seconds than over 5 steps (docs/benchmarks.md, noise levers).
    # Steps of a second or more never extend.
    min_measure_s: float = Field(default=2.0, ge=0, description="Extend steps (up to "
                                 "max_measure_steps) until the measured window lasts this long.")
    threads_per_rank: int = Field(default=1, gt=0, description="CPU threads per rank (OMP_NUM_THREADS).")
    seed: int = Field(default=0, description=(
        "Seed of the weights (the same on every rank) and of the data (offset by rank)."))
    timeout_s: float = Field(default=300.0, gt=0, description=(
        "Wall-clock limit of the whole trial; past it the process group is killed. Also the "
        "process group's collective timeout (at least 60 s)."))
    device_peak_flops: float | None = Field(default=None, description=(
        "Dense peak FLOP/s of one device at this precision (from the catalog), for MFU."))
    measure_noise_scale: bool = Field(default=True, description=(
        "Record squared gradient norms at two batch sizes for the gradient noise scale "
        "(McCandlish et al. 2018); a loss target uses it."))
    compile: bool = Field(
        default=False, description="torch.compile the model (default mode, Inductor): DDP and "
        "TP compile the whole model, FSDP2 each block before fully_shard, DeepSpeed through its "
        "engine's compile(), accelerate through its dynamo_backend. The warm-up steps pay the "
        "compilation (TrialResult.compile_s); the measured steps run compiled.")

    @model_validator(mode="after")
    def _version_and_shape(self) -> "TrialConfig":
        if self.schema_version != SCHEMA_VERSION:  # another autotune's file: its fields may mean else
            raise ValueError(
                f"schema_version {self.schema_version} is not this autotune's ({SCHEMA_VERSION}). To fix: "
                "run the controller and the workers with one autotune version, or write the config again.")
        if self.num_gpus % self.tp_degree:
            raise ValueError(f"tp_degree={self.tp_degree} does not divide num_gpus={self.num_gpus}. "
                             "To fix: choose a tp_degree that divides the GPU count.")
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

    def measure_more(self, step_times_s: list[float], cv: float) -> bool:
        """Whether a trial that measured these steps (their step-time CV `cv`) measures
        another: past measure_steps, while the window lasts under min_measure_s or its CV is
        above max_step_time_cv, up to max_measure_steps (trials/worker.py)."""
        n = len(step_times_s)
        if n < self.measure_steps:
            return True
        return n < self.max_measure_steps and (cv > self.max_step_time_cv or sum(step_times_s) < self.min_measure_s)

    def write(self, path: str | Path) -> None:
        write_json_atomic(path, self.model_dump(mode="json"))

    @classmethod
    def read(cls, path: str | Path) -> "TrialConfig":
        return cls.model_validate_json(Path(path).read_text())


