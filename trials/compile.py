"""torch.compile as the engines apply it, its cache, its cost and its failures.

    use_study_cache(result_path)          # Inductor's cache in the study's folder
    model = compile_module(model, cfg)    # DDP / TP: the whole model (default mode, Inductor)
    compile_blocks(model, cfg)            # FSDP2: each repeated block, before fully_shard
    note_compile(result, warmup_times_s)   # compile_s, cache hits, into the result
    reason = compile_failure(exc)         # the compiler's reason, or None for other errors
    reset_compile_state()                 # a pooled worker, between trials

The first (warm-up) steps of a compiled model pay the compilation; the measured steps run
the compiled code. What that cost is kept apart from the step time (`TrialResult.compile_s`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from autotune.contract.trial_files import COMPILE_CACHE


def _users_cache_dir() -> str | None:
    """TORCHINDUCTOR_CACHE_DIR as whoever launched the worker set it (the user's own cache,
    kept as it is), or None. Inductor writes its default folder into os.environ the first
    time it is imported (torch._inductor.runtime.cache_dir_utils.cache_dir), and a pooled
    trial imports its workload's modules before this one (torch._dynamo and a transformers
    model class each import Inductor: trials/pool.py, trials.workloads.build). So the default
    folder counts as Inductor's own, not the user's; a user who chose exactly that folder
    gets the study's instead."""
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if folder is None:
        return None  # (without importing Inductor, which takes a second)
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return None if os.path.abspath(folder) == os.path.abspath(default_cache_dir()) else folder


# Read once, when this module is first imported: later, the variable holds the study's folder.
_USER_CACHE_DIR = _users_cache_dir()


def use_study_cache(result_path: Path) -> str:
    """Point Inductor's cache (its FX graph and AOTAutograd caches, C++ and Triton builds) at
    the study's folder, beside the trial folders, so that a config measured again, by any
    worker of the study on this file system, loads what an earlier trial compiled instead
    of compiling it again. Returns the folder."""
    folder = _USER_CACHE_DIR or str(Path(result_path).resolve().parent.parent / COMPILE_CACHE)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
    return folder


def configure(cfg) -> None:
    import torch._inductor.config as inductor_config

    if cfg.device.value == "cpu":
        # A CPU rank owns threads_per_rank cores: Inductor's parallel compile would start a
        # pool of compile processes per rank, competing with the other ranks for them.
        inductor_config.compile_threads = max(1, cfg.threads_per_rank)


def compile_module(module: torch.nn.Module, cfg) -> torch.nn.Module:
    """`torch.compile(module)` in its default mode (Inductor), compiled at the first call."""
    configure(cfg)
    return torch.compile(module)


def compile_blocks(model: torch.nn.Module, cfg) -> int:
    """Replace each repeated block (the GPT's blocks, a transformers model's decoder layers)
    by its compiled self, in place, as torchtitan applies compile before FSDP2: per block,
    so that fully_shard's hooks around each block stay outside the compiled graphs and every
    block reuses one compiled graph. Returns the number of blocks compiled; 0 when the model
    has no repeated blocks (then the caller compiles it whole)."""
    configure(cfg)
    holder = _block_list(model)
    if holder is None:
        return 0
    for i, block in enumerate(list(holder)):
        holder[i] = torch.compile(block)
    return len(holder)


def _block_list(model: torch.nn.Module) -> torch.nn.ModuleList | None:
    """The ModuleList holding most parameters (trials.workloads.materialize.repeated_blocks)."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) > 1]
    if not lists:
        return None
    return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))


def compile_seconds(warmup_times_s: list[float], steady_s: float) -> float:
    """What the warm-up steps took beyond the steady step time: compilation at the first
    step, recompilations after it (a new shape, a guard that failed)."""
    return sum(max(0.0, t - steady_s) for t in warmup_times_s)


def note_compile(result, warmup_times_s: list[float]) -> None:
    """A compiled trial's result: compile_s apart from the step time, where its time went,
    and what the compile cache gave."""
    result.compile_s = compile_seconds(warmup_times_s, result.step_time_median_s)
    result.warmup_steps = len(warmup_times_s)  # at least one: the compile's
    result.phase_s["compile"] = result.compile_s
    result.observations["compile"] = {
        "mode": "default", "backend": "inductor", "warmup_step_times_s": warmup_times_s,
        "cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR"), **cache_counters()}
    result.notes = [n for n in result.notes if not n.startswith("activation bytes not measured")]
    result.notes.append(f"compiled: {result.compile_s:.1f} s compiling (the warm-up steps' time "
                        "beyond the median step), apart from tokens/s; activation bytes not probed "
                        "(hooks would recompile the model)")


def cache_counters() -> dict[str, int]:
    """Inductor's FX graph cache and AOTAutograd's cache, hits and misses in this process
    (a repeat of a measured config hits)."""
    if "torch._dynamo" not in sys.modules:
        return {}
    from torch._dynamo.utils import counters

    names = ("fxgraph_cache_hit", "fxgraph_cache_miss", "autograd_cache_hit", "autograd_cache_miss")
    merged = {**counters.get("inductor", {}), **counters.get("aot_autograd", {})}
    return {n: int(merged.get(n, 0)) for n in names}


def compile_failure(exc: BaseException) -> str | None:
    """The compiler's reason when `exc` (or what it was raised from) is torch.compile failing
    to trace or build (no C++ compiler, an op Inductor cannot lower, a graph Dynamo cannot
    capture); None for any other error."""
    if "torch._dynamo" not in sys.modules:
        return None  # nothing was ever compiled in this process
    from torch._dynamo.exc import TorchDynamoException

    seen = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        exc = cause
        seen.add(id(exc))
        if isinstance(exc, TorchDynamoException) or type(exc).__module__.startswith("torch._inductor"):
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            return f"torch.compile failed ({type(exc).__name__}): {lines[0] if lines else ''}"
        cause = exc.__cause__ or exc.__context__
    return None


def reset_compile_state() -> None:
    """Forget every compiled graph and guard of the last trial (torch._dynamo.reset), so that
    a pooled worker's next trial compiles, or loads from the cache, its own."""
    if "torch._dynamo" in sys.modules:
        import torch._dynamo

        torch._dynamo.reset()
        from torch._dynamo.utils import counters

        counters.clear()
