"""The host part of a hardware fingerprint, read the same way by the controller (this
machine, `autotune.run.hardware`) and the worker (the machine a trial ran on,
`trials/hardware.py`), so their keys match. Standard library only.

    hw = host_fingerprint()            # hostname, cpu_model, cpu_bf16, cpu_count, host_memory_bytes
    hw.key()                           # "cpu:AMD EPYC | AMD EPYC, bf16 native, 2 cores, 24 GiB | torch ..."
    visible_devices()                  # CUDA_VISIBLE_DEVICES as a list (None: unset, all devices)
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


# /proc/cpuinfo flags of instructions that compute bf16 natively: x86 AVX512-BF16 (Intel Cooper
# Lake and later, AMD Zen 4 and later) and AMX-BF16 (Intel Sapphire Rapids and later); Arm's
# BF16 extension ("bf16" in Features). Source: Linux arch/x86/include/asm/cpufeatures.h
# ("avx512_bf16", "amx_bf16") and arch/arm64/kernel/cpuinfo.c ("bf16"), read 2026-11.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def bf16_in_cpuinfo(cpuinfo: str) -> str | None:
    """"native" when every processor of a /proc/cpuinfo text lists a native bf16 instruction,
    "emulated" when none lacks flags but one lacks those, None when it lists no flags."""
    flags = [line.split(":", 1)[1].split() for line in cpuinfo.splitlines()
             if ":" in line and line.split(":", 1)[0].strip() in ("flags", "Features")]
    if not flags:
        return None
    return "native" if all(NATIVE_BF16_FLAGS & set(f) for f in flags) else "emulated"


def cpu_bf16() -> str | None:
    """Whether this CPU computes bf16 in hardware ("native") or PyTorch converts to fp32 for it
    ("emulated"); None where /proc/cpuinfo is not there. Emulated bf16 runs far slower than
    fp32, native bf16 faster (docs/benchmarks.md, observations recorded once), so the baselines start from
    the faster of the two."""
    try:
        with open("/proc/cpuinfo") as f:
            return bf16_in_cpuinfo(f.read())
    except OSError:
        return None


# What a Slurm job was given on this node (sbatch sets them in the job's environment). Where
# Slurm does not pin the job to its CPUs (task/none, no cgroup), the affinity mask is the whole
# node, and two jobs of one node would each measure as many ranks as the node has cores.
SLURM_CPU_VARS = ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE")


def usable_cpu_count(environ: dict[str, str] | None = None) -> int:
    """CPU cores this process may run on: its affinity mask (cgroup aware where the OS says),
    and within a Slurm job no more than the CPUs the job was given on this node."""
    env = os.environ if environ is None else environ
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    if env.get("SLURM_JOB_ID"):
        given = [int(env[v]) for v in SLURM_CPU_VARS if env.get(v, "").isdigit() and int(env[v]) > 0]
        cores = min([cores, *given])
    return cores


def visible_devices(environ: dict[str, str] | None = None) -> list[str] | None:
    """The devices `CUDA_VISIBLE_DEVICES` lets CUDA see, in its order: indices ("0", "3") or
    UUIDs ("GPU-8f2c...", "MIG-..."); None when the variable is unset (every device). CUDA's
    own reading, which NVML ignores (CUDA C Programming Guide, "CUDA Environment Variables",
    read 2026-12): entries are comma-separated, an empty value hides every device, and the
    list ends at the first entry that is not a device (so "-1" hides them all)."""
    env = os.environ if environ is None else environ
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    out: list[str] = []
    for entry in (e.strip() for e in raw.split(",")):
        if entry.isdigit() or entry.upper().startswith(("GPU-", "MIG-")):
            out.append(entry)
        else:
            break  # "" or "-1" or a typo: CUDA sees nothing from here on
    return out


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
    return HardwareFingerprint(hostname=socket.gethostname(), cpu_model=cpu_model(), cpu_bf16=cpu_bf16(),
                               cpu_count=usable_cpu_count(), host_memory_bytes=host_memory_bytes(),
                               torch_version=installed_version("torch"),
                               deepspeed_version=installed_version("deepspeed"))
