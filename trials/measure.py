"""Measurement inside a trial: step timing, memory peaks, activation bytes (FLOPs per
token and MFU follow `autotune.contract.flops`, the rule the estimates use too).

    timer = StepTimer(device)
    with timer.step():            # synchronises the device before and after
        train_step()
    summarize(timer.times_s)      # median, p90, CV of the measured steps

Memory, each figure named by its source (`MemorySource`): CUDA allocator peaks (allocated /
reserved) per rank, the device-level peak from NVML sampled by `NvmlSampler` in a background
thread, and the host RSS peak of the rank's process. `SavedTensorMeter` measures, on any
device, the bytes autograd keeps for backward in one micro-step: the activation memory.
"""

from __future__ import annotations

import resource
import statistics
import threading
import time
from contextlib import contextmanager
from typing import Any

import torch

from trials.alive import vm_hwm_bytes


def synchronize(device: torch.device) -> None:
    # A CPU-GPU sync point: without it the timer measures kernel launches, not kernels.
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepTimer:
    def __init__(self, device: torch.device):
        self.device = device
        self.times_s: list[float] = []

    @contextmanager
    def step(self):
        synchronize(self.device)
        t0 = time.perf_counter()
        yield
        synchronize(self.device)
        self.times_s.append(time.perf_counter() - t0)

    def reset(self) -> None:
        self.times_s.clear()


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    xs = sorted(values)
    if not xs:
        raise ValueError("no values")
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarize(times_s: list[float]) -> dict[str, float]:
    """Median, p90, mean and coefficient of variation (population stdev / mean)."""
    median = statistics.median(times_s)
    mean = statistics.fmean(times_s)
    cv = statistics.pstdev(times_s) / mean if len(times_s) > 1 and mean > 0 else 0.0
    return {"median_s": median, "p90_s": percentile(times_s, 90), "cv": cv, "mean_s": mean}


# ---------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------


def host_rss_peak_bytes() -> int:
    """Peak resident set size of this process since it started or since the last
    `reset_host_rss_peak()`: Linux's VmHWM, else ru_maxrss (KiB), which cannot be reset (the
    kernel folds every exited thread's high-water mark into it)."""
    peak = vm_hwm_bytes()
    return peak if peak is not None else int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def reset_host_rss_peak() -> bool:
    """Reset VmHWM to the current RSS (proc(5): writing 5 to /proc/self/clear_refs), so that a
    process running trial after trial (trials/pool.py) reports each trial's own peak. False
    where the kernel does not offer it: the next peak then includes earlier trials'."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def host_rss_now_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return host_rss_peak_bytes()


def memory_mark(device: torch.device) -> dict:
    """When, and this rank's memory high-water marks so far: the host RSS peak and, on CUDA,
    the allocator's peak (allocated) since its last reset."""
    return {"t": time.perf_counter(), "rss_peak": host_rss_peak_bytes(),
            "cuda": int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None}


def cuda_peaks(device: torch.device) -> tuple[int, int]:
    """(peak allocated, peak reserved) bytes of the caching allocator since the last reset."""
    return (int(torch.cuda.max_memory_allocated(device)),
            int(torch.cuda.max_memory_reserved(device)))


class NvmlSampler:
    """Device-level used memory (NVML), sampled in a background thread; GPU only.

    The allocator's peak misses what lives outside it (CUDA context, NCCL buffers, other
    libraries' allocations); NVML sees the whole device, including other processes on it.

        with NvmlSampler(device) as s:
            measured_steps()
        s.peak_used_bytes, s.why_not   # None + the reason where NVML is not available
    """

    def __init__(self, device: torch.device, interval_s: float = 0.01):
        self.device = device
        self.interval_s = interval_s
        self.peak_used_bytes: int | None = None
        self.why_not: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle = None

    def _open(self):
        if self.device.type != "cuda":
            self.why_not = "NVML is GPU only"
            return None
        try:
            import pynvml  # from the nvidia-ml-py package
        except ImportError:
            self.why_not = "pynvml not installed (pip install nvidia-ml-py)"
            return None
        try:
            pynvml.nvmlInit()
            uuid = getattr(torch.cuda.get_device_properties(self.device), "uuid", None)
            if uuid is not None:
                # CUDA_VISIBLE_DEVICES renumbers devices; the UUID names the physical one.
                text = str(uuid)
                return pynvml.nvmlDeviceGetHandleByUUID(text if text.startswith("GPU-") else f"GPU-{text}")
            return pynvml.nvmlDeviceGetHandleByIndex(self.device.index or 0)
        except Exception as exc:  # noqa: BLE001 - NVML missing or driver mismatch: say so
            self.why_not = f"NVML unavailable: {type(exc).__name__}: {exc}"
            return None

    def _run(self) -> None:
        import pynvml

        while True:
            used = int(pynvml.nvmlDeviceGetMemoryInfo(self._handle).used)
            self.peak_used_bytes = max(self.peak_used_bytes or 0, used)
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> "NvmlSampler":
        self._handle = self._open()
        if self._handle is not None:
            self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)


