"""autotune from Python: a sweep, an estimate and a bill, with what the commands print as
dicts (the same documents as their `--json`).

    import autotune
    result = autotune.sweep("spec.yaml", trials=4)       # SweepResult: .pick, .pareto, .report, .export()
    autotune.estimate(model="7b", seq_len=4096, zero_stage=2, dp=8, gpu="a100-80gb")["total_bytes"]
    autotune.cost(gpu="h100-sxm", gpus=8, mfu=0.4, params=7e9, target_tokens=1e11,
                  global_batch_tokens=4e6, zero_stage=1).cheapest   # over 1 GPU: with the batch
"""

from autotune.api.plan import CostResult, cost, estimate
from autotune.api.sweep import SweepResult, sweep

__all__ = ["CostResult", "SweepResult", "cost", "estimate", "sweep"]
