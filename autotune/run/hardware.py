"""Fingerprint of the local hardware, without importing torch (the CLI stays fast).

    hw = local_hardware()          # HardwareFingerprint
    hw.device_kind, hw.device_count

GPUs are found through NVML (`pynvml`, from nvidia-ml-py), limited to the ones
`CUDA_VISIBLE_DEVICES` leaves visible (a Slurm allocation's, a pinned trial's); without a driver,
or with none visible, the machine is a CPU machine, whose "GPUs" are ranks of one CPU thread each.
"""

from __future__ import annotations

import os
from functools import lru_cache

from autotune.contract import DeviceKind, HardwareFingerprint
from autotune.contract.hardware import host_fingerprint, visible_devices


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _visible_handles(pynvml) -> list:
    """NVML handles of the devices CUDA_VISIBLE_DEVICES leaves visible, in its order. NVML
    counts every device of the node and ignores the variable, so a sweep inside an allocation
    of 4 of 8 GPUs would otherwise offer 8. An index past the count or an unknown UUID ends the
    list, as it does for CUDA."""
    count = pynvml.nvmlDeviceGetCount()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    wanted = visible_devices()
    if wanted is None:
        return handles
    uuids = [_text(pynvml.nvmlDeviceGetUUID(h)) for h in handles]
    picked: list[int] = []
    for entry in wanted:
        if entry.isdigit():
            index = int(entry) if int(entry) < count else None
        else:  # a UUID, or a unique prefix of one (CUDA accepts both)
            hits = [i for i, u in enumerate(uuids) if u.startswith(entry)]
            index = hits[0] if len(hits) == 1 else None
        if index is None or index in picked:
            break
        picked.append(index)
    return [handles[i] for i in picked]


def _with_nvml(read):
    """`read(pynvml, visible handles)`, or None without NVML, a driver or a visible GPU."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU: NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None
    try:
        handles = _visible_handles(pynvml)
        return read(pynvml, handles) if handles else None
    finally:
        pynvml.nvmlShutdown()


def _nvml_gpus() -> tuple[str, int, int, str, str] | None:
    """(name, count, memory bytes, driver, CUDA) of the visible GPUs; None without any. The
    memory is the smallest visible device's: a config must fit on every rank."""
    def read(pynvml, handles):
        name = _text(pynvml.nvmlDeviceGetName(handles[0]))
        mem = min(int(pynvml.nvmlDeviceGetMemoryInfo(h).total) for h in handles)
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        return name, len(handles), mem, driver, f"{cuda // 1000}.{(cuda % 1000) // 10}"

    return _with_nvml(read)


def visible_compute_capability() -> tuple[int, int] | None:
    """The lowest compute capability of the visible GPUs (what every rank can run), from NVML;
    None without a visible GPU, or with a driver too old for the call (then unknown)."""
    def read(pynvml, handles):
        try:
            return min(tuple(int(v) for v in pynvml.nvmlDeviceGetCudaComputeCapability(h)) for h in handles)
        except Exception:  # NVMLError_FunctionNotFound on old drivers; AttributeError on old pynvml
            return None

    return _with_nvml(read)


@lru_cache(maxsize=1)
def local_hardware() -> HardwareFingerprint:
    hw = host_fingerprint()
    if os.environ.get("AUTOTUNE_FORCE_CPU") != "1":
        gpus = _nvml_gpus()
        if gpus is not None:
            name, count, mem, driver, cuda = gpus
            return hw.model_copy(update=dict(
                device_kind=DeviceKind.cuda, device_name=name, device_count=count,
                device_memory_bytes=mem, driver_version=driver, cuda_version=cuda,
            ))
    return hw.model_copy(update=dict(
        device_kind=DeviceKind.cpu, device_name=f"cpu ({hw.cpu_model})",
        device_count=hw.cpu_count, device_memory_bytes=hw.host_memory_bytes,
    ))


def max_ranks(hw: HardwareFingerprint, threads_per_rank: int = 1) -> int:
    """How many ranks this machine can run at once: GPUs, or cores / threads per rank."""
    if hw.device_kind is DeviceKind.cuda:
        return hw.device_count
    return max(1, hw.cpu_count // threads_per_rank)
