"""What this machine offers of a study's space: its hardware, the space restricted to what it
can run, the unrestricted space (for parameter names shared across machines), and its GPU's
peak FLOP/s from the catalog (for MFU).

    ms = MachineSpace.for_spec(spec, catalog)
    ms.hardware.key(), ms.restricted.num_gpus, ms.peak_flops.get("bf16")
    rs = restricted_space(spec, hw)    # the restricted space alone (what the slots of --side-by-side need)

On a GPU, what decides fp8 (and bf16) is read here, as the hardware fingerprint records
neither: the visible GPUs' compute capability through NVML (autotune.run.hardware) and whether
torchao is installed, from its package metadata (no torch import: the CLI stays fast). fp8
needs both.
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
        from autotune.search.space import unrestricted
        from autotune.search.space_file import load_space

        hw = local_hardware()
        space = load_space(spec.space, spec.source)
        return cls(hw, restricted_space(spec, hw, space), unrestricted(space, *_tp_limit(spec)),
                   device_peak_flops(hw, catalog if catalog is not None else spec.platforms.catalog))


def _tp_limit(spec: SweepSpec) -> tuple[int | None, str | None]:
    """What every TP degree must divide, and why the model leaves TP > 1 out (ModelShape.tp_heads,
    tp_why); (None, None) where the workload gives no model (an entry point)."""
    from autotune.estimate.workload import model_shape_for

    model = model_shape_for(spec.workload)
    return (model.tp_heads, model.tp_why) if model is not None else (None, None)


def restricted_space(spec: SweepSpec, hw: HardwareFingerprint, space=None):
    """The study's space (`space`: loaded already) restricted to what `hw` can run, on a GPU
    with its compute capability and torchao read here; where fp8 is left out on a GPU,
    `why_dropped` says why (the sweep's "not offered on this machine" line prints it)."""
    from autotune.search.space import capabilities_for, restrict
    from autotune.search.space_file import load_space

    space = space if space is not None else load_space(spec.space, spec.source)
    cc, lib = None, False
    if hw.device_kind is DeviceKind.cuda:
        from autotune.run.hardware import visible_compute_capability

        cc, lib = visible_compute_capability(), fp8_library_installed()
    rs = restrict(space, capabilities_for(hw, spec.trial.threads_per_rank, cc, lib), *_tp_limit(spec))
    reason = fp8_reason(hw, cc, lib)
    if reason and Precision.fp8 in rs.dropped.get("precision", []):
        rs.why_dropped["precision fp8"] = reason
    return rs


def fp8_reason(hw: HardwareFingerprint, compute_capability: tuple[int, int] | None,
               fp8_library: bool) -> str | None:
    """Why a GPU machine cannot run fp8 (the first that applies: the GPU, torchao); None on a
    CPU machine, which never offers fp8 (its line stays as it was), and on a GPU that can (a
    space without compile drops it all the same: autotune.search.space.restrict says why)."""
    from autotune.search.space import capabilities_for

    if hw.device_kind is not DeviceKind.cuda:
        return None
    if compute_capability is None:
        return "this GPU's compute capability could not be read (NVML); fp8 needs >= 8.9, Ada/Hopper"
    if Precision.fp8 not in capabilities_for(hw, 1, compute_capability, True).precisions:
        return (f"needs compute capability >= 8.9, Ada/Hopper; {hw.device_name or 'this GPU'} has "
                f"{compute_capability[0]}.{compute_capability[1]}")
    if not fp8_library:
        return "needs torchao, not installed: pip install 'autotune-llm[fp8]'"
    return None


def fp8_library_installed() -> bool:
    """Whether torchao (fp8 training: trials/precision.py) is installed, from its metadata: the
    trials run in this environment, and the worker checks the import itself before fp8."""
    from autotune.contract.hardware import installed_version

    return installed_version("torchao") is not None


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
