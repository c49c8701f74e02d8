"""Scaling projection: ring collectives by ZeRO stage, overlap fitted from measured counts,
other node counts and GPU types; hand-computed expected values."""

from __future__ import annotations

import pytest

from autotune.errors import UserError
from autotune.estimate.scaling import (
    CommModel,
    Link,
    Measured,
    comm_s,
    fit_step_model,
    gpu_type_factor,
    project,
    project_gpu_type,
)
from autotune.pricing.load import load_catalog

W = 8192  # tokens per GPU per optimizer step
COMM = CommModel(params=1e9, grad_bytes_per_param=2, zero_stage=0)
# 64 GB/s both ways (PCIe Gen4 x16) -> 32 GB/s a direction; 12.5 GB/s per node between nodes.
LINK = Link(intra_node_bytes_per_s=32e9, inter_node_bytes_per_s=12.5e9, gpus_per_node=8)


def test_ring_volumes_by_zero_stage():
    f = 3 / 4  # (d - 1) / d at d = 4
    g = 1e9 * 2
    assert COMM.bytes_per_rank(1) == 0
    assert COMM.bytes_per_rank(4) == pytest.approx(2 * f * g)  # all-reduce 2(d-1)/d
    z2 = CommModel(params=1e9, zero_stage=2)
    assert z2.bytes_per_rank(4) == pytest.approx(2 * f * g)  # reduce-scatter + all-gather
    z3 = CommModel(params=1e9, zero_stage=3)
    assert z3.bytes_per_rank(4) == pytest.approx(1.5 * COMM.bytes_per_rank(4))  # ZeRO paper: 1.5x
    # Accumulation: DDP syncs once per step; ZeRO-3 gathers every micro-step.
    assert CommModel(params=1e9, grad_accum_steps=4).bytes_per_rank(4) == COMM.bytes_per_rank(4)
    assert CommModel(params=1e9, zero_stage=3, grad_accum_steps=4).bytes_per_rank(4) == \
        pytest.approx(4 * z3.bytes_per_rank(4))
    # TP degree 2: each rank holds half the parameters.
    assert CommModel(params=1e9, tp_degree=2).bytes_per_rank(4) == pytest.approx(COMM.bytes_per_rank(4) / 2)


def test_intra_and_inter_node_bandwidth():
    assert comm_s(COMM, LINK, 2) == pytest.approx(2e9 / 32e9)  # 0.0625 s
    # 16 GPUs span two nodes: the ring runs at the network's 12.5 GB/s.
    assert comm_s(COMM, LINK, 16) == pytest.approx(2 * 15 / 16 * 2e9 / 12.5e9)  # 0.3 s


def test_projection_from_1_and_2_gpus_with_fitted_overlap():
    # 1 GPU: 1.0 s per step. 2 GPUs: 1.03125 s = 1.0 + half of the 0.0625 s all-reduce exposed.
    pts = [Measured(1, W / 1.0, W), Measured(2, 2 * W / 1.03125, W)]
    fit = fit_step_model(pts, COMM, LINK)
    assert fit.compute_s == pytest.approx(1.0) and fit.exposed == pytest.approx(0.5)
    assert "50% of communication hidden" in fit.how
    p8 = project(fit, 8, COMM, LINK)
    step8 = 1.0 + 0.5 * (2 * 7 / 8 * 2e9 / 32e9)  # 1.0546875 s
    assert p8.tokens_per_s == pytest.approx(8 * W / step8)  # 62,139 tok/s
    assert p8.scaling_efficiency == pytest.approx(1 / step8)  # 94.8%
    assert not p8.measured and p8.basis.startswith("projected from")
    p16 = project(fit, 16, COMM, LINK)
    assert p16.tokens_per_s == pytest.approx(16 * W / 1.15)  # 113,976 tok/s over two nodes
    assert p16.scaling_efficiency == pytest.approx(1 / 1.15)
    # A measured count returns the measurement: measured wins over projected.
    p2 = project(fit, 2, COMM, LINK)
    assert p2.measured and p2.tokens_per_s == pts[1].tokens_per_s and p2.basis.startswith("measured")


def test_one_measured_count_assumes_no_overlap():
    fit = fit_step_model([Measured(1, W / 1.0, W)], COMM, LINK)
    assert fit.exposed == 1.0 and "assumed none" in fit.how
    assert project(fit, 2, COMM, LINK).tokens_per_s == pytest.approx(2 * W / 1.0625)


def test_cpu_ranks_fit_an_effective_bandwidth_and_are_not_projected_onto_gpus():
    comm = CommModel(params=1e8, grad_bytes_per_param=4)
    cpu = Link(intra_node_bytes_per_s=None, gpus_per_node=192)
    # 1 rank 1.0 s/step; 2 ranks 1.1 s: 4e8 bytes moved in 0.1 s -> 4 GB/s effective.
    fit = fit_step_model([Measured(1, W, W), Measured(2, 2 * W / 1.1, W)], comm, cpu)
    assert fit.exposed_unit == "s_per_byte" and "4.00 GB/s" in fit.how
    assert project(fit, 4, comm, cpu).tokens_per_s == pytest.approx(4 * W / 1.15)  # 6e8 B at 4 GB/s
    with pytest.raises(UserError, match="two counts"):
        fit_step_model([Measured(1, W, W)], comm, cpu)
    cat = load_catalog()
    with pytest.raises(UserError, match="CPU measurements are not projected"):
        gpu_type_factor(0.1, cat.gpus["cpu-core"], cat.gpus["h100-sxm"], "bf16")


def test_projection_to_another_gpu_type_from_mfu():
    cat = load_catalog()
    a100, h100 = cat.gpus["a100-80gb"], cat.gpus["h100-sxm"]
    # MFU 50%: half the time scales with peak (312 -> 989 TFLOPS), half with bandwidth (2039 -> 3350 GB/s).
    factor, why = gpu_type_factor(0.5, a100, h100, "bf16")
    assert factor == pytest.approx(0.5 * 312 / 989 + 0.5 * 2039 / 3350)  # 0.4621
    assert "peak" in why and "bandwidth" in why
    fit = fit_step_model([Measured(1, W / 1.0, W)], COMM, Link(300e9))
    moved = project_gpu_type(fit, 0.5, a100, h100, "bf16", "a100-80gb", "h100-sxm")
    p1 = project(moved, 1, COMM, Link(450e9))
    assert p1.tokens_per_s == pytest.approx(W / factor)
    assert not p1.measured and "on a100-80gb" in p1.basis and "h100-sxm" in p1.basis
    with pytest.raises(UserError, match="no sourced"):
        gpu_type_factor(0.5, a100, cat.gpus["a10g"], "bf16")  # A10G peaks are not sourced


def test_tp_ranks_all_reduce_the_parameters_they_hold():
    # Given what one TP rank holds (embeddings whole), the data-parallel volume is of that;
    # without it, the whole model split t ways (a lower bound).
    held = CommModel(params=1e9, tp_degree=2, local_params=0.6e9)
    assert held.dp_bytes_per_rank(4) == pytest.approx(2 * 3 / 4 * 0.6e9 * 2)
    assert CommModel(params=1e9, tp_degree=2).dp_bytes_per_rank(4) == pytest.approx(2 * 3 / 4 * 0.5e9 * 2)
