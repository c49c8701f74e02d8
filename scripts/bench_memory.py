"""Predicted vs measured peak memory per rank over a grid of real trials on this machine.

    .venv/bin/python scripts/bench_memory.py                  # full grid (~30 min on 2 busy cores)
    .venv/bin/python scripts/bench_memory.py --quick          # 6 configs
    .venv/bin/python scripts/bench_memory.py --json-out benchmarks/results/memory.json \
        --md-out benchmarks/sections/memory.md --runs benchmarks/results/memory_runs

For every config: the analytic estimate (autotune/estimate/memory.py), a real trial
(autotune.run.launch.run_trial: torchrun / DeepSpeed, real steps) and its measured peak (CPU:
host RSS of the rank; CUDA: device peak). Then the calibration (autotune/search/calibration.py) is
evaluated honestly: leave-one-out (each config predicted from a fit on the others) and
sequentially (each config from the configs before it, as a study sees them). Then the
prescreen rule (calibrated x (1 + margin) <= limit) is checked at every limit between the
measured peaks: a config predicted to fit whose measured peak is over the limit would have
run out of memory. Activations are also compared, in-process, with the bytes autograd saves
for backward (trials.measure.SavedTensorMeter) and with Korthikanti et al.'s closed form.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import context_lines, install_sigterm_handler, run_context, write_outputs  # noqa: E402

from autotune.contract import Checkpointing, GPTShape, GPTWorkload, Launcher, Offload, Precision, TrialConfig  # noqa: E402
from autotune.estimate.compute import model_from_gpt_shape  # noqa: E402
from autotune.estimate.memory import MemoryConfig, activation_parts, korthikanti_layer_bytes  # noqa: E402
from autotune.run.hardware import local_hardware  # noqa: E402
from autotune.search.calibration import CalibrationPoint, MemoryGuard, fit_calibration, measured_peak_bytes  # noqa: E402

# Big enough that the model, not the Python + torch process, decides the peak; small enough
# for a trial of two steps on one CPU thread per rank (~17M parameters). Two steps: the
# optimizer state exists from the first step on, so the second holds the whole peak.
BENCH_SHAPE = GPTShape(n_layers=4, d_model=512, n_heads=8, vocab_size=8192, max_seq_len=256)
SEQ_LEN = 128
MiB = 2**20


def grid(quick: bool) -> list[dict]:
    rows = []
    if quick:
        for mb, ck, n in ((2, "none", 1), (8, "none", 1), (8, "full", 1), (8, "none", 2),
                          (8, "selective", 2), (2, "full", 2)):
            rows.append(dict(micro_batch_size=mb, checkpointing=ck, num_gpus=n, precision="fp32"))
        return rows
    for n in (1, 2):
        for mb in (2, 8):
            for ck in ("none", "selective", "full"):
                rows.append(dict(micro_batch_size=mb, checkpointing=ck, num_gpus=n, precision="fp32"))
    # bf16 matmuls are emulated on CPUs without AMX/AVX512-BF16: a few minutes per step at
    # micro-batch 8 here, so the bf16 corner is sampled, not gridded.
    rows.append(dict(micro_batch_size=8, checkpointing="none", num_gpus=1, precision="bf16"))
    rows.append(dict(micro_batch_size=2, checkpointing="none", num_gpus=2, precision="bf16"))
    return rows


# DeepSpeed ZeRO on CPU in fp32 (bf16 is as slow as above); run when the worker's engine has them.
ZERO_GRID = [dict(micro_batch_size=8, checkpointing="none", num_gpus=2, precision="fp32", zero_stage=z)
             for z in (1, 2, 3)] + [
    dict(micro_batch_size=2, checkpointing="none", num_gpus=2, precision="fp32", zero_stage=3),
    dict(micro_batch_size=8, checkpointing="none", num_gpus=2, precision="fp32", zero_stage=2,
         offload="optimizer")]


def reusable_result(runs: Path, cfg: TrialConfig):
    """An ok result of exactly this config already in `runs` (a rerun measures only what's new)."""
    from autotune.contract import TrialResult

    want = cfg.model_dump(mode="json")
    for folder in sorted(runs.glob("trial_*")):
        try:
            if (json.loads((folder / "config.json").read_text()) == want
                    and (folder / "result.json").is_file()):
                result = TrialResult.read(folder / "result.json")
                if result.ok:
                    return result
        except (OSError, ValueError):
            continue
    return None


def trial_config(row: dict) -> TrialConfig:
    zero = row.get("zero_stage", 0)
    return TrialConfig(
        workload=GPTWorkload(preset=None, shape=BENCH_SHAPE), seq_len=SEQ_LEN,
        micro_batch_size=row["micro_batch_size"], num_gpus=row["num_gpus"],
        precision=Precision(row["precision"]), checkpointing=Checkpointing(row["checkpointing"]),
        zero_stage=zero, offload=Offload(row.get("offload", "none")),
        launcher=Launcher.deepspeed if zero else Launcher.torchrun,
        warmup_steps=1, measure_steps=1, max_measure_steps=1, timeout_s=600, seed=0)


def label(cfg: TrialConfig) -> str:
    z = f" zero{cfg.zero_stage}" + (f"+{cfg.offload.value}" if cfg.offload is not Offload.none else "") \
        if cfg.zero_stage else ""
    return (f"{cfg.num_gpus}r mb{cfg.micro_batch_size} {cfg.precision.value} "
            f"ckpt:{cfg.checkpointing.value}{z}")


def saved_activations_in_process(cfg: TrialConfig) -> int | None:
    """Bytes autograd keeps for backward in one forward of the real model (one rank)."""
    try:
        import torch

        from trials.measure import SavedTensorMeter
        from trials.workloads.gpt import GPT, checkpointed_blocks
    except ImportError:
        return None
    torch.manual_seed(0)
    model = GPT(BENCH_SHAPE)
    model.set_checkpointing(checkpointed_blocks(BENCH_SHAPE.n_layers, cfg.checkpointing.value,
                                                cfg.checkpoint_every))
    ids = torch.randint(0, BENCH_SHAPE.vocab_size, (cfg.micro_batch_size, cfg.seq_len))
    ctx = (torch.autocast("cpu", dtype=torch.bfloat16) if cfg.precision is Precision.bf16
           else torch.autocast("cpu", enabled=False))
    with SavedTensorMeter(model) as meter, ctx:
        loss = model(ids, labels=ids)
    del loss
    # Like the worker's figure: autocast's 16-bit weight copies are saved tensors too.
    return meter.saved_bytes


def rel(p: float, m: float) -> float:
    return (p - m) / m


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="6 configs instead of the full grid")
    ap.add_argument("--no-zero", action="store_true", help="leave out the DeepSpeed ZeRO configs")
    ap.add_argument("--margin", type=float, default=0.10,
                    help="the fixed headroom checked (memory.safety_margin)")
    ap.add_argument("--json-out", help="write every figure here")
    ap.add_argument("--md-out", help="write the markdown section here")
    ap.add_argument("--runs", type=Path, help="trial folders (default: a temporary folder); "
                    "configs already measured there are reused")
    args = ap.parse_args()
    install_sigterm_handler()
    ctx = run_context()

    from autotune.run.launch import run_trial

    hw = local_hardware()
    guard = MemoryGuard(hw)  # no fit: analytic figures
    model = model_from_gpt_shape(BENCH_SHAPE, "bench")
    runs = args.runs or Path(tempfile.mkdtemp(prefix="bench_memory_"))
    rows = grid(args.quick) + ([] if args.no_zero else ZERO_GRID)
    print(f"# memory benchmark on {hw.key()} ({hw.device_name}); model {model.params:,} params, "
          f"seq {SEQ_LEN}; {len(rows)} configs; trials in {runs}", flush=True)
    records = []
    zero_skipped = None
    t0 = time.time()
    for i, row in enumerate(rows):
        cfg = trial_config(row)
        if cfg.zero_stage and zero_skipped:
            continue
        verdict = guard.predict(cfg)
        est = verdict.estimate
        result = reusable_result(runs, cfg)
        reused = result is not None
        if result is None:
            folder = runs / f"trial_{i:02d}"
            while folder.exists():
                folder = folder.with_name(folder.name + "b")
            result = run_trial(cfg, folder)
        measured, source = measured_peak_bytes(result)
        if not result.ok:
            print(f"  {label(cfg):40s} {result.status.value}: {result.error_type}: "
                  f"{(result.error or '').splitlines()[0][:100] if result.error else ''}", flush=True)
            if cfg.zero_stage and result.status.value in ("unsupported", "crash"):
                zero_skipped = f"{result.status.value}: {result.error_type}: {(result.error or '')[:160]}"
            continue
        parts = activation_parts(model, MemoryConfig.from_trial_config(cfg))
        rec = dict(config=label(cfg), engine=verdict.engine, ranks=cfg.num_gpus,
                   analytic_bytes=verdict.predicted_bytes,
                   measured_bytes=measured, measured_source=source,
                   baseline_bytes=max(result.memory.host_rss_baseline_bytes or [0]),
                   breakdown=est.as_dict(),
                   # what autograd keeps: block and norm activations, the fp32 log-softmax,
                   # and (autocast) the 16-bit weight copies
                   activations_kept_est_bytes=parts["kept"] + parts["kept_logits"]
                   + est.weight_cache_bytes,
                   saved_for_backward_bytes=result.observations.get("activation_saved_bytes"),
                   wall_s=result.wall_s, reused=reused)
        records.append(rec)
        print(f"  {rec['config']:40s} analytic {rec['analytic_bytes'] / MiB:8.1f} MiB  measured "
              f"{measured / MiB:8.1f} MiB ({source})  [{time.time() - t0:.0f}s]", flush=True)

    if len(records) < 3:
        print("fewer than 3 measured configs: nothing to calibrate", file=sys.stderr)
        return 1
    pts = [CalibrationPoint(r["analytic_bytes"], r["measured_bytes"], r["engine"], i, r["ranks"])
           for i, r in enumerate(records)]
    fit_all = fit_calibration(pts, hw.key())
    for i, r in enumerate(records):
        others = [p for j, p in enumerate(pts) if j != i]
        loo = fit_calibration(others, hw.key())
        r["loo_bytes"], _ = loo.predict(r["analytic_bytes"], r["engine"], r["ranks"])
        r["insample_bytes"], _ = fit_all.predict(r["analytic_bytes"], r["engine"], r["ranks"])
        seq = fit_calibration(pts[:i], hw.key()) if i else None
        r["sequential_bytes"] = seq.predict(r["analytic_bytes"], r["engine"], r["ranks"])[0] if seq else None

    # Activations: estimate of what is kept for backward vs autograd's saved bytes (in-process).
    act_rows = []
    seen = set()
    for r in records:
        key = r["config"].split(" ", 1)[1].split(" zero")[0]
        if key in seen:
            continue
        seen.add(key)
        mb = int(key.split()[0][2:])
        prec = key.split()[1]
        ck = key.split("ckpt:")[1]
        cfg = trial_config(dict(micro_batch_size=mb, precision=prec, checkpointing=ck, num_gpus=1))
        measured_saved = r["saved_for_backward_bytes"] or saved_activations_in_process(cfg)
        s, b, h, a = SEQ_LEN, mb, BENCH_SHAPE.d_model, BENCH_SHAPE.n_heads
        k_mode = {"none": "none", "full": "full", "selective": "none"}[ck]
        korthikanti = BENCH_SHAPE.n_layers * korthikanti_layer_bytes(s, b, h, a, 1, k_mode)
        if ck == "selective":
            n_rec = len(range(0, BENCH_SHAPE.n_layers, 2))
            korthikanti = (BENCH_SHAPE.n_layers - n_rec) * korthikanti_layer_bytes(s, b, h, a) + \
                n_rec * korthikanti_layer_bytes(s, b, h, a, 1, "full")
        act_rows.append(dict(config=key, estimate_bytes=r["activations_kept_est_bytes"],
                             saved_bytes=measured_saved, korthikanti_16bit_eager_bytes=int(korthikanti)))

    # The prescreen rule at every limit between the measured peaks.
    measured_sorted = sorted(r["measured_bytes"] for r in records)
    limits = [(x + y) / 2 for x, y in zip(measured_sorted, measured_sorted[1:])]
    violations, held_back_fitting, checks = [], 0, 0
    for limit in limits:
        for r in records:
            fits_predicted = r["loo_bytes"] * (1 + args.margin) <= limit
            fits_measured = r["measured_bytes"] <= limit
            checks += 1
            if fits_predicted and not fits_measured:
                violations.append((r["config"], limit))
            if not fits_predicted and fits_measured:
                held_back_fitting += 1

    def med(key: str, rs=records) -> float:
        vals = [abs(rel(r[key], r["measured_bytes"])) for r in rs if r[key] is not None]
        return statistics.median(vals) if vals else float("nan")

    summary = dict(
        hardware=hw.key(), configs=len(records), zero_skipped=zero_skipped,
        median_rel_error_before=med("analytic_bytes"),
        median_rel_error_after_loo=med("loo_bytes"),
        median_rel_error_after_sequential=med("sequential_bytes"),
        median_rel_error_after_insample=med("insample_bytes"),
        max_under_prediction_loo=max(rel(r["measured_bytes"], r["loo_bytes"]) for r in records),
        fit=fit_all.model_dump(), safety_margin=args.margin,
        prescreen_checks=checks, prescreen_violations=len(violations),
        prescreen_held_back_but_fit=held_back_fitting,
        median_rel_error_activations=statistics.median(
            abs(rel(a["estimate_bytes"], a["saved_bytes"])) for a in act_rows if a["saved_bytes"]),
    )
    md = "\n".join(["## Memory model (`scripts/bench_memory.py`)", "", *context_lines(ctx), "",
                    render_markdown(records, act_rows, summary)])
    print()
    write_outputs(args.json_out, args.md_out,
                  dict(context=ctx, summary=summary, configs=records, activations=act_rows), md)
    return 0


