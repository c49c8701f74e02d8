"""Summarise a gpu_check run: per trial, measured vs predicted memory (allocator and NVML),
tokens/s and MFU; one JSON summary and a markdown report.

    python scripts/gpu_check_summary.py --runs OUT/runs --out OUT [--extra OUT/extra]

Reads every trial folder (config.json + result.json) under --runs and --extra; torch-free.
Predicted memory is autotune.estimate.memory's analytic figure (no calibrated framework
overhead), so "measured - predicted" is what the analytic model does not count. MFU is the
worker's when it computed one, else computed here from the catalog's dense peak for the GPU
and precision (and labelled so); None where no peak is known (never guessed).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import fmt_bytes, markdown_table, run_context  # noqa: E402

from autotune.contract import TrialConfig, TrialResult  # noqa: E402


def catalog_peak_flops(device_name: str, precision: str) -> tuple[float | None, str]:
    try:
        from autotune.pricing.load import load_catalog

        cat = load_catalog(None)
        for key, gpu in cat.gpus.items():
            names = {key.lower(), *(a.lower() for a in gpu.aliases)}
            if device_name.lower() in names or any(a and a in device_name.lower() for a in names
                                                    if len(a) > 3):
                peak = gpu.peak_flops("bf16" if precision == "fp8" and not gpu.peak_flops("fp8")
                                      else precision)
                return peak, f"catalog {key} dense {precision} peak ({gpu.source})"
    except Exception as exc:  # noqa: BLE001 - the summary still reports what it has
        return None, f"catalog lookup failed: {type(exc).__name__}: {exc}"
    return None, f"no catalog GPU matches '{device_name}'"


def predicted(cfg: TrialConfig) -> dict | None:
    try:
        from autotune.estimate.compute import model_from_gpt_shape
        from autotune.estimate.memory import MemoryConfig, estimate_memory
    except ImportError:
        return None
    if cfg.workload.kind != "gpt":
        return None
    est = estimate_memory(model_from_gpt_shape(cfg.workload.resolved_shape()),
                          MemoryConfig.from_trial_config(cfg))
    return {"total_bytes": est.total_bytes, "breakdown": est.as_dict()}


def summarise_trial(folder: Path) -> dict | None:
    cfg_path, res_path = folder / "config.json", folder / "result.json"
    if not (cfg_path.is_file() and res_path.is_file()):
        return None
    cfg, r = TrialConfig.read(cfg_path), TrialResult.read(res_path)
    m = r.memory
    pred = predicted(cfg)
    alloc = max(m.allocator_allocated_peak_bytes) if m.allocator_allocated_peak_bytes else None
    reserved = max(m.allocator_reserved_peak_bytes) if m.allocator_reserved_peak_bytes else None
    nvml = max(m.nvml_device_peak_bytes) if m.nvml_device_peak_bytes else None
    mfu, mfu_basis = r.mfu, "worker (device_peak_flops given)" if r.mfu is not None else None
    if mfu is None and r.ok and r.flops_per_token and r.tokens_per_s and r.hardware.device_kind.value == "cuda":
        peak, basis = catalog_peak_flops(r.hardware.device_name, cfg.precision.value)
        if peak:
            mfu = r.tokens_per_s * r.flops_per_token / (r.world_size * peak)
            mfu_basis = f"computed by gpu_check: {basis}"
        else:
            mfu_basis = basis
    return {
        "trial": folder.name, "status": r.status.value, "error": r.error,
        "config": {k: cfg.model_dump(mode="json")[k] for k in (
            "num_gpus", "micro_batch_size", "grad_accum_steps", "precision", "checkpointing",
            "zero_stage", "offload", "seq_len", "launcher", "fsdp")},
        "tokens_per_s": r.tokens_per_s, "step_time_median_s": r.step_time_median_s,
        "step_time_cv": r.step_time_cv, "mfu": mfu, "mfu_basis": mfu_basis, "hfu": r.hfu,
        "allocator_peak_bytes": alloc, "allocator_reserved_peak_bytes": reserved,
        "nvml_peak_bytes": nvml, "host_rss_peak_bytes": r.peak_mem_bytes if alloc is None else None,
        "predicted_bytes": pred and pred["total_bytes"], "predicted": pred,
        "wall_s": r.wall_s, "phase_s": r.phase_s, "device": r.hardware.device_name,
        "notes": r.notes,
    }


def compare_long(trials: list[dict]) -> dict | None:
    """The long rerun (folder trial_long) against the sweep trial of the same config that it
    reran: tokens/s of each and their ratio; None when either is missing or failed."""
    long = next((t for t in trials if t["trial"] == "trial_long" and t["status"] == "ok"), None)
    if long is None:
        return None
    # Sweep trials are trial_NNNN; the direct trials carry names (trial_long, trial_fp8_zero0).
    same = [t for t in trials if re.fullmatch(r"trial_\d+", t["trial"]) and t["status"] == "ok"
            and t["config"] == long["config"]]
    if not same:
        return None
    short = max(same, key=lambda t: t["tokens_per_s"] or 0)
    return {"short_trial": short["trial"], "short_tokens_per_s": short["tokens_per_s"],
            "short_step_time_cv": short["step_time_cv"], "long_tokens_per_s": long["tokens_per_s"],
            "long_step_time_cv": long["step_time_cv"],
            "long_over_short": long["tokens_per_s"] / short["tokens_per_s"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, required=True, help="folder of trial folders")
    ap.add_argument("--extra", type=Path, default=None, help="more trial folders (direct trials)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--mode", default="gpu", help="gpu or dry-run (labels the report)")
    ap.add_argument("--started", type=float, default=None, help="epoch seconds the check began")
    args = ap.parse_args(argv)
    folders = sorted(p for p in args.runs.rglob("*") if (p / "config.json").is_file())
    if args.extra and args.extra.is_dir():
        folders += sorted(p for p in args.extra.rglob("*") if (p / "config.json").is_file())
    trials = [t for t in (summarise_trial(f) for f in folders) if t is not None]
    # The sweep's own prediction per trial (calibrated once the study has measured trials).
    report = args.out / "report.json"
    if report.is_file():
        try:
            by_dir = {Path(str(t.get("trial_dir") or "")).name: t
                      for t in json.loads(report.read_text()).get("trials", [])}
        except (ValueError, AttributeError):
            by_dir = {}
        for t in trials:
            r = by_dir.get(t["trial"], {})
            t["sweep_predicted_bytes"] = r.get("predicted_peak_mem_bytes")
            t["sweep_predicted_basis"] = r.get("predicted_basis")
    long_vs_short = compare_long(trials)
    ctx = run_context()
    import time

    doc = {"mode": args.mode, "context": ctx, "trials": trials,
           "elapsed_s": (time.time() - args.started) if args.started else None,
           "ok": sum(t["status"] == "ok" for t in trials), "total": len(trials),
           "long_vs_short": long_vs_short}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check_summary.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    md = render(doc)
    (args.out / "gpu_check_report.md").write_text(md + "\n")
    print(md)
    return 0 if trials else 1


def render(doc: dict) -> str:
    ctx = doc["context"]
    title = "GPU check" + (" (DRY RUN on CPU: tiny preset, no GPU figures)" if doc["mode"] != "gpu" else "")
    lines = [f"## {title}", "", f"- Run: {ctx['date_utc']}, commit `{ctx['git_commit']}`",
             f"- Machine: {ctx['machine']}"]
    if doc.get("elapsed_s"):
        lines.append(f"- Whole check took {doc['elapsed_s'] / 60:.1f} min")
    if ctx.get("load_warning"):
        lines.append(f"- **{ctx['load_warning']}**")
    lines += ["", f"{doc['ok']} of {doc['total']} trials ok. Memory per rank, peak: allocator = "
              "torch.cuda.max_memory_allocated (reserved in brackets); NVML = device used memory "
              "sampled during the trial (includes the CUDA context); predicted = "
              "autotune.estimate.memory, analytic, without framework overhead.", ""]
    rows = []
    for t in doc["trials"]:
        c = t["config"]
        cfg = (f"mb {c['micro_batch_size']}x{c['grad_accum_steps']}, {c['precision']}, ckpt "
               f"{c['checkpointing']}, ZeRO {c['zero_stage']}"
               + (f", FSDP2 {c['fsdp']}" if c.get("fsdp") not in (None, "none") else "")
               + (f" +{c['offload']}" if c.get("offload") not in (None, "none") else ""))
        alloc = fmt_bytes(t["allocator_peak_bytes"])
        if t["allocator_reserved_peak_bytes"]:
            alloc += f" ({fmt_bytes(t['allocator_reserved_peak_bytes'])})"
        if t["allocator_peak_bytes"] is None and t["host_rss_peak_bytes"]:
            alloc = f"host RSS {fmt_bytes(t['host_rss_peak_bytes'])}"
        err = None
        if t["predicted_bytes"] and t["allocator_peak_bytes"]:
            err = f"{(t['predicted_bytes'] - t['allocator_peak_bytes']) / t['allocator_peak_bytes']:+.0%}"
        rows.append([t["trial"], cfg, t["status"], t["tokens_per_s"],
                     None if t["mfu"] is None else f"{t['mfu']:.1%}", alloc, fmt_bytes(t["nvml_peak_bytes"]),
                     fmt_bytes(t["predicted_bytes"]), err,
                     fmt_bytes(t.get("sweep_predicted_bytes")) if t.get("sweep_predicted_bytes") else "n/a",
                     t["wall_s"]])
    lines.append(markdown_table(["trial", "config", "status", "tokens/s", "MFU", "allocator peak",
                                 "NVML peak", "predicted (analytic)", "analytic vs allocator",
                                 "sweep's prediction (calibrated)", "wall s"], rows))
    lvs = doc.get("long_vs_short")
    if lvs:
        lines += ["", f"Short trial vs long rerun of the same config: {lvs['short_trial']} "
                  f"{lvs['short_tokens_per_s']:,.0f} tok/s (CV {lvs['short_step_time_cv']:.1%}) vs "
                  f"{lvs['long_tokens_per_s']:,.0f} tok/s (CV {lvs['long_step_time_cv']:.1%}): "
                  f"long/short = {lvs['long_over_short']:.3f}"]
    pb = sorted({t["sweep_predicted_basis"] for t in doc["trials"] if t.get("sweep_predicted_basis")})
    if pb:
        lines += ["", "Sweep's prediction basis: " + "; ".join(pb)]
    bases = sorted({t["mfu_basis"] for t in doc["trials"] if t.get("mfu_basis")})
    if bases:
        lines += ["", "MFU basis: " + "; ".join(bases)]
    fails = [t for t in doc["trials"] if t["status"] != "ok"]
    if fails:
        lines += ["", "Failed trials:"] + [f"- {t['trial']}: {t['status']}: {(t['error'] or '')[:200]}"
                                           for t in fails]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
