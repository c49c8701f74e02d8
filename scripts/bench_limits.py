"""Memory limits and the sweep's first trials, for the search benchmark (scripts/bench_search.py).

    q = parse_limit("0.2")                      # a quantile of the measured peaks, or None
    limit = limit_bytes(table, q)               # bytes per rank (None: no limit)
    keys = baseline_keys(ms, spec, configs)     # the shipped sweep's baselines, in its order
    place = optimum_place(table, keys, ms, spec)  # where the optimum lies among them
    spec, table, limit, holdout = cell_truth("mem", "0.5")  # a matrix cell's truth, for replays

A limit is a quantile of the configs' measured peaks (each config's median peak per rank, as
`autotune.search.calibration.measured_peak_bytes` defines a peak), so "0.2" means: a device
where only a fifth of the space's configs fit. The baselines come from the shipped
`autotune.search.strategy.baseline_params` (the benchmark calls the shipped code), and the
distance to the optimum counts the shipped local moves (`autotune.search.space_walk.neighbours`:
one dimension to its adjacent choice).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Iterator

from bench_common import percentile, start_run, write_outputs

# The quantiles the matrix runs every space at, and "none" (no limit).
LIMITS = ("0.1", "0.2", "0.3", "0.5", "0.7", "0.9", "none")


def parse_limit(text: str) -> float | str | None:
    """`--limit`: a quantile in (0, 1], `none`, or `default` (the bench's own limit)."""
    if text.strip().lower() in ("none", "default"):
        return None if text.strip().lower() == "none" else "default"
    try:
        q = float(text)
    except ValueError:
        q = -1.0
    if not 0 < q <= 1:
        raise argparse.ArgumentTypeError(
            f"--limit {text!r} is not a quantile: give a number in (0, 1] such as "
            f"{', '.join(LIMITS[:-1])}, none, or default (the bench's own limit)")
    return q


def limit_name(q: float | None) -> str:
    """How a limit names its result file: search_<bench>_limit<name>.json."""
    return "none" if q is None else f"{q:g}"


def limit_bytes(table, quantile: float | None) -> int | None:
    """The per-rank limit at this quantile of the configs' measured peaks (runs that failed for
    other reasons do not count)."""
    if quantile is None:
        return None
    peaks = sorted(e.emulated_peak_bytes for e in table.values()
                   if e.result.ok and e.emulated_peak_bytes is not None)
    return int(percentile(peaks, 100 * quantile))


def _params_key(params: dict[str, Any]) -> str:
    return json.dumps({k: getattr(v, "value", v) for k, v in params.items()}, sort_keys=True, default=str)


def baseline_keys(ms, spec, configs) -> list[str]:
    """The shipped sweep's baselines (autotune.search.strategy.baseline_params), in its order,
    as ground-truth keys."""
    from bench_truth import config_key

    from autotune.search.strategy import baseline_params

    by_params = {_params_key(p): config_key(v) for p, v in configs}
    out = []
    for params in baseline_params(ms, spec.batch.global_batch_samples):
        key = by_params.get(_params_key(params))
        if key is None:
            raise SystemExit(f"baseline {params} is not a config of the space: the enumeration "
                             "and the shipped baselines disagree")
        out.append(key)
    return out


def optimum_key(table, metric: str = "usd") -> str | None:
    """The optimum of the whole truth (every run's median) under the table's limit; None when
    no config fits."""
    ok = [e for e in table.values() if e.feasible and not e.oom]
    return min(ok, key=lambda e: getattr(e, metric)).key if ok else None


def moves_away(table, start: list[str], goal: str, ms, spec) -> int | None:
    """The fewest shipped local moves (autotune.search.space_walk.neighbours) from any of `start`
    to `goal`, through configs of the table; None if unreachable."""
    from bench_truth import config_key

    from autotune.search.space_walk import neighbours

    dist = {k: 0 for k in start}
    todo = deque(start)
    while todo:
        k = todo.popleft()
        if k == goal:
            return dist[k]
        for _, moved in neighbours(table[k].values, ms.restricted, spec.batch.global_batch_samples, ms.full):
            nk = config_key(moved)
            if nk in table and nk not in dist:
                dist[nk] = dist[k] + 1
                todo.append(nk)
    return None


def optimum_place(table, baselines: list[str], ms, spec) -> dict[str, Any]:
    """Where the optimum (by cost) lies among the sweep's first trials: {optimum, baseline
    (1-based index or None), moves (from the nearest baseline), fits (configs under the limit),
    baselines_fit (which baselines fit)}."""
    best = optimum_key(table)
    fits = sum(1 for e in table.values() if e.feasible and not e.oom)
    place: dict[str, Any] = {"optimum": best, "baselines": baselines, "fits": fits,
                             "baselines_fit": [not table[k].oom and table[k].feasible for k in baselines],
                             "baseline": None, "moves": None}
    if best is None:
        return place
    if best in baselines:
        place["baseline"] = baselines.index(best) + 1
        place["moves"] = 0
    else:
        place["moves"] = moves_away(table, baselines, best, ms, spec)
    return place


def place_sentence(place: dict[str, Any]) -> str:
    """One sentence: where the optimum lies among the sweep's first trials."""
    n_fit = sum(place["baselines_fit"])
    fit = (f"{n_fit} of the {len(place['baselines'])} baselines fit"
           + (f" (baseline {', '.join(str(i + 1) for i, f in enumerate(place['baselines_fit']) if f)})"
              if n_fit else ""))
    if place["optimum"] is None:
        return f"No config of the space fits under this limit; {fit}."
    if place["baseline"] is not None:
        where = f"the optimum (`{place['optimum']}`) is baseline {place['baseline']}"
    elif place["moves"] is None:
        where = (f"the optimum (`{place['optimum']}`) is not among the baselines and no chain of "
                 "local moves through the space reaches it")
    else:
        where = (f"the optimum (`{place['optimum']}`) is not among the baselines; it is "
                 f"{place['moves']} local move{'s' if place['moves'] != 1 else ''} from the nearest")
    return f"Where the optimum lies: {where}; {fit}; {place['fits']} configs fit."


def cell_truth(bench: str, limit: str):
    """A matrix cell's truth, as its replays see it: (the bench's spec, the table under the
    cell's limit, the limit in bytes, whether seeds are judged on held-out runs), with Optuna's
    logging quiet for the replays that follow."""
    import warnings

    import bench_search as bs  # here: bench_search imports this module
    import bench_truth as bt
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    b, _, spec, _, configs = bs.bench_space(bench)
    doc = bt.load_cache(bs.ROOT / b["cache"], None, log=lambda *a: None)
    table, limit_bytes, _, _ = bs.limited_table(b, doc, configs, spec, parse_limit(limit))
    return spec, table, limit_bytes, bs.held_out(table)  # held_out: as bench_search's --holdout auto


def limit_label(data: dict[str, Any]) -> str:
    """A cell's limit as the sections show it: `0.3 (432 MiB)`, or `none`."""
    if not data.get("mem_limit_bytes"):
        return "none"
    return f"{data['limit_arg']} ({data['mem_limit_bytes'] / 2**20:,.0f} MiB)"


def cell_results(bench: str, limits: list[str], path_of: Callable[[str, str], Path]
                 ) -> Iterator[tuple[str, Path, dict[str, Any] | None]]:
    """(limit, its raw file, its figures or None where not run) for each limit of a bench;
    `path_of(bench, limit)` names the raw file."""
    for limit in limits:
        path = path_of(bench, limit)
        yield limit, path, json.loads(path.read_text()) if path.is_file() else None


def add_cell_args(ap, benches: list[str], name: str, what: str, results: Path, sections: Path,
                  default: list[str] | None = None) -> None:
    """The flags of a script that replays cells (bench x limit) into `<what>_<bench>_limit<Q>.json`
    and writes one section (`name`): --benches (`default`: all of `benches`), --limits,
    --summary-only, --json-out, --md-out."""
    ap.add_argument("--benches", nargs="*", default=list(benches if default is None else default),
                    choices=sorted(benches))
    ap.add_argument("--limits", nargs="*", default=list(LIMITS), type=lambda s: limit_name(parse_limit(s)))
    ap.add_argument("--summary-only", action="store_true",
                    help=f"only write the section, from the committed {what}_<bench>_limit<Q>.json")
    ap.add_argument("--json-out", default=str(results / f"{name}.json"))
    ap.add_argument("--md-out", default=str(sections / f"{name}.md"))


def _timed(replay: Callable[[str, str], dict[str, Any]], cell: tuple[str, str]):
    t0 = time.monotonic()
    return cell, replay(*cell), time.monotonic() - t0


def replay_cells(args, replay: Callable[[str, str], dict[str, Any]], path_of: Callable[[str, str], Path],
                 section: Callable[[list[str], list[str]], tuple[str, dict[str, Any]]], jobs: int = 1) -> None:
    """The work of a script with add_cell_args: unless --summary-only, each cell of --benches x
    --limits replayed by `replay(bench, limit)` (a module-level function: `jobs` cells at once run
    in processes) into `path_of(bench, limit)`; then `section(benches, limits)` (markdown, raw
    files) written to --md-out and --json-out."""
    if not args.summary_only:
        ctx, _ = start_run()
        cells = [(b, q) for b in args.benches for q in args.limits]
        run = functools.partial(_timed, replay)
        with ProcessPoolExecutor(max_workers=jobs) if jobs > 1 else nullcontext() as pool:
            for (bench, limit), data, secs in (pool.map(run, cells) if pool else map(run, cells)):
                data["context"] = ctx
                path_of(bench, limit).write_text(json.dumps(data, indent=1) + "\n")
                print(f"== {bench} at limit {limit}: {secs:.0f} s", file=sys.stderr, flush=True)
    md, raw = section(args.benches, args.limits)
    write_outputs(args.json_out, args.md_out, {"benches": args.benches, "limits": args.limits, "results": raw}, md)


def seeded_cells_main(argv: list[str] | None, name: str, doc: str | None,
                      replay: Callable[..., dict[str, Any]], path_of: Callable[[str, str], Path],
                      section: Callable[[list[str], list[str]], tuple[str, dict[str, Any]]]) -> int:
    """The command line of a script that replays each matrix cell's seeds once (`replay(bench,
    limit, seeds=...)`) into `<name>_<bench>_limit<Q>.json` and writes the section `name`:
    add_cell_args, --seeds and --jobs."""
    import bench_search as bs  # here: bench_search imports this module

    ap = argparse.ArgumentParser(description=(doc or name).splitlines()[0])
    add_cell_args(ap, list(bs.BENCHES), name, name, bs.RESULTS, bs.ROOT / "benchmarks" / "sections",
                  default=bs.measured_benches())
    ap.add_argument("--seeds", type=int, default=60)
    ap.add_argument("--jobs", type=int, default=2, help="cells replayed at once (processes; 1: in this process)")
    args = ap.parse_args(argv)
    replay_cells(args, functools.partial(replay, seeds=args.seeds), path_of, section, args.jobs)
    return 0
