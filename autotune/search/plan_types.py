"""The GPU types `autotune plan` plans on: every GPU type with an offer, or those named with
--gpu, each of which must be one the plan can answer for.

    types = plan_types(catalog, ["h100-sxm"], ["bf16"])   # UserError (exit 2) naming a bad one

A type named with --gpu that the plan cannot answer for is refused, not planned to "no GPU
type to plan on" with exit 0: a CPU core (no dense peak), or a GPU whose catalog entry sources
no peak FLOPs at the space's precisions, or no memory size (the plan runs at a stated fraction
of the peak and drops configs over the memory).
"""

from __future__ import annotations

from autotune.errors import UserError
from autotune.pricing.catalog import Catalog


def plan_types(catalog: Catalog, gpu_types: list[str] | None, precisions: list[str]) -> list[str]:
    """The GPU types to plan on; `precisions`: the space's (fp8 is planned from bf16's peak)."""
    types = gpu_types or sorted({o.gpu for o in catalog.offers})
    for t in types:
        catalog.gpu_type(t)  # "did you mean"
    named = gpu_types or []
    not_gpus = [t for t in named if catalog.gpus[t].device_class != "gpu"]
    if not_gpus:  # a CPU core has no dense peak to plan at a fraction of
        raise UserError(f"--gpu {', '.join(not_gpus)}: not a GPU type (no dense peak to plan with)",
                        fix="plan for a GPU type (list them: autotune catalog); to price a CPU run, "
                            "sweep it: autotune sweep")
    peaks = ["bf16" if p == "fp8" else p for p in precisions]
    unsourced = [t for t in named if not catalog.gpus[t].memory_bytes
                 or not any(catalog.gpus[t].peak_flops(p) for p in peaks)]
    if unsourced:
        raise UserError(f"--gpu {', '.join(unsourced)}: the catalog sources no dense peak at "
                        f"{'/'.join(dict.fromkeys(precisions))} or no memory size for "
                        f"{'it' if len(unsourced) == 1 else 'them'}, so the plan has nothing to scale",
                        fix="plan for another GPU type (autotune catalog lists their peaks), or add the "
                            "peak_tflops and memory of this one, with their source, to your own catalog "
                            "(--catalog FILE)")
    return [t for t in types if catalog.gpus[t].device_class == "gpu"]
