"""How far a cell of the memory-limit matrix moves with its truth's own runs: each cell replayed
on truths resampled from the committed one (a bootstrap), so that a figure is shown with its
noise.

    .venv/bin/python scripts/bench_resample.py                 # replay, then the section
    .venv/bin/python scripts/bench_resample.py --summary-only  # the section from committed results
    .venv/bin/python scripts/bench_resample.py --benches mem --limits none --datasets 10 --seeds 6

Why: a cell of scripts/bench_matrix.py replays 60 seeds against one measured truth. With 6
rounds per config (as the 124M and 389.5M truths had until 2026-12-03) a seed observes 3 of them
and is judged on the other 3, so its 60 seeds are at most 20 different splits of the same runs.
Within one truth a config's observed and held-out halves are not independent: they share its
figures, so a config that looks lucky in its observed half is unlucky in its held-out half by
construction. Where two configs are within a run's noise of each other, a cell's figure then
says as much about how that one truth's runs happened to fall as about the strategy (the
reference, which measures everything the seed may observe, got 10/60 on the 124M space without
a limit while the first baseline alone got 43).

What: for each bench with held-out truth (ds, mem, gpt390) and each limit of the matrix,
`--datasets` truths are drawn by resampling the measurement rounds with replacement (the same
rounds for every config, so what the configs of one round share is kept:
bench_truth.resampled), the limit staying the committed truth's. Each is replayed with
`--seeds` seeds by the same strategies as the matrix (bench_search.run_strategy: the shipped
sweep at 8 trials, random search, the bound, the reference, the first baseline) and judged the
same way (bench_search.summarize). Per cell and row: the accuracy over datasets (scaled to 60
seeds) as median and 10th-90th percentile, and in how many datasets the worst regret was at
most 10%. Raw results: benchmarks/results/resample_<bench>_limit<Q>.json.

The in-sample benches (cpu40, big: 3 runs per config, judged on the runs a replay observes) are
not resampled: there a seed sees every run its truth is made of.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_limits as bl  # noqa: E402
import bench_search as bs  # noqa: E402
import bench_truth as bt  # noqa: E402
from bench_common import markdown_table, percentile, shown_path  # noqa: E402

BENCHES = ("ds", "mem", "gpt390")  # the benches judged on held-out runs
KINDS = ("sweep", "random", "oracle", "exhaustive", "first_baseline")
HEAD = {"sweep": "sweep", "random": "random", "oracle": "bound", "exhaustive": "reference",
        "first_baseline": "first baseline"}
TRIALS = 8
REGRET_MAX = 0.10  # issue 28's target for the worst regret (bench_matrix.REGRET_MAX)


def result_path(bench: str, limit: str) -> Path:
    return bs.RESULTS / f"resample_{bench}_limit{limit}.json"


def replay_cell(bench: str, limit_arg, datasets: int, seeds: int) -> dict[str, Any]:
    """Every row of KINDS on `datasets` resampled truths of one cell, `seeds` seeds each."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    b, _, spec, ms, configs = bs.bench_space(bench)
    doc = bt.load_cache(Path(b["cache"]), None, log=lambda *a: None)
    table, limit, _, _ = bs.limited_table(b, doc, configs, spec, limit_arg)
    baselines = bl.baseline_keys(ms, spec, configs)
    rounds = bt.rounds_of(table)
    rng = random.Random(f"{bench}/{bl.limit_name(limit_arg)}")  # reproducible draws per cell
    per_kind: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    draws = []
    for _ in range(datasets):
        draw = [rng.choice(rounds) for _ in rounds]
        draws.append(draw)
        truth_table = bt.resampled(table, draw, limit)
        truths = [bt.truth_for(truth_table, s, True) for s in range(seeds)]
        for kind in KINDS:
            reps = [bs.run_strategy(kind, TRIALS, truth_table, spec, ms, s, limit, True, len(configs), baselines)
                    for s in range(seeds)]
            usd = bs.summarize(reps, truths)["usd"]
            per_kind[kind].append({"right": usd["right"], "regret_max": usd["regret_max"],
                                   "no_pick": usd["no_pick"]})
    return {"bench": bench, "limit_arg": bl.limit_name(limit_arg), "mem_limit_bytes": limit,
            "datasets": datasets, "seeds": seeds, "trials": TRIALS, "rounds": rounds, "draws": draws,
            "cache": str(Path(b["cache"]).relative_to(bs.ROOT)), "per_dataset": per_kind}


