"""The `autotune report --json` document: pydantic models, the one source of its JSON Schema.

    doc = ReportDoc.model_validate(json.loads(text))     # what a consumer does
    schema = report_json_schema()                         # pinned in docs/report_schema.md

Versioned by `REPORT_SCHEMA_VERSION`: adding an optional field keeps the version; renaming,
removing or changing the meaning of a field bumps it (and docs/report_schema.md says how).
Every figure says where it came from: `basis_kind` is measured, projected or estimated.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

REPORT_SCHEMA_VERSION: Literal[1] = 1

BasisKind = Literal["measured", "projected", "estimated"]


class _M(BaseModel):
    # Consumers of version 1 may rely on every field below being present; extra keys are
    # refused so the schema cannot drift from what the code writes.
    model_config = ConfigDict(extra="forbid")


class MemoryFitRow(_M):
    """How a config's runs fit the sweep's memory limit (autotune.search.verdict.RunsFit): the
    same on every trial of the config."""

    limit_bytes: int = Field(description="the sweep's memory limit per rank")
    runs: int = Field(description="runs of the config with a measured peak or out of memory")
    oom_runs: int = Field(description="those of them that ran out of memory")
    p_run: float = Field(description="chance that one more run (the long run) stays under the limit, "
                         "from the runs' peaks and their spread")
    headroom: bool = Field(description="p_run is at least autotune.search.verdict.P_HEADROOM: a config "
                           "without it may run out of memory in the long run")


class TrialRow(_M):
    """One Optuna trial as stored, whatever its state."""

    number: int
    state: str = Field(description="Optuna state: COMPLETE, PRUNED, FAIL, RUNNING, WAITING")
    params: dict[str, Any] = Field(description="Optuna parameters as suggested")
    config: dict[str, Any] = Field(description="the TrialConfig fields that define the config")
    status: str | None = Field(description="how the trial ended: ok, oom, timeout, crash, nan, "
                                           "unsupported, lost (its sweep died during it, or before "
                                           "recording it; a later sweep failed it), or why it "
                                           "was never launched")
    error: str | None
    tokens_per_s: float | None = Field(description="measured, all ranks together")
    peak_mem_bytes: int | None = Field(description="measured peak per rank (max over ranks)")
    peak_mem_source: str | None = Field(description="cuda_allocator, nvml, host_rss, not_measured")
    mem_before_build_bytes: int | None = Field(
        None, description="CPU ranks: the most a rank held before the model was built (Python, "
        "torch, the process group), which no config of this runtime peaks below")
    predicted_peak_mem_bytes: int | None = Field(description="per rank, estimated before launch")
    predicted_basis: str | None = Field(description="how the prediction was made")
    mem_capacity_bytes: int | None = Field(description="memory one rank may use (see source)")
    mem_capacity_source: str | None
    headroom_bytes: int | None = Field(description="capacity minus the measured peak per rank")
    mfu: float | None = Field(description="model FLOPs utilisation; None when no device peak")
    hfu: float | None = Field(
        None, description="hardware FLOPs utilisation (recomputation counted); None when no device peak")
    step_time_median_s: float | None
    hours: float | None = Field(description="projected hours to the target on the stored offer")
    usd: float | None = Field(description="projected dollars to the target on the stored offer")
    offer: str | None
    basis: str | None = Field(description="how hours/dollars were obtained, in words")
    hardware: str | None = Field(description="key of the hardware the trial ran on")
    trial_dir: str | None
    wall_s: float | None = Field(description="wall time of the trial itself")
    compile_s: float | None = Field(None, description="compiled trials: seconds the warm-up steps "
                                    "spent compiling (apart from tokens/s; charged once to hours)")
    cpu_huge_pages: bool | None = Field(None, description="CPU ranks: whether the trial ran with the "
                                        "allocator's huge pages (THP_MEM_ALLOC_ENABLE=1); the export keeps it")
    constraints: dict[str, float] = Field(description="Optuna constraint values; > 0 = violated")
    search_gpu_hours: float | None = Field(description="rank-hours this trial cost the search")
    search_usd: float | None = Field(description="what those rank-hours cost; None = not priced")
    reused_from: int | None = Field(default=None, description="the trial whose measurement of the "
                                    "same config on the same hardware this one reused (no run)")
    recovered_from: int | None = Field(default=None, description="not launched: the lost trial "
                                       "(its controller gone before recording it) whose run's "
                                       "result this one recorded from its folder")
    held_back_by: int | None = Field(default=None, description="not launched: that trial found a "
                                     "setting of this config unsupported by the workload itself "
                                     "(e.g. TP for a model with no TP plan)")
    local_move_from: int | None = Field(default=None, description="queued by the sweep as a "
                                        "neighbour of this front trial (the sampler had repeated "
                                        "a measured config)")
    repeat_of: int | None = Field(default=None, description="a deliberate re-measurement (before "
                                  "recommending) of the config this trial first measured")
    retry_of: int | None = Field(default=None, description="the trial whose config this one measures "
                                 "again because that trial was cut short (SIGTERM, SIGHUP) or lost with its controller")
    race_block: str | None = Field(default=None, description="measured back to back with the "
                                   "other trials of this block")
    slot: str | None = Field(default=None, description="the disjoint cores or GPUs it ran on when "
                             "trials ran side by side, e.g. 'cores 1 (slot 2 of 2)'")
    neighbours: list[int] = Field(default_factory=list, description="trials that ran on the same "
                                  "host while it ran (overlapping runs); [] = it ran alone")
    memory_fit: MemoryFitRow | None = Field(default=None, description="under a memory limit: how the "
                                            "runs of this trial's config fit it; None without a limit "
                                            "or a measured peak")


class Sensitivity(_M):
    """The bill under stress: the run takes 30% longer; the run is interrupted once."""

    plus_30pct_time_hours: float | None
    plus_30pct_time_usd: float | None
    one_interruption_hours: float | None
    one_interruption_usd: float | None


class OptionRow(_M):
    """One (config, offer) pair: a trial's measured config priced on one catalog offer."""

    trial: int
    config: dict[str, Any]
    offer: str
    provider: str | None
    regions: list[str] = Field(default_factory=list, description="regions where the offer's prices hold")
    instance: str | None = Field(default=None, description="the instance type rented (x nodes)")
    pricing: str | None = Field(description="on-demand, spot, reserved, owned, ...")
    platform: str = Field(description="provider/pricing: the colour of the Pareto plot")
    gpu_type: str | None
    price_usd_per_gpu_hour: float | None
    price_date: str | None
    price_unit: Literal["GPU", "vCPU"] | None = Field(None, description="what price_usd_per_gpu_hour "
                                                     "and gpu_hours count: a GPU, or on a CPU offer a "
                                                     "vCPU; None: the offer is not in the catalog")
    price_source: str | None = Field(None, description="where the offer's price was read (the "
                                     "catalog's price_source); price_date says when")
    hours: float
    usd: float
    gpu_hours: float | None
    basis: str = Field(description="how hours/dollars were obtained, in words")
    basis_kind: BasisKind
    tokens_per_s: float | None
    mfu: float | None
    hfu: float | None = None
    peak_mem_bytes: int | None
    peak_mem_source: str | None
    headroom_bytes: int | None
    sensitivity: Sensitivity | None = Field(description="None when pricing gave none")
    usd_worst_case: float | None = Field(description="+30% time and one more interruption")
    hours_worst_case: float | None
    breakdown: dict[str, float] | None = Field(description="dollars by item: gpu, storage, egress, ...")
    within_budget: bool | None = Field(description="usd <= max_usd; None when no budget is set")
    within_deadline: bool | None = Field(description="hours <= deadline; None when none is set")
    feasible: bool = Field(description="within budget and deadline (unset limits pass), and its runs' "
                                        "typical peak under the memory limit")
    pareto: bool = Field(description="no other option is both cheaper and faster")
    runs: list[int] = Field(default_factory=list, description="the trials that measured this "
                            "config on this hardware (the first, then repeats); hours, usd and "
                            "tokens_per_s are the estimate over all of them (see `picks`)")
    tokens_to_target: float | None = Field(None, description="tokens the long run processes to "
                                           "reach the target at this config's global batch")
    target_basis: str | None = Field(None, description="how tokens_to_target was derived, e.g. "
                                     "'1e+09 tokens' or '1,000 steps x 8,192 tokens/step'")


