"""What a sweep that found nothing under the memory limit says would make it fit
(autotune.report.nothing_fits): savers the closest config lacks, unless a trial that used one at
no larger micro-batch was measured over the limit too; and on CPU ranks, a limit below what the
ranks held before their model was built, which no config can meet. The sweep-level and the
real-trial checks are tests/test_fit.py and tests/test_sweep_e2e.py."""

from __future__ import annotations

from autotune.report.nothing_fits import nothing_fits_note, what_would_fit
from autotune.report.schema import TrialRow

MiB = 2**20
LIMIT = 300 * MiB


def row(number: int, peak_mib: float | None, status: str = "oom", before_mib: float | None = None,
        **config) -> TrialRow:
    cfg = dict(num_gpus=2, micro_batch_size=1, grad_accum_steps=1, precision="fp32",
               checkpointing="none", zero_stage=0, offload="none", fsdp="none", tp_degree=1) | config
    return TrialRow.model_construct(
        number=number, status=status, config=cfg, peak_mem_bytes=int(peak_mib * MiB) if peak_mib else None,
        predicted_peak_mem_bytes=None, mem_capacity_bytes=LIMIT,
        mem_before_build_bytes=int(before_mib * MiB) if before_mib else None)


def test_a_saver_tried_over_the_limit_is_named_not_suggested():
    rows = [row(0, 400, micro_batch_size=2), row(1, 420, checkpointing="full"),
            row(2, 380, zero_stage=3, micro_batch_size=1)]
    note = nothing_fits_note(rows)
    # The closest (380 MiB against 300) is trial 2, ZeRO-3 already; checkpointing was measured
    # over the limit at micro-batch 1 (trial 1): named, not advised again. Offload never ran.
    assert note.startswith("no config fits the memory limit: the closest was trial 2 "
                           "(2x mb1 ga1 fp32 ckpt:none zero3), measured peak 380.0 MiB per rank against "
                           "300.0 MiB (+27%). To make it fit: CPU offload"), note
    assert "Tried, and over the limit too: full activation checkpointing (trial 1: 420.0 MiB)." in note
    assert "activation checkpointing (checkpointing: [full])" not in note


def test_a_saver_over_the_limit_at_a_larger_micro_batch_is_still_advised():
    rows = [row(0, 350), row(1, 900, checkpointing="full", micro_batch_size=8)]
    note = nothing_fits_note(rows)
    assert "activation checkpointing (checkpointing: [full])" in note and "Tried" not in note
    assert what_would_fit(rows[0].config)[-1] == "more GPUs per trial, or a GPU with more memory"


def test_a_limit_below_every_trials_pre_build_memory_leaves_no_saver():
    rows = [row(0, 380, before_mib=320), row(1, 420, before_mib=310, checkpointing="full")]
    note = nothing_fits_note(rows)
    assert "No config can fit: before building the model, the ranks of every trial measured already " \
           "held 310.0 MiB or more (trial 1: Python, torch, the process group)." in note
    assert "To make it fit" not in note
    # One trial held less than the limit before its build: the savers are advised as usual.
    rows.append(row(2, 390, before_mib=250, zero_stage=3))
    assert "No config can fit" not in nothing_fits_note(rows)
    # Something fit: no note at all.
    assert nothing_fits_note([*rows, row(3, 290, status="ok")]) is None