def _replay(bench: str, limit: str, datasets: int, seeds: int) -> dict[str, Any]:
    return replay_cell(bench, bl.parse_limit(limit), datasets, seeds)


def spread(rows: list[dict[str, Any]], seeds: int) -> dict[str, float]:
    """Accuracy over datasets, scaled to 60 seeds: median, 10th and 90th percentile; and the
    share of datasets whose worst regret was within REGRET_MAX."""
    acc = [r["right"] * 60 / seeds for r in rows]
    return {"median": percentile(acc, 50), "p10": percentile(acc, 10), "p90": percentile(acc, 90),
            "regret_ok": sum(r["regret_max"] <= REGRET_MAX for r in rows) / len(rows)}


def cell_text(s: dict[str, float]) -> str:
    return f"{s['median']:.0f} [{s['p10']:.0f}-{s['p90']:.0f}]; {s['regret_ok']:.0%}"


def cell_sentence(bench: str, limit: str) -> str | None:
    """What the resampled truths say of a matrix cell, for bench_matrix's list of the cells
    that miss a target; None where the cell was not resampled."""
    path = result_path(bench, limit)
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    sweep, ref = (spread(data["per_dataset"][k], data["seeds"]) for k in ("sweep", "exhaustive"))
    return (f"on {data['datasets']} resampled truths the sweep gets {sweep['median']:.0f}/60 "
            f"[{sweep['p10']:.0f}-{sweep['p90']:.0f}] and a worst regret within {REGRET_MAX:.0%} in "
            f"{sweep['regret_ok']:.0%} of them, the reference {ref['median']:.0f}/60 "
            f"[{ref['p10']:.0f}-{ref['p90']:.0f}]")


def section(benches: list[str], limits: list[str]) -> tuple[str, dict[str, Any]]:
    lines = ["## How far a matrix cell moves with its truth's runs (`scripts/bench_resample.py`)", "",
             "A cell of the matrix above is 60 seeds against one measured truth; a seed observes half "
             "of its R rounds, so its seeds are at most C(R, R/2) different splits of the same runs (20 "
             "for 6 rounds, 70 for 8, 252 for 10), and within one truth "
             "a config's observed and held-out halves share its runs (a half that looks lucky leaves "
             "an unlucky one). So each cell of the benches judged on held-out runs is replayed again "
             "on truths resampled from the committed one: its measurement rounds drawn with "
             "replacement, the same rounds for every config, the limit unchanged. Each cell: the "
             "accuracy by cost over the resampled truths, scaled to 60 seeds, as median [10th-90th "
             f"percentile]; then the share of truths where the worst regret was at most "
             f"{REGRET_MAX:.0%}. `{TRIALS}` trials, the same rows and judging as the matrix. "
             "Regenerate: `scripts/bench_resample.py` (replays) or `scripts/bench_resample.py "
             "--summary-only` (this section from the committed "
             "`benchmarks/results/resample_<bench>_limit<Q>.json`).", ""]
    raw: dict[str, str] = {}
    for bench in benches:
        rows, about = [], ""
        for limit, path, data in bl.cell_results(bench, limits, result_path):
            if data is None:
                rows.append([limit, "not run"] + ["-"] * (len(KINDS) - 1))
                continue
            raw[f"{bench}/{limit}"] = str(shown_path(path))
            about = (f"{data['datasets']} resampled truths of `{data['cache']}` "
                     f"({len(data['rounds'])} rounds), {data['seeds']} seeds each.")
            rows.append([bl.limit_label(data)]
                        + [cell_text(spread(data["per_dataset"][k], data["seeds"])) for k in KINDS])
        lines += [f"### `{bench}`", "", about, "",
                  markdown_table(["limit (quantile)"] + [HEAD[k] for k in KINDS], rows), ""]
    return "\n".join(lines), raw


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bl.add_cell_args(ap, list(BENCHES), "resample", "resample", bs.RESULTS, bs.ROOT / "benchmarks" / "sections")
    ap.add_argument("--datasets", type=int, default=20, help="resampled truths per cell")
    ap.add_argument("--seeds", type=int, default=15, help="replay seeds per resampled truth")
    args = ap.parse_args(argv)
    bl.replay_cells(args, functools.partial(_replay, datasets=args.datasets, seeds=args.seeds), result_path, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