class SavedTensorMeter:
    """Bytes autograd saves for backward in the forward pass of one micro-step.

    That is the activation memory a step holds at its peak, measurable on any device. Counted
    through `torch.autograd.graph.saved_tensors_hooks` from the first pack to the first unpack
    (the start of backward); storages are counted once (views share them), and parameters
    are left out (model states, not activations): their storages and views, a DTensor
    parameter's local shard (tensor parallel) and FSDP2's gathered copies. A DTensor
    activation counts its rank's local part. With activation
    checkpointing, torch's own hooks take over inside checkpointed regions, so only what the
    checkpoint keeps (its inputs) reaches this meter: exactly what stays alive.

        with SavedTensorMeter(model) as m:
            one_train_step()
        m.saved_bytes, m.bytes_by_dtype
    """

    def __init__(self, model: torch.nn.Module):
        self._param_storages = {_storage_key(_local(p)) for p in model.parameters()}
        self._seen: set[tuple[str, int]] = set()
        self.saved_bytes = 0
        self.saved_tensors = 0
        self.bytes_by_dtype: dict[str, int] = {}
        self._closed = False
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _is_model_state(self, t: torch.Tensor, local: torch.Tensor) -> bool:
        """A parameter, a view of one (`weight.t()` in a linear), or its local shard: model
        states, not activations. Under FSDP2 the gathered (unsharded) weight is a Parameter of
        its own, swapped in for the block's forward, so its views are caught by their base."""
        for x in (t, local):
            if isinstance(x, torch.nn.Parameter) or isinstance(x._base, torch.nn.Parameter):
                return True
        return _storage_key(local) in self._param_storages

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        # A DTensor (tensor parallel) holds its rank's part in a local tensor: count that
        # storage, not the global shape. ZeRO-3 saves a parameter as itself.
        if not self._closed:
            local = _local(t)
            key = _storage_key(local)
            if key not in self._seen and not self._is_model_state(t, local):
                self._seen.add(key)
                nbytes = int(local.untyped_storage().nbytes())
                self.saved_bytes += nbytes
                self.saved_tensors += 1
                dtype = str(t.dtype).removeprefix("torch.")
                self.bytes_by_dtype[dtype] = self.bytes_by_dtype.get(dtype, 0) + nbytes
        return t

    def _unpack(self, t: torch.Tensor) -> torch.Tensor:
        # Backward has started: later packs belong to another micro-step (or a recompute).
        self._closed = True
        return t

    def activation_dtype(self) -> str | None:
        """The floating dtype holding most saved bytes (what the activations are stored in)."""
        floats = {k: v for k, v in self.bytes_by_dtype.items()
                  if k.startswith(("float", "bfloat"))}
        return max(floats, key=floats.__getitem__) if floats else None

    def __enter__(self) -> "SavedTensorMeter":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)


def _local(t: torch.Tensor) -> torch.Tensor:
    """The plain tensor under a DTensor (nested for 2-D meshes); `t` itself otherwise."""
    while hasattr(t, "_local_tensor"):
        t = t._local_tensor
    return t


def _storage_key(t: torch.Tensor) -> tuple[str, int]:
    try:
        return (str(t.device), t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # tensor subclasses without a plain storage
        return (str(t.device), id(t))


class LinearCallCounter:
    """Counts forward calls of every `nn.Linear`, weighted by its weight's elements.

    Σ(calls × elements) ÷ Σ(elements) is how many forward passes the linear layers ran:
    1.0 per micro-step without recompute, 2.0 with full activation checkpointing (the
    backward re-runs the forward). It is the recompute evidence behind HFU.

    It listens through torch's global module hook, not hooks of its own on the model's
    modules: DeepSpeed ZeRO-3 traces the order its module hooks fetch parameters in, and
    module hooks added and removed between steps broke that trace three steps later
    ("tracing error ... expected the next 2 parameters", DeepSpeed 0.19, with parameters
    released after use).
    """

    def __init__(self, model: torch.nn.Module):
        self._linears = {id(m) for m in model.modules() if isinstance(m, torch.nn.Linear)}
        self.total_elements = sum(_numel(m.weight) for m in model.modules()
                                  if isinstance(m, torch.nn.Linear))
        self.called_elements = 0
        self.calls = 0
        self._handles: list[Any] = []

    def _hook(self, module, _inputs, _output) -> None:
        if id(module) in self._linears:
            self.calls += 1
            self.called_elements += _numel(module.weight)

    def forward_passes(self, micro_steps: int) -> float | None:
        if not self.total_elements or micro_steps <= 0:
            return None
        return self.called_elements / self.total_elements / micro_steps

    def __enter__(self) -> "LinearCallCounter":
        from torch.nn.modules.module import register_module_forward_hook

        self._handles = [register_module_forward_hook(self._hook)]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()


def _numel(p: torch.Tensor) -> int:
    # ZeRO-3 leaves a 0-element placeholder; `ds_numel` is the real size.
    return int(getattr(p, "ds_numel", p.numel()))
