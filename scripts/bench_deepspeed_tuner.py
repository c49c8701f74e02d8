"""Side by side with DeepSpeed's autotuner on its home ground: the same model through an entry
point (scripts/deepspeed_tuner/tiny_gpt.py), the same DeepSpeed-style space (ZeRO 0-3 x
micro-batch 1-32 x accumulation 1-2, fp32, 2 CPU ranks), on this machine, one after the other.

    .venv/bin/python scripts/bench_deepspeed_tuner.py --repeats 2        # ~30 min idle
    .venv/bin/python scripts/bench_deepspeed_tuner.py --analyse-only     # the committed raw runs

Each repetition runs `deepspeed --autotuning run` (as its docs tell a new user: an autotuning
section in the DeepSpeed config, fast mode, micro-batch 1-32 per rank, max_train_batch_size
128 = 64 samples per rank; it needs `tabulate`, from
`pip install deepspeed[autotuning]`) and `autotune sweep` (the spec below, the default
budget), alternating which goes first, each started once the machine is quiet (at most
`--max-busy` other runnable processes). Both timelines are read from what the tools wrote:
DeepSpeed's log (an experiment ends when the tuner moves on) and the study (each trial's
completion time). A config "within 3% of the best" is judged on the benchmark ground truth of
the same space (benchmarks/results/truth_ds_pool.json: every config measured in rounds, median
run; the built-in GPT of the same shape), so both tools are scored by the same yardstick, not
by their own noisy measurements. Then both picks are rerun, interleaved, with autotune's trial
runner (the same entry point), and compared as paired ratios.

Equal reach: DeepSpeed's tuner has no accumulation dimension; it sets accumulation to
max_train_batch_size / (ranks x micro-batch) (deepspeed/autotuning/autotuner.py,
run_tuning_micro_batch_sizes). The space's optimum, micro-batch 32 x accumulation 2 x 2 ranks,
takes 128 samples per step, so the tuner gets max_train_batch_size 128 (repetitions that do
not record the figure ran with 64: that optimum was out of its reach; the table shows each
repetition's figure). Its smaller micro-batches then run at accumulation
64 / micro-batch, outside autotune's accumulation 1-2: those count as "outside the space".
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_truth  # noqa: E402
from bench_common import ROOT, add_output_args, context_lines, markdown_table, start_run, write_outputs  # noqa: E402

from autotune.contract.rank_env import cpu_rank_env  # noqa: E402

HERE = ROOT / "scripts" / "deepspeed_tuner"
RAW = ROOT / "benchmarks" / "results" / "deepspeed_tuner_runs.json"
TRUTH = ROOT / "benchmarks" / "results" / "truth_ds_pool.json"
WITHIN = 0.03
# The largest global batch the space holds: micro-batch 32 x accumulation 2 x 2 ranks.
MAX_TRAIN_BATCH = 128
# What repetitions recorded before the figure was recorded ran with.
OLD_MAX_TRAIN_BATCH = 64
DS_CONFIG = {
    "train_micro_batch_size_per_gpu": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.0003, "torch_adam": True}},
    "zero_optimization": {"stage": "all"},
    "autotuning": {"enabled": True, "fast": True, "max_train_batch_size": MAX_TRAIN_BATCH,
                   "min_train_micro_batch_size_per_gpu": 1, "max_train_micro_batch_size_per_gpu": 32,
                   "start_profile_step": 2, "end_profile_step": 5, "arg_mappings": {}},
}
SPEC = """\
workload: {{kind: entry_point, entry_point: "tiny_gpt:build", python_path: ["{here}"]}}
seq_len: 128
target: {{tokens: 1.0e9}}
space: "{space}"
trial: {{warmup_steps: 2, measure_steps: 5}}
storage: "sqlite:///{db}"
study: side_by_side
"""
_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]")
_LAUNCH = re.compile(r"Launching exp_id = \d+, exp_name = (\S+),")


def _env(extra_path: str | None) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT)] + ([extra_path] if extra_path else []) + [env.get("PYTHONPATH", "")]
    # The ranks' environment autotune's CPU trials get (1 thread each, no CUDA, huge pages):
    # the same machine settings for both tools.
    env.update(cpu_rank_env(1, os.environ))
    env.update(PYTHONPATH=os.pathsep.join(p for p in paths if p), DS_ACCELERATOR="cpu",
               # DeepSpeed counts CPU "accelerators" by NUMA node unless told: 2 ranks here.
               LOCAL_SIZE="2", PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    return env


def run_deepspeed(workdir: Path, extra_path: str | None, timeout_s: float) -> dict[str, Any]:
    (workdir / "ds_config.json").write_text(json.dumps(DS_CONFIG))
    t0 = time.time()
    with open(workdir / "ds.log", "w") as log:
        rc = subprocess.run([str(Path(sys.executable).parent / "deepspeed"), "--autotuning", "run",
                             "--num_gpus", "2", str(HERE / "train.py"), "--deepspeed_config",
                             "ds_config.json"], cwd=workdir, env=_env(extra_path), stdout=log,
                            stderr=subprocess.STDOUT, timeout=timeout_s).returncode
    end = time.time()
    return {"tool": "deepspeed", "rc": rc, "t0": t0, "end": end, **parse_deepspeed(workdir, t0)}


def parse_deepspeed(workdir: Path, t0: float) -> dict[str, Any]:
    """Experiments in launch order, each ending when the tuner logged its next line; the pick
    from ds_config_optimal.json; the search's end when it wrote it."""
    exps: list[dict[str, Any]] = []
    done_s = None
    for line in (workdir / "ds.log").read_text(errors="replace").splitlines():
        stamp = _STAMP.search(line)
        if not stamp:
            continue
        when = dt.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(stamp.group(2)) / 1e3
        if exps and exps[-1]["end_s"] is None and "Launching exp_id" not in line:
            exps[-1]["end_s"] = when - t0
        m = _LAUNCH.search(line)
        if m:
            if exps and exps[-1]["end_s"] is None:
                exps[-1]["end_s"] = when - t0
            exps.append({"name": m.group(1), "start_s": when - t0, "end_s": None})
        if "optimal setup after tuning" in line:
            done_s = when - t0
    for e in exps:
        cfg = workdir / "autotuning_results" / e["name"] / "ds_config.json"
        if cfg.is_file() and e["name"] != "profile_model_info":
            c = json.loads(cfg.read_text())
            e["config"] = _key(c.get("zero_optimization", {}).get("stage", 0),
                               c["train_micro_batch_size_per_gpu"], c.get("gradient_accumulation_steps", 1))
    opt = workdir / "autotuning_results" / "ds_config_optimal.json"
    pick = None
    if opt.is_file():
        c = json.loads(opt.read_text())
        pick = _key(c["zero_optimization"]["stage"], c["train_micro_batch_size_per_gpu"],
                    c.get("gradient_accumulation_steps", 1))
    return {"timeline": [{"config": e.get("config"), "end_s": e["end_s"], "name": e["name"]} for e in exps],
            "pick": pick, "search_s": done_s}


