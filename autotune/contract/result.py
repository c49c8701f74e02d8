"""What a trial measured: `TrialResult` (throughput, step times, memory per rank with its
source, MFU, the failure kind), written by the worker's rank 0 and read by the controller.

    result = TrialResult.read(folder / "result.json")
    result.ok, result.tokens_per_s, result.peak_mem_bytes, result.peak_mem_source
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import Field

from autotune.contract.config import SCHEMA_VERSION, ContractModel, DeviceKind
from autotune.contract.jsonio import write_json_atomic


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


class MemoryReport(ContractModel):
    """Peak memory per rank (index = rank), each figure with its source. None = not measured."""

    allocator_allocated_peak_bytes: list[int] | None = None
    allocator_reserved_peak_bytes: list[int] | None = None
    nvml_device_peak_bytes: list[int] | None = None
    host_rss_peak_bytes: list[int] | None = None
    host_rss_baseline_bytes: list[int] | None = Field(
        default=None, description="RSS before the model was built (CPU: memory the trial added)"
    )
    build_host_rss_peak_bytes: list[int] | None = Field(
        default=None, description="host RSS peak once the rank's weights were built (the model's "
        "build: before the engine's optimizer state, gradients and buffers)"
    )
    build_allocator_peak_bytes: list[int] | None = Field(
        default=None, description="CUDA allocator peak (allocated) during the model's build"
    )


class HardwareFingerprint(ContractModel):
    hostname: str = ""
    device_kind: DeviceKind = DeviceKind.cpu
    device_name: str = ""
    device_count: int = 0
    device_memory_bytes: int | None = None
    cpu_model: str = ""
    # "native" when the CPU computes bf16 in hardware (AVX512-BF16, AMX-BF16, Arm BF16),
    # "emulated" when not: CPUs of one model name ("AMD EPYC" in a VM) differ here, and bf16
    # trials run ~10x apart between the two (autotune.contract.hardware.cpu_bf16).
    cpu_bf16: str | None = None
    cpu_count: int = 0
    host_memory_bytes: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    torch_version: str | None = None
    deepspeed_version: str | None = None
    interconnect: str | None = None

    def key(self) -> str:
        """Results count as measured on the same hardware only when this whole key matches:
        device model, count and memory, driver and CUDA, torch and DeepSpeed versions, CPU
        model and whether it computes bf16 natively, usable cores and host memory (whole GiB:
        identical machines report a few MiB apart). Readable, so that it can be shown as it is."""
        if self.device_kind is DeviceKind.cuda:
            device = (f"{self.kind_key()} x{self.device_count}, {_gib(self.device_memory_bytes)}, "
                      f"driver {self.driver_version or '?'}, CUDA {self.cuda_version or '?'}")
        else:
            device = self.kind_key()
        bf16 = f", bf16 {self.cpu_bf16}" if self.cpu_bf16 else ""
        return (f"{device} | {self.cpu_model or 'unknown CPU'}{bf16}, {self.cpu_count} cores, "
                f"{_gib(self.host_memory_bytes)} | torch {self.torch_version or '?'}, "
                f"DeepSpeed {self.deepspeed_version or '?'}")

    def kind_key(self) -> str:
        """The device model alone ("cuda:NVIDIA H100 80GB HBM3", "cpu:AMD EPYC"): a label for
        reports, and the whole key of studies written before `key` named counts and versions."""
        if self.device_kind is DeviceKind.cuda:
            return f"cuda:{self.device_name}"
        return f"cpu:{self.cpu_model or 'unknown'}"

    def matches_recorded(self, recorded: dict[str, Any] | None) -> bool:
        """A fingerprint stored by an older version (whose key was `kind_key`) describes this
        machine: every field it recorded that `key` uses agrees (versions it did not record
        cannot disagree)."""
        if not recorded:
            return False
        try:
            old = HardwareFingerprint.model_validate(recorded)
        except ValueError:
            return False
        if old.kind_key() != self.kind_key():
            return False
        for name in _KEY_FIELDS:
            mine, theirs = getattr(self, name), getattr(old, name)
            if name.endswith("_bytes"):
                mine, theirs = _gib(mine), _gib(theirs) if theirs is not None else None
            if theirs not in (None, "", 0) and mine != theirs:
                return False
        return True


# The fields `HardwareFingerprint.key` names besides the device model.
_KEY_FIELDS = ("device_count", "device_memory_bytes", "driver_version", "cuda_version",
               "torch_version", "deepspeed_version", "cpu_model", "cpu_bf16", "cpu_count",
               "host_memory_bytes")


def _gib(n: int | None) -> str:
    return "? GiB" if n is None else f"{round(n / 2**30)} GiB"


# The error_type of a trial whose user entry point returned what breaks its calling convention
# (not (model, batches[, info]), or a model that is no torch.nn.Module): the same in every
# config, so a sweep stops at the first such trial (autotune.search.budget.RepeatedError).
ENTRY_POINT_CONTRACT_ERROR = "EntryPointContractError"


class TrialResult(ContractModel):
    schema_version: int = SCHEMA_VERSION
    status: TrialStatus
    error_type: str | None = None
    error: str | None = None
    log_tail: str | None = None
    tokens_per_s: float | None = Field(default=None, description=(
        "The global batch's tokens over the median measured step time (each step's time is its "
        "slowest rank's; warm-up excluded). The median keeps a one-off stall of a shared machine "
        "out; a slow step that recurs in fewer than half of the steps is left out too."))
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
    compile_s: float | None = Field(
        default=None, description="compiled trials: seconds the warm-up steps took beyond the "
        "steady step time (their sum of step time minus the median measured step): tracing, "
        "Inductor's code generation and C++/Triton builds, or loading them from the compile "
        "cache. An upper bound: first-step costs eager runs pay too (allocator warm-up, DDP's "
        "buckets) count here. None for eager trials")
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
