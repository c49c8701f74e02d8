"""Visible devices are honoured: NVML's count, name and memory cover only the GPUs that
CUDA_VISIBLE_DEVICES leaves visible (indices or UUIDs; empty = none), and a sweep offers only
those.

A mock stands where the real thing cannot run: no GPU here. The NVML layer (`pynvml`) is a
small stand-in for an 8-GPU node; everything above it (parsing the variable, the fingerprint,
the space the sweep offers) is the real code.
"""

from __future__ import annotations

import sys
import types

import pytest

from autotune.contract import DeviceKind
from autotune.contract.hardware import visible_devices

GIB = 1024**3


def fake_nvml(memory_gib: list[int]) -> types.ModuleType:
    """pynvml's calls that autotune.run.hardware makes, for a node of len(memory_gib) H100s."""
    m = types.ModuleType("pynvml")
    m.nvmlInit = m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: len(memory_gib)
    m.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h[1]:02d}aa-uuid"
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=memory_gib[h[1]] * GIB)
    m.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    m.nvmlSystemGetCudaDriverVersion_v2 = lambda: 12040
    return m


@pytest.fixture
def node(monkeypatch):
    """An 8-GPU node: device 5 has 40 GiB, the others 80 GiB. Returns a function that sets
    CUDA_VISIBLE_DEVICES (None: unset) and reads the hardware afresh."""
    from autotune.run import hardware

    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([80, 80, 80, 80, 80, 40, 80, 80]))
    monkeypatch.delenv("AUTOTUNE_FORCE_CPU", raising=False)

    def read(visible: str | None):
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        hardware.local_hardware.cache_clear()
        return hardware.local_hardware()

    yield read
    hardware.local_hardware.cache_clear()


def test_the_variable_is_read_as_cuda_reads_it():
    assert visible_devices({}) is None
    assert visible_devices({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "1,x,3"}) == ["1"]  # stops at a non-device
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "GPU-ab12,MIG-cd"}) == ["GPU-ab12", "MIG-cd"]


def test_unset_means_every_gpu_of_the_node(node):
    hw = node(None)
    assert (hw.device_kind, hw.device_count, hw.device_memory_bytes) == (DeviceKind.cuda, 8, 40 * GIB)


def test_indices_limit_the_count_and_the_memory(node):
    hw = node("0,3")
    assert (hw.device_kind, hw.device_count, hw.device_memory_bytes) == (DeviceKind.cuda, 2, 80 * GIB)
    assert hw.device_name == "NVIDIA H100 80GB HBM3"
    assert node("4,5").device_memory_bytes == 40 * GIB  # the smallest visible device's


def test_uuids_and_their_prefixes_select_devices(node):
    hw = node("GPU-06aa-uuid,GPU-07")
    assert (hw.device_count, hw.device_memory_bytes) == (2, 80 * GIB)
    assert node("GPU-05").device_memory_bytes == 40 * GIB
    assert node("GPU-0").device_kind is DeviceKind.cpu  # ambiguous prefix: CUDA sees nothing


def test_an_index_past_the_node_ends_the_list(node):
    assert node("1,9,2").device_count == 1


def test_empty_means_no_gpu(node):
    hw = node("")
    assert hw.device_kind is DeviceKind.cpu
    assert node("-1").device_kind is DeviceKind.cpu


def test_the_sweep_offers_only_the_visible_devices(node):
    from autotune.api.sweep import load
    from autotune.search.machine import MachineSpace

    spec = load(None)  # the default space offers 1, 2, 4 and 8 GPUs
    node("1,2")
    ms = MachineSpace.for_spec(spec)
    assert (ms.hardware.device_count, ms.hardware.device_memory_bytes) == (2, 80 * GIB)
    assert ms.restricted.num_gpus == [1, 2]
    node(None)
    assert MachineSpace.for_spec(spec).restricted.num_gpus == [1, 2, 4, 8]
