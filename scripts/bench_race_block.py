"""How many configs a race block measures back to back (autotune.search.racing.BLOCK_SIZE): every
cell of the memory-limit matrix replayed by the shipped sweep once per block size, judged as the
matrix is, at the matrix's budget and at twice it.

    .venv/bin/python scripts/bench_race_block.py                 # replay (~1.6 h of CPU, 2 cells at a time), section
    .venv/bin/python scripts/bench_race_block.py --summary-only  # the section from committed results
    .venv/bin/python scripts/bench_race_block.py --benches mem --limits 0.7 --seeds 10

A block measures the leader and up to BLOCK_SIZE - 1 rivals one after another, so that a slow
spell of the machine hits them all and cancels in their ratio. A larger block spends the reserve
on more rivals at one repeat each; a smaller one on more repeats of the closest rival. Unlike the
headroom rule (scripts/bench_headroom.py), the block size changes which trials the sweep
launches, so each seed's sweep is replayed once per size and budget (bench_replay.replay_sweep,
the matrix's sweep row: 60 seeds; 8 trials, whose re-measuring reserve of 4 is the largest block
that can run there, and 16). Raw results: benchmarks/results/race_block_<bench>_limit<Q>.json
(each seed's pick per budget and size). The shipped size's column at 8 trials must equal the
matrix's sweep cell (same replay); the section says where it does not.
"""

from __future__ import annotations

import argparse
import functools
import json
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

from autotune.search import racing  # noqa: E402

TRIALS = bench_matrix.TRIALS
# The matrix's budget, and twice it (as the search section's second row): a larger budget has a
# larger re-measuring reserve (half the trials), where a block of 4 leaves room for more blocks.
BUDGETS = (TRIALS, 2 * TRIALS)
SIZES = (2, 3, 4)


def result_path(bench: str, limit: str) -> Path:
    return bs.RESULTS / f"race_block_{bench}_limit{limit}.json"


@contextmanager
def block_size(n: int):
    """The race's block size set to `n` for the block (the shipped value restored after)."""
    old = racing.BLOCK_SIZE
    racing.BLOCK_SIZE = n
    try:
        yield n
    finally:
        racing.BLOCK_SIZE = old


def replay_cell(bench: str, limit: str, seeds: int = 60, budgets: tuple[int, ...] = BUDGETS) -> dict[str, Any]:
    """Each seed's sweep replayed once per budget and block size; its pick by cost, judged."""
    from autotune.search.study import make_sampler

    b = bs.BENCHES[bench]
    spec, table, limit_bytes, holdout = bl.cell_truth(bench, limit)
    truths = [bt.truth_for(table, s, holdout) for s in range(seeds)]
    out: dict[str, dict[str, Any]] = {}
    for trials in budgets:
        out[str(trials)] = {}
        for n in SIZES:
            with block_size(n):
                reps = [br.replay_sweep(table, spec, make_sampler(s, worker=0), s, trials, limit_bytes, holdout)
                        for s in range(seeds)]
            usd = bs.summarize(reps, truths)["usd"]
            out[str(trials)][str(n)] = {"picks": [r.pick_usd for r in reps], "right": usd["right"],
                                        "regret_max": usd["regret_max"], "no_pick": usd["no_pick"]}
    return {"bench": bench, "limit_arg": limit, "mem_limit_bytes": limit_bytes, "seeds": seeds,
            "holdout": holdout, "cache": str(Path(b["cache"]).relative_to(bs.ROOT)),
            "shipped": racing.BLOCK_SIZE, "budgets": out}


cell_text = bench_matrix.figures_text


