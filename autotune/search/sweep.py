"""Create or resume the Optuna study and run trials: suggest -> prescreen -> launch -> score.

    study = open_study("sqlite:///autotune.db", "default")
    summary = run_sweep(spec, study, n_trials=8, runs_dir=Path("autotune_runs/default"))

Objectives are (hours to target, dollars), both minimised. How each trial ended:
- ok: COMPLETE with its values; constraints (feasible, budget, deadline) set on every path
  through `trial.set_constraint` (Optuna 5 counts a trial without them as feasible).
- oom / unsupported / nan / timeout: PRUNED, with an infeasible constraint value, so the
  sampler learns where the boundary is (TPE counts pruned trials among the bad ones).
- crash, Ctrl-C, a controller that died: FAIL (not a property of the config); the study goes on.

Several machines, one study: every `autotune sweep` with the same storage and study name joins
it. Each trial records the machine (`hardware`: the key that keeps GPU types apart in scoring
and reports; `machine`: the full fingerprint) and where its processes run (`controller`,
`launch`), so a sweep that finds a RUNNING trial whose controller on this host is dead kills
its orphaned process group, fails it and re-queues it (`recover_dead_trials`); trials of dead
machines elsewhere are failed by the heartbeat (autotune/run/storage.py).

No config is measured twice on the same hardware: a trial first looks for a finished trial
with the same `config_key` (config without its seed, plus the hardware key) and reuses it
(values, attributes, constraints; `reused_from`). Otherwise it must win an atomic claim on
the key (`autotune.run.storage.claim`) before launching; a trial that loses waits for the winner
and reuses its result, or claims the next generation if the winner failed. Baselines are
enqueued once per machine kind under the same kind of claim, so two workers starting at
once do not enqueue them twice.

Sampler: TPE, multivariate + group (a small, conditional, mostly categorical space; GPSampler
would need torch in the controller and handles conditional spaces poorly), constant liar so
concurrent workers spread out, and a seed mixed with the process id so they do not propose
the same sequence. Local moves (`LocalMoves`): every second trial after the baselines, and
whenever TPE proposes a config already measured here (reused) or held back by the prescreen,
the sweep queues an untried neighbour of the best configs, so a sampler that has settled
keeps finding new configs near the best ones. `n_trials` counts launched
trials; a sweep stops early once every config of a listable space has been tried.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from autotune.contract import (
    DeviceKind,
    HardwareFingerprint,
    Launcher,
    Precision,
    TrialConfig,
    TrialResult,
    TrialStatus,
    write_json_atomic,
)
from autotune.errors import UserError
from autotune.run.launch import group_alive
from autotune.spec import SweepSpec
from autotune.run.storage import (  # noqa: F401 - redact_url and DEFAULT_STORAGE are re-exported
    DEFAULT_STORAGE,
    claim,
    claim_owner,
    open_storage,
    redact_url,
    user_study_names,
)

DIRECTIONS = ["minimize", "minimize"]  # hours to target, dollars
INFEASIBLE = 1.0
# Seconds between looks at the study while waiting for another worker's measurement.
WAIT_POLL_S = 1.0
# Attributes that describe this trial's own run; everything else is copied on reuse.
OWN_ATTRS = ("config", "config_key", "hardware", "machine", "controller", "launch", "claim",
             "retry_of", "baseline", "search_gpu_hours", "search_usd", "reused_from")


def open_study(storage_url: str | None, study_name: str, seed: int = 0, create: bool = True):
    """The study `study_name` in `storage_url` (created unless `create` is False)."""
    import optuna

    # Our own progress lines say how each trial ended; Optuna's per-trial warnings repeat them.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    # `group=True` and heartbeats are marked experimental; we rely on them knowingly.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    url = storage_url or DEFAULT_STORAGE
    storage = open_storage(url)
    sampler = make_sampler(seed)
    if not create:
        try:
            return optuna.load_study(study_name=study_name, storage=storage, sampler=sampler)
        except KeyError:
            names = user_study_names(storage)
            raise UserError(f"no study '{study_name}' in {redact_url(url)}",
                            fix=f"use one of: {', '.join(names) or '(none yet: run autotune sweep)'}") from None
    try:
        return optuna.create_study(study_name=study_name, storage=storage, sampler=sampler,
                                   directions=DIRECTIONS, load_if_exists=True)
    except ValueError as exc:  # an existing study of another kind (e.g. single-objective)
        raise UserError(f"study '{study_name}' in {redact_url(url)} is not an autotune study: {exc}",
                        fix="choose another --study name") from None


def make_sampler(seed: int, worker: int | None = None):
    """TPE for a sweep. Concurrent workers with one seed would propose the same sequence, so
    the worker's identity (default: the process id) is mixed into the seed."""
    import optuna

    worker = os.getpid() if worker is None else worker
    return optuna.samplers.TPESampler(multivariate=True, group=True, constant_liar=True,
                                      seed=(seed * 1_000_003 + worker) % 2**32,
                                      n_startup_trials=4)


