"""SweepSpec: what to tune, towards what target, on which platforms, within what budget.

    spec = load_spec("my_sweep.yaml")     # UserError (exit 2) naming file and field if bad
    spec = default_spec()                 # the built-in example for this machine

A spec file is YAML; every field has a default, so `{}` is a valid spec (the default sweep).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from autotune.contract import GPTWorkload, Launcher, TrialConfig, Workload
from autotune.errors import UserError, format_validation_error, load_yaml_file, plain_message
from autotune.format import bytes_from_text
from autotune.pricing.target import DEFAULT_TOKENS, TargetSpec


class _Spec(BaseModel):
    # NaN and infinity are not quantities: `tokens: .nan` would pass every `> 0` check.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class BatchPolicy(_Spec):
    """Fix the global batch (samples per optimizer step) or let the search choose it.

    With `global_batch_samples` set, accumulation is derived: global = micro x accum x dp,
    and configs that cannot meet it exactly are not suggested."""

    global_batch_samples: int | None = Field(default=None, gt=0, description=(
        "Samples per optimizer step across all data-parallel ranks; unset: the search chooses "
        "micro-batch and accumulation freely."))


def _trial_default(name: str):
    """TrialConfig's default for a field: one home for a trial's length and patience."""
    return TrialConfig.model_fields[name].default


def _trial_description(name: str) -> str | None:
    """TrialConfig's description of a field the spec's `trial:` section sets for every trial."""
    return TrialConfig.model_fields[name].description


def _trial_field(name: str, **bounds: Any) -> Any:
    """A `trial:` field with TrialConfig's default and description for `name`."""
    return Field(default=_trial_default(name), description=_trial_description(name), **bounds)


class TrialSettings(_Spec):
    """How each trial of the sweep runs; defaults are TrialConfig's (autotune.contract)."""

    warmup_steps: int = _trial_field("warmup_steps", ge=0)
    measure_steps: int = _trial_field("measure_steps", gt=0)
    max_measure_steps: int = _trial_field("max_measure_steps", gt=0)
    min_measure_s: float = _trial_field("min_measure_s", ge=0)
    timeout_s: float = _trial_field("timeout_s", gt=0)
    threads_per_rank: int = _trial_field("threads_per_rank", gt=0)
    launcher: Launcher | None = Field(
        default=None, description="Force a launcher; default: deepspeed for ZeRO, else torchrun."
    )
    reuse_workers: bool = Field(
        default=True, description="Run consecutive local trials in a pool of long-lived workers "
        "(autotune/run/pool.py): the launcher, imports and rendezvous paid once per pool; a "
        "failed trial ends its pool; CPU ranks under a memory limit never pool (a pooled rank's "
        "resident memory keeps what earlier trials left). false: a fresh launcher per trial."
    )


class PlatformSpec(_Spec):
    """Where the long run may rent its GPUs: the catalog and, optionally, some of its offers."""

    catalog: str | None = Field(default=None, description=(
        "Catalog YAML, or a SkyPilot catalog folder; default: the shipped one."))
    offers: list[str] | None = Field(default=None, description="Only these offers (names); default: all.")


