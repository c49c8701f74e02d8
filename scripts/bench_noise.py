"""Run-to-run noise on this machine, and whether measuring rivals back to back helps.

    .venv/bin/python scripts/bench_noise.py --pairs 12          # measure, then analyse
    .venv/bin/python scripts/bench_noise.py --analyse-only       # the committed raw runs only

Two questions decide how the sweep re-measures its closest rivals (autotune.search.racing):
(1) How much do runs of one config differ, and (2) does a slow spell of the machine last
longer than a trial, so that two configs measured back to back share it and their *ratio* is
steadier than either? (1) and (2) from two sources: a dedicated experiment that measures pairs
of configs interleaved (A B A B ...; `--pairs` rounds per pair), and the benchmark ground truths
(benchmarks/results/truth_*.json: every config measured in shuffled rounds): each run's
residual (log tokens/s minus its config's mean log) against the residual of the run measured
just before it (a different config), by lag.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_truth  # noqa: E402
from bench_common import ROOT, add_output_args, context_lines, markdown_table, start_run, stdev_or_nan, write_outputs  # noqa: E402

RAW = ROOT / "benchmarks" / "results" / "noise_pairs.json"
# Pairs from the DeepSpeed-style space (2 ranks, fp32, seq 128): close rivals and a clear gap.
PAIRS = [
    ({"micro_batch_size": 16, "grad_accum_steps": 2, "zero_stage": 0},
     {"micro_batch_size": 8, "grad_accum_steps": 2, "zero_stage": 0}),
    ({"micro_batch_size": 16, "grad_accum_steps": 2, "zero_stage": 0},
     {"micro_batch_size": 16, "grad_accum_steps": 2, "zero_stage": 1}),
]


def _values(knobs: dict) -> dict:
    from autotune.contract import Checkpointing, Offload, Precision

    return dict(num_gpus=2, tp_degree=1, precision=Precision.fp32, checkpointing=Checkpointing.none,
                offload=Offload.none, **knobs)


def measure_pairs(args, log=print) -> dict:
    """Each pair measured `args.pairs` times as A, B (alternating which goes first)."""
    from autotune.contract import write_json_atomic
    from autotune.search.machine import MachineSpace

    ns = argparse.Namespace(preset="tiny", seq_len=128, global_batch=None,
                            space=ROOT / "benchmarks" / "search_space_ds.yaml", warmup_steps=2,
                            measure_steps=5, max_measure_steps=15, timeout_s=300.0)
    spec = bench_truth.make_spec(ns)
    ms = MachineSpace.for_spec(spec)
    runner = bench_truth.RUNNERS[args.runner]()
    raw = Path(args.raw)
    doc = json.loads(raw.read_text()) if raw.is_file() else {"runs": []}
    with tempfile.TemporaryDirectory(prefix="bench_noise_") as tmp:
        for p, (a, b) in enumerate(PAIRS):
            for i in range(args.pairs):
                for which, knobs in (("AB"[(i + j) % 2], (a, b)[(i + j) % 2]) for j in range(2)):
                    cfg = bench_truth.trial_config(_values(knobs), spec, ms, seed=0)
                    t0 = time.time()
                    r = runner(cfg, Path(tmp) / f"p{p}_{i}_{which}")
                    doc["runs"].append({"pair": p, "round": i, "which": which,
                                        "key": bench_truth.cfg_key(cfg), "started": t0,
                                        "tokens_per_s": r.tokens_per_s if r.ok else None,
                                        "wall_s": r.wall_s})
                    log(f"pair {p} round {i} {which}: {r.tokens_per_s or 0:,.0f} tok/s", flush=True)
                    write_json_atomic(raw, doc)
    return doc


def analyse_pairs(doc: dict) -> list[dict]:
    """Per pair: spread of log tokens/s of A and of B alone, of log(A/B) measured back to back
    (same round), and of log(A/B) across rounds (A of round i against B of round i + 3)."""
    out = []
    for p in sorted({r["pair"] for r in doc["runs"]}):
        runs = [r for r in doc["runs"] if r["pair"] == p and r["tokens_per_s"]]
        by_round: dict[int, dict[str, float]] = {}
        for r in runs:
            by_round.setdefault(r["round"], {})[r["which"]] = math.log(r["tokens_per_s"])
        rounds = sorted(i for i, d in by_round.items() if len(d) == 2)
        if len(rounds) < 4:
            continue
        la = [by_round[i]["A"] for i in rounds]
        lb = [by_round[i]["B"] for i in rounds]
        paired = [a - b for a, b in zip(la, lb)]
        apart = [la[k] - lb[(k + 3) % len(lb)] for k in range(len(la))]
        out.append({"pair": p, "a": runs[0]["key"] if runs[0]["which"] == "A" else
                    next(r["key"] for r in runs if r["which"] == "A"),
                    "b": next(r["key"] for r in runs if r["which"] == "B"), "rounds": len(rounds),
                    "sd_log_a": stdev_or_nan(la), "sd_log_b": stdev_or_nan(lb), "sd_log_ratio_paired": stdev_or_nan(paired),
                    "sd_log_ratio_apart": stdev_or_nan(apart),
                    "mean_ratio": math.exp(statistics.fmean(paired))})
    return out


def analyse_truth(path: Path, max_lag: int = 4) -> dict | None:
    """Residual autocorrelation by lag over the runs of a ground truth, in time order."""
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    seq = []
    for e in doc["entries"].values():
        logs = [math.log(r["tokens_per_s"]) for r in e["results"] if r.get("tokens_per_s")]
        if len(logs) < 2:
            continue
        mean = statistics.fmean(logs)
        for r, m in zip(e["results"], e.get("runs_meta") or []):
            if r.get("tokens_per_s") and m.get("started_utc"):
                seq.append((m["started_utc"], math.log(r["tokens_per_s"]) - mean, m.get("load1_before")))
    if len(seq) < 20:
        return None
    seq.sort()
    res = [s[1] for s in seq]
    mu = statistics.fmean(res)
    var = statistics.fmean([(x - mu) ** 2 for x in res])
    acf = {lag: statistics.fmean([(res[i] - mu) * (res[i + lag] - mu) for i in range(len(res) - lag)]) / var
           for lag in range(1, max_lag + 1)}
    loads = [s[2] for s in seq if s[2] is not None]
    return {"runs": len(res), "sd_residual": math.sqrt(var), "acf": acf,
            "load_median": statistics.median(loads) if loads else None}


def render(data: dict) -> str:
    lines = ["## Noise and pairing (`scripts/bench_noise.py`)", "", *context_lines(data["context"]), ""]
    lines += ["How much runs of one config differ on this machine, and whether two configs measured "
              "back to back share the machine's slow spells (then their ratio is steadier than "
              "either run, and re-measuring rivals as interleaved pairs separates them with fewer "
              "runs). Spreads are standard deviations of natural-log tokens/s (0.10 = about 10%).", ""]
    if data["pairs"]:
        lines.append(markdown_table(
            ["pair A / B", "rounds", "sd log A", "sd log B", "sd log(A/B), back to back",
             "sd log(A/B), 3 rounds apart", "A/B (back to back, mean)"],
            [[f"{p['a']} / {p['b']}", p["rounds"], p["sd_log_a"], p["sd_log_b"],
              p["sd_log_ratio_paired"], p["sd_log_ratio_apart"], p["mean_ratio"]] for p in data["pairs"]]))
        lines.append("")
    rows = [[name, t["runs"], t["sd_residual"], *[t["acf"][str(k)] if str(k) in t["acf"] else t["acf"][k]
                                                   for k in (1, 2, 3, 4)], t["load_median"]]
            for name, t in data["truth"].items() if t]
    if rows:
        lines += ["Ground truths (runs in time order; residual = log tokens/s minus the config's mean "
                  "log; autocorrelation of the residual with the run 1-4 trials earlier, a different "
                  "config):", "",
                  markdown_table(["ground truth", "runs", "sd residual", "lag 1", "lag 2", "lag 3",
                                  "lag 4", "median 1-min load"], rows), ""]
    lines.append(data["reading"])
    return "\n".join(lines)


def reading(pairs: list[dict], truth: dict) -> str:
    if not pairs:
        return "No interleaved pairs measured yet."
    gains = [p["sd_log_ratio_apart"] / p["sd_log_ratio_paired"] for p in pairs if p["sd_log_ratio_paired"] > 0]
    gain = statistics.median(gains)
    return (f"Reading: measured back to back, the ratio of two configs was {gain:.2g}x as steady as "
            f"the ratio of runs 3 rounds apart (median over {len(gains)} pairs; per pair "
            f"{', '.join(f'{g:.2g}x' for g in gains)}). The re-measuring race "
            "(autotune.search.racing) measures rivals back to back anyway (it costs nothing), and "
            "its model (autotune.search.estimates) learns from the study's own blocks how much two runs "
            "of a block share, starting from the prior that they share nothing: what this "
            "machine showed under other people's load, where spells are shorter than a trial.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=12, help="rounds per pair (A and B each)")
    ap.add_argument("--analyse-only", action="store_true", help="no new runs")
    ap.add_argument("--runner", default="launcher", choices=sorted(bench_truth.RUNNERS))
    ap.add_argument("--raw", type=Path, default=RAW, help="the interleaved runs (JSON, topped up)")
    add_output_args(ap)
    args = ap.parse_args(argv)
    ctx, _ = start_run()
    doc = json.loads(args.raw.read_text()) if args.raw.is_file() else {"runs": []}
    if not args.analyse_only:
        doc = measure_pairs(args)
    pairs = analyse_pairs(doc)
    truth = {p.stem: analyse_truth(p) for p in sorted((ROOT / "benchmarks" / "results").glob("truth_*.json"))}
    data = {"context": ctx, "pairs": pairs, "truth": truth, "reading": reading(pairs, truth)}
    write_outputs(args.json_out, args.md_out, data, render(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