@dataclass
class TrialOutcome:
    number: int
    config: TrialConfig
    result: TrialResult
    hours: float | None
    usd: float | None
    offer: str | None
    reused_from: int | None = None


def launcher_for(cfg_values: dict[str, Any], spec: SweepSpec) -> Launcher:
    if spec.trial.launcher is not None:
        return spec.trial.launcher
    return Launcher.deepspeed if cfg_values.get("zero_stage", 0) > 0 else Launcher.torchrun


class TrialCrashed(Exception):
    """A trial crashed (not a property of the config): recorded as FAIL, the study goes on."""


# ---------------------------------------------------------------------------------------
# Processes: who runs a trial, and whether they are still alive
# ---------------------------------------------------------------------------------------


def _start_ticks(pid: int) -> int | None:
    """Start time of a process (clock ticks since boot): tells a live pid from a reused one."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def process_alive(pid: int, start_ticks: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    now = _start_ticks(pid)
    return start_ticks is None or now is None or now == start_ticks


def trial_processes(pgid: int, trial_dir: str) -> list[int]:
    """Live processes of group `pgid` that belong to the trial (working directory inside its
    folder): a recycled group id of an unrelated program is never touched."""
    root = os.path.realpath(trial_dir)
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            if os.getpgid(pid) != pgid:
                continue
            cwd = os.path.realpath(os.readlink(f"/proc/{pid}/cwd"))
        except (OSError, ProcessLookupError):
            continue
        if cwd == root or cwd.startswith(root + os.sep):
            found.append(pid)
    return found


def kill_trial_processes(pgid: int, trial_dir: str, grace_s: float = 3.0) -> int:
    """SIGTERM, then SIGKILL, the trial's processes left in group `pgid`; how many there were."""
    pids = trial_processes(pgid, trial_dir)
    if not pids:
        return 0
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and trial_processes(pgid, trial_dir):
            time.sleep(0.1)
        if not trial_processes(pgid, trial_dir):
            break
    return len(pids)


def _controller_record() -> dict[str, Any]:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start_ticks": _start_ticks(pid)}


def recover_dead_trials(study, note: Callable[[str], None] | None = None) -> list[int]:
    """Fail (and re-queue) RUNNING trials whose controller on THIS host is dead, killing the
    processes they left behind; also kill leftovers of this host's trials already failed by a
    heartbeat. Trials of other hosts are the heartbeat's job. Returns the trial numbers failed."""
    import copy

    import optuna
    from optuna.trial import TrialState

    from autotune.run.storage import retry_callback

    host = socket.gethostname()
    storage = study._storage
    failed: list[int] = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.FAIL)):
        ctl, launch = t.user_attrs.get("controller"), t.user_attrs.get("launch") or {}
        if not ctl or ctl.get("host") != host:
            continue
        if t.state is TrialState.RUNNING and process_alive(ctl["pid"], ctl.get("start_ticks")):
            continue  # a live sweep on this machine runs it
        pgid = launch.get("pgid")
        if t.state is TrialState.FAIL and not (pgid and group_alive(int(pgid))):
            continue
        killed = 0
        if pgid and t.user_attrs.get("trial_dir"):
            killed = kill_trial_processes(int(pgid), t.user_attrs["trial_dir"])
        if t.state is TrialState.FAIL:
            if killed and note:  # failed by a heartbeat elsewhere; its processes lived on here
                note(f"trial {t.number}: killed {killed} leftover process(es)")
            continue
        why = (f"controller pid {ctl['pid']} on {host} died during the trial; a later sweep "
               f"failed it and killed {killed} leftover process(es)")
        storage.set_trial_user_attr(t._trial_id, "error", why)
        storage.set_trial_user_attr(t._trial_id, "leftovers_killed", killed)
        try:
            if not storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another sweep got there first
        failed.append(t.number)
        if note:
            note(f"trial {t.number}: {why}; re-queued")
        retry_callback()(study, copy.deepcopy(storage.get_trial(t._trial_id)))
    return failed


# ---------------------------------------------------------------------------------------
# Measured once per hardware: config keys, claims, reuse
# ---------------------------------------------------------------------------------------


