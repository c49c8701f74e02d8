"""Scaling projection: measured tokens/s at the GPU counts this machine has, projected to
more GPUs, to several nodes, and to another GPU type.

    comm = CommModel(params=1.3e9, grad_bytes_per_param=2, zero_stage=0)
    fit = fit_step_model([Measured(1, 9000.0, 8192), Measured(2, 17000.0, 8192)], comm, link)
    p = project(fit, 8, comm, link)          # p.tokens_per_s, p.basis ("projected from ...")

The step model (data parallel, same per-GPU work as measured: micro-batch, accumulation,
TP degree held fixed; the global batch grows with the data-parallel degree):

    step_s(n) = compute_s + exposed * comm_s(n)

`comm_s(n)` is the time of the step's collectives at full link bandwidth (ring algorithms,
NVIDIA nccl-tests doc/PERFORMANCE.md: all-reduce moves 2(d-1)/d x bytes per rank,
reduce-scatter or all-gather (d-1)/d x bytes; volumes per ZeRO stage from Rajbhandari et
al. 2019). `exposed` (1 - overlap) is fitted from the measured counts; with one count it is
assumed 1 (no overlap: the pessimistic choice) and the basis says so. Every figure returned
is labelled: "measured" when a count was measured (measured wins), else "projected from ...".
CPU measurements are never projected onto GPU types (design.md): `project_gpu_type` refuses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autotune.errors import UserError


@dataclass(frozen=True)
class Measured:
    """One measured point: `num_gpus` ranks running the same per-GPU work."""

    num_gpus: int
    tokens_per_s: float
    tokens_per_gpu_step: float  # tokens one GPU processes per optimizer step (mb x seq x accum)

    @property
    def step_s(self) -> float:
        return self.num_gpus * self.tokens_per_gpu_step / self.tokens_per_s


def grad_bytes_per_param(precision: str, zero_stage: int) -> int:
    """Bytes per gradient element the data-parallel collectives move, as the trials run them:
    4 for fp32 training and for ZeRO 0 (DDP, FSDP2 and TP keep fp32 gradients under autocast
    or reduce in fp32: trials/engines), 2 for 16-bit DeepSpeed ZeRO 1-3 (gradients in the
    model's dtype). `precision` is the config's value ("fp32", "bf16", ...)."""
    return 4 if precision == "fp32" or zero_stage == 0 else 2


@dataclass(frozen=True)
class CommModel:
    """Bytes the data-parallel collectives move per rank per optimizer step.

    `grad_bytes_per_param`: 2 for bf16/fp16 gradients (DeepSpeed), 4 for fp32 (fp32 training,
    or autocast AMP under DDP, which keeps fp32 gradients). Parameters are gathered in 16-bit
    (`param_bytes_per_param`) under ZeRO 2/3.
    """

    params: float
    grad_bytes_per_param: float = 2.0
    param_bytes_per_param: float = 2.0
    zero_stage: int = 0
    tp_degree: int = 1
    grad_accum_steps: int = 1
    tp_bytes_per_step: float = 0.0  # tensor-parallel activation all-reduces, see `tp_bytes`
    fsdp: str = "none"  # FSDP2 (at zero_stage 0): "full_shard" or "shard_grad_op"
    # Parameters one rank holds under tensor parallelism (ModelShape.tp_local_params: the blocks
    # split, embeddings and head whole); None: params / tp_degree, a lower bound.
    local_params: float | None = None

    def bytes_per_rank(self, dp: int) -> float:
        """Ring volume one rank sends per optimizer step at data-parallel degree `dp`."""
        return self.dp_bytes_per_rank(dp) + (self.tp_bytes_per_step if self.tp_degree > 1 else 0.0)

    def dp_bytes_per_rank(self, dp: int) -> float:
        if dp <= 1:
            return 0.0
        f = (dp - 1) / dp
        held = self.local_params if self.local_params is not None else self.params / self.tp_degree
        g = held * self.grad_bytes_per_param
        p = held * self.param_bytes_per_param
        a = self.grad_accum_steps
        if self.fsdp != "none":
            # FSDP2, every micro-step (no sync skipped while accumulating in trials/engines/fsdp.py):
            # parameters all-gathered for forward, and again for backward under full_shard
            # (resharded after forward), gradients reduce-scattered.
            gathers = 2 if self.fsdp == "full_shard" else 1
            return a * (gathers * f * p + f * g)
        if self.zero_stage <= 1:
            # DDP / ZeRO-1: one gradient all-reduce per optimizer step (no sync while accumulating).
            return 2 * f * g
        if self.zero_stage == 2:
            # ZeRO-2: gradients reduce-scattered every micro-step, updated params all-gathered once.
            return a * f * g + f * p
        # ZeRO-3: params all-gathered in forward and backward, gradients reduce-scattered, every
        # micro-step: 3 x (d-1)/d x bytes at a = 1, 1.5x plain data parallel (ZeRO paper, sec. 7).
        return a * (2 * f * p + f * g)


def tp_bytes(n_layers: int, d_model: int, tokens_per_micro_step: int, tp_degree: int,
             act_bytes: int, grad_accum_steps: int = 1) -> float:
    """Megatron tensor parallelism: per layer, two all-reduces of the (tokens x d_model)
    activations in forward and two in backward (Shoeybi et al. 2019, sec. 3), each a ring
    moving 2(t-1)/t of its bytes per rank. Per optimizer step, per rank."""
    if tp_degree <= 1:
        return 0.0
    per = tokens_per_micro_step * d_model * act_bytes
    return grad_accum_steps * n_layers * 4 * 2 * (tp_degree - 1) / tp_degree * per


@dataclass(frozen=True)
class Link:
    """Bandwidths the collectives run over, bytes/s in one direction. None = not known (CPU)."""

    intra_node_bytes_per_s: float | None
    inter_node_bytes_per_s: float | None = None
    gpus_per_node: int = 8
    label: str = ""

    def bytes_per_s(self, num_gpus: int) -> float | None:
        """A ring spanning nodes runs at its slowest hop: the node's network share."""
        if num_gpus <= self.gpus_per_node:
            return self.intra_node_bytes_per_s
        if self.inter_node_bytes_per_s is None or self.intra_node_bytes_per_s is None:
            return None
        return min(self.intra_node_bytes_per_s, self.inter_node_bytes_per_s)


def link_for(gpu_type, offer=None) -> Link:
    """The link of an offer (or of a GPU type alone: one node)."""
    intra = gpu_type.ring_bytes_per_s
    inter = offer.inter_node_gb_per_s * 1e9 if offer is not None and offer.inter_node_gb_per_s else None
    per_node = offer.gpus_per_node if offer is not None else 10**9
    label = gpu_type.interconnect or "unknown link"
    if offer is not None and offer.max_nodes > 1:
        label += f", {offer.inter_node_gb_per_s or '?'} GB/s per node between nodes"
    return Link(intra, inter, per_node, label)


def comm_s(comm: CommModel, link: Link, num_gpus: int) -> float | None:
    """Seconds of collectives per step at full bandwidth; None if the bandwidth is unknown."""
    dp = num_gpus // comm.tp_degree
    vol = comm.bytes_per_rank(dp)
    if vol == 0:
        return 0.0
    bw = link.bytes_per_s(num_gpus)
    return vol / bw if bw else None


@dataclass(frozen=True)
class StepFit:
    """The fitted step model of one config family."""

    compute_s: float           # per-step time without communication
    exposed: float             # fraction of comm_s not hidden behind compute (or s/byte, see unit)
    exposed_unit: str          # "fraction" (bandwidth known) or "s_per_byte" (fitted bandwidth)
    tokens_per_gpu_step: float
    measured: tuple[Measured, ...]
    how: str                   # how `exposed` was obtained, for the basis text
    moved_from: str | None = None  # set when moved to another GPU type: nothing is measured there


def _comm_term(comm: CommModel, link: Link, n: int, unit: str) -> float:
    if unit == "s_per_byte":
        return comm.bytes_per_rank(n // comm.tp_degree)
    c = comm_s(comm, link, n)
    if c is None:
        raise UserError(f"no bandwidth known for {n} GPUs on {link.label or 'this link'}",
                        fix="set interconnect_gb_per_s / inter_node_gb_per_s in the catalog")
    return c


def fit_step_model(points: list[Measured], comm: CommModel, link: Link) -> StepFit:
    """Fit compute_s and the exposed communication fraction to measured points.

    With the link's bandwidth known, `exposed` is a fraction in [0, 1] (1 - overlap). With no
    bandwidth (CPU ranks over shared memory) it is fitted in seconds per byte: an effective
    bandwidth measured on this machine, valid for this machine's kind only.
    """
    if not points:
        raise ValueError("no measured points")
    w = {round(p.tokens_per_gpu_step, 6) for p in points}
    if len(w) > 1:
        raise ValueError("measured points must share the per-GPU work (tokens_per_gpu_step)")
    unit = "fraction" if link.intra_node_bytes_per_s is not None else "s_per_byte"
    xs = [_comm_term(comm, link, p.num_gpus, unit) for p in points]
    ys = [p.step_s for p in points]
    distinct = sorted(set(xs))
    if len(distinct) >= 2:
        # Least squares y = c + e x over the measured counts, e clamped to its valid range.
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        e = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        e = max(0.0, min(1.0, e)) if unit == "fraction" else max(0.0, e)
        c = sum(y - e * x for x, y in zip(xs, ys)) / len(xs)
        counts = ", ".join(str(p.num_gpus) for p in points)
        how = (f"overlap fitted from the measured counts ({counts}): {100 * (1 - e):.0f}% of "
               f"communication hidden" if unit == "fraction"
               else f"effective bandwidth fitted from the measured counts ({counts}): "
                    + (f"{1 / e / 1e9:.2f} GB/s" if e > 0 else "no measurable communication cost"))
    else:
        if unit == "s_per_byte":
            raise UserError("cannot project: one measured count and no known link bandwidth "
                            "(CPU ranks)", fix="measure at two counts (e.g. 1 and 2 ranks)")
        e = 1.0
        c = max(ys[0] - e * xs[0], 0.0)
        how = "overlap not fitted (one measured count): assumed none, the pessimistic case"
    return StepFit(c, e, unit, points[0].tokens_per_gpu_step, tuple(points), how)


@dataclass(frozen=True)
class Projection:
    num_gpus: int
    tokens_per_s: float
    basis: str                     # "measured ..." or "projected from ..."
    measured: bool
    scaling_efficiency: float      # per-GPU throughput at n / at the smallest measured count
    comm_s: float = 0.0
    notes: list[str] = field(default_factory=list)


def _model_tps(fit: StepFit, num_gpus: int, comm: CommModel, link: Link) -> tuple[float, float]:
    x = _comm_term(comm, link, num_gpus, fit.exposed_unit)
    step = fit.compute_s + fit.exposed * x
    if step <= 0:
        raise UserError("the fitted step model gives no time per step", fix="measure more counts")
    seconds = x if fit.exposed_unit == "fraction" else fit.exposed * x
    return num_gpus * fit.tokens_per_gpu_step / step, seconds


def project(fit: StepFit, num_gpus: int, comm: CommModel, link: Link) -> Projection:
    """Tokens/s at `num_gpus`; a measured count returns its measurement (measured wins).

    Scaling efficiency is per-GPU throughput relative to the smallest measured count.
    """
    base = min(fit.measured, key=lambda p: p.num_gpus)
    if fit.moved_from is None:
        for p in fit.measured:
            if p.num_gpus == num_gpus:
                return Projection(num_gpus, p.tokens_per_s, f"measured at {num_gpus} GPUs", True,
                                  (p.tokens_per_s / num_gpus) / (base.tokens_per_s / base.num_gpus))
        base_per_gpu = base.tokens_per_s / base.num_gpus
    else:
        base_per_gpu = _model_tps(fit, base.num_gpus, comm, link)[0] / base.num_gpus
    if fit.exposed_unit == "s_per_byte" and num_gpus > max(p.num_gpus for p in fit.measured) * 64:
        raise UserError(f"cannot project CPU ranks from {base.num_gpus} to {num_gpus}",
                        fix="measure nearer the count you want to price")
    tps, seconds = _model_tps(fit, num_gpus, comm, link)
    measured_txt = ", ".join(f"{p.tokens_per_s:,.0f} tok/s at {p.num_gpus}" for p in fit.measured)
    where = f" on {fit.moved_from}" if fit.moved_from else ""
    basis = (f"projected from {measured_txt} GPUs{where} measured: ring collectives over "
             f"{link.label or 'the link'}, ZeRO-{comm.zero_stage}, {fit.how}")
    return Projection(num_gpus, tps, basis, False, (tps / num_gpus) / base_per_gpu, seconds)


def gpu_type_factor(mfu: float, from_gpu, to_gpu, precision: str) -> tuple[float, str]:
    """Time on `to_gpu` / time on `from_gpu` for the same per-GPU work.

    The fraction of time spent at peak (the measured MFU) scales with the peak ratio; the
    rest (memory-bound kernels, overheads) with the memory-bandwidth ratio. A stated model,
    not a measurement: the basis text says so.
    """
    if from_gpu.device_class != "gpu" or to_gpu.device_class != "gpu":
        raise UserError("CPU measurements are not projected onto GPU types (or back)",
                        fix="price GPUs from a GPU measurement, or with `autotune plan` / --mfu")
    pa, pb = from_gpu.peak_flops(precision), to_gpu.peak_flops(precision)
    ba, bb = from_gpu.memory_bandwidth_gb_per_s, to_gpu.memory_bandwidth_gb_per_s
    if not (pa and pb and ba and bb):
        raise UserError(f"no sourced {precision} peak or memory bandwidth for both GPU types",
                        fix="add peak_tflops / memory_bandwidth_gb_per_s to the catalog, or measure")
    if not 0 < mfu <= 1:
        raise UserError(f"MFU {mfu} is not in (0, 1]", fix="give the measured MFU as a fraction")
    factor = mfu * pa / pb + (1 - mfu) * ba / bb
    why = (f"MFU {mfu:.1%} share scaled by peak ({pa / 1e12:g} -> {pb / 1e12:g} TFLOPS), "
           f"the rest by memory bandwidth ({ba:g} -> {bb:g} GB/s)")
    return factor, why


def project_gpu_type(fit: StepFit, mfu: float, from_gpu, to_gpu, precision: str,
                     from_name: str, to_name: str) -> StepFit:
    """The step model moved to another GPU type: compute time scaled by `gpu_type_factor`.

    The overlap fraction is kept (same software, same schedule); the link is the new offer's.
    """
    factor, why = gpu_type_factor(mfu, from_gpu, to_gpu, precision)
    if fit.exposed_unit != "fraction":
        raise UserError("this measurement's communication was fitted without a known bandwidth",
                        fix="measure on a GPU type with a catalog interconnect figure")
    return StepFit(fit.compute_s * factor, fit.exposed, fit.exposed_unit, fit.tokens_per_gpu_step,
                   fit.measured, f"{fit.how}; GPU type {from_name} -> {to_name}: {why}",
                   moved_from=from_name)