def verdict(right: dict[tuple[str, str], int], budgets: list[int], names: list[str], shipped: str) -> str:
    """Which size gets the most seeds right at each budget, and whether one beats the shipped
    size at every budget (the only evidence that would change it)."""
    best = {t: max(names, key=lambda n: (right[str(t), n], n == shipped)) for t in budgets}
    beats = [n for n in names if n != shipped and budgets
             and all(right[str(t), n] > right[str(t), shipped] for t in budgets)]
    return ("Most seeds right: " + ", ".join(f"at {t} trials block {best[t]}" for t in budgets) + ". "
            + (f"Block {' and '.join(beats)} gets more seeds right than the shipped {shipped} at every budget."
               if beats else f"No size gets more seeds right than the shipped {shipped} at every budget."))


# A cell whose shipped sweep gets this many seeds more or fewer right at one budget than at the
# other is named in the budget paragraph (a seed or two is a replay's noise across cells).
BUDGET_MOVE_SEEDS = 5


def optimum_oom_text(bench: str, limit: str, holdout: bool) -> str:
    """" (its optimum ran out of memory in k of its n runs; judged on held-out runs)", the first
    from the matrix's raw file and the committed truth (bench_matrix.optimum_oom_runs), each part
    where it applies; "" where neither does."""
    path = bench_matrix.result_path(bench, limit)
    oom = bench_matrix.optimum_oom_runs(bench, json.loads(path.read_text())) if path.is_file() else None
    parts = [f"its optimum ran out of memory in {oom[0]} of its {oom[1]} runs"] if oom else []
    parts += ["judged on held-out runs"] if holdout else []
    return f" ({'; '.join(parts)})" if parts else ""


def budget_paragraph(found: list[tuple[str, str, Path, dict[str, Any]]], budgets: list[int], shipped: str) -> str:
    """The shipped size at the smallest budget against the largest: seeds right over the cells,
    and the cells that move by BUDGET_MOVE_SEEDS or more, with how often their optimum's own runs
    ran out of memory (what a larger budget's re-measuring can draw)."""
    lo, hi = str(budgets[0]), str(budgets[-1])
    both = [(b, q, d["budgets"][lo][shipped]["right"], d["budgets"][hi][shipped]["right"], d["holdout"])
            for b, q, _, d in found if shipped in d["budgets"].get(lo, {}) and shipped in d["budgets"].get(hi, {})]
    if lo == hi or not both:
        return ""
    moved = [f"{b} {q} {x} -> {y}{optimum_oom_text(b, q, held)}" for b, q, x, y, held in
             sorted(both, key=lambda c: c[3] - c[2]) if abs(y - x) >= BUDGET_MOVE_SEEDS]
    return (f"**{hi} trials against {lo}**, block {shipped} (shipped): seeds right over the {len(both)} cells "
            f"{sum(c[2] for c in both)} at {lo} trials, {sum(c[3] for c in both)} at {hi}. Cells that move by "
            f"{BUDGET_MOVE_SEEDS} seeds or more: {', '.join(moved) or 'none'}. A larger budget re-measures more: "
            "where the optimum's own runs ran out of memory, a repeat can draw such a run, and the report then "
            "gives way to a config with headroom (`autotune.report.picks.GIVE_WAY_AFTER_OOM`), which the judge, "
            "taking the optimum by its median peak, counts as a miss.")


