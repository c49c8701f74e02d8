"""The priors of the memory fit model (autotune/search/calibration.py PRIOR_SD_RUN and
PRIOR_SD_MODEL), computed from committed raw results: how a config's peak varies between runs,
and how far the calibrated prediction was from the measured peak on configs it had not seen.

    .venv/bin/python scripts/bench_fit_priors.py --md-out benchmarks/sections/fit_priors.md

Run-to-run: every ground truth's configs with two or more measured peaks (sd of log peak).
Model error on CPU: benchmarks/results/memory.json's leave-one-out predictions; on GPU: the
H200 sweep's calibrated predictions (benchmarks/results/gpu_check.json, `sweep_predicted_bytes`,
made before each trial from the trials before it) against the NVML device peak, and leave-one-out
predictions over the H200 ground truth's configs (benchmarks/results/truth_h200_pool.json: the
shipped calibration fitted on every other config, as the sweep fits it) against the peak the
prescreen's limit is about (autotune.search.calibration.measured_peak_bytes).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, shown_path  # noqa: E402

from autotune.contract import DeviceKind  # noqa: E402
from autotune.search.calibration import PRIOR_SD_MODEL, PRIOR_SD_RUN  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
TRUTHS = [ROOT / "benchmarks" / "search_ground_truth.json", RESULTS / "truth_ds_pool.json",
          RESULTS / "truth_big_pool.json", RESULTS / "truth_mem_pool.json"]


def _medians(spreads: list[dict], widest: bool) -> str:
    """The truths' median run-to-run sd: the widest one's (`file` median), or the others' range."""
    top = max(spreads, key=lambda s: s["median"])
    if widest:
        return f"`{top['file']}` {top['median']:.3f}"
    rest = [s["median"] for s in spreads if s is not top]
    return f"{min(rest):.3f} to {max(rest):.3f}"


def run_spread(path: Path) -> dict | None:
    """sd of log peak between runs of one config, over a truth's configs."""
    if not path.is_file():
        return None
    sds = []
    for entry in json.loads(path.read_text())["entries"].values():
        logs = [math.log(max(r["memory"]["host_rss_peak_bytes"])) for r in entry["results"]
                if (r.get("memory") or {}).get("host_rss_peak_bytes")]
        if len(logs) > 1:
            sds.append(statistics.stdev(logs))
    if not sds:
        return None
    sds.sort()
    return {"file": shown_path(path), "configs": len(sds), "median": statistics.median(sds),
            "p90": sds[int(0.9 * (len(sds) - 1))], "max": sds[-1]}


def cpu_model_errors() -> dict:
    d = json.loads((RESULTS / "memory.json").read_text())
    errs = [math.log(c["measured_bytes"] / c["loo_bytes"]) for c in d["configs"]
            if c.get("loo_bytes") and c.get("measured_bytes")]
    return {"n": len(errs), "rms": math.sqrt(statistics.fmean(e * e for e in errs)),
            "max_abs": max(abs(e) for e in errs), "date": d["context"].get("date_utc")}


def gpu_model_errors() -> dict:
    d = json.loads((RESULTS / "gpu_check.json").read_text())
    predicted = [t for t in d["trials"] if t.get("sweep_predicted_bytes") and t.get("nvml_peak_bytes")]
    # A prediction before its engine had a calibration point is the analytic lower bound, not
    # the calibrated model: counted apart (the prescreen treats it as a bound, not an estimate).
    bounds = [t for t in predicted if "analytic lower bound" in (t.get("sweep_predicted_basis") or "")]
    errs = [math.log(t["nvml_peak_bytes"] / t["sweep_predicted_bytes"]) for t in predicted if t not in bounds]
    return {"n": len(errs), "rms": math.sqrt(statistics.fmean(e * e for e in errs)) if errs else None,
            "bounds": [t["trial"] for t in bounds],
            "max_abs": max((abs(e) for e in errs), default=None), "date": d["context"].get("date_utc"),
            "machine": d["context"].get("machine")}


