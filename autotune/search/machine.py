"""What this machine offers of a study's space: its hardware, the space restricted to what it
can run, the unrestricted space (for parameter names shared across machines), and its GPU's
peak FLOP/s from the catalog (for MFU).

    ms = MachineSpace.for_spec(spec, catalog)
    ms.hardware.key(), ms.restricted.num_gpus, ms.peak_flops.get("bf16")
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune.contract import DeviceKind, HardwareFingerprint, Precision
from autotune.spec import SweepSpec


@dataclass
class MachineSpace:
    """What this machine offers of the study's space (see autotune/search/space.py)."""

    hardware: HardwareFingerprint
    restricted: Any
    full: Any
    # Dense peak FLOP/s of this machine's GPU per precision, from the catalog (MFU in every
    # trial); empty on CPU or for a GPU the catalog does not know (MFU then says why not).
    peak_flops: dict[str, float] = field(default_factory=dict)

    @classmethod
    def for_spec(cls, spec: SweepSpec, catalog=None) -> "MachineSpace":
        """`catalog`: the sweep's, loaded once (None: the spec's, loaded here when needed)."""
        from autotune.run.hardware import local_hardware
        from autotune.search.space import capabilities_for, restrict, unrestricted
        from autotune.search.space_file import load_space

        hw = local_hardware()
        space = load_space(spec.space)
        n_heads = spec.workload.resolved_shape().n_heads if spec.workload.kind == "gpt" else None
        return cls(hw, restrict(space, capabilities_for(hw, spec.trial.threads_per_rank), n_heads),
                   unrestricted(space, n_heads),
                   device_peak_flops(hw, catalog if catalog is not None else spec.platforms.catalog))


def device_peak_flops(hw: HardwareFingerprint, catalog) -> dict[str, float]:
    """{precision: dense peak FLOP/s} of the detected GPU, from the catalog; {} on CPU.
    `catalog`: a loaded Catalog, or a catalog path (None: the shipped one) to load."""
    from autotune.pricing.catalog import Catalog
    from autotune.pricing.load import load_catalog

    if hw.device_kind is not DeviceKind.cuda or not hw.device_name:
        return {}
    if not isinstance(catalog, Catalog):
        catalog = load_catalog(catalog)
    key = catalog.match_device(hw.device_name)
    if key is None:
        return {}
    gpu = catalog.gpus[key]
    peaks = {p.value: gpu.peak_flops(p.value) for p in Precision}
    return {p: v for p, v in peaks.items() if v}


def preferred_precision(hw: HardwareFingerprint) -> Precision:
    """The precision that runs fastest here: bf16 on GPUs, and on CPUs that compute it natively
    (`HardwareFingerprint.cpu_bf16`: AVX512-BF16, AMX, Arm BF16, where it runs faster than fp32);
    fp32 on other CPUs, where bf16 is converted in software and runs several times slower
    (autotune.contract.hardware.cpu_bf16; docs/benchmarks.md has the figures)."""
    native = hw.device_kind is DeviceKind.cuda or hw.cpu_bf16 == "native"
    return Precision.bf16 if native else Precision.fp32
