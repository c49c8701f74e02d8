"""Measurement fidelity: do short trials and projections predict the long run?

    .venv/bin/python scripts/bench_fidelity.py                  # 6 configs, 1 and 2 ranks
    .venv/bin/python scripts/bench_fidelity.py --long-factor 10 --md-out docs/_fidelity.md

For each config (built-in GPT, 1 rank): a short trial (the sweep's default window) and a
trial measuring ten times more steps: tokens/s and peak memory compared, next to the same
short trial run a second time (the machine's run-to-run noise). Then the same
per-rank work on 2 ranks is measured and compared with two projections:
- analytic: FLOPs per token (autotune.estimate.compute.hardware_flops_per_token, recompute
  included) at one effective FLOP rate, calibrated on the first config's short trial (a CPU
  core has no published peak, so a rate must come from a measurement);
- from a measured smaller count (1 -> 2 ranks, autotune.estimate.scaling): with the 1-rank
  point alone (the tool then has no communication measurement), and with the effective
  link bandwidth fitted on the first config's 1- and 2-rank trials.
Spearman rank correlations across configs say whether the ordering, which is what a search
needs, survives.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import add_output_args, context_lines, fmt_bytes, markdown_table, spearman, start_run, write_outputs  # noqa: E402

from autotune.contract import GPTWorkload, TrialConfig, TrialResult  # noqa: E402

# (micro-batch, accumulation, precision, checkpointing): cheap on CPU, varied in what they stress.
DEFAULT_CONFIGS = ["4,1,fp32,none", "8,1,fp32,none", "2,2,fp32,none", "4,1,fp32,full",
                   "8,1,fp32,full", "4,1,bf16,none"]


def parse_config(text: str) -> tuple[int, int, str, str]:
    mb, acc, prec, ckpt = text.split(",")
    return int(mb), int(acc), prec, ckpt


def trial(cfg: TrialConfig, folder: Path, log=print) -> TrialResult:
    from autotune.run.launch import run_trial

    r = run_trial(cfg, folder)
    log(f"  {folder.name}: {r.status.value} {r.tokens_per_s or 0:,.0f} tok/s "
        f"({r.measured_steps} steps, {r.wall_s or 0:.1f}s)")
    return r


def trial_added(r: TrialResult) -> int | None:
    m = r.memory
    if m.allocator_allocated_peak_bytes:
        return max(m.allocator_allocated_peak_bytes)
    if m.host_rss_peak_bytes and m.host_rss_baseline_bytes:
        return max(p - b for p, b in zip(m.host_rss_peak_bytes, m.host_rss_baseline_bytes))
    return None


def pct(a: float | None, b: float | None) -> str:
    if a is None or b is None or not b:
        return "n/a"
    return f"{(a - b) / b:+.1%}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS,
                    help="micro,accum,precision,checkpointing ...")
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--measure-steps", type=int, default=5, help="the short trial (sweep default)")
    ap.add_argument("--max-measure-steps", type=int, default=15, help="the short trial's cap")
    ap.add_argument("--long-factor", type=int, default=10, help="long run = this x measured steps")
    ap.add_argument("--timeout-s", type=float, default=900.0)
    ap.add_argument("--from-json", default=None,
                    help="re-analyse the measurements of an earlier --json-out (no trials)")
    add_output_args(ap)
    args = ap.parse_args(argv)
    ctx, hw = start_run()
    if args.from_json:
        old = json.loads(Path(args.from_json).read_text())
        rows, ctx = old["rows"], old["context"]
        for key in ("preset", "seq_len", "warmup_steps", "measure_steps", "max_measure_steps",
                    "long_factor"):
            setattr(args, key, old["settings"][key])
    else:
        rows = measure(args, hw, ctx)
    analyse(rows, args)
    data = {"context": ctx, "settings": vars(args), "rows": rows}
    write_outputs(args.json_out, args.md_out, data, render(data, args))
    return 0


def measure(args, hw, ctx: dict) -> list[dict]:
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench_fidelity_") as tmp:
        for i, text in enumerate(args.configs):
            mb, acc, prec, ckpt = parse_config(text)
            base = dict(workload=GPTWorkload(preset=args.preset), seq_len=args.seq_len,
                        micro_batch_size=mb, grad_accum_steps=acc, precision=prec, checkpointing=ckpt,
                        device=hw.device_kind, warmup_steps=args.warmup_steps, timeout_s=args.timeout_s)
            short = TrialConfig(**base, measure_steps=args.measure_steps,
                                max_measure_steps=args.max_measure_steps)
            r_short = trial(short, Path(tmp) / f"c{i}_short")
            # The same short trial again: the machine's run-to-run noise, the floor under
            # any short-vs-long difference.
            r_again = trial(short, Path(tmp) / f"c{i}_short_again")
            n_long = args.long_factor * max(r_short.measured_steps, args.measure_steps)
            long = TrialConfig(**base, measure_steps=n_long, max_measure_steps=n_long)
            r_long = trial(long, Path(tmp) / f"c{i}_long")
            two = short.model_copy(update={"num_gpus": 2})
            r_two = trial(two, Path(tmp) / f"c{i}_2ranks")
            rows.append({"config": text, "short": short.model_dump(mode="json"),
                         "results": {k: r.model_dump(mode="json", exclude={"log_tail"})
                                     for k, r in (("short", r_short), ("again", r_again), ("long", r_long),
                                                  ("two", r_two))}})
            if args.json_out:  # the measurements survive a failure of the analysis below
                Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.json_out).write_text(json.dumps(
                    {"partial": True, "context": ctx, "settings": vars(args), "rows": rows}, default=str))
    return rows


def analyse(rows: list[dict], args) -> None:
    """Add the projections to each row (in place)."""
    from autotune.errors import UserError
    from autotune.estimate.compute import hardware_flops_per_token, model_from_gpt_shape
    from autotune.estimate.scaling import CommModel, Link, Measured, StepFit, fit_step_model, project

    link = Link(intra_node_bytes_per_s=None, label="CPU ranks (gloo over shared memory)")
    ref = None
    for row in rows:
        cfg = TrialConfig.model_validate(row["short"])
        res = {k: TrialResult.model_validate(v) for k, v in row["results"].items()}
        model = model_from_gpt_shape(cfg.workload.resolved_shape(), name=str(cfg.workload.preset))
        hw_flops = hardware_flops_per_token(model, cfg.seq_len, recompute=cfg.checkpointing.value)
        row["hw_flops_per_token"] = hw_flops
        tokens_per_gpu_step = cfg.micro_batch_size * cfg.grad_accum_steps * cfg.seq_len
        # DDP (also under autocast) all-reduces fp32 gradients: 4 bytes per parameter.
        comm = CommModel(params=model.params, grad_bytes_per_param=4.0, zero_stage=0,
                         grad_accum_steps=cfg.grad_accum_steps)
        if not (res["short"].ok and res["two"].ok):
            continue
        m1 = Measured(1, res["short"].tokens_per_s, tokens_per_gpu_step)
        m2 = Measured(2, res["two"].tokens_per_s, tokens_per_gpu_step)
        if ref is None:
            ref = {"flop_rate": res["short"].tokens_per_s * hw_flops,
                   "fit": fit_step_model([m1, m2], comm, link), "config": row["config"]}
        row["analytic_tps"] = ref["flop_rate"] / hw_flops
        try:
            one = project(fit_step_model([m1], comm, link), 2, comm, link)
            row["proj_one_point_tps"], row["proj_one_point_basis"] = one.tokens_per_s, one.basis
        except UserError as exc:  # the tool refuses: that is its answer, reported as such
            row["proj_one_point_tps"], row["proj_one_point_basis"] = None, f"refused: {exc}"
        fitted = StepFit(m1.step_s, ref["fit"].exposed, ref["fit"].exposed_unit, tokens_per_gpu_step,
                         (m1,), f"bandwidth fitted on config {ref['config']}")
        row["proj_ref_bw_tps"] = project(fitted, 2, comm, link).tokens_per_s
        row["ref"] = {"config": ref["config"], "how": ref["fit"].how,
                      "flop_rate": ref["flop_rate"]}


def render(data, args) -> str:
    rows = data["rows"]
    res = [{k: TrialResult.model_validate(v) for k, v in r["results"].items()} for r in rows]
    lines = ["## Fidelity (`scripts/bench_fidelity.py`)", "", *context_lines(data["context"]), "",
             f"Built-in GPT `{args.preset}`, seq_len {args.seq_len}; config = micro-batch, "
             f"accumulation, precision, checkpointing. Short trial = {args.warmup_steps} warm-up + "
             f"{args.measure_steps} measured steps (extended up to {args.max_measure_steps} when "
             f"the step-time CV is high), as a sweep; long = {args.long_factor} x the short trial's "
             f"measured steps. Memory = trial-added peak (peak RSS minus RSS before the model was "
             f"built, max over ranks; the allocator peak on CUDA).", ""]
    t1, vs_long, vs_again = [], [], []
    for r, x in zip(rows, res):
        s, lg, again = x["short"], x["long"], x.get("again")
        t1.append([r["config"], s.tokens_per_s, lg.tokens_per_s, pct(s.tokens_per_s, lg.tokens_per_s),
                   again.tokens_per_s if again else "not run", pct(s.tokens_per_s, again and again.tokens_per_s),
                   s.step_time_cv, lg.step_time_cv, fmt_bytes(trial_added(s)), fmt_bytes(trial_added(lg)),
                   pct(trial_added(s), trial_added(lg))])
        if s.ok and lg.ok:
            vs_long.append(abs(s.tokens_per_s - lg.tokens_per_s) / lg.tokens_per_s)
        if s.ok and again and again.ok:
            vs_again.append(abs(s.tokens_per_s - again.tokens_per_s) / again.tokens_per_s)
    lines.append(markdown_table(["config", "short tok/s", "long tok/s", "short vs long",
                                 "short again tok/s", "short vs again", "short CV", "long CV",
                                 "short peak", "long peak", "short vs long"], t1))
    if vs_again:
        import statistics

        lines += ["", f"Median |short vs long| {statistics.median(vs_long):.1%}; median |short vs the "
                  f"same short trial run again right after| {statistics.median(vs_again):.1%}. Two "
                  "runs seconds apart are the floor; runs minutes apart differ more on a shared "
                  "machine whose speed drifts (the search section's Noise paragraph: runs of one "
                  "config minutes apart), and a longer window inside one trial does not remove "
                  "that drift."]
    ok = [(r, x) for r, x in zip(rows, res) if x["short"].ok and x["long"].ok]
    rho_long = spearman([x["short"].tokens_per_s for _, x in ok], [x["long"].tokens_per_s for _, x in ok])
    lines += ["", f"Rank correlation short vs long tokens/s across configs: Spearman "
              f"{_rho(rho_long)} ({len(ok)} configs).", ""]
    ref = next((r["ref"] for r in rows if "ref" in r), None)
    if ref is None:
        lines.append("Projections: not computed (the reference trials failed).")
        return "\n".join(lines)
    lines += [f"Projections. Analytic: tokens/s = {ref['flop_rate'] / 1e9:.2f} GFLOP/s (effective, "
              f"measured on config {ref['config']}, 1 rank) / hardware FLOPs per token. "
              f"1 -> 2 ranks: `autotune.estimate.scaling` from the 1-rank trial alone (no "
              f"communication measured) and with the link fitted on config {ref['config']} "
              f"({ref['how']}).", ""]
    refused = next((r["proj_one_point_basis"] for r in rows
                    if str(r.get("proj_one_point_basis", "")).startswith("refused")), None)
    if refused:
        lines += [f"From the 1-rank point alone the tool {refused[0].lower()}{refused[1:]}: CPU "
                  "ranks have no catalog link bandwidth, so it will not guess one.", ""]
    t2 = []
    for r, x in zip(rows, res):
        m1, m2 = x["short"].tokens_per_s, x["two"].tokens_per_s
        t2.append([r["config"], m1, r.get("analytic_tps"), pct(r.get("analytic_tps"), m1), m2,
                   r.get("proj_one_point_tps") if r.get("proj_one_point_tps") is not None
                   else "refused by the tool", pct(r.get("proj_one_point_tps"), m2),
                   r.get("proj_ref_bw_tps"), pct(r.get("proj_ref_bw_tps"), m2)])
    lines.append(markdown_table(["config", "1 rank measured", "analytic (estimated)", "error",
                                 "2 ranks measured", "projected from 1 rank", "error",
                                 "projected, link fitted on ref.", "error"], t2))
    have = [(r, x) for r, x in zip(rows, res) if "analytic_tps" in r]
    rho_a = spearman([r["analytic_tps"] for r, _ in have], [x["short"].tokens_per_s for _, x in have])
    one = [(r, x) for r, x in have if r.get("proj_one_point_tps") is not None]
    rho_p = spearman([r["proj_one_point_tps"] for r, _ in one], [x["two"].tokens_per_s for _, x in one])
    rho_f = spearman([r["proj_ref_bw_tps"] for r, _ in have], [x["two"].tokens_per_s for _, x in have])
    lines += ["", "Spearman rank correlation, projected vs measured across configs: "
              f"analytic (1 rank) {_rho(rho_a)}; 1 -> 2 ranks from the 1-rank point {_rho(rho_p)}; "
              f"with the fitted link {_rho(rho_f)} ({len(have)} configs).",
              "", "The analytic column uses one FLOP rate for every config, so it cannot see "
              "precision (bf16 matmuls on this CPU run far slower than fp32) or per-kernel "
              "efficiency differences: those are what trials measure."]
    return "\n".join(lines)


def _rho(x: float | None) -> str:
    return "undefined (< 3 configs or constant)" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