def run_autotune(workdir: Path, n_trials: int | None, timeout_s: float) -> dict[str, Any]:
    import optuna

    from autotune.record import TrialRecord

    db = workdir / "study.db"
    (workdir / "spec.yaml").write_text(SPEC.format(here=HERE, space=ROOT / "benchmarks" / "search_space_ds.yaml",
                                                   db=db))
    argv = [sys.executable, "-m", "autotune.cli", "sweep", "spec.yaml"] + (["--trials", str(n_trials)] if n_trials else [])
    t0 = time.time()
    with open(workdir / "sweep.log", "w") as log:
        rc = subprocess.run(argv, cwd=workdir, env=_env(None), stdout=log, stderr=subprocess.STDOUT,
                            timeout=timeout_s).returncode
    end = time.time()
    study = optuna.load_study(study_name="side_by_side", storage=f"sqlite:///{db}")
    timeline = []
    for t in sorted(study.trials, key=lambda t: t.datetime_complete or dt.datetime.max):
        rec = TrialRecord.of(t)
        if not rec.launched or t.datetime_complete is None:
            continue
        c = rec.config or {}
        timeline.append({"config": _key(c["zero_stage"], c["micro_batch_size"], c["grad_accum_steps"]),
                         "end_s": t.datetime_complete.timestamp() - t0, "trial": t.number,
                         "repeat": rec.repeat_of is not None})
    report = json.loads(subprocess.run([sys.executable, "-m", "autotune.cli", "report", "--study", "side_by_side",
                                        "--json", "--storage", f"sqlite:///{db}"], cwd=workdir,
                                       env=_env(None), capture_output=True, text=True).stdout)
    pick = report["cheapest"]["config"] if report.get("cheapest") else None
    picks = report.get("picks") or []
    return {"tool": "autotune", "rc": rc, "t0": t0, "end": end, "timeline": timeline, "search_s": end - t0,
            "pick": _key(pick["zero_stage"], pick["micro_batch_size"], pick["grad_accum_steps"]) if pick else None,
            "how_sure": picks[0]["how_sure"] if picks else None}