def config_key(cfg: TrialConfig, hardware_key: str) -> str:
    """Identity of a measurement: the config without its seed, on one kind of hardware."""
    # The device peak is bookkeeping for MFU (from the catalog), not part of what is measured.
    doc = cfg.model_dump(mode="json", exclude={"seed", "device_peak_flops"})
    text = json.dumps({"config": doc, "hardware": hardware_key}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _finished_same_key(study, key: str, number: int):
    from optuna.trial import TrialState

    # A prescreened trial measured nothing: a later proposal that the (by then calibrated)
    # prescreen lets through runs for real instead of reusing it.
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
            if t.user_attrs.get("config_key") == key and t.number != number
            and t.user_attrs.get("status") not in (None, "prescreened")]
    return min(done, key=lambda t: t.number, default=None)


def wait_for_measurement(trial, key: str, note: Callable[[str], None] | None = None):
    """None: this trial holds the claim on `key` and must measure. Otherwise the finished
    trial (COMPLETE or PRUNED) whose measurement of the same config it reuses."""
    import optuna
    from optuna.trial import TrialState

    study = trial.study
    storage = study._storage
    gen, waited_for_owner_s, said = 0, 0.0, False
    while True:
        src = _finished_same_key(study, key, trial.number)
        if src is not None:
            return src
        name = f"{study.study_name}/{key}/{gen}"
        if claim(storage, name, {"trial": trial.number, **_controller_record()}):
            trial.set_user_attr("claim", name)
            return None
        owner = claim_owner(storage, name) or {}
        if "trial" not in owner:
            # The winner has not written its name yet, or died in between: give it a moment.
            waited_for_owner_s += WAIT_POLL_S
            if waited_for_owner_s > 30:
                gen += 1
            time.sleep(WAIT_POLL_S)
            continue
        owner_id = storage.get_trial_id_from_study_id_trial_number(study._study_id, owner["trial"])
        state = storage.get_trial(owner_id).state
        if state in (TrialState.COMPLETE, TrialState.PRUNED):
            return storage.get_trial(owner_id)
        if state is TrialState.FAIL:
            gen += 1  # the measurement failed (crash, dead machine): the next claim may retry it
            continue
        if not said and note:
            note(f"trial {trial.number}: same config as running trial {owner['trial']}; waiting "
                 "to reuse its measurement")
            said = True
        recover_dead_trials(study)
        optuna.storages.fail_stale_trials(study)
        time.sleep(WAIT_POLL_S)


def reuse_measurement(trial, src) -> tuple[TrialResult, dict[str, Any] | None]:
    """Copy a finished trial's measurement into `trial`: attributes and constraints."""
    for k, v in src.user_attrs.items():
        if k not in OWN_ATTRS:
            trial.set_user_attr(k, v)
    trial.set_user_attr("reused_from", src.number)
    trial.set_user_attr("search_gpu_hours", 0.0)
    trial.set_user_attr("search_usd", 0.0)
    for name, value in src.constraints.items():
        trial.set_constraint(name, value)
    ua = src.user_attrs
    result = TrialResult(status=TrialStatus(ua["status"]), tokens_per_s=ua.get("tokens_per_s"),
                         peak_mem_bytes=ua.get("peak_mem_bytes"), wall_s=ua.get("wall_s"),
                         step_time_median_s=ua.get("step_time_median_s"),
                         final_loss=ua.get("final_loss"), mfu=ua.get("mfu"),
                         error=(ua.get("error") or None))
    return result, ua.get("score")


# ---------------------------------------------------------------------------------------
# The objective
# ---------------------------------------------------------------------------------------


def set_constraints(trial, spec: SweepSpec, feasible: bool, usd: float | None = None,
                    hours: float | None = None) -> None:
    """The same constraint names on every path, so the sampler compares like with like."""
    trial.set_constraint("feasible", 0.0 if feasible else INFEASIBLE)
    if spec.budget.max_usd is not None:
        trial.set_constraint("max_usd", usd - spec.budget.max_usd if usd is not None else 0.0)
    if spec.budget.deadline_hours is not None:
        trial.set_constraint("deadline_hours",
                             hours - spec.budget.deadline_hours if hours is not None else 0.0)


