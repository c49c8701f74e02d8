"""Levers on run-to-run noise: would a longer measured window, or huge pages for the CPU
allocator, make one trial's figure steadier?

    .venv/bin/python scripts/bench_noise_levers.py --rounds 8      # measure (~8 min), then analyse
    .venv/bin/python scripts/bench_noise_levers.py --analyse-only  # the committed raw runs only

Why: in the DeepSpeed-style space, the optimum and the cheapest config outside 3% of it are a few
percent apart, less than one run's sd of log tokens/s there (docs/benchmarks.md, search section:
the `ds` line gives both), so the sweep needs several runs of each to tell them apart. Two cheaper
cures are possible. (1) If the noise were jitter of single steps, a longer window would average it
out: then each of a run's 5-step windows would differ as much as whole runs do. If instead a run
settles at its own level (where its fresh model's memory landed, which cores its ranks got) and
holds it, windows within a run agree and only more runs help. (2) torch's CPU allocator backs large
tensors with transparent huge pages when THP_MEM_ALLOC_ENABLE=1 (this kernel: THP "madvise"), which
may change both level and spread. What it found (huge pages on, a window of 2 s or more) is what
trials now do: TrialConfig's min_measure_s and autotune.contract.rank_env.

Each round measures two close rivals of that space (micro-batch 8 and 16, accumulation 2,
ZeRO 0, 2 ranks, fp32), each with huge pages off and on, for a fixed window of `--steps` steps,
with the sweep's worker pool (the environment is part of a pool's launch key, so each setting
has its own pool). From each run's step times: its tokens/s over the first 5 steps (what a
default trial measures) and over the whole window, and the spread of its 5-step windows.
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
import bench_truth  # noqa: E402
from bench_common import (  # noqa: E402
    ROOT,
    add_output_args,
    context_lines,
    markdown_table,
    shown_path,
    start_run,
    stdev_or_nan,
    write_outputs,
)

RAW = ROOT / "benchmarks" / "results" / "noise_levers_runs.json"
RIVALS = [{"micro_batch_size": 8}, {"micro_batch_size": 16}]
THP_ENV = "THP_MEM_ALLOC_ENABLE"  # read by torch's CPU allocator (c10 alloc_cpu)
WINDOW = 5  # steps a default trial measures (TrialConfig.measure_steps)


def _values(knobs: dict) -> dict:
    from autotune.contract import Checkpointing, Offload, Precision

    return dict(num_gpus=2, tp_degree=1, precision=Precision.fp32, checkpointing=Checkpointing.none,
                offload=Offload.none, grad_accum_steps=2, zero_stage=0, **knobs)


def measure(args, log=print) -> dict:
    from autotune.contract import write_json_atomic
    from autotune.search.machine import MachineSpace

    ns = argparse.Namespace(preset="tiny", seq_len=128, global_batch=None,
                            space=ROOT / "benchmarks" / "search_space_ds.yaml", warmup_steps=2,
                            measure_steps=args.steps, max_measure_steps=args.steps, min_measure_s=0.0,
                            timeout_s=300.0)
    spec = bench_truth.make_spec(ns)
    ms = MachineSpace.for_spec(spec)
    raw = Path(args.raw)
    doc = load_raw(raw)
    runner = bench_truth.RUNNERS["pool"]()
    before = os.environ.get(THP_ENV)
    try:
        with tempfile.TemporaryDirectory(prefix="bench_noise_levers_") as tmp:
            for i in range(args.rounds):
                # Alternate which setting and which config go first, round by round.
                for thp in (("off", "on") if i % 2 == 0 else ("on", "off")):
                    # Trials set it on CPU unless the environment says otherwise
                    # (autotune.contract.rank_env): "0" turns it off.
                    os.environ[THP_ENV] = "1" if thp == "on" else "0"
                    for knobs in (RIVALS if i % 2 == 0 else RIVALS[::-1]):
                        cfg = bench_truth.trial_config(_values(knobs), spec, ms, seed=0)
                        r = runner(cfg, Path(tmp) / f"r{i}_{thp}_{knobs['micro_batch_size']}")
                        doc["runs"].append({"round": i, "thp": thp, "key": bench_truth.cfg_key(cfg),
                                            "started": time.time(), "status": r.status.value,
                                            "tokens_per_s": r.tokens_per_s, "step_times_s": r.step_times_s})
                        log(f"round {i} thp {thp} {bench_truth.cfg_key(cfg)}: "
                            f"{r.tokens_per_s or 0:,.0f} tok/s", flush=True)
                        write_json_atomic(raw, doc)
    finally:
        runner.close()
        if before is None:
            os.environ.pop(THP_ENV, None)
        else:
            os.environ[THP_ENV] = before
    return doc


def load_raw(path: Path) -> dict:
    """The runs measured so far ({"runs": []} when none); a file that is not such a record is
    refused rather than topped up (and so overwritten)."""
    if not path.is_file():
        return {"runs": []}
    try:
        doc = json.loads(path.read_text())
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise ValueError(f"{path} is not a record of this script's runs (no 'runs' list). To fix: "
                         "pass --raw a new file, or this script's own")
    return doc


def run_figures(run: dict) -> dict | None:
    """One run: log tokens/s over its first WINDOW steps and over all of them (tokens/s is
    tokens per step over the median step time, as in trials/trial_result.py), and the sd of the
    log tokens/s of its consecutive WINDOW-step windows."""
    ts = run.get("step_times_s") or []
    if run.get("status") != "ok" or not run.get("tokens_per_s") or len(ts) < 2 * WINDOW:
        return None
    tokens_per_step = run["tokens_per_s"] * statistics.median(ts)
    windows = [statistics.median(ts[j:j + WINDOW]) for j in range(0, len(ts) - WINDOW + 1, WINDOW)]
    return {"log_first": math.log(tokens_per_step / windows[0]),
            "log_shipped": math.log(tokens_per_step / statistics.median(ts[:shipped_steps(ts)])),
            "log_all": math.log(run["tokens_per_s"]),
            "sd_within": stdev_or_nan([math.log(tokens_per_step / w) for w in windows])}


def shipped_steps(step_times_s: list[float]) -> int:
    """How many of these steps a default trial would have measured (TrialConfig.measure_more,
    the rule trials/worker.py runs)."""
    from trials.measure import summarize

    cfg, n = _cfg(), 1
    while n < len(step_times_s) and cfg.measure_more(step_times_s[:n], summarize(step_times_s[:n])["cv"]):
        n += 1
    return n


def analyse(doc: dict) -> list[dict]:
    """Per config and huge-page setting: the median tokens/s, the sd between runs of a 5-step
    window's and of the whole window's log tokens/s, and the median sd within a run."""
    out = []
    for key in sorted({r["key"] for r in doc["runs"]}):
        for thp in ("off", "on"):
            figs = [f for r in doc["runs"] if r["key"] == key and r["thp"] == thp
                    for f in [run_figures(r)] if f is not None]
            if len(figs) < 3:
                continue
            out.append({"key": key, "thp": thp, "runs": len(figs),
                        "steps": statistics.median(len(r["step_times_s"]) for r in doc["runs"]
                                                   if r["key"] == key and r["thp"] == thp and r["step_times_s"]),
                        "tokens_per_s_median": math.exp(statistics.median(f["log_all"] for f in figs)),
                        "sd_between_first": stdev_or_nan([f["log_first"] for f in figs]),
                        "sd_between_shipped": stdev_or_nan([f["log_shipped"] for f in figs]),
                        "sd_between_all": stdev_or_nan([f["log_all"] for f in figs]),
                        "sd_within_median": statistics.median(f["sd_within"] for f in figs)})
    return out


def reading(rows: list[dict]) -> str:
    off = [r for r in rows if r["thp"] == "off"]
    if not off:
        return "No runs measured yet."
    ratio_window = statistics.median(r["sd_between_all"] / r["sd_between_first"] for r in off)
    ratio_within = statistics.median(r["sd_within_median"] / r["sd_between_first"] for r in off)
    steps = statistics.median(r["steps"] for r in off)
    text = (f"Reading (huge pages off, the machine's default): a {steps / WINDOW:.0f}x longer window ({steps:.0f} steps, "
            f"not {WINDOW}) left the sd between runs at {ratio_window:.2g}x (median over configs), and a "
            f"run's own {WINDOW}-step windows differ {ratio_within:.2g}x as much as runs do: runs settle "
            "at levels of their own, which a longer window does not average out.")
    if ratio_window < 0.9:
        k = 1 / ratio_window ** 2  # 5-step runs with the same variance of their mean
        text += (f" The same variance takes {k:.2g} runs of {WINDOW} steps; the longer window is the "
                 f"cheaper of the two only where a trial's fixed cost (start, build, warm-up) exceeds "
                 f"{(steps - WINDOW * k) / (k - 1):.0f} steps' time; a pooled trial's is a few steps' "
                 "(the warm-up and a fresh model: docs/benchmarks.md, pool section).")
    on = {r["key"]: r for r in rows if r["thp"] == "on"}
    pairs = [(r, on[r["key"]]) for r in off if r["key"] in on]
    if pairs:
        speed = [b["tokens_per_s_median"] / a["tokens_per_s_median"] for a, b in pairs]
        spread = [b["sd_between_first"] / a["sd_between_first"] for a, b in pairs]
        best_off = max(pairs, key=lambda p: p[0]["tokens_per_s_median"])[0]["key"]
        best_on = max(pairs, key=lambda p: p[1]["tokens_per_s_median"])[1]["key"]
        text += (" Huge pages for the CPU allocator (THP_MEM_ALLOC_ENABLE=1): tokens/s "
                 + ", ".join(f"{x:.2f}x" for x in speed) + ", sd between runs over the first 5 steps "
                 + ", ".join(f"{x:.2g}x" for x in spread)
                 + f" ({', '.join(a['key'] for a, _ in pairs)}): "
                 + ("the spread stays within 1.5x either way" if all(1 / 1.5 <= x <= 1.5 for x in spread)
                    else "the spread moves both ways" if min(spread) < 1 < max(spread)
                    else f"the spread is {statistics.median(spread):.2g}x")
                 + ("; and it changes which config is faster "
                    f"({best_off} without, {best_on} with)" if best_off != best_on else "")
                 + ".")
        shipped = [(a["sd_between_shipped"], b["sd_between_shipped"]) for a, b in pairs]
        text += (" What a trial measures now (at least "
                 f"{_cfg().min_measure_s:g} s of steps, up to {_cfg().max_measure_steps}; huge pages on): "
                 "sd between runs " + ", ".join(f"{b:.2g}" for _, b in shipped) + " against "
                 + ", ".join(f"{a:.2g}" for a, _ in shipped) + " with huge pages off, and "
                 + ", ".join(f"{r['sd_between_first']:.2g}" for r in off)
                 + f" for the old {WINDOW}-step window without them. With huge pages a run no longer "
                 "holds a level of its own, so a longer window does average the noise out: trials on "
                 "CPU run with them (autotune.contract.rank_env) and so does the exported long run.")
    return text


def _cfg():
    from autotune.contract import TrialConfig

    return TrialConfig()


def render(data: dict) -> str:
    lines = ["## Noise levers: window length and huge pages (`scripts/bench_noise_levers.py`)", "",
             *context_lines(data["context"]), f"- Runs: {data['measured']}", ""]
    if data["rows"]:
        lines += [markdown_table(
            ["config", "huge pages", "runs", "steps per run", "tokens/s (median)",
             f"sd log tok/s between runs, first {WINDOW} steps",
             f"sd between runs, a trial's window (>= {_cfg().min_measure_s:g} s)", "sd between runs, whole window",
             f"sd of a run's {WINDOW}-step windows (median)"],
            [[r["key"], r["thp"], r["runs"], r["steps"], r["tokens_per_s_median"], r["sd_between_first"],
              r["sd_between_shipped"], r["sd_between_all"], r["sd_within_median"]] for r in data["rows"]]), ""]
    lines.append(data["reading"])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8, help="rounds (each config x huge pages off/on)")
    ap.add_argument("--steps", type=int, default=30, help="measured steps per run (fixed window)")
    ap.add_argument("--analyse-only", action="store_true", help="no new runs")
    ap.add_argument("--raw", type=Path, default=RAW, help="the runs (JSON, topped up)")
    add_output_args(ap)
    args = ap.parse_args(argv)
    ctx, _ = start_run()
    try:
        doc = load_raw(args.raw)
    except ValueError as e:
        print(f"bench_noise_levers: {e}", file=sys.stderr)
        return 2
    if not args.analyse_only:
        doc = measure(args)
    rows = analyse(doc)
    started = sorted(r["started"] for r in doc["runs"] if r.get("started"))
    when = (f"{len(doc['runs'])} runs (`{shown_path(args.raw)}`), measured "
            f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(started[0]))} to "
            f"{time.strftime('%H:%M UTC', time.gmtime(started[-1]))}" if started else "no runs")
    data = {"context": ctx, "rows": rows, "measured": when, "reading": reading(rows)}
    write_outputs(args.json_out, args.md_out, data, render(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
