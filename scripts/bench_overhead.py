"""Trial overhead: one trial's wall time against its measured steps and against a bare
launcher run of the same steps, and where the time goes.

    .venv/bin/python scripts/bench_overhead.py                 # 1 and 2 ranks, 3 repeats each
    .venv/bin/python scripts/bench_overhead.py --repeats 5 --ranks 1 --md-out docs/_overhead.md

A trial is `autotune.run.launch.run_trial` (torchrun -> trials.worker -> result.json), timed from
the controller. The bare run is torchrun of scripts/bench_overhead_bare.py: the same model
class, micro-batch, accumulation, warm-up and measured steps in a plain torch loop, with
no controller, contract, engine, noise-scale probe or result file. Runs alternate
(trial, bare, trial, ...) so a change in machine load hits both alike; medians are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import add_output_args, context_lines, markdown_table, start_run, write_outputs  # noqa: E402

from autotune.contract import GPTWorkload, TrialConfig  # noqa: E402

BARE = Path(__file__).resolve().parent / "bench_overhead_bare.py"
TARGET_OVERHEAD = 0.20  # issue #8: a trial adds at most 20% wall time over a bare launcher run


def run_one_trial(cfg: TrialConfig, folder: Path) -> dict:
    from autotune.run.launch import run_trial

    t0 = time.monotonic()
    result = run_trial(cfg, folder)
    total = time.monotonic() - t0
    if not result.ok:
        raise SystemExit(f"trial failed: {result.status.value}: {result.error}\n{result.log_tail}")
    p = dict(result.phase_s)
    worker = sum(p.get(k, 0.0) for k in ("launch_to_worker", "worker_imports", "build", "warmup",
                                          "measure"))
    return {
        "total_s": total,
        "launcher_wall_s": result.wall_s,
        "steps_s": sum(result.step_times_s),
        "measured_steps": result.measured_steps,
        "phases": {
            "controller (config, argv, result read)": total - (result.wall_s or 0.0),
            "launcher start -> worker": p.get("launch_to_worker"),
            "imports": p.get("worker_imports"),
            "model build + engine": p.get("build"),
            "warm-up steps": p.get("warmup"),
            "measured steps (incl. sync, gather)": p.get("measure"),
            "teardown (gather, result, exit)": (result.wall_s or 0.0) - worker,
        },
    }


def run_one_bare(cfg: TrialConfig, folder: Path) -> dict:
    from autotune.run.argv import free_port, launch_env

    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node",
            str(cfg.num_gpus), "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
            str(BARE), "--preset", str(cfg.workload.preset), "--seq-len", str(cfg.seq_len),
            "--micro-batch", str(cfg.micro_batch_size), "--accum", str(cfg.grad_accum_steps),
            "--warmup", str(cfg.warmup_steps), "--steps", str(cfg.measure_steps)]
    env = launch_env(cfg)  # the same thread settings and PYTHONPATH as a trial
    t0 = time.monotonic()
    env["BENCH_LAUNCH_TIME"] = repr(time.time())
    proc = subprocess.run(argv, env=env, cwd=folder, capture_output=True, text=True,
                          timeout=cfg.timeout_s)
    total = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bare run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    out = json.loads(line)
    p = out["phase_s"]
    inside = sum(p.get(k, 0.0) for k in ("launch_to_script", "imports", "build", "warmup", "measure"))
    return {
        "total_s": total,
        "steps_s": sum(out["step_times_s"]),
        "phases": {
            "controller (config, argv, result read)": 0.0,
            "launcher start -> worker": p.get("launch_to_script"),
            "imports": p.get("imports"),
            "model build + engine": p.get("build"),
            "warm-up steps": p.get("warmup"),
            "measured steps (incl. sync, gather)": p.get("measure"),
            "teardown (gather, result, exit)": total - inside,
        },
    }


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--measure-steps", type=int, default=5, help="as a sweep's default trial")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout-s", type=float, default=600.0)
    add_output_args(ap)
    args = ap.parse_args(argv)
    ctx, hw = start_run()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_overhead_") as tmp:
        for ranks in args.ranks:
            # max_measure_steps = measure_steps: the trial may not extend its window, so
            # both runs do exactly the same number of steps.
            cfg = TrialConfig(workload=GPTWorkload(preset=args.preset), seq_len=args.seq_len,
                              micro_batch_size=args.micro_batch, grad_accum_steps=args.accum,
                              num_gpus=ranks, device=hw.device_kind, warmup_steps=args.warmup_steps,
                              measure_steps=args.measure_steps, max_measure_steps=args.measure_steps,
                              timeout_s=args.timeout_s)
            trials, bares = [], []
            for i in range(args.repeats):
                trials.append(run_one_trial(cfg, Path(tmp) / f"trial_{ranks}_{i}"))
                folder = Path(tmp) / f"bare_{ranks}_{i}"
                folder.mkdir()
                bares.append(run_one_bare(cfg, folder))
                print(f"  {ranks} rank(s) #{i}: trial {trials[-1]['total_s']:.1f}s, "
                      f"bare {bares[-1]['total_s']:.1f}s", flush=True)
            results.append({"ranks": ranks, "config": cfg.model_dump(mode="json"),
                            "trials": trials, "bares": bares})
    data = {"context": ctx, "settings": vars(args), "results": results}
    write_outputs(args.json_out, args.md_out, data, render(data, args))
    return 0


def render(data, args) -> str:
    lines = ["## Trial overhead (`scripts/bench_overhead.py`)", "", *context_lines(data["context"]), "",
             f"Config: built-in GPT `{args.preset}`, seq_len {args.seq_len}, micro-batch "
             f"{args.micro_batch} x accumulation {args.accum}, fp32, {args.warmup_steps} warm-up + "
             f"{args.measure_steps} measured steps (window not extended), torchrun. Medians of "
             f"{args.repeats} alternating runs. *Trial* = `autotune.run.launch.run_trial` timed from "
             f"the controller; *bare* = torchrun of `scripts/bench_overhead_bare.py` (same model "
             f"class and steps, plain torch loop). Target (issue #8): a trial adds at most "
             f"{TARGET_OVERHEAD:.0%} wall time over the bare run.", ""]
    rows = []
    for r in data["results"]:
        t, b = med([x["total_s"] for x in r["trials"]]), med([x["total_s"] for x in r["bares"]])
        steps = med([x["steps_s"] for x in r["trials"]])
        over = (t - b) / b
        rows.append([r["ranks"], t, b, f"{over:+.0%}", "met" if over <= TARGET_OVERHEAD else "NOT met",
                     steps, f"{steps / t:.1%}"])
    lines.append(markdown_table(["ranks", "trial wall s", "bare launcher wall s", "overhead",
                                 "target <= 20%", "measured steps s", "measured steps / trial wall"],
                                rows))
    lines += ["", "Where the time goes (median seconds; the same phases timed inside both runs):", ""]
    names = list(data["results"][0]["trials"][0]["phases"])
    header = ["phase"] + [f"{r['ranks']} rank(s): {w}" for r in data["results"] for w in ("trial", "bare")]
    prow = []
    for n in names:
        row = [n]
        for r in data["results"]:
            row += [med([x["phases"][n] for x in r["trials"]]), med([x["phases"][n] for x in r["bares"]])]
        prow.append(row)
    lines.append(markdown_table(header, prow))
    lines += ["", "Phases: *launcher start -> worker* from the controller starting torchrun to the "
              "worker's first line (wall clocks); *imports* torch and the worker's modules; "
              "*model build + engine* includes process-group init; *teardown* is what remains of "
              "the launcher's wall time (gathering results across ranks, writing result.json, "
              "process exit, torchrun shutdown)."]
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