class BudgetSpec(_Spec):
    """When to stop searching (`trials`, `total_trials`, `search_*`, `patience_trials`; see
    autotune/search/budget.py `SearchBudget`) and what a config may cost (`max_usd`, `deadline_hours`:
    constraints on each trial's projected long run)."""

    trials: int = Field(
        default=8, gt=0, description="trials launched per invocation; a proposal that reuses a "
        "measured config or that the memory prescreen holds back runs nothing and does not count")
    remeasure_trials: int | None = Field(
        default=None, ge=0, description="of `trials`, how many the end of each invocation may "
        "spend re-measuring the cheapest and fastest configs against their closest rivals "
        "(autotune/search/racing.py); unused ones go back to exploring, and once every config of "
        "the space has been tried the rest of `trials` may re-measure; default: half of "
        "`trials`; 0: never re-measure")
    max_usd: float | None = Field(default=None, gt=0, description=(
        "A config's projected long run may cost at most this (dollars to the target); dearer "
        "options are infeasible."))
    deadline_hours: float | None = Field(default=None, gt=0, description=(
        "A config's projected long run may take at most this long (hours to the target)."))
    total_trials: int | None = Field(
        default=None, gt=0, description="stop once the study holds this many finished trials "
        "(all machines together)")
    search_gpu_hours: float | None = Field(
        default=None, gt=0, description="stop once the trials' wall time x ranks x nodes, "
        "summed over the study, reaches this")
    search_usd: float | None = Field(
        default=None, gt=0, description="stop once the search itself has cost this much "
        "(GPU-hours x search_price_usd_per_gpu_hour)")
    search_price_usd_per_gpu_hour: float | None = Field(
        default=None, gt=0, description="what one rank-hour of this machine costs; default: "
        "the catalog's cheapest offer for this hardware")
    patience_trials: int | None = Field(
        default=None, gt=0, description="stop when this machine's Pareto front has not "
        "improved for this many finished trials")


class LauncherSpec(_Spec):
    """How a trial's processes start when a cluster scheduler starts them or a trial spans
    nodes. `argv` is a template: a list of strings, each filled field by field (`{num_nodes}`,
    `{gpus_per_node}`, `{rdzv_endpoint}`, ... see autotune/run/templates.py TEMPLATE_FIELDS), never
    a shell string; the element "{launcher_argv}" becomes the node launcher's whole argv
    (torchrun with a c10d rendezvous). E.g. Slurm, inside an allocation:
    `argv: [srun, "--nodes={num_nodes}", --ntasks-per-node=1, "{launcher_argv}"]`; per node
    over ssh (which hands its arguments to the remote shell as one string, so the launcher argv
    goes shell-quoted): `argv: [ssh, "{host}", "{launcher_argv_shell}"]` with `per_node: true`."""

    num_nodes: list[int] = Field(default_factory=lambda: [1], min_length=1,
                                 description="nodes per trial (choices; >1 needs `argv`)")
    argv: list[str] | None = Field(default=None, min_length=1, description="argv template")
    per_node: bool = Field(
        default=False, description="the controller starts `argv` once per node ({node_rank}, "
        "{host}), e.g. ssh; false: once in all (srun starts the nodes itself)")
    hosts: list[str] = Field(default_factory=list, description="node host names ({host})")
    rdzv_host: str | None = Field(
        default=None, description="rendezvous host, one of the nodes; default: hosts[0], "
        "else this machine's host name")

    @model_validator(mode="after")
    def _check(self) -> "LauncherSpec":
        from autotune.run.templates import TEMPLATE_FIELDS, check_remote_shell_template, template_fields

        if any(n <= 0 for n in self.num_nodes):
            raise ValueError("`num_nodes` choices must be positive")
        if max(self.num_nodes) > 1 and self.argv is None:
            raise ValueError("trials on more than one node need an `argv` template that starts "
                             "them, e.g. [srun, \"--nodes={num_nodes}\", \"{launcher_argv}\"]")
        unknown = sorted(template_fields(self.argv or []) - set(TEMPLATE_FIELDS))
        if unknown:
            raise ValueError(f"unknown template field(s) {', '.join(unknown)}; known: "
                             f"{', '.join(TEMPLATE_FIELDS)}")
        check_remote_shell_template(self.argv or [])
        if self.per_node and self.hosts and len(self.hosts) < max(self.num_nodes):
            raise ValueError(f"{max(self.num_nodes)} nodes but only {len(self.hosts)} `hosts`")
        return self