def rank_hour_price_usd(spec: SweepSpec, cfg: TrialConfig, catalog) -> float | None:
    """What one rank-hour of this machine costs the search (None: not priced)."""
    if spec.budget.search_price_usd_per_gpu_hour is not None:
        return spec.budget.search_price_usd_per_gpu_hour
    from autotune.search.score import device_type_key

    try:
        prices = [o.price_usd_per_gpu_hour for o in catalog.offers_for(device_type_key(cfg))
                  if getattr(o, "price_usd_per_gpu_hour", None) is not None]
    except Exception:  # unknown GPU type in the catalog: the search is simply not priced
        return None
    if not prices:
        return None
    # On CPU a rank is `threads_per_rank` cores, each billed as a vCPU.
    return min(prices) * (cfg.threads_per_rank if cfg.device.value == "cpu" else 1)


@dataclass
class MachineSpace:
    """What this machine offers of the study's space (see autotune/search/space.py)."""

    hardware: HardwareFingerprint
    restricted: Any
    full: Any
    # Dense peak FLOP/s of this machine's GPU per precision, from the catalog (MFU in every
    # trial); empty on CPU or for a GPU the catalog does not know (MFU then says why not).
    peak_flops: dict[str, float] = field(default_factory=dict)

    @classmethod
    def for_spec(cls, spec: SweepSpec) -> "MachineSpace":
        from autotune.run.hardware import local_hardware
        from autotune.search.space import capabilities_for, load_space, restrict, unrestricted

        hw = local_hardware()
        space = load_space(spec.space)
        n_heads = spec.workload.resolved_shape().n_heads if spec.workload.kind == "gpt" else None
        return cls(hw, restrict(space, capabilities_for(hw, spec.trial.threads_per_rank), n_heads),
                   unrestricted(space, n_heads), device_peak_flops(hw, spec.platforms.catalog))


def device_peak_flops(hw: HardwareFingerprint, catalog_path: str | None) -> dict[str, float]:
    """{precision: dense peak FLOP/s} of the detected GPU, from the catalog; {} on CPU."""
    from autotune.contract import DeviceKind, Precision
    from autotune.pricing.catalog import load_catalog

    if hw.device_kind is not DeviceKind.cuda or not hw.device_name:
        return {}
    catalog = load_catalog(catalog_path)
    key = catalog.match_device(hw.device_name)
    if key is None:
        return {}
    gpu = catalog.gpus[key]
    peaks = {p.value: gpu.peak_flops(p.value) for p in Precision}
    return {p: v for p, v in peaks.items() if v}


def trial_config_for(values: dict[str, Any], spec: SweepSpec, ms: MachineSpace, num_nodes: int,
                     seed: int) -> TrialConfig:
    """The TrialConfig a trial with these suggested values launches on this machine."""
    return TrialConfig(
        workload=spec.workload, seq_len=spec.seq_len, **values, num_nodes=num_nodes,
        launcher=launcher_for(values, spec), device=ms.hardware.device_kind,
        warmup_steps=spec.trial.warmup_steps, measure_steps=spec.trial.measure_steps,
        max_measure_steps=spec.trial.max_measure_steps, timeout_s=spec.trial.timeout_s,
        threads_per_rank=spec.trial.threads_per_rank, seed=seed,
        device_peak_flops=ms.peak_flops.get(str(getattr(values.get("precision"), "value",
                                                         values.get("precision")))),
    )