class RunRow(_M):
    """One measurement of a recommended config."""

    trial: int
    tokens_per_s: float
    block: str | None = Field(description="measured back to back with the other runs of this "
                                          "block (a re-measuring race); None: measured alone")


class PickRow(_M):
    """A recommended config (the cheapest or the fastest within the limits): its runs, its
    estimate with an interval, and how sure the pick is against the runner-up."""

    by: Literal["cost", "time"]
    trial: int = Field(description="the config's first trial (its option row)")
    offer: str
    runs: list[RunRow]
    tokens_per_s: float = Field(description="estimate over the runs (autotune.search.estimates)")
    tokens_per_s_low: float = Field(description="90% interval of the estimate")
    tokens_per_s_high: float
    value: float = Field(description="usd (by cost) or hours (by time) at the estimate")
    value_low: float = Field(description="90% interval")
    value_high: float
    runner_up: int | None = Field(description="first trial of the next best config")
    margin: float | None = Field(description="how much worse the runner-up is (0.04 = 4%)")
    margin_low: float | None = Field(description="90% interval of the margin")
    margin_high: float | None
    how_sure: str = Field(description="the sentence: 'cheaper than the runner-up ... by 4% ± 2%' "
                                      "or 'not distinguishable from trial 7 ...'")
    run_sd: float = Field(description="sd of log tokens/s between runs used for the interval")
    paired_sd: float = Field(description="the part two runs measured back to back do not share")