def truth_model_errors(path: Path) -> dict | None:
    """Leave-one-out calibrated predictions over a GPU truth's measured configs, and how far the
    analytic figure (the prescreen's lower bound before any calibration) was from each peak."""
    from autotune.contract import HardwareFingerprint, TrialConfig, TrialResult
    from autotune.search.calibration import CalibrationPoint, MemoryGuard, fit_calibration, measured_peak_bytes

    if not path.is_file():
        return None
    rows = []
    for entry in json.loads(path.read_text())["entries"].values():
        cfg = TrialConfig.model_validate(entry["config"])
        for raw in entry["results"]:
            result = TrialResult.model_validate(raw)
            peak, _ = measured_peak_bytes(result)
            if result.ok and peak:
                hw = HardwareFingerprint.model_validate(raw["hardware"])
                verdict = MemoryGuard(hw).predict(cfg)  # no fit: the analytic figure
                rows.append((CalibrationPoint(verdict.predicted_bytes, peak, verdict.engine, len(rows),
                                              cfg.num_gpus * cfg.num_nodes), hw.key()))
    if len(rows) < 3:
        return None
    errs, analytic = [], []
    for i, (p, hw_key) in enumerate(rows):
        fit = fit_calibration([q for j, (q, _) in enumerate(rows) if j != i], hw_key)
        errs.append(math.log(p.measured_bytes / fit.predict(p.analytic_bytes, p.engine, p.ranks)[0]))
        analytic.append(math.log(p.measured_bytes / p.analytic_bytes))
    return {"file": shown_path(path), "n": len(errs), "rms": math.sqrt(statistics.fmean(e * e for e in errs)),
            "max_abs": max(abs(e) for e in errs), "analytic_over_n": sum(a < 0 for a in analytic),
            "analytic_over_max": -min(analytic)}


def render(spreads: list[dict], cpu: dict, gpu: dict, h200: dict | None = None) -> str:
    lines = ["### Memory: how peaks vary between runs, and how far the calibrated model errs", "",
             "The fit model (`autotune/search/fit.py`) weighs a config's chance to fit the limit "
             "with two spreads, each a prior until the study's own trials replace it. "
             "Generated by `scripts/bench_fit_priors.py` from the committed raw results.", "",
             "| ground truth | configs with 2+ runs | sd of log peak between runs: median | p90 | max |",
             "|---|---|---|---|---|"]
    for s in spreads:
        lines.append(f"| `{s['file']}` | {s['configs']} | {s['median']:.3f} | {s['p90']:.3f} | {s['max']:.3f} |")
    lines += ["", f"Calibrated prediction against the measured peak, on configs the fit had not seen "
              f"(root mean square of log error): CPU {cpu['rms']:.3f} over {cpu['n']} leave-one-out "
              f"predictions (max {cpu['max_abs']:.3f}; `benchmarks/results/memory.json`, {cpu['date']}); "
              + (f"GPU {gpu['rms']:.3f} over {gpu['n']} calibrated predictions of the H200 sweep "
                 f"(max {gpu['max_abs']:.3f}; `benchmarks/results/gpu_check.json`, {gpu['date']}; "
                 f"left out as analytic lower bounds, predicted before their engine had a calibration "
                 f"point: {', '.join(gpu['bounds']) or 'none'})."
                 if gpu["rms"] is not None else "GPU: not measured.")
              + (f" On the H200 ground truth (`{h200['file']}`), leave-one-out over its {h200['n']} "
                 f"measured configs: {h200['rms']:.3f} (max {h200['max_abs']:.3f}). There the analytic "
                 f"figure, which the prescreen takes for a lower bound before any calibration, was over "
                 f"the measured peak in {h200['analytic_over_n']} of {h200['n']} configs, by at most "
                 f"{h200['analytic_over_max']:.3f} (log)." if h200 else ""), "",
              f"Priors in the code: run-to-run sd {PRIOR_SD_RUN[DeviceKind.cpu]} (CPU) / "
              f"{PRIOR_SD_RUN[DeviceKind.cuda]} (GPU: an allocator's peak repeats; not measured here, "
              f"an assumption); model error sd {PRIOR_SD_MODEL[DeviceKind.cpu]} (CPU) / "
              f"{PRIOR_SD_MODEL[DeviceKind.cuda]} (GPU), each weighted as 2 points. The CPU run-to-run "
              f"prior is above the typical config's spread in the truths above but one (medians "
              f"{_medians(spreads, widest=False)}) and near that of the widest, {_medians(spreads, widest=True)}, "
              "whose pooled workers mix engines: a study learns its own from its repeats.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--md-out", type=Path, default=None)
    args = ap.parse_args(argv)
    spreads = [s for s in (run_spread(p) for p in TRUTHS) if s]
    md = render(spreads, cpu_model_errors(), gpu_model_errors(), truth_model_errors(RESULTS / "truth_h200_pool.json"))
    if args.md_out:
        args.md_out.write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
