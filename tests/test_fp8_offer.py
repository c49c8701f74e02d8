"""fp8 is offered where it can run: a GPU of compute capability >= 8.9 (Ada/Hopper) with torchao
installed, and a space that compiles. Elsewhere it is left out, and on a GPU the sweep's "not
offered on this machine" line says why; a CPU machine's line is as it was.

No GPU here: NVML (`pynvml`) is a small stand-in describing GPUs this machine lacks (an H100
node, an A100 node), and torchao's metadata is made to say it is installed or not. Everything
above them (the fingerprint, the capability probe, the restricted space, the side-by-side slots)
is the real code.
"""

from __future__ import annotations

import importlib.metadata
import sys
import types
from typing import Any

import pytest

from autotune.contract import DeviceKind, HardwareFingerprint, Precision

GIB = 1024**3


def fake_nvml(gpus: list[tuple[str, tuple[int, int]]]) -> Any:
    """pynvml's calls that autotune reads, for a node of these GPUs (name, compute capability)."""
    m: Any = types.ModuleType("pynvml")
    m.nvmlInit = m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h[1]:02d}aa-uuid"
    m.nvmlDeviceGetName = lambda h: gpus[h[1]][0].encode()
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=80 * GIB)
    m.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    m.nvmlSystemGetCudaDriverVersion_v2 = lambda: 12040
    m.nvmlDeviceGetCudaComputeCapability = lambda h: gpus[h[1]][1]
    return m


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """machine(name, capabilities, torchao, compile, visible) -> (spec, this machine's
    MachineSpace) for a node of GPUs `name` (or (name, capability) pairs) and a space offering
    every precision and the given compile choices."""
    from autotune.api.sweep import load
    from autotune.run import hardware
    from autotune.search.machine import MachineSpace

    real_version = importlib.metadata.version
    monkeypatch.delenv("AUTOTUNE_FORCE_CPU", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def make(name: str, capabilities: list, torchao: bool, compile_: str = "[false, true]",
             visible: str | None = None):
        gpus = [c if isinstance(c[0], str) else (name, c) for c in capabilities]
        monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(gpus))
        if visible is not None:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)

        def version(package: str) -> str:
            if package == "torchao":
                if torchao:
                    return "0.12.0"
                raise importlib.metadata.PackageNotFoundError(package)
            return real_version(package)

        monkeypatch.setattr(importlib.metadata, "version", version)
        space = tmp_path / "space.yaml"
        space.write_text(f"num_gpus: [1, 2]\nprecision: [fp32, bf16, fp16, fp8]\ncompile: {compile_}\n")
        spec = load(None).with_overrides(space=str(space))
        hardware.local_hardware.cache_clear()
        return spec, MachineSpace.for_spec(spec)

    yield make
    hardware.local_hardware.cache_clear()


def test_a_hopper_gpu_with_torchao_offers_fp8(machine):
    _, ms = machine("NVIDIA H100 80GB HBM3", [(9, 0), (9, 0)], torchao=True)
    assert ms.hardware.device_kind is DeviceKind.cuda
    assert Precision.fp8 in ms.restricted.precision and "precision" not in ms.restricted.dropped
    assert Precision.fp8 not in ms.restricted.precision_choices(False)  # only compiled, as before


def test_an_ampere_gpu_does_not_and_says_why(machine):
    _, ms = machine("NVIDIA A100-SXM4-80GB", [(8, 0), (8, 0)], torchao=True)
    assert Precision.fp8 not in ms.restricted.precision
    assert Precision.bf16 in ms.restricted.precision  # 8.0 has bf16
    assert ms.restricted.dropped["precision"] == [Precision.fp8]
    assert ms.restricted.dropped_text() == (
        "precision fp8 (needs compute capability >= 8.9, Ada/Hopper; NVIDIA A100-SXM4-80GB has 8.0)")


def test_the_gpu_the_fingerprint_describes_decides(machine):
    """A node of an A100 and two H100s: with the A100 hidden (CUDA_VISIBLE_DEVICES), the
    fingerprint is of H100s and fp8 is offered; with it first, of an A100, and it is not."""
    a100, h100 = ("NVIDIA A100-SXM4-80GB", (8, 0)), ("NVIDIA H100 80GB HBM3", (9, 0))
    _, ms = machine("", [a100, h100, h100], torchao=True, visible="1,2")
    assert ms.hardware.device_name == h100[0] and Precision.fp8 in ms.restricted.precision
    _, ms = machine("", [a100, h100, h100], torchao=True, visible="0,1")
    assert ms.hardware.device_name == a100[0] and Precision.fp8 not in ms.restricted.precision
    assert "NVIDIA A100-SXM4-80GB has 8.0" in ms.restricted.dropped_text()


