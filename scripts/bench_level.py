"""How far the pick's projected tokens/s lies from what its config runs: every cell of the
memory-limit matrix replayed once per seed by the shipped sweep, and the report's pick by cost
read three ways.

    .venv/bin/python scripts/bench_level.py                 # replay (~5 min of CPU, 2 cells at a time), section
    .venv/bin/python scripts/bench_level.py --summary-only  # the section from committed results
    .venv/bin/python scripts/bench_level.py --benches gpt390 --limits 0.7 --seeds 10

The report prices its pick at the config's estimate over its runs (autotune.search.estimates):
a median polish that nets out the spell a block of back-to-back runs shared, at the level of the
study's runs (the shipped rule: RunModel.level_shift moves every estimate by one offset). Read
beside it: the same polish at the level of the runs measured alone (the rule before: the
estimate less the shift), and the geometric mean of the pick's own runs (no model). Each is
judged against the seed's truth for the picked config: the median tokens/s of its held-out runs
(benches judged on held-out runs), or of all its runs (in-sample benches, whose truth includes
the runs the seed observed, so the own runs' mean is favoured there). Figures: the mean and the
largest |log error| over the seeds that picked a config, and how often the level lies outside
the pick's own runs. Raw results: benchmarks/results/level_<bench>_limit<Q>.json (each seed's
pick, its runs and the three levels).
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_limits as bl  # noqa: E402
import bench_matrix  # noqa: E402
import bench_replay as br  # noqa: E402
import bench_search as bs  # noqa: E402
from bench_common import markdown_table, shown_path  # noqa: E402

TRIALS = bench_matrix.TRIALS
RULES = ("shipped", "lone runs", "own runs")


def result_path(bench: str, limit: str) -> Path:
    return bs.RESULTS / f"level_{bench}_limit{limit}.json"


def pick_levels(study) -> dict[str, Any] | None:
    """The report's pick by cost: its trial, its runs (tokens/s) and its level (tokens/s) under
    each rule; None where the report recommends nothing."""
    from autotune.report.build import build_report
    from autotune.report.picks import run_models

    doc = build_report(study)
    pick = next((p for p in doc.picks if p.by == "cost"), None)
    if pick is None:
        return None
    runs = [r.tokens_per_s for r in pick.runs]
    model = next(m for _, m in run_models(study.get_trials(deepcopy=False))
                 if any(pick.trial in e.trials for e in m.configs.values()))
    return {"trial": pick.trial, "runs": runs, "interval": [pick.tokens_per_s_low, pick.tokens_per_s_high],
            "levels": {"shipped": pick.tokens_per_s, "lone runs": pick.tokens_per_s / math.exp(model.level_shift),
                       "own runs": statistics.geometric_mean(runs)}}


def replay_cell(bench: str, limit: str, seeds: int = 60) -> dict[str, Any]:
    """Each seed's sweep replayed once; its pick's levels and the truth of the picked config."""
    from autotune.search.study import make_sampler

    b = bs.BENCHES[bench]
    spec, table, limit_bytes, holdout = bl.cell_truth(bench, limit)
    out = []
    for s in range(seeds):
        rep = br.replay_sweep(table, spec, make_sampler(s, worker=0), s, TRIALS, limit_bytes, holdout,
                              keep_study=True)
        got = pick_levels(rep.study) if rep.pick_usd else None
        if got is None:
            out.append({"seed": s, "pick": None})
            continue
        truth_runs = table[rep.pick_usd].split(s, holdout)[1]
        tps = [m.result.tokens_per_s for m in truth_runs if m.result.ok and m.result.tokens_per_s]
        out.append({"seed": s, "pick": rep.pick_usd, **got,
                    "truth_tokens_per_s": statistics.median(tps) if tps else None})
    return {"bench": bench, "limit_arg": limit, "mem_limit_bytes": limit_bytes, "seeds": seeds,
            "trials": TRIALS, "holdout": holdout, "cache": str(Path(b["cache"]).relative_to(bs.ROOT)),
            "picks": out}


def errors(data: dict[str, Any]) -> dict[str, list[tuple[float, bool]]]:
    """Per rule: (|log error| against the truth, whether the level lies outside the pick's own
    runs) for each seed that picked a config with a truth."""
    out: dict[str, list[tuple[float, bool]]] = {r: [] for r in RULES}
    for p in data["picks"]:
        if not p.get("pick") or not p.get("truth_tokens_per_s"):
            continue
        lo, hi = min(p["runs"]), max(p["runs"])
        for r in RULES:
            level = p["levels"][r]
            # (a hair of float slack: a level equal to a run is inside)
            out[r].append((abs(math.log(level / p["truth_tokens_per_s"])),
                           not lo * (1 - 1e-9) <= level <= hi * (1 + 1e-9)))
    return out


def covered(data: dict[str, Any]) -> tuple[int, int, int] | None:
    """How often the report's 90% interval of the pick's tokens/s holds the truth: (seeds
    inside, truth below it, seeds judged); None for a file replayed before intervals were kept."""
    judged = [p for p in data["picks"] if p.get("pick") and p.get("truth_tokens_per_s")]
    if any("interval" not in p for p in judged):
        return None
    inside = sum(p["interval"][0] <= p["truth_tokens_per_s"] <= p["interval"][1] for p in judged)
    below = sum(p["truth_tokens_per_s"] < p["interval"][0] for p in judged)
    return inside, below, len(judged)


def coverage_text(c: tuple[int, int, int] | None) -> str:
    return "not kept" if c is None else f"{c[0]}/{c[2]} ({c[1]} below)"


def figures(errs: list[tuple[float, bool]]) -> str:
    if not errs:
        return "no pick"
    mean = sum(e for e, _ in errs) / len(errs)
    return f"{mean:.1%} (max {max(e for e, _ in errs):.0%}; outside {sum(o for _, o in errs)})"


def section(benches: list[str], limits: list[str]) -> tuple[str, dict[str, Any]]:
    rows, raw = [], {}
    pooled: dict[bool, dict[str, list[tuple[float, bool]]]] = {h: {r: [] for r in RULES} for h in (True, False)}
    cover: dict[bool, tuple[int, int, int] | None] = {h: (0, 0, 0) for h in (True, False)}
    for bench in benches:
        for limit, path, data in bl.cell_results(bench, limits, result_path):
            if data is None:
                continue
            raw[f"{bench}/{limit}"] = str(shown_path(path))
            errs = errors(data)
            for r in RULES:
                pooled[data["holdout"]][r] += errs[r]
            c, total = covered(data), cover[data["holdout"]]
            # (one file without intervals, and the total is not kept either)
            cover[data["holdout"]] = None if c is None or total is None else (
                total[0] + c[0], total[1] + c[1], total[2] + c[2])
            rows.append([f"`{bench}` {bl.limit_label(data)}", "held-out" if data["holdout"] else "in-sample",
                         len(errs["shipped"])] + [figures(errs[r]) for r in RULES] + [coverage_text(c)])
    totals = []
    for held in (True, False):
        p = pooled[held]
        if not p["shipped"]:
            continue
        mean = {r: sum(e for e, _ in p[r]) / len(p[r]) for r in RULES}
        best = min(RULES, key=lambda r: mean[r])
        totals.append(f"Over the {'held-out' if held else 'in-sample'} cells' {len(p['shipped'])} picks: "
                      + ", ".join(f"{r} {figures(p[r])}" for r in RULES)
                      + f"; the smallest mean error: {best}. The shown 90% interval holds the truth in "
                      + coverage_text(cover[held]) + ".")
    lines = ["## The pick's projected tokens/s (`scripts/bench_level.py`)", "",
             "The report prices its pick at the config's estimate over its runs. Each seed's sweep of the "
             f"matrix ({TRIALS} trials) is replayed once and its pick by cost read three ways: the shipped "
             "estimate (a median polish over configs and back-to-back blocks, at the level of the study's runs: "
             "`autotune.search.estimates.RunModel.level_shift`), the same polish at the level of the runs measured "
             "alone (the rule before), and the geometric mean of the pick's own runs. Each cell: the mean |log "
             "error| of the level against the picked config's truth (the median tokens/s of its held-out runs, "
             "or of all its runs in-sample, where the own runs are part of the truth), the largest, and how many "
             "seeds' level lies outside the pick's own runs. Beside them, how often the 90% interval the report "
             "shows for the pick's tokens/s holds that truth, and how often the truth lies below it (a pick is "
             "the best of several noisy estimates, so its truth tends to be lower; and the truth is itself the "
             "median of a few runs, not the config's expected speed). Regenerate: `scripts/bench_level.py`, or "
             "`--summary-only` from `benchmarks/results/level_<bench>_limit<Q>.json`.", "",
             markdown_table(["cell", "judged", "picks"] + list(RULES) + ["90% interval holds the truth"], rows),
             ""] + totals + [""]
    return "\n".join(lines), raw


def main(argv: list[str] | None = None) -> int:
    return bl.seeded_cells_main(argv, "level", __doc__, replay_cell, result_path, section)


if __name__ == "__main__":
    sys.exit(main())