class Limits(_M):
    max_usd: float | None
    deadline_hours: float | None
    source: str = Field(description="where the limits came from: flags, study, none, or each its "
                                    "own (a flag for one, the study for the other)")


class Counts(_M):
    total: int
    complete: int
    pruned: int
    failed: int
    running: int
    waiting: int


class FailureReason(_M):
    reason: str = Field(description="the error type (text before the first ':'), or the message")
    example: str = Field(description="the first line of one such trial's error")
    count: int
    trials: list[int]


class FailureGroup(_M):
    """Trials that did not complete, grouped by how they ended."""

    state: str
    status: str
    count: int
    trials: list[int]
    reasons: list[FailureReason]


class MemoryCheck(_M):
    """Predicted (analytic) against measured peak memory for one trial."""

    trial: int
    status: str | None = Field(description="how the trial ended (prescreened: never launched)")
    predicted_peak_mem_bytes: int | None
    predicted_basis: str | None
    measured_peak_mem_bytes: int | None
    measured_source: str | None
    measured_over_predicted: float | None


class ScalingPoint(_M):
    """Measured throughput of one per-rank config at each GPU count it ran at, and how well it
    scales: the fastest config measured at two or more counts. Empty when no two trials differ
    in GPU count alone (other differences are not the GPUs' doing)."""

    num_gpus: int
    trial: int
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    scaling_efficiency: float = Field(
        description="per-GPU throughput relative to the smallest GPU count measured (1.0 = linear)")
    basis_kind: BasisKind


class InterferenceRow(_M):
    """A config measured beside other trials and alone (autotune.report.neighbours)."""

    trial: int = Field(description="the config's first trial")
    runs_beside: list[int] = Field(description="its trials that had a neighbour")
    runs_alone: list[int] = Field(description="its trials that ran alone")
    tokens_per_s_beside: float = Field(description="median over runs_beside")
    tokens_per_s_alone: float = Field(description="median over runs_alone")
    beside_over_alone: float = Field(description="throughput beside others / alone (< 1: slowed down)")


class SearchCost(_M):
    """What the search itself cost (trial wall time x ranks, priced at this machine's rate)."""

    gpu_hours: float
    usd: float | None = Field(description="None when the search hardware has no price")


class OfferFilter(_M):
    """The offers a report was narrowed to (`--provider`, `--region`): its options, Pareto set
    and picks are on those offers alone; the trials keep the offer the sweep priced them on."""

    providers: list[str] = Field(description="--provider values (shell patterns); [] = any provider")
    regions: list[str] = Field(description="--region values (shell patterns); [] = any region")
    options_left_out: int = Field(description="the study's priced options on other offers")


class ReportDoc(_M):
    schema_version: Literal[1] = REPORT_SCHEMA_VERSION
    study: str
    storage: str | None = Field(description="storage URL with any password redacted")
    catalog: str | None = Field(description="the catalog the offers came from")
    catalog_note: str | None = Field(description="e.g. example prices as of DATE; check your provider")
    target: str | None = Field(None, description="the training target that hours and dollars are "
                               "projected to, in words ('1B tokens', '10,000 steps'); None: a study "
                               "swept before autotune stored it")
    limits: Limits
    offer_filter: OfferFilter | None = Field(None, description="the --provider / --region the "
                                             "report was narrowed to; None: every offer")
    counts: Counts
    search: SearchCost
    trials: list[TrialRow]
    options: list[OptionRow] = Field(description="every priced (config, offer) pair")
    pareto: list[OptionRow] = Field(description="options no other option beats on both hours "
                                                "and dollars, cheapest first")
    cheapest: OptionRow | None = Field(description="cheapest option within the limits")
    fastest: OptionRow | None = Field(description="fastest option within the limits")
    best_by_cost: OptionRow | None = Field(description="cheapest option, ignoring the limits")
    best_by_time: OptionRow | None = Field(description="fastest option, ignoring the limits")
    per_platform: list[OptionRow] = Field(description="the cheapest feasible option per platform")
    picks: list[PickRow] = Field(default_factory=list, description="the cheapest and the "
                                 "fastest config with their runs, interval and how sure")
    failures: list[FailureGroup]
    memory: list[MemoryCheck]
    scaling: list[ScalingPoint]
    interference: list[InterferenceRow] = Field(default_factory=list, description="configs "
                                                "measured beside other trials and alone")
    notes: list[str]


def report_json_schema() -> dict[str, Any]:
    """The JSON Schema of the report document (draft 2020-12, as pydantic writes it)."""
    schema = ReportDoc.model_json_schema()
    schema["title"] = f"autotune report, schema version {REPORT_SCHEMA_VERSION}"
    return schema


if __name__ == "__main__":  # python -m autotune.report.schema > schema.json
    import json
    import sys

    json.dump(report_json_schema(), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
