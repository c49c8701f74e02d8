"""What the report's memory-headroom rule buys, and what its two constants do: every cell of the
memory-limit matrix replayed once per seed by the shipped sweep, then the report's pick read
under each variant of the rule.

    .venv/bin/python scripts/bench_headroom.py                 # replay, then the section
    .venv/bin/python scripts/bench_headroom.py --summary-only  # the section from committed results
    .venv/bin/python scripts/bench_headroom.py --benches mem --limits 0.5 --seeds 10

The rule (autotune.report.picks.with_headroom): a recommended config whose runs give one more
run less than autotune.search.verdict.P_HEADROOM chance of fitting gives way to the best config
with that headroom, where it costs at most autotune.report.picks.GIVE_WAY more (GIVE_WAY_AFTER_OOM
where some of its own runs ran out of memory). The rule reads only the report: the sweep
launches the same trials under every variant, so each seed's study is replayed once
(bench_replay.replay_sweep, the matrix's sweep row: 8 trials, 60 seeds) and its report is built
again per variant. Judged as the matrix is (bench_search.summarize, by cost). Variants: the rule
off, the shipped constants, P_HEADROOM at 0.8 and 0.95, the give-way after an OOM at GIVE_WAY
(no gate: the rule before the gate), 25% and any cost, and one give-way for every pick (flat) at
10%, 25% and any cost. Raw results: benchmarks/results/headroom_<bench>_limit<Q>.json (each seed's
pick under each variant). The shipped column must equal the matrix's sweep cell (same replay);
the section says where it does not.
"""

from __future__ import annotations

import json
import math
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_limits as bl  # noqa: E402
import bench_matrix  # noqa: E402
import bench_replay as br  # noqa: E402
import bench_search as bs  # noqa: E402
import bench_truth as bt  # noqa: E402
from bench_common import markdown_table, shown_path  # noqa: E402

from autotune.report.picks import GIVE_WAY  # noqa: E402

TRIALS = bench_matrix.TRIALS
SHIPPED = "shipped"
# name -> (P_HEADROOM, GIVE_WAY, GIVE_WAY_AFTER_OOM); None: the shipped value.
# The gate off: a pick whose runs ran out of memory gives way as far as any other (GIVE_WAY, read
# from the shipped code so that the variant follows it).
VARIANTS: dict[str, tuple[float | None, float | None, float | None]] = {
    "rule off": (0.0, None, None), SHIPPED: (None, None, None), "P_HEADROOM 0.8": (0.8, None, None),
    "P_HEADROOM 0.95": (0.95, None, None), f"after an OOM {GIVE_WAY:.0%}": (None, None, GIVE_WAY),
    "after an OOM 25%": (None, None, 0.25), "after an OOM any": (None, None, math.inf),
    "flat 10%": (None, 0.10, 0.10), "flat 25%": (None, 0.25, 0.25), "flat any": (None, math.inf, math.inf)}


def result_path(bench: str, limit: str) -> Path:
    return bs.RESULTS / f"headroom_{bench}_limit{limit}.json"


@contextmanager
def rule(p_headroom: float | None, give_way: float | None, after_oom: float | None = None):
    """The report's headroom constants set for the block (None keeps the shipped value)."""
    from autotune.report import picks
    from autotune.search import verdict

    old = verdict.P_HEADROOM, picks.GIVE_WAY, picks.GIVE_WAY_AFTER_OOM
    verdict.P_HEADROOM = old[0] if p_headroom is None else p_headroom
    picks.GIVE_WAY = old[1] if give_way is None else give_way
    picks.GIVE_WAY_AFTER_OOM = old[2] if after_oom is None else after_oom
    try:
        yield verdict.P_HEADROOM, picks.GIVE_WAY, picks.GIVE_WAY_AFTER_OOM
    finally:
        verdict.P_HEADROOM, picks.GIVE_WAY, picks.GIVE_WAY_AFTER_OOM = old


def replay_cell(bench: str, limit: str, seeds: int = 60) -> dict[str, Any]:
    """Each seed's sweep replayed once; its pick by cost under every variant, judged."""
    from autotune.search.study import make_sampler

    b = bs.BENCHES[bench]
    spec, table, limit_bytes, holdout = bl.cell_truth(bench, limit)
    reps = {name: [] for name in VARIANTS}
    truths = [bt.truth_for(table, s, holdout) for s in range(seeds)]
    for s in range(seeds):
        rep = br.replay_sweep(table, spec, make_sampler(s, worker=0), s, TRIALS, limit_bytes, holdout,
                              keep_study=True)
        for name, consts in VARIANTS.items():
            with rule(*consts):
                pick_usd, _ = br.report_picks(rep.study)
            reps[name].append(br.Replay(steps=rep.steps, pick_usd=pick_usd))
    out = {}
    for name, consts in VARIANTS.items():
        with rule(*consts) as (p_used, g_used, oom_used):
            usd = bs.summarize(reps[name], truths)["usd"]
        out[name] = {"p_headroom": p_used, "give_way": g_used, "give_way_after_oom": oom_used,
                     "picks": [r.pick_usd for r in reps[name]],
                     "right": usd["right"], "regret_max": usd["regret_max"], "no_pick": usd["no_pick"]}
    return {"bench": bench, "limit_arg": limit, "mem_limit_bytes": limit_bytes, "seeds": seeds,
            "trials": TRIALS, "holdout": holdout, "cache": str(Path(b["cache"]).relative_to(bs.ROOT)),
            "variants": out}