def make_objective(spec: SweepSpec, runs_dir: Path, on_trial: Callable[[TrialOutcome], None] | None = None,
                   note: Callable[[str], None] | None = None, machine: MachineSpace | None = None):
    """The Optuna objective for this spec on this machine."""
    import optuna

    from autotune.run.launch import run_trial, template_argv_builder
    from autotune.pricing.catalog import load_catalog
    from autotune.search.score import device_type_key, score_trial
    from autotune.search.space import suggest

    ms = machine or MachineSpace.for_spec(spec)
    hw = ms.hardware
    catalog = load_catalog(spec.platforms.catalog)
    ls = spec.launcher
    builder = template_argv_builder(ls.argv, per_node=ls.per_node, hosts=ls.hosts,
                                    rdzv_host=ls.rdzv_host, job_name=f"autotune-{spec.study}")
    from autotune.search.calibration import MemoryGuard

    guard = MemoryGuard(hw, spec.memory.limit_bytes_per_rank, spec.memory.safety_margin,
                        enabled=spec.memory.prescreen)

    def objective(trial: "optuna.Trial"):
        trial.set_user_attr("controller", _controller_record())
        retry_of = trial.study._storage.get_trial_system_attrs(trial._trial_id).get("failed_trial")
        if retry_of is not None:
            trial.set_user_attr("retry_of", retry_of)
        values = suggest(trial, ms.restricted, spec.batch.global_batch_samples, ms.full)
        num_nodes = ls.num_nodes[0] if len(ls.num_nodes) == 1 else \
            trial.suggest_categorical("num_nodes", ls.num_nodes)
        cfg = trial_config_for(values, spec, ms, num_nodes, seed=spec.seed + trial.number)
        trial_dir = runs_dir / f"trial_{trial.number:04d}"
        key = config_key(cfg, hw.key())
        trial.set_user_attr("config", cfg.model_dump(mode="json"))
        trial.set_user_attr("hardware", hw.key())
        trial.set_user_attr("machine", hw.model_dump(mode="json"))
        trial.set_user_attr("trial_dir", str(trial_dir.resolve()))
        trial.set_user_attr("config_key", key)
        # Memory prescreen: a config predicted not to fit is not launched (PRUNED, infeasible).
        verdict = guard.prescreen(trial, cfg)
        if not verdict.launch:
            result = guard.record_prescreened(trial, verdict)
            if on_trial is not None:
                on_trial(TrialOutcome(trial.number, cfg, result, None, None, None))
            set_constraints(trial, spec, feasible=False)
            raise optuna.TrialPruned(result.error)
        src = wait_for_measurement(trial, key, note)
        if src is not None:
            result, score_doc = reuse_measurement(trial, src)
            if on_trial is not None:
                on_trial(TrialOutcome(trial.number, cfg, result, score_doc and score_doc.get("hours"),
                                      score_doc and score_doc.get("usd"),
                                      score_doc and score_doc.get("offer"), reused_from=src.number))
            if src.state.name == "COMPLETE":
                return tuple(src.values)
            raise optuna.TrialPruned(f"reused trial {src.number}: {src.user_attrs.get('status')}")

        def on_start(pid: int) -> None:
            # The launcher leads its own process group (pgid = pid): recorded so that a later
            # sweep can kill what this one leaves behind if it dies.
            launch = {"pgid": pid, "start_ticks": _start_ticks(pid)}
            trial.set_user_attr("launch", launch)
            write_json_atomic(trial_dir / "launch.json", {**launch, **_controller_record()})

        try:
            result = run_trial(cfg, trial_dir, on_start=on_start, argv_builder=builder)
        except KeyboardInterrupt:
            trial.set_user_attr("status", "interrupted")
            trial.set_user_attr("error", "interrupted (Ctrl-C); its processes were killed")
            set_constraints(trial, spec, feasible=False)
            raise
        result = guard.after_trial(trial, cfg, verdict, result)  # calibration point; emulated limit
        record_result(trial, result)
        gpu_hours = (result.wall_s or 0.0) / 3600.0 * cfg.world_size
        price = rank_hour_price_usd(spec, cfg, catalog)
        trial.set_user_attr("search_gpu_hours", gpu_hours)
        trial.set_user_attr("search_usd", None if price is None else gpu_hours * price)
        score = score_trial(result, cfg, spec, catalog, device_type_key(cfg)) if result.ok else None
        outcome = TrialOutcome(trial.number, cfg, result, score and score.hours, score and score.usd,
                               score and score.offer)
        if score is not None:
            trial.set_user_attr("score", score.as_dict())
        if on_trial is not None:
            on_trial(outcome)
        if result.status is TrialStatus.crash:
            set_constraints(trial, spec, feasible=False)
            raise TrialCrashed(f"trial {trial.number} crashed: {result.error_type}: {result.error}")
        if not result.ok or score is None:
            set_constraints(trial, spec, feasible=False)
            raise optuna.TrialPruned(f"{result.status.value}: {result.error}")
        set_constraints(trial, spec, feasible=True, usd=score.usd, hours=score.hours)
        return score.hours, score.usd

    return objective


def record_result(trial: Any, result: TrialResult) -> None:
    """The summary of a result that reports need, as user attributes (JSON-able)."""
    trial.set_user_attr("status", result.status.value)
    trial.set_user_attr("tokens_per_s", result.tokens_per_s)
    trial.set_user_attr("peak_mem_bytes", result.peak_mem_bytes)
    trial.set_user_attr("peak_mem_source", result.peak_mem_source.value)
    trial.set_user_attr("step_time_median_s", result.step_time_median_s)
    trial.set_user_attr("mfu", result.mfu)
    trial.set_user_attr("final_loss", result.final_loss)
    trial.set_user_attr("wall_s", result.wall_s)
    trial.set_user_attr("world_size", result.world_size)
    if not result.ok:
        trial.set_user_attr("error", f"{result.error_type or ''}: {result.error or ''}"[:1000])


# ---------------------------------------------------------------------------------------
# Baselines
# ---------------------------------------------------------------------------------------


