"""Pooled against fresh-launcher trials at the scale users train: the 389.5M GPT's leading
configs (the gpt390 bench: 2 CPU ranks, fp32, AdamW, micro-batch 4), each run both ways,
alternated in one run.

    .venv/bin/python scripts/bench_pool_scale.py            # 3 rounds x 3 configs x 2 runners, ~22 min
    .venv/bin/python scripts/bench_pool_scale.py --add-rounds     # 3 more rounds, added to the raw file
    .venv/bin/python scripts/bench_pool_scale.py --summary-only   # the section from its raw file

Why: the gpt390 ground truth is measured with the worker pool (what `autotune sweep` runs),
while a sweep under a CPU memory limit runs every trial in fresh ranks (a pooled rank's RSS
holds what earlier trials' libraries kept: autotune.search.objective.pooled_peaks_differ).
The real check of issue 28 (scripts/bench_real_limit.py --case gpt390) judges such a sweep's
fresh-rank runs by the pooled truth. scripts/bench_pool.py measured the pool's fidelity on the
tiny GPT only; this measures it where a trial's model states are gigabytes per rank. Each
round runs every config once per runner, back to back, the runner that goes first alternating,
so that a slow spell of the machine hits both alike; the pool stays up across rounds, as the
truth's did. The committed truth's median tokens/s of the same configs is shown beside them:
its runs are from other days, so their ratio to these is the machine's drift between sessions.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_search as bs  # noqa: E402
import bench_truth as bt  # noqa: E402
from bench_common import ROOT, context_lines, markdown_table, start_run, write_outputs  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
RAW = RESULTS / "pool_scale.json"
SECTION = ROOT / "benchmarks" / "sections" / "pool_scale.md"
# The gpt390 truth's leading configs under its 6 GiB limit and without one (docs/benchmarks.md,
# the gpt390 search section): FSDP2, ZeRO-3 with the optimizer offloaded, ZeRO-2.
CONFIGS = {"FSDP2 full_shard": "g2-tp1-mb4-acc1-fp32-ckpt:none-z0-off:none-fsdp:full_shard",
           "ZeRO-3, optimizer offloaded": "g2-tp1-mb4-acc1-fp32-ckpt:none-z3-off:optimizer",
           "ZeRO-2": "g2-tp1-mb4-acc1-fp32-ckpt:none-z2-off:none"}
RUNNERS = ("fresh", "pool")


def measure(rounds: int, first_round: int = 0, log=print) -> list[dict]:
    """Every config once per runner per round, back to back; returns one record per run."""
    _, _, spec, ms, configs = bs.bench_space("gpt390", None, None, 900.0, False)
    by_key = {bt.config_key(v): v for _, v in configs}
    runners = {"fresh": bt.RUNNERS["launcher"](), "pool": bt.RUNNERS["pool"]()}
    runs = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench_pool_scale_") as tmp:
            for r in range(first_round, first_round + rounds):
                for i, (name, key) in enumerate(CONFIGS.items()):
                    order = RUNNERS if (r + i) % 2 == 0 else tuple(reversed(RUNNERS))
                    for runner in order:
                        cfg = bt.trial_config(by_key[key], spec, ms, seed=spec.seed)
                        load1_before = bt._load1()
                        t0 = time.monotonic()
                        res = runners[runner](cfg, Path(tmp) / f"r{r}_{i}_{runner}")
                        if not res.ok:
                            raise SystemExit(f"{runner} trial of {key} failed: {res.status.value}: "
                                             f"{res.error}\n{(res.log_tail or '')[-3000:]}")
                        rec = {"round": r, "config": name, "key": key, "runner": runner,
                               "tokens_per_s": res.tokens_per_s, "step_times_s": res.step_times_s,
                               "peak_bytes": bt.emulated_peak(res), "wall_s": round(time.monotonic() - t0, 1),
                               "load1_before": load1_before}
                        runs.append(rec)
                        log(json.dumps(rec), flush=True)
    finally:
        runners["pool"].close()
    return runs


def truth_tokens_per_s() -> dict[str, float]:
    """The committed gpt390 truth's median tokens/s of each config here (runner: pool)."""
    b, _, spec, _, configs = bs.bench_space("gpt390", None, None, 900.0, False)
    table = bt.build_table(bt.load_cache(Path(b["cache"]), None), configs, spec, None)
    return {key: table[key].tokens_per_s for key in CONFIGS.values()}


