"""Fingerprint of the local hardware, without importing torch (the CLI stays fast).

    hw = local_hardware()          # HardwareFingerprint
    hw.device_kind, hw.device_count

GPUs are found through NVML (`pynvml`, from nvidia-ml-py); without a driver the machine is
a CPU machine, whose "GPUs" are ranks of one CPU thread each.
"""

from __future__ import annotations

import os
from functools import lru_cache

from autotune.contract import DeviceKind, HardwareFingerprint
from autotune.contract.hardware import host_fingerprint


def _nvml_gpus() -> tuple[str, int, int, str, str] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU: NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return None
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else name
        mem = int(pynvml.nvmlDeviceGetMemoryInfo(h).total)
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        return name, count, mem, str(driver), f"{cuda // 1000}.{(cuda % 1000) // 10}"
    finally:
        pynvml.nvmlShutdown()


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