def baseline_params(ms: MachineSpace, global_batch_samples: int | None) -> list[dict[str, Any]]:
    """A few sensible first configs on this machine, as Optuna params: all its ranks at a
    middle micro-batch, one rank at the same, and all ranks with full checkpointing at the
    largest micro-batch (the memory-saving corner). bf16 on GPUs that have it; fp32 on CPU,
    where bf16 runs without native kernels (measured ~15x slower on this project's CPU
    machines: docs/benchmarks.md), so a bf16 baseline there would be three wasted trials."""
    from autotune.search.space import params_for

    rs = ms.restricted
    on_gpu = ms.hardware.device_kind is DeviceKind.cuda
    prefer = Precision.bf16 if on_gpu else Precision.fp32
    prec = prefer if prefer in rs.precision else rs.precision[0]
    micros = sorted(rs.micro_batch_size)
    base = dict(tp_degree=1, zero_stage=min(rs.zero_stage), offload="none",
                grad_accum_steps=min(rs.grad_accum_steps), precision=prec, checkpointing="none")
    wanted = [
        {**base, "num_gpus": max(rs.num_gpus), "micro_batch_size": micros[len(micros) // 2]},
        {**base, "num_gpus": min(rs.num_gpus), "micro_batch_size": micros[len(micros) // 2]},
        {**base, "num_gpus": max(rs.num_gpus), "micro_batch_size": micros[-1],
         "checkpointing": "full"},
    ]
    out: list[dict[str, Any]] = []
    for w in wanted:
        params, _ = params_for(w, rs, global_batch_samples, ms.full)
        if params not in out:
            out.append(params)
    return out


def enqueue_baselines(study, spec: SweepSpec, ms: MachineSpace) -> int:
    """Enqueue the baselines once per study and machine kind (an atomic claim): 0 if another
    worker already did."""
    baselines = baseline_params(ms, spec.batch.global_batch_samples)
    sig = hashlib.sha256(json.dumps(baselines, sort_keys=True, default=str).encode()).hexdigest()[:16]
    if not claim(study._storage, f"{study.study_name}/baselines/{sig}", _controller_record()):
        return 0
    for params in baselines:
        study.enqueue_trial(params, user_attrs={"baseline": True})
    return len(baselines)


# ---------------------------------------------------------------------------------------
# Search budget and stopping
# ---------------------------------------------------------------------------------------


def _dominates_or_equal(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b))


def trials_since_front_improved(trials, hardware_key: str) -> int:
    """Finished trials of this hardware since its Pareto front last gained a point."""
    from optuna.trial import TrialState

    mine = [t for t in trials if t.state.is_finished() and t.user_attrs.get("hardware") == hardware_key]
    mine.sort(key=lambda t: (t.datetime_complete or t.datetime_start or 0, t.number))
    front: list[tuple[float, ...]] = []
    since = 0
    for t in mine:
        feasible = all(v <= 0 for v in t.constraints.values())
        if t.state is TrialState.COMPLETE and t.values and feasible:
            v = tuple(t.values)
            if not any(_dominates_or_equal(f, v) for f in front):
                front = [f for f in front if not _dominates_or_equal(v, f)] + [v]
                since = 0
                continue
        since += 1
    return since


@dataclass
class SearchBudget:
    """When the search stops, beyond this invocation's `n_trials`: total finished trials in
    the study, GPU-hours or dollars spent on trials (all machines), or a Pareto front (this
    machine's hardware) that has not improved for `patience_trials` trials."""

    spec: SweepSpec
    hardware_key: str

    def exhausted(self, study) -> str | None:
        from optuna.trial import TrialState

        b = self.spec.budget
        trials = study.get_trials(deepcopy=False)
        finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)]
        if b.total_trials is not None and len(finished) >= b.total_trials:
            return f"the study holds {len(finished)} finished trials (budget.total_trials = {b.total_trials})"
        gpu_hours = sum(t.user_attrs.get("search_gpu_hours") or 0.0 for t in trials)
        if b.search_gpu_hours is not None and gpu_hours >= b.search_gpu_hours:
            return (f"trials have used {gpu_hours:.4g} GPU-hours (budget.search_gpu_hours = "
                    f"{b.search_gpu_hours:g})")
        usd = sum(t.user_attrs.get("search_usd") or 0.0 for t in trials)
        if b.search_usd is not None and usd >= b.search_usd:
            return f"trials have cost ${usd:.4g} (budget.search_usd = ${b.search_usd:g})"
        if b.patience_trials is not None:
            since = trials_since_front_improved(trials, self.hardware_key)
            if since >= b.patience_trials:
                return (f"the Pareto front on {self.hardware_key} has not improved for {since} "
                        f"trials (budget.patience_trials = {b.patience_trials})")
        return None


# ---------------------------------------------------------------------------------------
# Local moves: what to measure when the sampler repeats itself
# ---------------------------------------------------------------------------------------

# Proposals in a row that launch nothing (reused, prescreened) before a sweep gives up on a
# space it cannot list (autotune.search.space.enumerate_configs caps the listing).
MAX_IDLE_PROPOSALS = 50
# After the baselines, every second launched trial is a local move and the others are TPE's:
# TPE models the whole space, the moves try what is next to the best configs measured (the
# alternation measured best of every 1, 2, 3 or only-on-repeat in scripts/bench_search.py).
LOCAL_MOVE_EVERY = 2
ENUMERATE_LIMIT = 5000


def was_launched(t) -> bool:
    """The trial ran its own measurement: not reused from another, not held back."""
    return t.user_attrs.get("status") not in (None, "prescreened") and "reused_from" not in t.user_attrs


def ranked_by_front(trials, hardware_key: str) -> list:
    """This hardware's feasible complete trials (one per config), Pareto front first, then the
    front of the rest, and so on; cheapest first within a front."""
    from optuna.trial import TrialState

    done: dict[Any, Any] = {}
    for t in trials:
        if (t.state is TrialState.COMPLETE and t.values and t.user_attrs.get("hardware") == hardware_key
                and all(v <= 0 for v in t.constraints.values())):
            done.setdefault(t.user_attrs.get("config_key"), t)
    rest, ranked = list(done.values()), []
    while rest:
        front = [t for t in rest if not any(_dominates_or_equal(tuple(o.values), tuple(t.values))
                                            and tuple(o.values) != tuple(t.values) for o in rest)]
        ranked += sorted(front, key=lambda t: (t.values[-1], t.values[0], t.number))
        rest = [t for t in rest if t not in front]
    return ranked


class LocalMoves:
    """When the sampler proposes a config this hardware has measured already (its model has
    settled on a region it knows) or one the memory prescreen holds back (TPE proposes those
    again and again: they carry no objective values to learn from), the sweep queues an
    untried neighbour (one dimension moved to the adjacent choice: `autotune.search.space.neighbours`,
    in a seeded random order) of the best config that has one left: the Pareto front first,
    then the next front. A single measurement is noisy (docs/benchmarks.md: runs of one config
    differ by 10-30% on a shared CPU), so the runner-up's neighbours matter as much as the
    incumbent's. TPE keeps re-proposing its incumbent on a small space; without this, those
    proposals are spent measuring nothing (docs/benchmarks.md). The sweep also queues a move
    after every `LOCAL_MOVE_EVERY`-th launched trial past the baselines. On a space small
    enough to list, it also tells when every config has been tried."""

    def __init__(self, spec: SweepSpec, ms: MachineSpace, seed: int):
        import random

        self.spec, self.ms, self.hw_key = spec, ms, ms.hardware.key()
        self.rng = random.Random(seed)
        self.queued: set[str] = set()
        self._all_keys: set[str] = set()
        self._listed: bool | None = None

    def _key(self, values: dict[str, Any], num_nodes: int) -> str:
        return config_key(trial_config_for(values, self.spec, self.ms, num_nodes, seed=0), self.hw_key)

    def tried(self, trials) -> set[str]:
        return {t.user_attrs["config_key"] for t in trials
                if t.user_attrs.get("hardware") == self.hw_key and "config_key" in t.user_attrs}

    def enqueue_next(self, study) -> bool:
        """Queue one untried neighbour of the front; False when the front has none left."""
        from autotune.search.space import neighbours

        trials = study.get_trials(deepcopy=False)
        tried = self.tried(trials) | self.queued
        gb, rs, full = self.spec.batch.global_batch_samples, self.ms.restricted, self.ms.full
        for t in ranked_by_front(trials, self.hw_key):
            cfg = t.user_attrs["config"]
            nodes = int(cfg.get("num_nodes", 1))
            candidates = neighbours(cfg, rs, gb, full)
            self.rng.shuffle(candidates)
            for params, values in candidates:
                key = self._key(values, nodes)
                if key in tried:
                    continue
                if len(self.spec.launcher.num_nodes) > 1:
                    params = {**params, "num_nodes": nodes}
                study.enqueue_trial(params, user_attrs={"local_move_from": t.number})
                self.queued.add(key)
                return True
        return False

    def exhausted(self, study) -> int | None:
        """The number of configs when every config this machine can run has been tried; None
        otherwise, or when the space is too large to list."""
        from autotune.search.space import enumerate_configs

        if self._listed is None:
            listed = enumerate_configs(self.ms.restricted, self.spec.batch.global_batch_samples,
                                       self.ms.full, limit=ENUMERATE_LIMIT)
            self._listed = listed is not None
            self._all_keys = {self._key(v, n) for _, v in listed or [] for n in self.spec.launcher.num_nodes}
        if not self._listed or not self._all_keys <= self.tried(study.get_trials(deepcopy=False)):
            return None
        return len(self._all_keys)


@dataclass
class SweepSummary:
    trials_run: int = 0  # launched here: each ran its own measurement
    proposals: int = 0  # Optuna trials here, including reused and prescreened ones
    stop_reason: str | None = None
    interrupted: bool = False
    recovered: list[int] = field(default_factory=list)
    baselines_enqueued: int = 0


class _Interrupt:
    """First Ctrl-C: finish the running trial, then stop. Second: fail it now (its process
    group is killed by autotune.run.launch) and stop; the study stays consistent either way."""

    def __init__(self, note: Callable[[str], None] | None):
        self.requested = False
        self.note = note
        self.previous: Any = None

    def __enter__(self) -> "_Interrupt":
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        if self.note:
            self.note("Ctrl-C: finishing the running trial, then stopping (Ctrl-C again to stop now)")

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


def run_sweep(spec: SweepSpec, study, n_trials: int, runs_dir: Path,
              on_trial: Callable[[TrialOutcome], None] | None = None,
              note: Callable[[str], None] | None = None) -> SweepSummary:
    """Run up to `n_trials` trials of `study` on this machine, within the spec's budget."""
    ms = MachineSpace.for_spec(spec)
    summary = SweepSummary()
    summary.recovered = recover_dead_trials(study, note)
    budget = SearchBudget(spec, ms.hardware.key())
    if spec.budget.search_usd is not None:
        from autotune.pricing.catalog import load_catalog

        probe = TrialConfig(workload=spec.workload, device=ms.hardware.device_kind,
                            threads_per_rank=spec.trial.threads_per_rank)
        if rank_hour_price_usd(spec, probe, load_catalog(spec.platforms.catalog)) is None:
            raise UserError("budget.search_usd is set but this machine's hardware has no price "
                            "in the catalog", fix="set budget.search_price_usd_per_gpu_hour")
    summary.stop_reason = budget.exhausted(study)
    if summary.stop_reason:
        return summary
    summary.baselines_enqueued = enqueue_baselines(study, spec, ms)
    objective = make_objective(spec, runs_dir, on_trial, note, machine=ms)

    moves = LocalMoves(spec, ms, seed=spec.seed)

    with _Interrupt(note) as interrupt:
        idle = 0  # proposals in a row that launched nothing

        def after_trial(st, frozen) -> None:
            nonlocal idle
            summary.proposals += 1
            launched = was_launched(frozen)
            if launched:
                summary.trials_run += 1
                idle = 0
            else:
                idle += 1
            if interrupt.requested:
                summary.stop_reason, summary.interrupted = "interrupted (Ctrl-C)", True
                st.stop()
                return
            reason = budget.exhausted(st)
            if reason is None and summary.trials_run >= n_trials:
                st.stop()
                return
            if reason is None and idle:
                n_all = moves.exhausted(st)
                if n_all is not None:
                    reason = f"every config this machine can run has been tried ({n_all} configs)"
                elif idle >= MAX_IDLE_PROPOSALS:
                    reason = (f"{idle} proposals in a row were configs already tried: the sampler "
                              "has settled; widen the search space to search further")
            if reason:
                summary.stop_reason = reason
                st.stop()
                return
            # Going on: a local move when the proposal measured nothing (a repeat, or held
            # back), and every LOCAL_MOVE_EVERY-th launched trial past the baselines.
            if not launched or (summary.trials_run > summary.baselines_enqueued
                                and summary.trials_run % LOCAL_MOVE_EVERY == 0):
                moves.enqueue_next(st)

        try:
            # n_trials counts launched trials (after_trial stops the study): a reused or
            # prescreened proposal measures nothing and costs nothing.
            study.optimize(objective, n_trials=None, catch=(TrialCrashed,), callbacks=[after_trial])
        except KeyboardInterrupt:
            summary.stop_reason, summary.interrupted = "interrupted (Ctrl-C twice): the running trial was failed", True
    return summary