cell_text = bench_matrix.figures_text


def _better(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Variant figures `a` beat `b`: more seeds right, or as many with a smaller worst regret."""
    return (a["right"], -a["regret_max"]) > (b["right"], -b["regret_max"])


def cell_sentence(bench: str, limit: str) -> str | None:
    """For bench_matrix's list of missed cells: the variant that does best on this cell where
    one beats the shipped constants, and how many other cells it makes worse; None otherwise."""
    path = result_path(bench, limit)
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    v = data["variants"]
    # A file replayed before a variant was added lacks it: that variant is not read from it.
    gains = [n for n in VARIANTS if n != SHIPPED and n in v and _better(v[n], v[SHIPPED])]
    if not gains:
        return None
    best = max(gains, key=lambda n: (v[n]["right"], -v[n]["regret_max"]))
    worse = []
    for other in sorted(bs.RESULTS.glob("headroom_*_limit*.json")):
        if other != path:
            o = json.loads(other.read_text())
            if best in o["variants"] and _better(o["variants"][SHIPPED], o["variants"][best]):
                worse.append(f"{o['bench']} {o['limit_arg']}")
    return (f"the headroom rule with {best} would get {cell_text(v[best], data['seeds'])} here, and do worse in "
            f"{len(worse)} other cell{'s' if len(worse) != 1 else ''} ({', '.join(worse) or 'none'}; "
            "`scripts/bench_headroom.py`)")


def section(benches: list[str], limits: list[str]) -> tuple[str, dict[str, Any]]:
    names = list(VARIANTS)
    rows, same, raw, unlike, sizes = [], [], {}, [], set()
    moves: dict[str, list[str]] = {n: [] for n in names if n != SHIPPED}
    met = dict.fromkeys(names, 0)
    for bench in benches:
        for limit, path, data in bl.cell_results(bench, limits, result_path):
            if data is None:
                continue
            raw[f"{bench}/{limit}"] = str(shown_path(path))
            sizes.add(f"{data['trials']} trials, {data['seeds']} seeds")
            v = data["variants"]
            for name in names:  # a file replayed before a variant was added lacks it
                met[name] += name in v and bench_matrix.meets_targets(v[name], data["seeds"])
            unlike += [d for d in [bench_matrix.differs_from_sweep(bench, limit, data["seeds"], v[SHIPPED])] if d]
            for n in moves:
                if n in v and cell_text(v[n]) != cell_text(v[SHIPPED]):
                    moves[n].append(f"{bench} {limit} {cell_text(v[SHIPPED])} -> {cell_text(v[n])}")
            texts = [cell_text(v[n]) if n in v else "not replayed" for n in names]
            if len(set(texts)) == 1:
                same.append(f"{bench} {limit}")
            else:
                rows.append([f"`{bench}` {bl.limit_label(data)}"] + texts)
    n_cells = len(raw)
    lines = ["## The headroom rule's constants (`scripts/bench_headroom.py`)", "",
             "A recommended config whose runs give one more run less than `P_HEADROOM` chance of "
             "fitting gives way to the best config with that headroom where it costs at most "
             "`GIVE_WAY` more, or `GIVE_WAY_AFTER_OOM` where some of its own runs ran out of memory "
             "(`autotune.report.picks.with_headroom`). The rule reads only the "
             f"report, so each seed's sweep of the matrix ({' / '.join(sorted(sizes))}) is replayed once and "
             "its pick read under each variant: pick accuracy by cost (worst cost regret), judged "
             "as the matrix is. Regenerate: `scripts/bench_headroom.py`, or `--summary-only` from "
             "`benchmarks/results/headroom_<bench>_limit<Q>.json`. A tight pick whose truth "
             "does not fit and one whose truth fits look alike in the runs a sweep observes (one more "
             "run fits with about the same chance), so a larger flat give-way rescues the first kind only "
             "by giving up the second; a pick whose own runs ran out of memory is a measured risk, "
             "and the give-way after an OOM reads only those. The rule off shows what the rule buys.", "",
             markdown_table(["cell"] + names, rows) if rows else "No cell differs between variants.", "",
             f"The same under every variant: {', '.join(same) or 'none'}.", "",
             "Against the shipped constants, each variant moves: "
             + "; ".join(f"**{n}**: {', '.join(m) if m else 'no cell'}" for n, m in moves.items()) + ".", "",
             f"Cells (of {n_cells}) meeting both flat targets (at least {bench_matrix.ACCURACY}/60 and a "
             f"worst regret within {bench_matrix.REGRET_MAX:.0%}): "
             + ", ".join(f"{n} {met[n]}" for n in names) + ".", ""]
    if unlike:
        lines += ["**The shipped column differs from the matrix** (re-run `scripts/bench_matrix.py`): "
                  + "; ".join(unlike) + ".", ""]
    return "\n".join(lines), raw


def main(argv: list[str] | None = None) -> int:
    return bl.seeded_cells_main(argv, "headroom", __doc__, replay_cell, result_path, section)


if __name__ == "__main__":
    sys.exit(main())