def _key(zero: int, micro: int, accum: int) -> str:
    return f"z{zero}-mb{micro}-acc{accum}"


def rerun_picks(picks: list[str], pairs: int, runner_name: str = "launcher") -> dict[str, list[float]]:
    """Each pick measured `pairs` times, interleaved (A B, B A, ...), with autotune's runner."""
    from autotune.contract import EntryPointWorkload, TrialConfig

    run_trial = bench_truth.RUNNERS[runner_name]()
    out: dict[str, list[float]] = {p: [] for p in picks}
    with tempfile.TemporaryDirectory(prefix="bench_ds_rerun_") as tmp:
        for i in range(pairs):
            for j, p in enumerate(picks if i % 2 == 0 else picks[::-1]):
                z, mb, acc = (int(x[k:]) for x, k in zip(p.split("-"), (1, 2, 3)))
                cfg = TrialConfig(workload=EntryPointWorkload(entry_point="tiny_gpt:build", python_path=[str(HERE)]),
                                  seq_len=128, num_gpus=2, micro_batch_size=mb, grad_accum_steps=acc,
                                  zero_stage=z, launcher="deepspeed" if z else "torchrun",
                                  warmup_steps=2, measure_steps=5)
                r = run_trial(cfg, Path(tmp) / f"r{i}_{j}")
                out[p].append(r.tokens_per_s if r.ok else float("nan"))
    return out


def truth_table() -> dict[str, float]:
    """Median tokens/s of every config of the DeepSpeed-style ground truth, by _key."""
    doc = json.loads(TRUTH.read_text())
    out = {}
    for e in doc["entries"].values():
        c = e["config"]
        tps = [r["tokens_per_s"] for r in e["results"] if r.get("status") == "ok" and r.get("tokens_per_s")]
        if tps:
            out[_key(c["zero_stage"], c["micro_batch_size"], c["grad_accum_steps"])] = statistics.median(tps)
    return out


def analyse(raw: dict[str, Any]) -> dict[str, Any]:
    truth = truth_table()
    best = max(truth.values())
    good = {k for k, v in truth.items() if v >= best / (1 + WITHIN)}
    rows = []
    for rep in raw["repetitions"]:
        for run in rep["runs"]:
            reach = next((e["end_s"] for e in run["timeline"] if e.get("config") in good and e["end_s"] is not None), None)
            rows.append({"repetition": rep["index"], "tool": run["tool"], "first": run is rep["runs"][0],
                         "reach_s": reach, "search_s": run["search_s"], "experiments": len(run["timeline"]),
                         "pick": run["pick"], "pick_truth": truth.get(run["pick"]),
                         "ds_max_train_batch": rep.get("ds_max_train_batch_size", OLD_MAX_TRAIN_BATCH),
                         # None: a pick outside the truth's space is not judged (no truth to judge it by)
                         "pick_within": (run["pick"] in good) if run["pick"] in truth else None,
                         "how_sure": run.get("how_sure"),
                         "outside_space": sum(1 for e in run["timeline"] if e.get("config") and e["config"] not in truth)})
        rr = rep.get("rerun") or {}
        if len(rr) == 2:
            (a, ta), (b, tb) = rr.items()
            ratios = [x / y for x, y in zip(ta, tb) if x == x and y == y]
            rep["rerun_summary"] = {"a": a, "b": b, "a_median": statistics.median(ta), "b_median": statistics.median(tb),
                                    "paired_ratio_median": statistics.median(ratios) if ratios else None}
    return {"truth_best_key": max(truth, key=truth.get), "truth_best_tps": best, "good": sorted(good),
            "rows": rows, "reruns": [r.get("rerun_summary") for r in raw["repetitions"]]}


