"""autotune: pick the cheapest way to reach an LLM training target.

    autotune sweep                      # the default example sweep on this machine
    autotune report --study default     # trials, Pareto front, best by cost and by time

The controller (this package) never imports torch at import time; trials run in their own
processes (`trials/worker.py`) and talk to it only through `autotune.contract`.
"""

__version__ = "0.1.0"
