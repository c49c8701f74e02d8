"""Trials at scale: build seconds, trial wall seconds and per-rank peak memory against model
size, for DDP, DeepSpeed ZeRO-3 and FSDP2 full_shard on 2 CPU ranks (issue 13).

    .venv/bin/python scripts/bench_scale.py                         # the ladder, 29M to 1.27B (~30 min)
    .venv/bin/python scripts/bench_scale.py --sizes 29M,109M --no-ablations   # a quick subset
    .venv/bin/python scripts/bench_scale.py --json-out benchmarks/results/scale.json \
        --md-out benchmarks/sections/scale.md

Every figure is a real trial (autotune.run.launch.run_trial under torchrun; fp32, SGD, micro-batch
1, seq 128; one warm-up and one measured step: the optimizer state exists from the first
step's end, so the second holds the whole peak), one at a time. A config whose peak the
memory model (autotune.estimate.memory, plus the runtime this script measured on the
smallest model) puts over this machine's available memory is not run, and the table says
so. Ablations on the 389.5M model: ZeRO-3 with DeepSpeed's default buffers (what a model
without a known hidden size gets: an entry point building the same GPT) and trials with
glibc's default allocator (AUTOTUNE_HOST_MMAP_THRESHOLD_BYTES=0, see trials/worker.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import add_output_args, context_lines, markdown_table, start_run, write_outputs  # noqa: E402

from autotune.contract import EntryPointWorkload, FSDPMode, GPTShape, GPTWorkload, TrialConfig  # noqa: E402

GiB = 2**30
SCRIPTS = str(Path(__file__).resolve().parent)
# name -> (layers, d_model, heads); vocab 32000 and 256 positions throughout.
SIZES = {"29M": (4, 512, 8), "109M": (6, 1024, 16), "390M": (12, 1536, 12),
         "872M": (16, 2048, 16), "1.27B": (24, 2048, 16)}
ENGINES = {"DDP": {}, "ZeRO-3": {"zero_stage": 3}, "FSDP2": {"fsdp": FSDPMode.full_shard}}
ABLATION_SIZE = "390M"


def shape(name: str) -> GPTShape:
    layers, d, heads = SIZES[name]
    return GPTShape(n_layers=layers, d_model=d, n_heads=heads, vocab_size=32000, max_seq_len=256)


def config(workload, engine: str) -> TrialConfig:
    return TrialConfig(workload=workload, seq_len=128, micro_batch_size=1, num_gpus=2,
                       optimizer="sgd", warmup_steps=1, measure_steps=1, max_measure_steps=1,
                       max_step_time_cv=100.0, timeout_s=1800, **ENGINES[engine])


def gpt_entry(seq_len: int, micro_batch_size: int, device, n_layers: int, d_model: int,
              n_heads: int):
    """The built-in GPT as a user entry point, built on the meta device, that does not say
    its hidden size: DeepSpeed then keeps its default buffers (the ablation)."""
    import torch

    from trials.workloads.gpt import GPT, random_batches

    s = GPTShape(n_layers=n_layers, d_model=d_model, n_heads=n_heads, vocab_size=32000,
                 max_seq_len=256)
    with torch.device("meta"):
        model = GPT(s)
    return model, random_batches(s.vocab_size, seq_len, micro_batch_size, device, seed=0), \
        {"init_module": GPT.init_module}


def predicted_peak_bytes(cfg: TrialConfig, runtime_bytes: float) -> int:
    from autotune.estimate.memory import MemoryConfig, estimate_memory
    from autotune.estimate.workload import model_shape_for

    model = model_shape_for(cfg.workload)
    return int(estimate_memory(model, MemoryConfig.from_trial_config(cfg)).analytic_bytes + runtime_bytes)


def reusable(cfg: TrialConfig, folder: Path):
    """An ok result of exactly this config in `folder` from an earlier run of this script
    (same --runs): a rerun measures only what is missing (e.g. configs skipped for memory)."""
    from autotune.contract import TrialResult

    try:
        if json.loads((folder / "config.json").read_text()) != cfg.model_dump(mode="json"):
            return None
        r = TrialResult.read(folder / "result.json")
    except (OSError, ValueError):
        return None
    return r if r.ok else None


def run(cfg: TrialConfig, folder: Path, env: dict[str, str] | None = None) -> dict:
    from autotune.run.launch import run_trial

    r = reusable(cfg, folder)  # each config, ablations too, has its own folder
    reused = r is not None
    if reused:
        wall = r.wall_s
    else:
        saved = {k: os.environ.get(k) for k in (env or {})}
        os.environ.update(env or {})
        try:
            t0 = time.perf_counter()
            r = run_trial(cfg, folder)
            wall = time.perf_counter() - t0
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    out = {"status": r.status.value, "error": (r.error or "")[:300] or None, "wall_s": wall,
           "reused": reused, "measured_at": time.strftime(
               "%H:%M UTC", time.gmtime((folder / "result.json").stat().st_mtime))}
    if r.ok:
        m = r.memory
        out.update(
            peak_bytes_per_rank=m.host_rss_peak_bytes,
            baseline_bytes_per_rank=m.host_rss_baseline_bytes,
            build_peak_bytes_per_rank=m.build_host_rss_peak_bytes,
            build_model_s=r.phase_s.get("build_model"), build_s=r.phase_s.get("build"),
            step_time_s=r.step_time_median_s, params=r.params,
            ds_zero_config=r.observations.get("ds_zero_config"))
    return out


def main(argv: list[str] | None = None) -> int:
    import psutil

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated, of {', '.join(SIZES)}")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--no-ablations", action="store_true")
    ap.add_argument("--runs", type=Path, help="trial folders (default: a temporary folder); "
                    "ok trials already there are reused")
    ap.add_argument("--note", default=None, help="a line for the section, e.g. the load the trials ran under")
    add_output_args(ap)
    args = ap.parse_args(argv)
    ctx, hw = start_run()
    sizes = [s for s in args.sizes.split(",") if s]
    engines = [e for e in args.engines.split(",") if e]
    runs = args.runs or Path(tempfile.mkdtemp(prefix="bench_scale_"))
    available = psutil.virtual_memory().available
    rows, runtime_bytes = [], None
    for size in sizes:
        s = shape(size)
        for engine in engines:
            cfg = config(GPTWorkload(preset=None, shape=s), engine)
            analytic = predicted_peak_bytes(cfg, 0)
            predicted = analytic + (runtime_bytes or 0)
            row = {"size": size, "params": s.num_params(), "engine": engine, "analytic_bytes": analytic}
            # What this machine can give two ranks now (other work shares it), 10% kept free.
            budget = 0.9 * psutil.virtual_memory().available
            if runtime_bytes is not None and 2 * predicted > budget:
                row.update(status="not run", error=f"predicted {2 * predicted / GiB:.1f} GiB for 2 ranks "
                                                   f"> {budget / GiB:.1f} GiB available")
            else:
                row.update(run(cfg, runs / f"{size}_{engine}"))
            rows.append(row)
            print(f"  {size:6s} {engine:7s} {row['status']:8s} "
                  + (f"peak {max(row['peak_bytes_per_rank']) / GiB:6.2f} GiB/rank, build "
                     f"{row['build_model_s']:.1f} s, wall {row['wall_s']:.0f} s"
                     if row["status"] == "ok" else (row.get("error") or "")), flush=True)
            if runtime_bytes is None and row["status"] == "ok":
                # The runtime (Python, torch, process group) the analytic model leaves out,
                # measured on the first (smallest) model.
                runtime_bytes = max(row["peak_bytes_per_rank"]) - analytic
    ablations = []
    if not args.no_ablations:
        s = shape(ABLATION_SIZE)
        entry = EntryPointWorkload(entry_point="bench_scale:gpt_entry", python_path=[SCRIPTS],
                                   kwargs={"n_layers": s.n_layers, "d_model": s.d_model,
                                           "n_heads": s.n_heads})
        for name, cfg, env in (
                ("ZeRO-3, DeepSpeed's default buffers and reuse distance",
                 config(entry, "ZeRO-3"), None),
                ("ZeRO-3, glibc's default allocator", config(GPTWorkload(preset=None, shape=s), "ZeRO-3"),
                 {"AUTOTUNE_HOST_MMAP_THRESHOLD_BYTES": "0"}),
                ("DDP, glibc's default allocator", config(GPTWorkload(preset=None, shape=s), "DDP"),
                 {"AUTOTUNE_HOST_MMAP_THRESHOLD_BYTES": "0"})):
            row = {"name": name, **run(cfg, runs / f"ablation_{len(ablations)}", env)}
            ablations.append(row)
            print(f"  ablation {name}: {row['status']} "
                  + (f"peak {max(row['peak_bytes_per_rank']) / GiB:.2f} GiB/rank" if row["status"] == "ok"
                     else (row.get("error") or "")), flush=True)
    data = {"context": ctx, "settings": vars(args) | {"runs": str(runs)}, "available_bytes": available,
            "runtime_bytes": runtime_bytes, "rows": rows, "ablations": ablations,
            "build_counts_imports": False}
    write_outputs(args.json_out, args.md_out, data, render(data))
    return 0


def _import_note(data: dict) -> str:
    """Runs before 6418a4b (their files lack `build_counts_imports`) counted an import in the
    build: the figures stand as measured, and the section says what they include."""
    if not data.get("build_counts_imports", True):
        return ""
    return ("In these runs a rank's build also counted the import of torch._dynamo, which a "
            "meta-device init op pulls in (the worker imports it before the build since "
            "6418a4b), most of the growth on the smallest models (observed once, 2026-12-03, in "
            "an A/B of a 2-rank trial of the tiny GPT before and after that commit, not "
            "regenerated and with no raw file: each rank grew by 37 MiB in 0.85-0.93 s before, "
            "by 6 MiB in 0.03-0.04 s after). ")


def _gib(x) -> str:
    return f"{x / GiB:.2f}"


def render(data: dict) -> str:
    rows = data["rows"]
    lines = ["## Trials at scale (`scripts/bench_scale.py`)", "", *context_lines(data["context"]),
             f"- Memory available to the trials at start: {data['available_bytes'] / GiB:.1f} GiB "
             "(a config runs when its predicted peak for 2 ranks fits 90% of what is available then)",
             *([f"- {data['settings']['note']}"] if data["settings"].get("note") else []), "",
             "Real trials of the built-in GPT (vocab 32000; fp32, SGD, micro-batch 1, seq 128, one "
             "warm-up and one measured step) on 2 CPU ranks, one at a time. Build = the model's build "
             "(this rank's weights allocated and initialised, from the meta device); + engine = the "
             "engine's state and buffers too. Peak = each rank's host RSS peak (the larger rank). "
             "Growth in the build = build peak less the RSS before it, as a multiple of the whole "
             "model's fp32 bytes (a rank's half is 0.5). Predicted = the analytic memory model plus "
             "the runtime measured on the smallest model "
             + (f"({data['runtime_bytes'] / GiB:.2f} GiB)" if data.get("runtime_bytes") else "")
             + ", the prescreen's figure; configs predicted over the available memory are not run. "
             + _import_note(data) + "The status says when each trial "
             "ran: a rerun with the same `--runs` folder measures only what is missing (configs "
             "skipped while other work held the memory) and reuses the rest.", ""]
    table = []
    ddp_peak = {r["size"]: max(r["peak_bytes_per_rank"]) for r in rows
                if r["engine"] == "DDP" and r["status"] == "ok"}
    runtime = data.get("runtime_bytes") or 0
    for r in rows:
        fp32 = 4 * r["params"]
        predicted = r["analytic_bytes"] + runtime
        if r["status"] != "ok":
            table.append([r["size"], f"{r['params'] / 1e6:,.1f}M", r["engine"], r["status"], "-", "-",
                          "-", "-", "-", "-", _gib(predicted), r.get("error")])
            continue
        peak = max(r["peak_bytes_per_rank"])
        growth = max(b - a for a, b in zip(r["baseline_bytes_per_rank"], r["build_peak_bytes_per_rank"]))
        vs_ddp = f"{peak / ddp_peak[r['size']]:.2f}" if r["size"] in ddp_peak else "-"
        table.append([r["size"], f"{r['params'] / 1e6:,.1f}M", r["engine"], f"ok ({r['measured_at']})",
                      f"{r['build_model_s']:.1f}", f"{r['build_s']:.1f}", f"{r['wall_s']:.0f}",
                      _gib(peak), vs_ddp, f"{growth / fp32:.2f}", _gib(predicted),
                      f"{(predicted - peak) / peak:+.0%}"])
    lines.append(markdown_table(["model", "params", "engine", "status", "build s", "+ engine s",
                                 "trial wall s", "peak GiB / rank", "peak / DDP's", "growth in build x fp32 model",
                                 "predicted GiB", "predicted vs peak"], table))
    if data["ablations"]:
        lines += ["", f"Ablations on the {ABLATION_SIZE} model (same settings):", ""]
        ab = []
        for a in data["ablations"]:
            ab.append([a["name"], a["status"],
                       _gib(max(a["peak_bytes_per_rank"])) if a["status"] == "ok" else a.get("error"),
                       f"{a['wall_s']:.0f}"])
        lines.append(markdown_table(["config", "status", "peak GiB / rank", "trial wall s"], ab))
    gpu = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "scale_gpu_h200.json"
    if gpu.is_file():
        lines += ["", gpu_lines(json.loads(gpu.read_text()))]
    return "\n".join(lines)


def gpu_lines(doc: dict) -> str:
    """The GPU-only paths, run once on an H200 by scripts/gpu_check_scale.py (its raw JSON)."""
    rows = []
    for name, t in doc.items():
        if name.startswith("_"):
            continue
        o = t.get("obs") or {}
        rows.append([name, t["status"], f"{t['phase_s'].get('build_model', 0):.2f}",
                     _gib(max(t["build_alloc"])) if t.get("build_alloc") else "-",
                     _gib(max(t["peak_alloc"])) if t.get("peak_alloc") else "-",
                     f"{t['tokens_per_s']:,.0f}" if t.get("tokens_per_s") else "-",
                     ", ".join([str(o.get("engine"))]
                               + ([f"params on {','.join(o['param_devices'])}"] if o.get("param_devices") else [])
                               + ([f"compute {o['linear_output_dtype']}"] if o.get("linear_output_dtype") else []))])
    return ("GPU paths (CUDA materialisation, FSDP2 MixedPrecisionPolicy and CPUOffloadPolicy on "
            "CUDA, ZeRO-3 partitioned on CUDA), checked once on 1 x H200 (torch 2.11, bf16, GPT "
            "124M seq 1024 micro-batch 8, and a Llama of 8 x 1024) by `scripts/gpu_check_scale.py`; "
            "world size 1, so these check the paths, not sharding's savings "
            "(`benchmarks/results/scale_gpu_h200.json`):\n\n"
            + markdown_table(["trial", "status", "build s", "build alloc GiB", "peak alloc GiB",
                              "tokens/s", "what ran"], rows))


if __name__ == "__main__":
    sys.exit(main())