class MemorySpec(_Spec):
    """The memory prescreen (autotune/search/calibration.py): configs predicted not to fit are not
    launched. The limit is the GPU's memory, or on CPU the host memory shared by the ranks;
    `limit_bytes_per_rank` sets a smaller one (e.g. to emulate a small device on CPU, where a
    trial measured above it then counts as out of memory)."""

    limit_bytes_per_rank: Annotated[int | None, BeforeValidator(bytes_from_text)] = Field(
        default=None, gt=0, description=(
            "Memory limit per rank, below the device's (or the host's share); a trial measured "
            "above it counts as out of memory. Bytes, or a size with its unit: '70 GiB', '75 GB', 7.5e10."))
    safety_margin: float | None = Field(
        default=None, ge=0, lt=1,
        description="fixed headroom: a config counts as fitting only under limit / (1 + margin). "
                    "Unset (the default): no fixed margin; the sweep weighs the calibrated model's own "
                    "errors on this hardware and probes what may fit (autotune/search/fit.py)")
    prescreen: bool = Field(default=True, description="false: launch every config, still calibrate")


class SweepSpec(_Spec):
    """A sweep: the workload and its target, the space searched on this machine, how each trial
    runs, the platforms priced, the budget, the memory prescreen, the launcher and the study."""

    workload: Workload = Field(default_factory=GPTWorkload, description=(
        "What is trained: the built-in GPT (kind gpt), a Hugging Face model (kind hf) or your "
        "own entry point (kind entry_point)."))
    seq_len: int = Field(default=128, gt=0, description="Tokens per sequence, in every trial and the long run.")
    target: TargetSpec = Field(default_factory=lambda: TargetSpec(tokens=DEFAULT_TOKENS), description=(
        "How much training the long run does: tokens, steps, epochs or a loss; the bill is to it."))
    batch: BatchPolicy = Field(default_factory=BatchPolicy, description="A fixed global batch, or none.")
    space: str | dict[str, Any] = Field(default="default", description=(
        "Search space: a shipped name, a YAML path, or the space itself, each dimension's "
        "choices (`{num_gpus: [1, 2], micro_batch_size: [1, 2, 4]}`; the others at one choice "
        "each, as in a file)."))
    trial: TrialSettings = Field(default_factory=TrialSettings, description="How each trial runs.")
    platforms: PlatformSpec = Field(default_factory=PlatformSpec, description="The catalog and offers priced.")
    budget: BudgetSpec = Field(default_factory=BudgetSpec, description=(
        "When the search stops, and what a config's long run may cost."))
    memory: MemorySpec = Field(default_factory=MemorySpec, description="The memory prescreen.")
    launcher: LauncherSpec = Field(default_factory=LauncherSpec, description=(
        "How trials start under a cluster scheduler or across nodes."))
    storage: str | None = Field(default=None, description=(
        "Optuna storage URL (sqlite, postgresql, mysql, a journal file); --storage, "
        "--storage-file and $AUTOTUNE_STORAGE win over it; default: sqlite:///autotune.db."))
    study: str = Field(default="default", description="Study name; also its runs folder's name.")
    seed: int = Field(default=0, description="Trial N runs with seed + N (weights and data).")
    source: str | None = Field(default=None, exclude=True, description="The file it came from.")

    @model_validator(mode="before")
    @classmethod
    def _no_objectives(cls, data):
        # `objectives` was accepted and ignored: a sweep always minimises hours and dollars to
        # the target together (the report's Pareto set). Said plainly rather than ignored.
        if isinstance(data, dict) and "objectives" in data:
            raise ValueError("`objectives` is not a spec field: a sweep always minimises hours and "
                             "dollars to the target together; remove it, and pick by one of them "
                             "with `autotune export --pick cheapest` or `--pick fastest`")
        return data

    @model_validator(mode="after")
    def _batch_over_nodes(self) -> "SweepSpec":
        # A fixed global batch is met over every node's ranks (micro x accumulation x ranks).
        gb = self.batch.global_batch_samples
        bad = [n for n in self.launcher.num_nodes if gb is not None and gb % n]
        if bad:
            raise ValueError(f"batch.global_batch_samples {gb} cannot be split evenly over "
                             f"launcher.num_nodes {bad}: use a global batch that each node count "
                             "divides, or drop those node counts")
        return self

    @model_validator(mode="after")
    def _seq_len_fits_gpt(self) -> "SweepSpec":
        # Every trial of the built-in GPT refuses a sequence longer than its learned positions
        # (trials/workloads/build.py): said once here instead of in every trial of a budget. A
        # Hugging Face model's own limit is checked at the sweep's start (trials/preflight.py).
        if isinstance(self.workload, GPTWorkload):
            longest = self.workload.resolved_shape().max_seq_len
            if self.seq_len > longest:
                what = ("workload.shape" if self.workload.shape is not None
                        else f"GPT preset '{self.workload.preset}'")
                raise ValueError(f"seq_len {self.seq_len} is longer than {what} takes (max_seq_len "
                                 f"{longest}): set seq_len to at most {longest}, or give "
                                 "workload.shape with a larger max_seq_len")
        return self

    @field_validator("space", mode="before")
    @classmethod
    def _space_kind(cls, v: Any) -> Any:
        # One message for what a space may be, not one per member of the union.
        if not isinstance(v, (str, dict)):
            raise ValueError("give a shipped space's name, a YAML file's path, or a mapping of "
                             "each dimension's choices, e.g. {num_gpus: [1, 2], micro_batch_size: [1, 2, 4]}")
        if isinstance(v, dict) and not v:
            raise ValueError("the inline space lists no dimension: list the choices of at least "
                             "one, e.g. {micro_batch_size: [1, 2, 4]}")
        return v

    @field_validator("study")
    @classmethod
    def _safe_study(cls, v: str) -> str:
        from autotune.names import study_name

        return study_name(v)

    def with_overrides(self, **updates) -> "SweepSpec":
        """This spec with command-line overrides (dotted names: `budget.trials`), validated by
        the same rules as the spec file: a flag can no more set `--max-gpu-hours 0` or a bad
        study name than the file can. None means "not given"."""
        return self._overridden(updates, False)

    def with_flags(self, given: dict[str, tuple[str, Any]]) -> "SweepSpec":
        """As `with_overrides`, for a command's flags: `given` maps each dotted field to (the
        flag that sets it, its value); an error names the flag the user typed and its value,
        not the spec's field ("--max-gpu-hours 0.0: must be greater than 0")."""
        return self._overridden({k: v for k, (_, v) in given.items()}, False,
                                flags={k: flag for k, (flag, _) in given.items()})

    def with_keyword_overrides(self, **updates) -> "SweepSpec":
        """As `with_overrides`, for a Python call's keywords (`budget__trials` given, passed
        dotted): its errors name them as the caller wrote them."""
        return self._overridden(updates, True)

    def _overridden(self, updates: dict[str, Any], _keywords: bool,
                    flags: dict[str, str] | None = None) -> "SweepSpec":
        data = self.model_dump(mode="json", exclude_none=False)
        where, shown = ("keyword", "__") if _keywords else ("command line", ".")
        for dotted, value in updates.items():
            if value is None:
                continue
            node = data
            *parents, leaf = dotted.split(".")
            for i, part in enumerate(parents):
                node = node.setdefault(part, {})
                if not isinstance(node, dict):  # `study__name`: the study is a value, not a section
                    raise UserError(f"{where} {dotted.replace('.', shown)}: `{'.'.join(parents[:i + 1])}` is a "
                                    "value of the spec, not a section with fields",
                                    fix="set it directly (docs/spec_reference.md lists every section and field)")
            node[leaf] = value
        try:
            spec = SweepSpec.model_validate(data)
        except ValidationError as exc:
            if flags:
                raise _flag_error(exc, updates, flags) from None
            raise UserError(format_validation_error(where, exc, SweepSpec),
                            fix=f"correct the {'keyword' if _keywords else 'option'} "
                                f"({_flags_shown(updates, exc, shown)})") from None
        spec.source = self.source
        return spec