def summarize(runs: list[dict], truth: dict[str, float]) -> dict:
    per_config = {}
    for name, key in CONFIGS.items():
        row: dict = {"key": key, "truth_tokens_per_s": truth.get(key)}
        for runner in RUNNERS:
            tps = [x["tokens_per_s"] for x in runs if x["config"] == name and x["runner"] == runner]
            peaks = [x["peak_bytes"] for x in runs if x["config"] == name and x["runner"] == runner]
            row[runner] = {"tokens_per_s": tps, "median": statistics.median(tps),
                           "spread": max(tps) / min(tps) - 1, "peak_bytes_median": statistics.median(peaks)}
        row["tokens_per_s_ratio"] = row["pool"]["median"] / row["fresh"]["median"]
        # Back-to-back pairs (one round's two runs): a slow spell of the machine hits both, so
        # their ratio is the runner's effect plus the noise of two runs, without the drift.
        by_round: dict = {}
        for x in runs:
            if x["config"] == name:
                by_round.setdefault(x["round"], {})[x["runner"]] = x["tokens_per_s"]
        pairs = [v["pool"] / v["fresh"] for _, v in sorted(by_round.items()) if len(v) == 2]
        row["paired_ratios"] = pairs
        row["paired_ratio_median"] = statistics.median(pairs)
        row["paired_ratios_straddle_1"] = min(pairs) <= 1.0 <= max(pairs)
        row["peak_ratio"] = row["pool"]["peak_bytes_median"] / row["fresh"]["peak_bytes_median"]
        # Within the noise: the pooled median lies inside the range of the fresh runs.
        row["pool_within_fresh_range"] = min(row["fresh"]["tokens_per_s"]) <= row["pool"]["median"] <= \
            max(row["fresh"]["tokens_per_s"])
        per_config[name] = row
    order = {r: sorted(CONFIGS, key=lambda n: -per_config[n][r]["median"]) for r in RUNNERS}
    return {"per_config": per_config, "rank_fresh": order["fresh"], "rank_pool": order["pool"],
            "same_ranking": order["fresh"] == order["pool"], "between_configs": between_configs(runs)}


def between_configs(runs: list[dict]) -> list[dict]:
    """What a pick compares is configs, so what matters is whether the runner shifts one config
    against another: per round, (pooled/fresh of A) / (pooled/fresh of B), A's pairs against B's
    measured minutes apart in the same round. Above 1: the pool favours A over B."""
    ratio: dict = {}
    for x in runs:
        ratio.setdefault((x["config"], x["round"]), {})[x["runner"]] = x["tokens_per_s"]
    out = []
    names = list(CONFIGS)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            rounds = [r for (n, r) in sorted(ratio) if n == a
                      and len(ratio[(a, r)]) == 2 and len(ratio.get((b, r), {})) == 2]
            per_round = [(ratio[(a, r)]["pool"] / ratio[(a, r)]["fresh"])
                         / (ratio[(b, r)]["pool"] / ratio[(b, r)]["fresh"]) for r in rounds]
            out.append({"a": a, "b": b, "per_round": per_round, "median": statistics.median(per_round),
                        "above_1": sum(v > 1 for v in per_round), "below_1": sum(v < 1 for v in per_round),
                        # Two-sided sign test: the chance of rounds this one-sided with no shift.
                        "sign_test_p": _sign_test(per_round)})
    return out


def _sign_test(values: list[float]) -> float:
    n = sum(v != 1 for v in values)
    k = min(sum(v > 1 for v in values), sum(v < 1 for v in values))
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n) if n else 1.0


