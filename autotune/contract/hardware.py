"""The host part of a hardware fingerprint, read the same way by the controller (this
machine, `autotune.run.hardware`) and the worker (the machine a trial ran on,
`trials/hardware.py`), so their keys match. Standard library only.

    hw = host_fingerprint()            # hostname, cpu_model, cpu_count, host_memory_bytes
    hw.key()                           # "cpu:AMD EPYC | AMD EPYC, 2 cores, 24 GiB | torch ..."
"""

from __future__ import annotations

import os
import platform
import socket

from autotune.contract.result import HardwareFingerprint


def cpu_model() -> str:
    """The CPU's model name: part of the key that keeps CPU measurements apart."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cpu_count() -> int:
    """CPU cores this process may run on (cgroup/affinity aware where the OS says)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def host_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def installed_version(package: str) -> str | None:
    """A package's installed version from its metadata, without importing it (torch and
    DeepSpeed take seconds to import; the controller never does)."""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def host_fingerprint() -> HardwareFingerprint:
    """This host without its accelerators: the caller fills in the device fields."""
    return HardwareFingerprint(hostname=socket.gethostname(), cpu_model=cpu_model(),
                               cpu_count=usable_cpu_count(), host_memory_bytes=host_memory_bytes(),
                               torch_version=installed_version("torch"),
                               deepspeed_version=installed_version("deepspeed"))