def render_markdown(records: list[dict], act_rows: list[dict], s: dict) -> str:
    def mib(x):
        return "-" if x is None else f"{x / MiB:,.0f}"

    def pct(p, m):
        return "-" if p is None else f"{rel(p, m):+.1%}"

    n_reused = sum(1 for r in records if r.get("reused"))
    out = [f"{len(records)} configs measured by real trials ({n_reused} reused from earlier runs "
           "in the `--runs` folder: same TrialConfig, same worker).", "",
           f"Hardware `{s['hardware']}`; model: built-in GPT {BENCH_SHAPE.n_layers} layers, d "
           f"{BENCH_SHAPE.d_model}, vocab {BENCH_SHAPE.vocab_size}, seq {SEQ_LEN}. Measured = peak "
           "host RSS of the rank (CPU), estimated = autotune/estimate/memory.py. MiB per rank.", "",
           "| config | analytic | measured | error before | after (LOO) | after (sequential) |",
           "|---|---:|---:|---:|---:|---:|"]
    for r in records:
        out.append(f"| {r['config']} | {mib(r['analytic_bytes'])} | {mib(r['measured_bytes'])} | "
                   f"{pct(r['analytic_bytes'], r['measured_bytes'])} | "
                   f"{pct(r['loo_bytes'], r['measured_bytes'])} | "
                   f"{pct(r['sequential_bytes'], r['measured_bytes'])} |")
    f = s["fit"]
    out += ["", f"Median |relative error|: before calibration {s['median_rel_error_before']:.1%}; "
            f"after, leave-one-out {s['median_rel_error_after_loo']:.1%}, sequential "
            f"{s['median_rel_error_after_sequential']:.1%}, in-sample "
            f"{s['median_rel_error_after_insample']:.1%}. Fit on all: constants "
            + ", ".join(f"{k} {v / MiB:,.0f} MiB" for k, v in f["constant_bytes"].items())
            + (f", multi-rank {f['distributed_bytes'] / MiB:,.0f} MiB" if f.get("distributed_bytes") else "")
            + f", slope {f['scale']:.3f} ({f['basis']}).",
            f"Prescreen (leave-one-out calibrated x (1 + {s['safety_margin']:.0%}) <= limit) at every "
            f"limit between measured peaks: {s['prescreen_checks']} checks, "
            f"{s['prescreen_violations']} configs predicted to fit but measured over the limit, "
            f"{s['prescreen_held_back_but_fit']} held back that would have fit. Largest "
            f"under-prediction (LOO): {s['max_under_prediction_loo']:+.1%}."]
    if s.get("zero_skipped"):
        out.append(f"ZeRO configs not measured: {s['zero_skipped']}")
    out += ["", "Activations kept for backward, one rank (MiB): estimate (fused attention, no "
            "dropout; + the fp32 log-softmax and, under autocast, the 16-bit weight copies) vs "
            "bytes autograd saved (measured: the trial's `activation_saved_bytes`, else in-process) "
            "vs Korthikanti's closed form (16-bit, eager attention, dropout; layers only):",
            "", "| config | estimate | saved (measured) | error | Korthikanti 16-bit eager |",
            "|---|---:|---:|---:|---:|"]
    for a in act_rows:
        out.append(f"| {a['config']} | {mib(a['estimate_bytes'])} | {mib(a['saved_bytes'])} | "
                   f"{pct(a['estimate_bytes'], a['saved_bytes']) if a['saved_bytes'] else '-'} | "
                   f"{mib(a['korthikanti_16bit_eager_bytes'])} |")
    out.append(f"\nMedian |error| of the activation estimate: {s['median_rel_error_activations']:.1%}.")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
