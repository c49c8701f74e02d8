"""Measurement fidelity: does a short trial predict a run ten times longer of the same config?

    python scripts/check_fidelity.py                      # tiny GPT, 1 rank, 5 vs 50 steps
    python scripts/check_fidelity.py my_config.json --factor 10 --out /tmp/fidelity

Runs the config's trial as given, then the same config with `factor` times the measured
steps (no CV extension in either, so the step counts are exactly those), and prints tokens/s
of both, their ratio and the peak memory of both. Not a timed test: a benchmark to run by
hand and quote (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune.contract import TrialConfig, TrialResult  # noqa: E402
from autotune.run.launch import run_trial  # noqa: E402


def _line(name: str, r: TrialResult) -> str:
    if not r.ok:
        return f"{name:>6}: {r.status.value} {r.error_type}: {r.error}"
    return (f"{name:>6}: {r.measured_steps:>4} steps  {r.tokens_per_s:>10,.0f} tokens/s  "
            f"median {r.step_time_median_s * 1e3:8.2f} ms  p90 {r.step_time_p90_s * 1e3:8.2f} ms  "
            f"cv {r.step_time_cv:.3f}  peak mem {r.peak_mem_bytes / 2**20:,.0f} MiB "
            f"({r.peak_mem_source.value})  wall {r.wall_s:.1f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", help="TrialConfig JSON (default: tiny GPT, 1 rank)")
    ap.add_argument("--factor", type=int, default=10, help="how many times longer the long run is")
    ap.add_argument("--out", type=Path, default=None, help="folder for the two trial folders")
    args = ap.parse_args(argv)

    if args.config:
        cfg = TrialConfig.model_validate_json(Path(args.config).read_text())
    else:
        cfg = TrialConfig(seq_len=128, micro_batch_size=4, warmup_steps=2, measure_steps=5)
    short = cfg.model_copy(update={"max_measure_steps": cfg.measure_steps, "timeout_s": max(cfg.timeout_s, 1800)})
    long_steps = cfg.measure_steps * args.factor
    long = short.model_copy(update={"measure_steps": long_steps, "max_measure_steps": long_steps})
    out = args.out or Path(tempfile.mkdtemp(prefix="autotune-fidelity-"))

    print(f"config: {cfg.workload.kind} seq {cfg.seq_len} micro {cfg.micro_batch_size} "
          f"accum {cfg.grad_accum_steps} ranks {cfg.world_size} {cfg.precision.value} "
          f"ckpt {cfg.checkpointing.value}; folders in {out}")
    r_short = run_trial(short, out / "short")
    print(_line("short", r_short), flush=True)
    r_long = run_trial(long, out / "long")
    print(_line("long", r_long))
    if not (r_short.ok and r_long.ok):
        return 1
    ratio = r_short.tokens_per_s / r_long.tokens_per_s
    print(f"tokens/s short / long = {ratio:.3f}  ({(ratio - 1) * 100:+.1f}% error of the short "
          f"trial against a run {args.factor}x longer)")
    print(f"peak memory short / long = {r_short.peak_mem_bytes / r_long.peak_mem_bytes:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
