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
        hardware: str = "cpu-a", **config) -> TrialRow:
    cfg = dict(num_gpus=2, micro_batch_size=1, grad_accum_steps=1, precision="fp32",
               checkpointing="none", zero_stage=0, offload="none", fsdp="none", tp_degree=1) | config
    return TrialRow.model_construct(
        number=number, status=status, config=cfg, peak_mem_bytes=int(peak_mib * MiB) if peak_mib else None,
        predicted_peak_mem_bytes=None, mem_capacity_bytes=LIMIT, hardware=hardware,
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


def test_a_limit_below_what_the_lightest_engine_held_before_its_build_leaves_no_saver():
    rows = [row(0, 380, before_mib=330), row(1, 420, before_mib=320, checkpointing="full"),
            row(2, 390, before_mib=400, zero_stage=3)]
    note = nothing_fits_note(rows)
    # The least any plain-DDP trial held before its build (trial 1, 320 MiB) is over the
    # 300 MiB limit by more than the 5% such a figure moves: every config holds at least that.
    assert "No config can fit: before building the model, trial 1's ranks already held 320.0 MiB " \
           "(Python, torch, the process group), which every config holds at least: set the limit above " \
           "that (memory: limit_bytes_per_rank in the spec), or run on a machine with more memory." in note
    assert "To make it fit" not in note
    # Within 5% of the limit: left to the trials, the savers are advised as usual.
    assert "No config can fit" not in nothing_fits_note([row(0, 380, before_mib=310)])
    # Only engines that import more before their build (ZeRO-3 here) over it: no word of it.
    assert "No config can fit" not in nothing_fits_note([row(0, 390, before_mib=400, zero_stage=3)])
    # One plain-DDP trial held less than the limit before its build: neither.
    assert "No config can fit" not in nothing_fits_note([*rows, row(3, 360, before_mib=290)])
    # Something fit: no note at all.
    assert nothing_fits_note([*rows, row(4, 290, status="ok")]) is None
    # Another machine's runtime says nothing of the closest trial's: only its own hardware counts.
    other = [row(0, 380, before_mib=330, hardware="cpu-b"), row(1, 370, hardware="cpu-a")]
    assert "No config can fit" not in nothing_fits_note(other)


def test_only_a_trial_in_fresh_ranks_records_what_they_held_before_the_build():
    """A pooled rank holds what its earlier trials left (272 to 459 MiB over the big truth's
    pooled runs): its pre-build figure is no floor for the runtime, so it is not recorded."""
    from autotune.contract import TrialResult, TrialStatus
    from autotune.contract.result import MemoryReport, MemorySource
    from autotune.search.objective import measured_record

    fresh = TrialResult(status=TrialStatus.ok, tokens_per_s=1.0, peak_mem_source=MemorySource.host_rss,
                        memory=MemoryReport(host_rss_baseline_bytes=[300 * MiB, 310 * MiB]))
    assert measured_record(fresh)["mem_before_build_bytes"] == 310 * MiB
    pooled = fresh.model_copy(update={"observations": {"pool": {"trial": 3, "host_rss_at_start_bytes": 1}}})
    assert "mem_before_build_bytes" not in measured_record(pooled)
    gpu = fresh.model_copy(update={"peak_mem_source": MemorySource.cuda_allocator})
    assert "mem_before_build_bytes" not in measured_record(gpu)


def test_the_sweep_stops_only_on_what_its_own_hardware_held_before_the_build():
    """autotune.search.floor.over_limit_reason, as StopRule asks it after a trial out of memory:
    the least a plain-DDP trial of the same hardware held before its build, against the limit."""
    import optuna

    from autotune.record import PrescreenRecord, TrialRecord
    from autotune.search.floor import over_limit_reason

    def trial(number: int, hardware: str, before_mib: int | None, status: str = "oom"):
        t = optuna.trial.create_trial(
            state=optuna.trial.TrialState.PRUNED, user_attrs=TrialRecord.attrs(
                config={"zero_stage": 0, "fsdp": "none", "tp_degree": 1, "launcher": "torchrun"},
                hardware=hardware, status=status, mem_before_build_bytes=before_mib and before_mib * MiB,
                memory_prescreen=PrescreenRecord(launch=True, limit_bytes=LIMIT)))
        t.number = number
        return t

    mine = trial(1, "cpu-a", 350)
    assert over_limit_reason(mine, [mine]).startswith(
        "no config can fit the memory limit of 300.0 MiB per rank: before building the model, trial 1's "
        "ranks already held 350.0 MiB")
    # Another machine's runtime held less there: this one's still cannot fit.
    assert over_limit_reason(mine, [mine, trial(0, "cpu-b", 200)]) is not None
    # A trial of this machine held less than the limit before its build: no stop.
    assert over_limit_reason(mine, [mine, trial(0, "cpu-a", 250)]) is None
    # Not out of memory, or no limit: no stop.
    assert over_limit_reason(trial(2, "cpu-a", 350, status="crash"), [mine]) is None


def test_every_space_setting_the_advice_names_is_one_a_space_file_takes():
    """The advice quotes space-file settings (`checkpointing: [full]`) for the user to copy:
    each must load, or the user's next sweep stops on it (`fsdp: [full]` did: FSDP2's mode is
    full_shard)."""
    import re

    import yaml

    from autotune.search.space_file import SearchSpace

    bare = dict(micro_batch_size=8, checkpointing="none", zero_stage=0, offload="none", fsdp="none")
    settings = re.findall(r"(\w+): (\[[^\]]*\])", " ".join(what_would_fit(bare)))
    assert {k for k, _ in settings} >= {"checkpointing", "zero_stage", "fsdp", "offload"}, settings
    for key, value in settings:
        SearchSpace.model_validate({key: yaml.safe_load(value)})


def test_bill_md_gives_the_advice_once_where_the_reports_note_already_does():
    """A pick without headroom where no measured config has any: the report's note names the
    savers (autotune.report.picks.with_headroom), and bill.md's memory paragraph quotes that
    note, so it does not give them a second time; with no note it gives them itself."""
    from autotune.report.memory_fit import fit_lines
    from autotune.report.schema import MemoryFitRow

    cfg = dict(micro_batch_size=8, checkpointing="none", zero_stage=0, offload="none", fsdp="none")
    fit = MemoryFitRow(limit_bytes=LIMIT, runs=2, oom_runs=0, p_run=0.6, headroom=False)
    savers = "; or ".join(what_would_fit(cfg)[:2])
    note = f"by cost, trial 3 is recommended though ...; no config measured has headroom. To give it some: {savers}"
    (with_note, _) = fit_lines(fit, cfg, note)
    assert with_note.count(savers) == 1 and "**Little headroom**" in with_note
    (alone, _) = fit_lines(fit, cfg)
    assert alone.count(savers) == 1 and "`autotune report` names the best config" in alone
