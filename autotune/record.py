"""What autotune stores in an Optuna study, typed: one `TrialRecord` per trial (its user
attributes, one attribute per field, so optuna-dashboard shows them as they are) and one
`SweepRecord` per study (the limits and catalog a report reads back).

    TrialRecord.write(trial, status="ok", tokens_per_s=1.2e4)   # validated, then stored
    rec = TrialRecord.of(frozen_trial)                          # every reader goes through this
    rec.status, rec.score.usd if rec.score else None, rec.launched

Writers: the sweep's objective and reuse (autotune/search), the memory prescreen
(autotune/search/calibration.py), recovery of dead trials (autotune/run/processes.py), study
copy. Readers: the report, the live progress panel, export, local moves, calibration, the
search budget. Studies written by earlier versions read as they are: every field is
optional, unknown attributes are ignored, and one that no longer validates is dropped with
the others kept (a report of an old study must not fail on one odd attribute).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.contract import HardwareFingerprint, TrialConfig, TrialResult, TrialStatus

# How a trial ended: the worker's TrialStatus, or what happened before or around it.
RecordStatus = Literal["ok", "oom", "timeout", "crash", "nan", "unsupported",
                       "prescreened",  # held back by the memory prescreen: never launched
                       "interrupted"]  # Ctrl-C twice, SIGTERM or SIGHUP: its processes were killed
# The error type of a config held back, never launched, because an earlier trial found its
# setting unsupported by the workload itself (autotune.search.objective.Objective.known_unsupported).
KNOWN_UNSUPPORTED = "KnownUnsupported"


class _Part(BaseModel):
    # Keeps attributes it does not name: a record read and written again (reuse) loses nothing.
    # Frozen, as the record: records are shared (TrialRecord.of caches them).
    model_config = ConfigDict(extra="allow", frozen=True)


class ControllerRef(_Part):
    """The sweep process that ran the trial (a later sweep on this host checks it is alive)."""

    host: str
    pid: int
    start_ticks: int | None = None  # tells a live pid from a reused one
    # Inside a Slurm job (stored only there): Slurm says when the job, or this run of a requeued
    # one, ended, so a trial of a cancelled or preempted job is recovered from any host.
    slurm_job_id: str | None = Field(None, exclude_if=lambda v: v is None, description="SLURM_JOB_ID")
    slurm_restarts: int | None = Field(None, exclude_if=lambda v: v is None, description="SLURM_RESTART_COUNT")


class LaunchRef(_Part):
    """The trial's launcher process group (a later sweep kills what a dead one left)."""

    pgid: int
    start_ticks: int | None = None


class SlotRecord(_Part):
    """Where a trial ran when a sweep ran trials side by side on one node (autotune.run.slots):
    which trials of the study ran beside it is derived from the host and the run intervals
    (autotune.report.neighbours), not stored."""

    host: str = Field(description="the node's hostname")
    kind: str = Field(description="cpu (devices are cores) or cuda (CUDA_VISIBLE_DEVICES indices)")
    devices: list[int] = Field(description="the slot's cores or GPUs, disjoint from the other slots'")
    index: int = Field(description="the slot's number, from 0")
    side_by_side: int = Field(description="how many slots this phase of the sweep ran at once "
                                          "(1: the alone phase, the leaders re-measured)")


class PrescreenRecord(_Part):
    """The memory prescreen's verdict before launch (autotune.search.calibration.Verdict)."""

    launch: bool
    predicted_bytes: int | None = None  # per rank; calibrated when a fit existed
    limit_bytes: int | None = None
    safety_margin: float | None = None  # the spec's fixed headroom, if one was set
    basis: str = ""
    engine: str = ""
    ranks: int = 1
    p_fit: float | None = None  # chance to fit (autotune.search.fit); None in older records
    breakdown: dict[str, Any] | None = None


class MemoryPointRecord(_Part):
    """Predicted against measured peak per rank: one calibration point of this hardware."""

    hardware: str
    engine: str
    ranks: int = 1
    analytic_bytes: float
    predicted_bytes: int | None = None
    measured_bytes: int
    measured_source: str = ""
    rel_error: float | None = None


class ScoreRecord(_Part):
    """The objective values of a completed trial (autotune.search.score.score_trial): the cheapest
    matching offer's bill, every offer's bill, and the inputs to price it again."""

    hours: float
    usd: float
    offer: str
    tokens_to_target: float | None = None
    gpu_hours: float | None = None
    basis: str | None = None
    usd_worst_case: float | None = None
    hours_worst_case: float | None = None
    pricing: str | None = None
    target_basis: str = ""
    price_note: str = ""
    bills: list[dict[str, Any]] = []
    pricing_inputs: dict[str, Any] = {}


