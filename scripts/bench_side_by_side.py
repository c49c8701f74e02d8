"""Trials side by side against one at a time (issue 26, part 1): the wall time of a sweep, and
whether it picks the same config.

    .venv/bin/python scripts/bench_side_by_side.py                        # 10 repeats, ~30 min idle
    .venv/bin/python scripts/bench_side_by_side.py --repeats 2 --json-out \\
        benchmarks/results/side_by_side.json --md-out benchmarks/sections/side_by_side.md

Each repeat runs the same sweep twice on fresh studies: one at a time (`--side-by-side 1`: one
worker in one slot) and K at a time (`--side-by-side K`: K workers on disjoint slots, then the
picks re-measured alone in slot 0). Both run in slots of the same size (the space's largest
trial), so both measure on the same hardware key and their picks compare. The two alternate
which goes first, so a change in the machine's load hits both alike. Figures: the wall-time
ratio (K at a time / one at a time) per repeat and its median; how often the K-at-a-time pick
is the config one at a time picked in the same repeat, and how often each mode picks the
modal config of the one-at-a-time sweeps; the interference the side-by-side reports measured.

The space: one-rank CPU trials of the built-in tiny GPT (micro-batch x accumulation x
checkpointing), so that a 2-core machine runs 2 at a time.
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
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import add_output_args, context_lines, markdown_table, start_run, write_outputs

SPACE = """\
num_gpus: [1]
micro_batch_size: [1, 2, 4, 8]
grad_accum_steps: [1, 2]
precision: [fp32]
checkpointing: [none, full]
"""
SPEC = """\
workload: {{kind: gpt, preset: tiny}}
seq_len: {seq_len}
target: {{tokens: 1.0e8}}
space: space.yaml
trial: {{warmup_steps: 1, measure_steps: {measure_steps}, timeout_s: 300, threads_per_rank: 1}}
study: bench
seed: {seed}
"""


def sweep(folder: Path, k: int, trials: int, seed: int, args) -> dict:
    """One sweep on a fresh journal study: its wall time, pick and interference rows."""
    folder.mkdir(parents=True)
    (folder / "space.yaml").write_text(SPACE)
    (folder / "spec.yaml").write_text(SPEC.format(seq_len=args.seq_len, measure_steps=args.measure_steps,
                                                  seed=seed))
    argv = [sys.executable, "-m", "autotune.cli", "sweep", "spec.yaml", "--trials", str(trials),
            "--side-by-side", str(k), "--storage", f"journal:///{folder}/study.log", "--json"]
    t0 = time.monotonic()
    p = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=args.timeout_s,
                       env={**os.environ, "COLUMNS": "200"})
    wall_s = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"sweep failed ({' '.join(argv)}):\n{p.stderr[-3000:]}")
    doc = json.loads(p.stdout)["report"]
    pick = doc["cheapest"]
    launched = [t for t in doc["trials"] if t["reused_from"] is None and t["status"] not in (None, "prescreened")]
    return {"k": k, "wall_s": wall_s, "trials_launched": len(launched),
            "pick_trial": pick["trial"] if pick else None,
            "pick_config": _config_name(pick["config"]) if pick else None,
            "interference": doc.get("interference", [])}


def _config_name(cfg: dict) -> str:
    return (f"mb{cfg.get('micro_batch_size')} ga{cfg.get('grad_accum_steps')} "
            f"ckpt:{cfg.get('checkpointing')} {cfg.get('precision')}")


def summarise(runs: list[dict], k: int) -> dict:
    pairs = [(r["one"], r["side"]) for r in runs]
    ratios = [s["wall_s"] / o["wall_s"] for o, s in pairs]
    modal = Counter(o["pick_config"] for o, _ in pairs).most_common(1)[0][0]
    ratios_interf = [i["beside_over_alone"] for _, s in pairs for i in s["interference"]]
    return {
        "k": k, "repeats": len(pairs),
        "wall_ratio_median": statistics.median(ratios), "wall_ratios": ratios,
        "same_pick_as_one_at_a_time": sum(o["pick_config"] == s["pick_config"] for o, s in pairs),
        "modal_pick_one_at_a_time": modal,
        "one_at_a_time_picks_modal": sum(o["pick_config"] == modal for o, _ in pairs),
        "side_by_side_picks_modal": sum(s["pick_config"] == modal for _, s in pairs),
        "interference_median": statistics.median(ratios_interf) if ratios_interf else None,
        "interference_n": len(ratios_interf),
    }


def plan_bound(trials: int, k: int) -> float:
    """The ratio the plan allows with no fixed costs and no interference: the re-measure
    reserve (half of --trials by default) runs alone, the rest k at a time."""
    reserve = max(trials // 2, 1) if k > 1 and trials > k else 0
    return (-(-(trials - reserve) // k) + reserve) / trials


def markdown(ctx: dict, summary: dict, runs: list[dict], args) -> str:
    s = summary
    rows = [[i, r["one"]["pick_config"], r["side"]["pick_config"], f"{r['one']['wall_s']:.0f}",
             f"{r['side']['wall_s']:.0f}", f"{r['side']['wall_s'] / r['one']['wall_s']:.2f}",
             r["one"]["trials_launched"], r["side"]["trials_launched"]] for i, r in enumerate(runs)]
    interf = ("not measured (no config was measured both beside another trial and alone)"
              if s["interference_median"] is None else
              f"median {s['interference_median']:.2f} (tokens/s beside another trial / alone, "
              f"{s['interference_n']} configs over all side-by-side sweeps)")
    return "\n".join([
        f"## Trials side by side ({s['k']} at a time) against one at a time",
        "",
        *context_lines(ctx),
        f"- Sweeps: `--trials {args.trials}`, one-rank CPU trials of the tiny GPT (seq_len "
        f"{args.seq_len}, {args.measure_steps} measured steps), 16 configs; {s['repeats']} repeats, each "
        f"one at a time (`--side-by-side 1`) and {s['k']} at a time (`--side-by-side {s['k']}`), "
        "alternating which goes first. Script: `scripts/bench_side_by_side.py`.",
        "",
        f"- Wall time, {s['k']} at a time / one at a time: median **{s['wall_ratio_median']:.2f}** "
        f"(per repeat: {', '.join(f'{x:.2f}' for x in s['wall_ratios'])}). The plan bounds it at "
        f"{plan_bound(args.trials, s['k']):.2f} ({args.trials - max(args.trials // 2, 1)} trials {s['k']} at "
        f"a time, {max(args.trials // 2, 1)} alone); each sweep's fixed costs (the workers' start, the "
        "first trial's pool of ranks) and the interference beside another trial take it towards 1 "
        "when trials last seconds, as here.",
        f"- Same pick as one at a time in the same repeat: **{s['same_pick_as_one_at_a_time']} of "
        f"{s['repeats']}**. The one-at-a-time sweeps' most frequent pick ({s['modal_pick_one_at_a_time']}) "
        f"was picked by {s['one_at_a_time_picks_modal']} of {s['repeats']} one-at-a-time sweeps and "
        f"{s['side_by_side_picks_modal']} of {s['repeats']} side-by-side sweeps.",
        f"- Interference measured by the side-by-side sweeps: {interf}.",
        "",
        markdown_table(["repeat", "pick, one at a time", f"pick, {s['k']} at a time", "wall s (1)",
                        f"wall s ({s['k']})", "ratio", "trials (1)", f"trials ({s['k']})"], rows),
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--side-by-side", type=int, default=2, dest="k")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--measure-steps", type=int, default=5)
    ap.add_argument("--timeout-s", type=float, default=1800.0, help="per sweep")
    ap.add_argument("--render", type=Path, default=None,
                    help="only write the markdown again from this JSON of an earlier run")
    add_output_args(ap)
    args = ap.parse_args()
    if args.render:
        data = json.loads(args.render.read_text())
        write_outputs(None, args.md_out, data, markdown(data["context"], data["summary"], data["runs"], args))
        return
    ctx, hw = start_run()
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench_sbs_") as tmp:
        for i in range(args.repeats):
            order = ("one", "side") if i % 2 == 0 else ("side", "one")
            r = {}
            for mode in order:
                k = 1 if mode == "one" else args.k
                r[mode] = sweep(Path(tmp) / f"r{i}_{mode}", k, args.trials, seed=i, args=args)
                print(f"repeat {i} {mode}: {r[mode]['wall_s']:.0f} s, pick {r[mode]['pick_config']}",
                      file=sys.stderr, flush=True)
            runs.append(r)
    summary = summarise(runs, args.k)
    write_outputs(args.json_out, args.md_out, {"context": ctx, "summary": summary, "runs": runs},
                  markdown(ctx, summary, runs, args))


if __name__ == "__main__":
    main()
