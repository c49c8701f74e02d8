"""autotune: pick the cheapest way to reach an LLM training target.

    autotune sweep                      # the default example sweep on this machine
    autotune report --study default     # trials, Pareto front, best by cost and by time

From Python (autotune.api; importing autotune stays light: no torch, nothing loaded until called):

    import autotune
    result = autotune.sweep("spec.yaml", trials=4)     # .pick, .pareto, .report, .export("launch/")
    autotune.estimate(model="7b", seq_len=4096, zero_stage=2, dp=8)
    autotune.cost(gpu="h100-sxm", gpus=8, mfu=0.4, params=7e9, target_tokens=1e11,
                  global_batch_tokens=4e6, zero_stage=1).cheapest

The controller (this package) never imports torch at import time; trials run in their own
processes (`trials/worker.py`) and talk to it only through `autotune.contract`.
"""

__version__ = "0.1.0"


import types as _types

import autotune.estimate as _estimate_package

_API = ("sweep", "cost", "SweepResult", "CostResult")


class _CallableEstimate(_types.ModuleType):
    """`autotune.estimate` is the package of analytic models (`autotune.estimate.memory`), and
    Python sets that attribute to the package whenever one of its modules is imported; so the
    package itself answers the call: `autotune.estimate(model="7b", ...)` is
    `autotune.api.plan.estimate` (its docstring has the parameters)."""

    def __call__(self, *args, **kwargs):
        """autotune.api.plan.estimate: peak memory per rank and FLOPs per token of a config."""
        from autotune.api.plan import estimate

        return estimate(*args, **kwargs)

    @property
    def __signature__(self):
        """The function's parameters, for `inspect.signature`, `help` and a notebook's `?` (they
        showed `(*args, **kwargs)`); autotune.api.plan imports nothing heavy."""
        import inspect

        from autotune.api.plan import estimate

        return inspect.signature(estimate)


_estimate_package.__class__ = _CallableEstimate


def __getattr__(name: str):
    """autotune.sweep / estimate / cost, loaded on first use (PEP 562): the real functions,
    with their signatures and docstrings, without making `import autotune` pay for them."""
    if name in _API:
        import autotune.api

        return getattr(autotune.api, name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API, "estimate"])