class TrialRecord(BaseModel):
    """Everything a trial stores in the study. Fields in `OWN` describe this trial's own run;
    the others are its measurement, which a trial of the same config on the same hardware
    copies instead of measuring again (`measurement()`)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    # -- this trial's own run
    config: dict[str, Any] | None = None  # the TrialConfig as JSON (`trial_config()` validates it)
    config_key: str | None = None  # config without seed + hardware key (autotune.search.reuse)
    hardware: str | None = None  # HardwareFingerprint.key(): scoring and reports keep kinds apart
    machine: dict[str, Any] | None = None  # the full HardwareFingerprint
    controller: ControllerRef | None = None
    launch: LaunchRef | None = None
    claim: str | None = None  # the claim won on config_key before launching
    retry_of: int | None = None  # the stale trial this one re-runs
    baseline: bool | None = None  # enqueued as a baseline
    local_move_from: int | None = None  # enqueued as a neighbour of this trial
    fit_probe: bool | None = None  # enqueued to learn what fits: launched whatever the prescreen says
    reused_from: int | None = None  # measured nothing: copied this trial's measurement
    recovered_from: int | None = None  # not launched: recorded what lost trial N's run measured
    held_back_by: int | None = None  # not launched: trial N found its setting unsupported by the workload
    repeat_of: int | None = None  # a deliberate re-measurement of the config trial N measured first
    race_block: str | None = None  # measured back to back with the other trials of this block
    search_gpu_hours: float | None = None  # what this trial cost the search
    search_usd: float | None = None
    leftovers_killed: int | None = None  # processes a later sweep killed after its controller died
    slot: SlotRecord | None = Field(default=None, description="the disjoint device set the trial "
                                    "ran on, when trials ran side by side (autotune sweep --side-by-side)")
    # -- the measurement
    status: RecordStatus | None = None
    error: str | None = None
    trial_dir: str | None = None  # the folder holding the measurement (the source's, when reused)
    tokens_per_s: float | None = None
    peak_mem_bytes: int | None = None
    peak_mem_source: str | None = None
    # CPU ranks: the most any rank's process held before the model was built (Python, torch,
    # the engine's libraries, the process group): no config of this runtime peaks below it.
    mem_before_build_bytes: int | None = None
    step_time_median_s: float | None = None
    mfu: float | None = None
    hfu: float | None = None  # hardware FLOPs utilisation (recomputation counted)
    final_loss: float | None = None
    wall_s: float | None = None
    compile_s: float | None = None  # a compiled trial's compile time, apart from its steps
    cpu_huge_pages: bool | None = None  # CPU ranks: ran with the allocator's huge pages (export keeps it)
    world_size: int | None = None
    memory_prescreen: PrescreenRecord | None = None
    memory_point: MemoryPointRecord | None = None
    score: ScoreRecord | None = None
    # An unsupported trial whose cause is the workload: the values of that setting it can run
    # (trials.errors.UnsupportedConfig), e.g. {"tp_degree": [1]}
    workload_allows: dict[str, list] | None = None

    OWN: ClassVar[frozenset[str]] = frozenset({
        "config", "config_key", "hardware", "machine", "controller", "launch", "claim",
        "retry_of", "baseline", "local_move_from", "fit_probe", "reused_from", "recovered_from",
        "held_back_by", "repeat_of", "race_block",
        "search_gpu_hours", "search_usd", "leftovers_killed", "slot"})
    # What a re-queued retry of a stale trial keeps (Optuna copies all attributes otherwise).
    KEPT_ON_RETRY: ClassVar[frozenset[str]] = frozenset({"baseline", "repeat_of", "race_block", "fit_probe"})

    # -- reading
    @classmethod
    def of(cls, trial: Any) -> "TrialRecord":
        """The record of an Optuna trial (frozen or live)."""
        return cls.from_attrs(getattr(trial, "user_attrs", None) or {})

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any]) -> "TrialRecord":
        # A sweep reads every trial's record on every proposal (reuse, local moves, budget,
        # calibration); Optuna's storages hand out a new dict whenever an attribute changes,
        # so a record parsed from the same dict with the same values is reused.
        key = tuple((k, id(v)) for k, v in attrs.items())
        hit = _PARSED.get(id(attrs))
        if hit is not None and hit[0] is attrs and hit[1] == key:
            return hit[2]
        record = cls._parse(attrs)
        _PARSED[id(attrs)] = (attrs, key, record)
        if len(_PARSED) > _PARSED_MAX:
            _PARSED.pop(next(iter(_PARSED)))
        return record

    @classmethod
    def _parse(cls, attrs: dict[str, Any]) -> "TrialRecord":
        attrs = {k: v for k, v in attrs.items() if k in cls.model_fields}
        while True:
            try:
                return cls.model_validate(attrs)
            except ValidationError as exc:
                bad = {str(e["loc"][0]) for e in exc.errors() if e.get("loc")}
                if not bad & set(attrs):
                    raise
                attrs = {k: v for k, v in attrs.items() if k not in bad}

    @property
    def launched(self) -> bool:
        """The trial ran its own measurement: not reused from another, not held back, not lost
        (failed by a later sweep for its dead controller, `leftovers_killed`: a run of it that
        measured is its retry's, `recovered_from`)."""
        return (self.status not in (None, "prescreened") and self.reused_from is None
                and self.held_back_by is None and self.leftovers_killed is None)

    def on(self, hw: HardwareFingerprint) -> bool:
        """Measured on this hardware (`HardwareFingerprint.key`). A record written before the
        key named device count, versions and cores holds the bare device model as its key, one
        written before it named the CPU's bf16 the key without it; either counts when every
        field its stored fingerprint recorded matches this machine."""
        if self.hardware is None:
            return False
        if self.hardware == hw.key():
            return True
        older = (hw.kind_key(), hw.model_copy(update={"cpu_bf16": None}).key())
        return self.hardware in older and hw.matches_recorded(self.machine)

    def trial_config(self) -> TrialConfig:
        """The stored config, validated (ValueError when missing or unreadable)."""
        if self.config is None:
            raise ValueError("no config stored")
        return TrialConfig.model_validate(self.config)

    def measurement(self) -> dict[str, Any]:
        """The measurement fields this trial stores, for a trial that reuses it."""
        return {k: getattr(self, k) for k in self.model_fields_set - self.OWN}

    def compile_seconds(self) -> float | None:
        """A compiled trial's compile time: its own field, else the figure its score charged
        (a record written before the field was stored)."""
        if self.compile_s is not None:
            return self.compile_s
        charged = (self.score.pricing_inputs or {}).get("compile_s") if self.score else None
        return float(charged) if charged else None

    def result(self) -> TrialResult:
        """The stored summary of the measurement as a TrialResult (status and headline figures)."""
        return TrialResult(status=TrialStatus(self.status), tokens_per_s=self.tokens_per_s,
                           peak_mem_bytes=self.peak_mem_bytes, wall_s=self.wall_s,
                           compile_s=self.compile_seconds(),
                           step_time_median_s=self.step_time_median_s,
                           final_loss=self.final_loss, mfu=self.mfu, error=(self.error or None))

    # -- writing
    @classmethod
    def attrs(cls, **fields: Any) -> dict[str, Any]:
        """`fields` validated and as stored (JSON): for `study.enqueue_trial(user_attrs=...)`."""
        unknown = set(fields) - set(cls.model_fields)
        if unknown:
            raise TypeError(f"not TrialRecord fields: {', '.join(sorted(unknown))}")
        return cls.model_validate(fields).model_dump(mode="json", include=set(fields))

    @classmethod
    def write(cls, trial: Any, **fields: Any) -> None:
        """Store `fields` on a running Optuna trial, each as one user attribute."""
        for k, v in cls.attrs(**fields).items():
            trial.set_user_attr(k, v)

    @classmethod
    def write_stored(cls, storage: Any, trial_id: int, **fields: Any) -> None:
        """Store `fields` on a trial through its storage (a trial this process does not run)."""
        for k, v in cls.attrs(**fields).items():
            storage.set_trial_user_attr(trial_id, k, v)


# Parsed records by the id of the attribute dict they came from (the dict is kept, so its id
# is not reused while cached); the oldest go first.
_PARSED: dict[int, tuple[dict[str, Any], tuple, TrialRecord]] = {}
_PARSED_MAX = 4096


# Study user attribute where `autotune sweep` records the limits and the catalog it used.
SPEC_ATTR = "autotune_spec"


class SweepRecord(BaseModel):
    """What the report needs from the latest sweep's spec, stored with the study. The storage
    URL is not stored (it may hold a password)."""

    model_config = ConfigDict(extra="ignore")

    budget: dict[str, float | None] = {}  # max_usd, deadline_hours, remeasure_trials
    catalog: str | None = None  # resolved path; None: the shipped catalog
    offers: list[str] | None = None
    target: dict[str, Any] = {}
    spec_file: str | None = None

    @property
    def remeasures(self) -> bool:
        """Whether the sweep re-measures leaders (not `budget.remeasure_trials: 0`)."""
        return self.budget.get("remeasure_trials") != 0

    @classmethod
    def of(cls, study: Any) -> "SweepRecord":
        return cls.model_validate(study.user_attrs.get(SPEC_ATTR) or {})

    def write(self, study: Any) -> None:
        study.set_user_attr(SPEC_ATTR, self.model_dump(mode="json"))
