"""`autotune trial`: one trial outside any study, the small run before the long one.

    autotune trial config.json [--json]        # into the next autotune_runs/single/trial_NNNN
    autotune trial config.json --out my_trial/ # new, empty or an earlier trial's (--force: keep other files;
                                               # a file of yours named as a trial file is refused)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from autotune.cli.common import console, write_stdout
from autotune.errors import UserError


def register(app: typer.Typer) -> None:
    app.command()(trial)


def trial(
    config_file: Path = typer.Argument(..., help="TrialConfig JSON"),
    out: Optional[Path] = typer.Option(None, help="trial folder: new, empty, or holding only an earlier "
                                       "trial's files (default: the next autotune_runs/single/trial_NNNN)"),
    as_json: bool = typer.Option(False, "--json", help="print the TrialResult JSON"),
    force: bool = typer.Option(False, "--force", help="run in an --out folder that holds other files "
                               "(they are kept; the trial's own files are replaced)"),
) -> None:
    """Run one trial outside any study (the small run before the long one)."""
    from pydantic import ValidationError

    from autotune.contract import HFWorkload, TrialConfig
    from autotune.errors import format_validation_error, read_text_file

    # A folder, a missing or non-UTF-8 file: UserError.
    text = read_text_file(config_file, "config", fix="check the path (a TrialConfig JSON: `autotune export` "
                          "writes one as trial_config.json; a trial's folder holds one as config.json)")
    try:
        cfg = TrialConfig.model_validate_json(text)
    except ValidationError as exc:
        raise UserError(format_validation_error(config_file, exc, TrialConfig),
                        fix="see docs/spec_reference.md, section TrialConfig, for the fields "
                            "(`autotune export` writes one as trial_config.json)") from None
    cfg = _paths_from(cfg, config_file.resolve().parent)
    hf_file = cfg.workload.config_file() if isinstance(cfg.workload, HFWorkload) else None
    if hf_file is not None:  # checked here, before a trial folder is made and a worker started
        from autotune.run.preflight import check_hf_file

        read_text_file(hf_file, "Hugging Face config", fix="point workload.config_path at a local config.json "
                       "(or the folder holding one; a relative path is read from the trial config's folder); "
                       "trials never download")
        check_hf_file(hf_file, f"{config_file}: ")  # readable JSON with a model_type
    _refuse_what_cannot_run_here(cfg, config_file)
    crowded = _crowded_cores(cfg)
    if crowded:
        console(stderr=True).print(f"warning: {crowded}", soft_wrap=True, markup=False)
    result, out = _run_stoppable(cfg, out, force)
    if as_json:
        write_stdout(result.model_dump_json(indent=2) + "\n")
    else:
        from autotune.format import fmt_bytes

        c = console()
        # The error is the worker's text (gloo's quotes "[/path/pair.cc:553]"), not markup.
        c.print(f"status: {result.status.value}" + (f" ({result.error_type}: {result.error})" if not result.ok else ""),
                markup=False)
        if result.ok:
            r, obs = result, result.observations
            c.print(f"tokens/s: {r.tokens_per_s:,.0f} ({r.tokens_per_s_per_rank:,.0f} per rank, "
                    f"{r.world_size} ranks)  samples/s: {r.samples_per_s:,.1f}")
            c.print(f"step: median {r.step_time_median_s:.4f}s p90 {r.step_time_p90_s:.4f}s "
                    f"cv {r.step_time_cv:.2f} over {r.measured_steps} steps after {r.warmup_steps} warm-up")
            pct = lambda v: "n/a" if v is None else f"{v:.1%}"  # noqa: E731
            c.print(f"MFU {pct(r.mfu)}  HFU {pct(r.hfu)}  FLOPs/token {r.flops_per_token or 0:.3g}"
                    f"  params {r.params or 0:,}")
            c.print(f"peak memory: {fmt_bytes(r.peak_mem_bytes)} ({r.peak_mem_source.value})")
            if "activation_saved_bytes" in obs:
                c.print(f"activations saved for backward: {fmt_bytes(obs['activation_saved_bytes'])} "
                        f"per micro-step ({obs.get('activation_dtype')})")
            gns = "not measured" if r.gradient_noise_scale is None else f"{r.gradient_noise_scale:,.1f} samples"
            c.print(f"gradient noise scale: {gns}")
            c.print(f"final loss: {r.final_loss:.4f}  folder: {out}", markup=False)
            for note in r.notes + ([crowded] if crowded else []):
                c.print(f"  note: {note}", markup=False)
    if not result.ok:
        raise typer.Exit(1)


def _paths_from(cfg, base: Path):
    """The workload's relative paths read from the config file's folder `base`, as a spec's are
    read from the spec's (autotune.spec.resolve_relative_paths), and `base` on an entry point's
    python_path, so that a module beside the config imports: the worker runs in the trial
    folder, where a relative path names another file."""
    from autotune.contract import EntryPointWorkload, HFWorkload

    def absolute(p: str) -> str:
        return str(p) if Path(p).is_absolute() else str((base / p).resolve())

    wl = cfg.workload
    if isinstance(wl, HFWorkload) and wl.config_path:
        wl = wl.model_copy(update={"config_path": absolute(wl.config_path)})
    elif isinstance(wl, EntryPointWorkload):
        folders = [absolute(f) for f in wl.python_path]
        wl = wl.model_copy(update={"python_path": folders + [str(base)] * (str(base) not in folders)})
    return cfg.model_copy(update={"workload": wl})


def _refuse_what_cannot_run_here(cfg, config_file: Path) -> None:
    """A trial this machine cannot run at all (a GPU asked of a CPU-only machine, fp8 on CPU
    ranks) is refused before a trial folder is made and a worker started, which would end it
    `unsupported` (exit 1) and leave the folder behind. What the worker alone can tell (this
    GPU's compute capability, an op it lacks) it still says itself."""
    from autotune.contract import DeviceKind, Precision
    from autotune.run.hardware import local_hardware

    if cfg.device is DeviceKind.cuda and local_hardware().device_kind is not DeviceKind.cuda:
        raise UserError(f"{config_file}: `device` is cuda, but this machine has no visible CUDA GPU "
                        "(NVML finds none, or CUDA_VISIBLE_DEVICES or AUTOTUNE_FORCE_CPU hides them)",
                        fix='set "device": "cpu" to run it on CPU ranks, or run it on a GPU machine')
    if cfg.device is DeviceKind.cpu and cfg.precision is Precision.fp8:
        raise UserError(f"{config_file}: `precision` fp8 on CPU ranks: fp8 matmuls need an Ada/Hopper GPU "
                        "(compute capability >= 8.9)",
                        fix='set "precision": "bf16" (or "fp32") for a CPU trial, or "device": "cuda" on such a GPU')


def _crowded_cores(cfg) -> str | None:
    """On CPU, more threads than usable cores: the ranks share cores, so the trial measures
    them crowded (the sweep never offers such a config; `trial` runs what it is given)."""
    from autotune.contract import DeviceKind
    from autotune.contract.hardware import usable_cpu_count

    threads, cores = cfg.num_gpus * cfg.threads_per_rank, usable_cpu_count()
    if cfg.device is not DeviceKind.cpu or threads <= cores:
        return None
    return (f"{cfg.num_gpus} rank(s) x {cfg.threads_per_rank} thread(s) on {cores} usable core(s): the "
            f"ranks share cores, so its tokens/s is not what {threads} cores would run")


def _run_stoppable(cfg, out: Path | None, force: bool):
    """(result, folder): the trial in `out`, or the next autotune_runs/single/trial_NNNN. SIGTERM
    (kill, scancel) or SIGHUP ends the trial's processes and DeepSpeed's buffers with it, then
    exits 143 (SIGHUP: 129)."""
    from autotune.contract.trial_files import COMPILE_CACHE, TRIAL_NAMES, own_output
    from autotune.report.files import TRIAL, next_numbered_dir, note_written, prepare_out_dir
    from autotune.run.launch import run_trial
    from autotune.search.interrupt import Terminated, terminated_exit_code, termination_raises

    try:
        with termination_raises():
            if out is None:
                out = next_numbered_dir(Path("autotune_runs/single"), "trial_")
                result = run_trial(cfg, out)
            else:
                # A folder that cannot be written, or a file of the user's under a name the trial
                # writes (config.json, result.json, ...: replaced even with --force before), is refused.
                out = prepare_out_dir(out, force, names=TRIAL_NAMES, kind=TRIAL, reused=[COMPILE_CACHE])
                result = _run_in(cfg, out)
            # Recorded in the numbered folder too: without the record, `--out` naming that folder
            # later was refused as holding files "autotune did not write".
            note_written(out, [p.name for p in out.iterdir() if p.name in TRIAL_NAMES or own_output(p.name)],
                         kind=TRIAL)
            return result, out
    except Terminated as exc:
        console(stderr=True).print(f"stopped by {exc.signum.name}: the trial's processes were ended; "
                                   f"its folder: {out}", soft_wrap=True, markup=False)
        raise typer.Exit(terminated_exit_code()) from None


def _run_in(cfg, out: Path):
    """run_trial in the user's --out folder: an OSError about a path in it (the folder made
    read-only or removed since it was checked) is a UserError naming it; any other stays.

    A compiled config's Inductor cache goes into the folder too (unless TORCHINDUCTOR_CACHE_DIR
    names one): a study's trials share theirs beside their folders (trials/compile.py), which
    for a lone trial would be beside --out, in a folder of the user's."""
    from autotune.contract.trial_files import COMPILE_CACHE
    from autotune.paths import cannot_write
    from autotune.run.launch import run_trial

    try:
        if cfg.compile and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(out.resolve() / COMPILE_CACHE)  # the ranks inherit it
        return run_trial(cfg, out)
    except OSError as exc:
        names = [Path(f) for f in (exc.filename, exc.filename2) if isinstance(f, (str, Path))]
        if any(f == out or out in f.parents for f in names):
            raise cannot_write(out, exc, "--out") from None
        raise