def test_a_hopper_gpu_without_torchao_says_how_to_get_it(machine):
    _, ms = machine("NVIDIA H100 80GB HBM3", [(9, 0)], torchao=False)
    assert Precision.fp8 not in ms.restricted.precision
    assert ms.restricted.dropped["precision"] == [Precision.fp8]
    assert ms.restricted.dropped_text().endswith(
        "; precision fp8 (needs torchao, not installed: pip install 'autotune-llm[fp8]')")


def test_a_space_without_compile_says_fp8_needs_it(machine):
    _, ms = machine("NVIDIA H100 80GB HBM3", [(9, 0)], torchao=True, compile_="[false]")
    assert ms.restricted.dropped["precision"] == [Precision.fp8]
    assert ms.restricted.dropped_text().endswith("; precision fp8 (runs only compiled: add true to the space's compile)")


def test_an_unreadable_capability_offers_no_fp8_and_keeps_bf16(machine, monkeypatch):
    """An NVML without the call (an old driver): unknown, so fp8 is not offered; bf16 stays
    offered, as it was before the capability was read."""
    from autotune.run import hardware
    from autotune.search.machine import MachineSpace

    spec, _ = machine("NVIDIA H100 80GB HBM3", [(9, 0)], torchao=True)
    monkeypatch.delattr(sys.modules["pynvml"], "nvmlDeviceGetCudaComputeCapability")
    hardware.local_hardware.cache_clear()
    ms = MachineSpace.for_spec(spec)
    assert Precision.fp8 not in ms.restricted.precision and Precision.bf16 in ms.restricted.precision
    assert "could not be read" in ms.restricted.dropped_text()


def test_a_cpu_machine_is_unchanged(machine, monkeypatch):
    """CPU: fp32 and bf16, its dropped precisions listed plainly as before (the README's demo
    line), whatever NVML or torchao would say; the same space as the capabilities alone give."""
    from autotune.run import hardware
    from autotune.search.machine import MachineSpace
    from autotune.search.space import capabilities_for, restrict
    from autotune.search.space_file import load_space

    spec, _ = machine("NVIDIA H100 80GB HBM3", [(9, 0)], torchao=True)
    monkeypatch.setenv("AUTOTUNE_FORCE_CPU", "1")
    hardware.local_hardware.cache_clear()
    ms = MachineSpace.for_spec(spec)
    assert ms.hardware.device_kind is DeviceKind.cpu
    assert ms.restricted.precision == [Precision.fp32, Precision.bf16]
    assert ms.restricted.dropped["precision"] == [Precision.fp16, Precision.fp8]
    plain = restrict(load_space(spec.space), capabilities_for(ms.hardware, spec.trial.threads_per_rank))
    assert ms.restricted == plain


def test_a_fingerprint_by_hand(monkeypatch, tmp_path):
    """`restricted_space` on fingerprints built by hand (an H100 node, which this machine is not,
    and a CPU), with the GPU's capability and torchao as the probes would read them."""
    from autotune.api.sweep import load
    from autotune.search import machine as machine_mod

    space = tmp_path / "space.yaml"
    space.write_text("num_gpus: [1]\nprecision: [bf16, fp8]\ncompile: [true]\n")
    spec = load(None).with_overrides(space=str(space))
    h100 = HardwareFingerprint(device_kind=DeviceKind.cuda, device_name="NVIDIA H100 80GB HBM3",
                               device_count=8, cpu_count=64)
    cpu = HardwareFingerprint(device_kind=DeviceKind.cpu, device_count=2, cpu_count=2)
    from autotune.run import hardware

    monkeypatch.setattr(hardware, "visible_compute_capability", lambda: (9, 0))
    monkeypatch.setattr(machine_mod, "fp8_library_installed", lambda: True)
    assert machine_mod.restricted_space(spec, h100).precision == [Precision.bf16, Precision.fp8]
    assert machine_mod.restricted_space(spec, cpu).precision == [Precision.bf16]
    assert machine_mod.restricted_space(spec, cpu).dropped["precision"] == [Precision.fp8]


def test_side_by_side_slots_use_the_same_space(machine, monkeypatch):
    """The slots of --side-by-side are sized by the space the workers' sweeps restrict."""
    from autotune.api.side_by_side import plan_slots

    spec, _ = machine("NVIDIA H100 80GB HBM3", [(9, 0)] * 4, torchao=True)
    slots = plan_slots(spec, 2)
    assert [len(s.devices) for s in slots] == [2, 2]  # num_gpus [1, 2]: a slot holds 2 GPUs