def measured_lines(ctx, raw) -> list[str]:
    """When the runs were measured (their own dates, commits and load), and when analysed: an
    analysis of committed runs must not pass off its own time and load as the measurement's."""
    reps = raw["repetitions"]
    when = sorted({f"{r['date_utc']}, commit `{r['commit']}`" for r in reps})
    busy = [run.get("others_running_before") for r in reps for run in r["runs"]]
    lines = [f"- Measured: {'; '.join(when)} ({len(reps)} repetitions); load average before each: "
             + ", ".join(f"{r['load_avg_before']:.2f}" for r in reps)
             + (f"; other runnable processes before each tool: max {max(b for b in busy if b is not None):g}"
                if any(b is not None for b in busy) else ""),
             f"- Analysed: {ctx['date_utc']}, commit `{ctx['git_commit']}` (truth: `{TRUTH.relative_to(ROOT)}`)",
             f"- Machine: {ctx['machine']}"]
    return lines


def render(ctx, raw, res, analyse_only: bool = False) -> str:
    lines = ["## Side by side with DeepSpeed's autotuner (`scripts/bench_deepspeed_tuner.py`)", "",
             *(measured_lines(ctx, raw) if analyse_only else context_lines(ctx)), "",
             f"Same model (built-in GPT `tiny` through an entry point), same space (ZeRO 0-3 x "
             f"micro-batch 1-32 x accumulation 1-2, fp32, 2 CPU ranks), same machine, one after the "
             f"other (the order alternates). Best config by the ground truth of this space: "
             f"`{res['truth_best_key']}` ({res['truth_best_tps']:,.0f} tokens/s, median run); configs within "
             f"3%: {', '.join(f'`{k}`' for k in res['good'])}. *Reach* = seconds from the tool's start "
             "until an experiment / trial of such a config had finished; *search* = until the tool "
             "named its pick (DeepSpeed: its optimal config written; autotune: the sweep exited). "
             f"DeepSpeed's tuner derives accumulation as max_train_batch_size / (2 x micro-batch): "
             f"at {OLD_MAX_TRAIN_BATCH} (the first repetitions) micro-batch 32 ran at accumulation 1 and the "
             f"optimum (micro-batch 32 x accumulation 2, 128 samples) was out of its reach; at "
             f"{MAX_TRAIN_BATCH} both tools can reach it.", ""]
    lines.append(markdown_table(
        ["rep", "DeepSpeed's max_train_batch_size", "tool", "ran first", "reach s", "search s",
         "experiments / trials", "outside the space", "pick", "pick within 3%", "how sure (autotune)"],
        [[r["repetition"], r.get("ds_max_train_batch", OLD_MAX_TRAIN_BATCH), r["tool"], "yes" if r["first"] else "no",
          # None: the tool ended without running a config within 3% of the best
          r["reach_s"] if r["reach_s"] is not None or r["search_s"] is None else "never", r["search_s"], r["experiments"],
          r["outside_space"], r["pick"], within_cell(r, res["reruns"]), r["how_sure"] or "-"]
         for r in res["rows"]]))
    lines += ["", "Both picks rerun, interleaved, with autotune's trial runner (tokens/s, median; paired "
              "ratio = first / second of each back-to-back pair, median):", ""]
    lines.append(markdown_table(["rep", "pick A", "A tokens/s", "pick B", "B tokens/s", "A / B paired"],
                                [[i, s["a"], s["a_median"], s["b"], s["b_median"], s["paired_ratio_median"]]
                                 for i, s in enumerate(res["reruns"]) if s]))
    return "\n".join(lines)