def _flag_error(exc: ValidationError, updates: dict[str, Any], flags: dict[str, str]) -> UserError:
    """The first error on a value a flag set, as the flag and value the user typed and what is
    wrong in words (plain_message); else the spec's own error."""
    from autotune.run.redact import redact_url

    for err in exc.errors():
        dotted = ".".join(str(p) for p in err.get("loc", ()))
        if dotted in flags:
            value = updates[dotted]
            shown = repr(redact_url(value)) if isinstance(value, str) else (
                f"{value:g}" if isinstance(value, float) else value)
            msg = plain_message(str(err.get("msg", "invalid")))
            return UserError(f"{flags[dotted]} {shown}: {msg}",
                             fix=f"give {flags[dotted]} a value as `{dotted}` takes in a spec (docs/spec_reference.md)")
    return UserError(format_validation_error("command line", exc, SweepSpec),
                     fix=f"correct the option ({_flags_shown(updates, exc)})")


def _flags_shown(updates: dict[str, Any], exc: ValidationError, dot: str = ".") -> str:
    """The options an error names: those the validation failed on (all given, if it failed
    elsewhere), each value as a terminal may show it: a storage URL's password masked."""
    from autotune.run.redact import redact_url

    failed = {".".join(str(p) for p in err.get("loc", ())) for err in exc.errors()}
    given = {k: v for k, v in updates.items() if v is not None}
    named = {k: v for k, v in given.items() if k in failed} or given
    return ", ".join(f"{k.replace('.', dot)}={(redact_url(v) if isinstance(v, str) else v)!r}"
                     for k, v in named.items())


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a spec file; relative paths in it are resolved against its folder."""
    data = load_yaml_file(path, "spec")
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(path, exc, SweepSpec),
                        fix="correct the field as described (every field and its default: "
                            "docs/spec_reference.md; an example: README, 'Usage')") from None
    spec = resolve_relative_paths(spec, Path(path).resolve().parent)
    spec.source = str(path)
    return spec


def resolve_relative_paths(spec: SweepSpec, base: Path) -> SweepSpec:
    """Every path a spec names, made absolute against `base` (the spec file's folder).

    A trial runs inside its own folder, so a relative `config_path: llama.json` beside the
    spec would otherwise be looked for there. Covers the HF config, the entry point's
    `python_path` (the spec's folder is added to it, so `my_model:build` beside the spec
    imports), a space or catalog given as a file, and SQLite / journal storage files."""
    from autotune.contract import EntryPointWorkload, HFWorkload

    def absolute(p: str) -> str:
        return str(p) if Path(p).is_absolute() else str((base / p).resolve())

    updates: dict = {}
    wl = spec.workload
    if isinstance(wl, HFWorkload) and wl.config_path:
        updates["workload"] = wl.model_copy(update={"config_path": absolute(wl.config_path)})
    elif isinstance(wl, EntryPointWorkload):
        folders = [absolute(f) for f in wl.python_path]
        if str(base) not in folders:
            folders.append(str(base))
        updates["workload"] = wl.model_copy(update={"python_path": folders})
    if isinstance(spec.space, str) and Path(spec.space).suffix in (".yaml", ".yml"):
        updates["space"] = absolute(spec.space)
    if spec.platforms.catalog:
        updates["platforms"] = spec.platforms.model_copy(
            update={"catalog": absolute(spec.platforms.catalog)})
    if spec.storage:
        updates["storage"] = _absolute_storage(spec.storage, absolute)
    return spec.model_copy(update=updates)


def _absolute_storage(url: str, absolute) -> str:
    """sqlite:///rel.db and journal files relative to the spec; other URLs as given."""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        db = url[len("sqlite:///"):]
        if db and db != ":memory:" and "?" not in db:
            return "sqlite:///" + absolute(db)
        return url
    if url.startswith("journal://"):
        path = url[len("journal://"):]
        # A user:password@ part is refused as written when the storage opens: not made a path.
        return url if path.startswith("/") or "@" in path.split("/", 1)[0] else "journal://" + absolute(path)
    if url.endswith(".log") and "://" not in url:
        return absolute(url)
    return url


def default_spec() -> SweepSpec:
    """The built-in example: the 0.7M-parameter `tiny` GPT on this machine, 1e9 tokens to target."""
    return SweepSpec()