def render(data: dict) -> str:
    s = data["summary"]
    n_runs = len(data["runs"])
    added = [f"- Rounds added: {c['date_utc']}, commit `{c['git_commit']}`, load average at start "
             + " / ".join(f"{x:.2f}" for x in c.get("load_avg_at_start") or []) for c in data.get("contexts_added", [])]
    lines = ["## Pooled trials at scale (`scripts/bench_pool_scale.py`)", "", *context_lines(data["context"]),
             *added, "",
             (f"The 389.5M GPT's leading configs (the `gpt390` bench's trials: 2 CPU ranks, fp32, AdamW, "
              f"micro-batch 4, seq_len 64, 1 warm-up + 2 measured steps), each run in fresh ranks (a "
              f"launcher per trial, as a sweep under a CPU memory limit runs them) and in the worker pool "
              f"(as the `gpt390` truth was measured), back to back, the first alternating: "
              f"{data['rounds']} rounds, {n_runs} runs. Medians of tokens/s; *spread* is max/min - 1 "
              f"of one runner's runs. The truth column is the committed truth's median (other days). "
              f"Why: the real check under a memory limit (the real-limit section, `gpt390`) judges a "
              f"sweep's fresh-rank runs by that pooled truth; `scripts/bench_pool.py` measured the "
              f"pool's fidelity on the tiny GPT only."), ""]
    rows = []
    for name in CONFIGS:  # in this order, whatever order the raw file keeps its keys in
        r = s["per_config"][name]
        truth = r["truth_tokens_per_s"]
        rows.append([name, f"{r['fresh']['median']:.1f}", f"{r['fresh']['spread']:.1%}",
                     f"{r['pool']['median']:.1f}", f"{r['pool']['spread']:.1%}",
                     f"{r['tokens_per_s_ratio']:.3f}", "yes" if r["pool_within_fresh_range"] else "no",
                     f"{r['paired_ratio_median']:.3f} [{min(r['paired_ratios']):.3f}-{max(r['paired_ratios']):.3f}]",
                     f"{r['fresh']['peak_bytes_median'] / 2**20:,.0f}", f"{r['peak_ratio']:.4f}",
                     "n/a" if truth is None else f"{truth:.1f}",
                     "n/a" if truth is None else f"{r['fresh']['median'] / truth:.2f}"])
    lines.append(markdown_table(
        ["config", "fresh tokens/s", "fresh spread", "pooled tokens/s", "pooled spread", "pooled / fresh",
         "pooled median within the fresh runs", "pooled / fresh, back-to-back pairs: median [range]",
         "fresh peak MiB per rank", "peak pooled / fresh",
         "truth tokens/s", "fresh / truth"], rows))
    ratios = [s["per_config"][n]["tokens_per_s_ratio"] for n in CONFIGS]
    drift = [r["fresh"]["median"] / r["truth_tokens_per_s"] for r in s["per_config"].values()
             if r["truth_tokens_per_s"]]
    straddle = [n for n in CONFIGS if s["per_config"][n]["paired_ratios_straddle_1"]]
    lines += ["", (f"Pooled / fresh tokens/s: {min(ratios):.3f} to {max(ratios):.3f}; ranking by tokens/s "
                   f"fresh: {' > '.join(s['rank_fresh'])}; pooled: {' > '.join(s['rank_pool'])} ("
                   + ("the same" if s["same_ranking"] else "they differ") + "). "
                   + f"The back-to-back pairs of {len(straddle)} of {len(s['per_config'])} configs fall on both "
                   "sides of 1 (" + (", ".join(straddle) or "none") + "): there, a difference between "
                   "the runners is not resolved from the noise of two runs of 2 measured steps; a config "
                   "whose pairs all lie on one side leans that way in this run.")]
    lines += ["", ("Between configs (what a pick compares), per round: (pooled / fresh of A) / (pooled / fresh "
                   "of B); above 1, the pool favours A over B against fresh ranks. The sign test is two-sided "
                   "(the chance of rounds this one-sided if the runner shifted neither)."), ""]
    lines.append(markdown_table(["A", "B", "median", "rounds above 1", "rounds below 1", "sign test p"],
                                [[c["a"], c["b"], f"{c['median']:.3f}", c["above_1"], c["below_1"],
                                  f"{c['sign_test_p']:.3f}"] for c in s["between_configs"]]))
    shifted = [c for c in s["between_configs"] if c["sign_test_p"] < 0.05]
    if shifted:
        lines += ["", " ".join(
            f"In {max(c['above_1'], c['below_1'])} of {len(c['per_round'])} rounds the pool favoured "
            f"{c['a'] if c['median'] > 1 else c['b']} over {c['b'] if c['median'] > 1 else c['a']} "
            f"(median x{max(c['median'], 1 / c['median']):.3f}, sign test p {c['sign_test_p']:.3f}): a truth "
            "measured pooled and a sweep run in fresh ranks can rank these two differently by that much."
            for c in shifted)]
    if drift:
        lines += ["", (f"This run's fresh medians are {min(drift):.2f} to {max(drift):.2f} x the committed "
                       "truth's (pooled, measured on other days).")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--summary-only", action="store_true", help="the section from --json-out's raw runs")
    ap.add_argument("--add-rounds", action="store_true",
                    help="measure --rounds more rounds and add them to --json-out's runs")
    ap.add_argument("--json-out", default=str(RAW))
    ap.add_argument("--md-out", default=str(SECTION))
    args = ap.parse_args(argv)
    if args.summary_only:
        data = json.loads(Path(args.json_out).read_text())
        # Re-derived from the raw runs (and the truth's medians as they were when measured).
        data["summary"] = summarize(data["runs"], data["truth_tokens_per_s"])
        write_outputs(args.json_out, args.md_out, data, render(data))
        return 0
    ctx, _ = start_run()
    if args.add_rounds:
        # Topped up: the earlier rounds stay, the new ones follow with their own context.
        data = json.loads(Path(args.json_out).read_text())
        data["runs"] += measure(args.rounds, first_round=data["rounds"])
        data["rounds"] += args.rounds
        data["contexts_added"] = [*data.get("contexts_added", []), ctx]
    else:
        data = {"context": ctx, "rounds": args.rounds, "configs": CONFIGS, "runs": measure(args.rounds),
                "truth_tokens_per_s": truth_tokens_per_s()}
    data["summary"] = summarize(data["runs"], data["truth_tokens_per_s"])
    write_outputs(args.json_out, args.md_out, data, render(data))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