def within_cell(row: dict, reruns: list) -> str:
    """'yes' / 'no' against the truth; a pick outside the truth's space is not judged there,
    and its rerun beside the other tool's pick (same runner, interleaved) says how it ran."""
    if row["pick_within"] is not None:
        return "yes" if row["pick_within"] else "no"
    s = reruns[row["repetition"]] if row["repetition"] < len(reruns) else None
    if not s or row["pick"] not in (s["a"], s["b"]) or not s["paired_ratio_median"]:
        return "not judged: outside the truth's space"
    ratio = s["paired_ratio_median"] if row["pick"] == s["a"] else 1 / s["paired_ratio_median"]
    return f"not judged: outside the truth's space; rerun beside the other pick: {ratio:.3f}x its tokens/s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--trials", type=int, default=None, help="autotune's --trials (default: its default)")
    ap.add_argument("--rerun-pairs", type=int, default=4)
    ap.add_argument("--runner", default="launcher", help="what reruns the picks (bench_truth.RUNNERS)")
    ap.add_argument("--extra-path", default=None, help="where `tabulate` is, if not installed")
    ap.add_argument("--timeout-s", type=float, default=3600)
    ap.add_argument("--max-busy", type=float, default=1.0,
                    help="before each tool, wait until at most this many other processes run")
    ap.add_argument("--max-wait-s", type=float, default=900.0)
    ap.add_argument("--analyse-only", action="store_true")
    ap.add_argument("--raw", type=Path, default=RAW)
    add_output_args(ap)
    args = ap.parse_args(argv)
    ctx, _ = start_run()
    raw = json.loads(args.raw.read_text()) if args.raw.is_file() else {"repetitions": []}
    if not args.analyse_only:
        for _ in range(args.repeats):
            index = len(raw["repetitions"])
            runs = []
            for tool in (("deepspeed", "autotune") if index % 2 == 0 else ("autotune", "deepspeed")):
                work = Path(tempfile.mkdtemp(prefix=f"bench_ds_{tool}_"))
                waited, busy = bench_truth._wait_for_quiet(args.max_busy, args.max_wait_s)
                runs.append(run_deepspeed(work, args.extra_path, args.timeout_s) if tool == "deepspeed"
                            else run_autotune(work, args.trials, args.timeout_s))
                runs[-1].update(waited_s=waited, others_running_before=busy,
                                load_avg_after=os.getloadavg()[0])
                print(f"rep {index} {tool}: pick {runs[-1]['pick']}, search {runs[-1]['search_s']}", flush=True)
                shutil.rmtree(work, ignore_errors=True)
            picks = [r["pick"] for r in runs if r["pick"]]
            rerun = rerun_picks(sorted(set(picks)), args.rerun_pairs, args.runner) if len(set(picks)) == 2 else {}
            raw["repetitions"].append({"index": index, "load_avg_before": os.getloadavg()[0],
                                       "ds_max_train_batch_size": MAX_TRAIN_BATCH,
                                       "date_utc": ctx["date_utc"], "commit": ctx["git_commit"],
                                       "runs": runs, "rerun": rerun})
            args.raw.write_text(json.dumps(raw, indent=1))
    if not raw["repetitions"]:  # nothing measured yet: say so rather than print empty tables
        md = "\n".join(["## Side by side with DeepSpeed's autotuner (`scripts/bench_deepspeed_tuner.py`)", "",
                         f"Not run yet: no raw runs in `{args.raw.relative_to(ROOT)}`. To run it (about "
                         "30 minutes on an otherwise idle machine): `.venv/bin/python "
                         "scripts/bench_deepspeed_tuner.py --repeats 2`.", ""])
        write_outputs(args.json_out, args.md_out, {"context": ctx, "analysis": None}, md)
        return 0
    res = analyse(raw)
    write_outputs(args.json_out, args.md_out, {"context": ctx, "analysis": res},
                  render(ctx, raw, res, args.analyse_only))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
