"""The hardware a trial ran on, as seen from inside the worker (torch is imported here)."""

from __future__ import annotations

import os
import platform
import socket

import torch

from autotune.contract import DeviceKind, HardwareFingerprint


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_driver() -> str | None:
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - no NVML: the fingerprint just lacks the driver
        return None


def fingerprint(device: torch.device, world_size: int) -> HardwareFingerprint:
    hw = HardwareFingerprint(hostname=socket.gethostname(), cpu_model=_cpu_model(),
                             cpu_count=os.cpu_count() or 1, torch_version=torch.__version__)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return hw.model_copy(update=dict(
            device_kind=DeviceKind.cuda, device_name=props.name, device_count=world_size,
            device_memory_bytes=int(props.total_memory), cuda_version=torch.version.cuda,
            driver_version=_nvidia_driver()))
    return hw.model_copy(update=dict(device_kind=DeviceKind.cpu, device_name=f"cpu ({hw.cpu_model})",
                                     device_count=world_size))