def section(benches: list[str], limits: list[str]) -> tuple[str, dict[str, Any]]:
    shipped = str(racing.BLOCK_SIZE)
    names = [str(n) for n in SIZES]
    found = [(bench, limit, path, data) for bench in benches
             for limit, path, data in bl.cell_results(bench, limits, result_path) if data is not None]
    budgets = sorted({int(t) for *_, data in found for t in data["budgets"]})
    cols = [(str(t), n) for t in budgets for n in names]
    rows, same, raw, unlike, seeds = [], [], {}, [], set()
    met, right = dict.fromkeys(cols, 0), dict.fromkeys(cols, 0)
    moves: dict[tuple[str, str], list[str]] = {c: [] for c in cols if c[1] != shipped}
    for bench, limit, path, data in found:
        raw[f"{bench}/{limit}"] = str(shown_path(path))
        seeds.add(data["seeds"])
        v = data["budgets"]
        texts = []
        for t, n in cols:
            x = v.get(t, {}).get(n)
            texts.append(cell_text(x) if x else "not replayed")
            if x:
                met[t, n] += bench_matrix.meets_targets(x, data["seeds"])
                right[t, n] += x["right"]
            ref = v.get(t, {}).get(shipped)
            if (t, n) in moves and x and ref and cell_text(x) != cell_text(ref):
                moves[t, n].append(f"{bench} {limit} {cell_text(ref)} -> {cell_text(x)}")
        ours = v.get(str(TRIALS), {}).get(str(data["shipped"]))
        if ours is not None:
            unlike += [d for d in [bench_matrix.differs_from_sweep(bench, limit, data["seeds"], ours)] if d]
        # the same when each budget's sizes agree with that budget's first size
        if all(texts[i] == texts[i - i % len(names)] for i in range(len(texts))):
            same.append(f"{bench} {limit}")
        else:
            rows.append([f"`{bench}` {bl.limit_label(data)}"] + texts)
    label = {n: f"{n} (shipped)" if n == shipped else n for n in names}
    head = ["cell"] + [f"{t} trials, block {label[n]}" for t, n in cols]
    lines = ["## The race's block size (`scripts/bench_race_block.py`)", "",
             "Before recommending, the sweep measures the leader and its closest rivals again, back "
             "to back, in blocks of up to `BLOCK_SIZE` configs (`autotune.search.racing`): a larger "
             "block spends the re-measuring reserve on more rivals, a smaller one on more repeats of "
             "the closest. The size changes what the sweep launches, so each seed's sweep of every "
             f"matrix cell is replayed once per size at each budget ({' / '.join(map(str, budgets))} trials; "
             f"the matrix's is {TRIALS}; {' / '.join(map(str, sorted(seeds)))} seeds): "
             "pick accuracy by cost (worst cost regret), judged as the matrix is. "
             "Regenerate: `scripts/bench_race_block.py`, or `--summary-only` from "
             "`benchmarks/results/race_block_<bench>_limit<Q>.json`.", "",
             markdown_table(head, rows) if rows else "No cell differs between sizes.", "",
             f"The same at every size (at each budget): {', '.join(same) or 'none'}.", "",
             "Against the shipped size, each size moves: "
             + "; ".join(f"**{t} trials, block {n}**: {', '.join(m) if m else 'no cell'}"
                         for (t, n), m in moves.items()) + ".", ""]
    for t in budgets:
        lines += [f"At {t} trials, seeds right over the {len(raw)} cell{'s' if len(raw) != 1 else ''}: "
                  + ", ".join(f"block {label[n]} {right[str(t), n]}" for n in names)
                  + f"; cells meeting both flat targets (at least {bench_matrix.ACCURACY}/60 and a worst "
                  f"regret within {bench_matrix.REGRET_MAX:.0%}): "
                  + ", ".join(f"block {label[n]} {met[str(t), n]}" for n in names) + ".", ""]
    lines += [verdict(right, budgets, names, shipped), ""]
    if para := budget_paragraph(found, budgets, shipped):
        lines += [para, ""]
    if unlike:
        lines += [f"**The shipped column at {TRIALS} trials differs from the matrix** (re-run "
                  "`scripts/bench_matrix.py`): " + "; ".join(unlike) + ".", ""]
    return "\n".join(lines), raw


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bl.add_cell_args(ap, list(bs.BENCHES), "race_block", "race_block", bs.RESULTS,
                     bs.ROOT / "benchmarks" / "sections", default=bs.measured_benches())
    ap.add_argument("--seeds", type=int, default=60)
    ap.add_argument("--budgets", type=int, nargs="+", default=list(BUDGETS), help="--trials of the replayed sweeps")
    ap.add_argument("--jobs", type=int, default=2, help="cells replayed at once (processes; 1: in this process)")
    args = ap.parse_args(argv)
    replay = functools.partial(replay_cell, seeds=args.seeds, budgets=tuple(args.budgets))
    bl.replay_cells(args, replay, result_path, section, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
