"""The hardware a trial ran on, as seen from inside the worker (torch is imported here): the
host part as the controller reads it (`autotune.contract.hardware`), the device from torch."""

from __future__ import annotations

import torch

from autotune.contract import DeviceKind, HardwareFingerprint
from autotune.contract.hardware import host_fingerprint


def _nvidia_driver() -> str | None:
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - no NVML: the fingerprint just lacks the driver
        return None


def fingerprint(device: torch.device, world_size: int) -> HardwareFingerprint:
    hw = host_fingerprint().model_copy(update=dict(torch_version=torch.__version__))
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return hw.model_copy(update=dict(
            device_kind=DeviceKind.cuda, device_name=props.name, device_count=world_size,
            device_memory_bytes=int(props.total_memory), cuda_version=torch.version.cuda,
            driver_version=_nvidia_driver()))
    return hw.model_copy(update=dict(device_kind=DeviceKind.cpu, device_name=f"cpu ({hw.cpu_model})",
                                     device_count=world_size))
