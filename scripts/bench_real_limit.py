"""Real sweeps under a memory limit, end to end (issue 28's checks "for real"), their outcome kept.

    scripts/bench_real_limit.py --case default   # ~5 min: the default sweep on 2 CPU ranks, with a
                                                 # per-rank limit between the measured peaks of
                                                 # 2 x mb4 and 2 x mb8 (measured first, 3 runs each)
    scripts/bench_real_limit.py --case gpt390    # ~15 min: the 389.5M GPT on 2 CPU ranks, with the gpt390
                                                 # bench's limit (6 GiB per rank: between FSDP2's and DDP's
                                                 # peaks in its ground truth)
                                                 # (scripts/bench_search.py --bench gpt390 --measure)
    scripts/bench_real_limit.py --summary-only   # the section from benchmarks/results/real_limit_*.json

Each case runs `autotune sweep SPEC --trials 8 --json` as a user would (a subprocess, a fresh
SQLite study, the shipped CLI) and keeps every trial (config, status, peak, build peak) and the
picks in benchmarks/results/real_limit_<case>.json. What passes:
- default: the fastest pick uses 2 ranks (the issue: 2 x mb4 fits and runs faster than 1 rank).
- gpt390: the cheapest pick's cost in the ground truth is within 3% of the best config of the
  truth that fits (median peak under the limit), and no trial's build went over the limit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_search as bs  # noqa: E402
import bench_truth as bt  # noqa: E402
from bench_common import ROOT, percentile, start_run, write_outputs  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
TRIALS = 8
WITHIN = 0.03
MiB = 2**20


def result_path(case: str) -> Path:
    return RESULTS / f"real_limit_{case}.json"


def run_sweep_cli(spec: dict, work: Path, trials: int = TRIALS) -> dict:
    """`autotune sweep SPEC --trials N --json` in a subprocess; its JSON document and wall time."""
    spec_path = work / "spec.json"  # YAML is a superset of JSON: the CLI reads either
    spec_path.write_text(json.dumps(spec, indent=1))
    argv = [sys.executable, "-m", "autotune.cli", "sweep", str(spec_path), "--trials", str(trials),
            "--json", "--runs-dir", str(work / "runs")]
    load1_before = bt._load1()
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=work)
    wall_s = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"autotune sweep exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    doc = json.loads(proc.stdout)
    return {"doc": doc, "wall_s": round(wall_s, 1), "progress": proc.stderr.splitlines()[-40:],
            "load1_before": load1_before, "load1_after": bt._load1()}


def trial_rows(report: dict) -> list[dict]:
    """Every trial of the sweep: its config key, status, peak and build peak per rank."""
    from autotune.contract import TrialResult
    from autotune.contract.trial_files import TrialFiles

    rows = []
    for t in report["trials"]:
        if not t.get("config"):
            continue
        cfg = t["config"]  # the report's fields that define a config (not a whole TrialConfig)
        build = None
        if t.get("trial_dir"):
            res = TrialFiles(Path(t["trial_dir"])).result
            if res.is_file():
                r = TrialResult.model_validate_json(res.read_text())
                build = max(r.memory.build_host_rss_peak_bytes or [0]) or None
        rows.append({"trial": t["number"], "key": bt.config_key(cfg), "status": t.get("status"),
                     "peak_bytes": t.get("peak_mem_bytes"), "build_peak_bytes": build,
                     "tokens_per_s": t.get("tokens_per_s"), "num_gpus": cfg["num_gpus"],
                     "reused_from": t.get("reused_from")})
    return rows


def reused(rows: list[dict]) -> list[dict]:
    """Rows that reused an earlier trial's measurement (no run of their own). Files kept before
    rows named it: the same config with the very same tokens/s and peak as an earlier row."""
    seen, out = set(), []
    for r in rows:
        mark = (r["key"], r["tokens_per_s"], r["peak_bytes"])
        if r.get("reused_from") is not None or ("reused_from" not in r and r["tokens_per_s"] and mark in seen):
            out.append(r)
        seen.add(mark)
    return out


def pick_key(report: dict, which: str) -> str | None:
    option = report.get(which)
    return bt.config_key(option["config"]) if option else None


# -- case default -------------------------------------------------------------------------


def default_peaks(repeats: int) -> dict[str, list[int]]:
    """Peaks per rank of the default sweep's 2 x mb4 and 2 x mb8 (no savers, accumulation 1),
    measured with the sweep's own trial runner, `repeats` runs each."""
    from autotune.search.calibration import measured_peak_bytes
    from autotune.search.machine import MachineSpace
    from autotune.search.strategy import baseline_params
    from autotune.spec import default_spec

    spec = default_spec()
    ms = MachineSpace.for_spec(spec)
    # The precision the sweep starts from on this machine (its first baseline's: bf16 where the
    # CPU runs it natively).
    first = baseline_params(ms, spec.batch.global_batch_samples)[0]["precision"]
    precision = str(getattr(first, "value", first))
    plain = {"checkpointing": "none", "zero_stage": 0, "offload": "none", "tp_degree": 1, "fsdp": "none",
             "precision": precision}
    picked: dict[int, dict] = {}
    for _, values in bt.enumerate_space(ms.restricted, spec.batch.global_batch_samples):
        v = {k: getattr(x, "value", x) for k, x in values.items()}
        if v["num_gpus"] == 2 and v["micro_batch_size"] in (4, 8) and all(v.get(k, x) == x for k, x in plain.items()):
            best = picked.get(v["micro_batch_size"])
            if best is None or v["grad_accum_steps"] < best["grad_accum_steps"]:
                picked[v["micro_batch_size"]] = values
    if set(picked) != {4, 8}:
        raise SystemExit("the default space has no 2-rank micro-batch 4 and 8 configs on this machine")
    runner = bt.RUNNERS["launcher"]()
    peaks: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory(prefix="real_limit_") as tmp:
        for _, values in sorted(picked.items()):
            cfg = bt.trial_config(values, spec, ms, seed=spec.seed)
            key = bt.config_key(values)
            for i in range(repeats):
                result = runner(cfg, Path(tmp) / f"{key}_{i}")
                peak = measured_peak_bytes(result)[0]
                if not result.ok or not peak:
                    raise SystemExit(f"{key}: {result.status.value}: {result.error}")
                peaks.setdefault(key, []).append(peak)
                print(f"  {key} run {i + 1}: peak {peak / MiB:,.0f} MiB per rank", flush=True)
    return peaks


def case_default(args) -> dict:
    peaks = default_peaks(args.repeats)
    (k4, p4), (k8, p8) = sorted(peaks.items(), key=lambda kv: statistics.median(kv[1]))
    if max(p4) >= min(p8):
        raise SystemExit(f"the peaks of {k4} ({p4}) and {k8} ({p8}) overlap: no limit lies between them")
    limit = (max(p4) + min(p8)) // 2  # between every run of the one and every run of the other
    with tempfile.TemporaryDirectory(prefix="real_limit_") as tmp:
        work = Path(tmp)
        out = run_sweep_cli({"memory": {"limit_bytes_per_rank": limit},
                             "storage": f"sqlite:///{work / 'study.db'}", "study": "real-limit"}, work)
        report = out["doc"]["report"]
        rows = trial_rows(report)
    fastest = pick_key(report, "fastest")
    fastest_gpus = next((r["num_gpus"] for r in rows if r["key"] == fastest), None)
    return {"case": "default", "limit_bytes": limit, "peaks_bytes": peaks, "trials": rows,
            "cheapest": pick_key(report, "cheapest"), "fastest": fastest, "wall_s": out["wall_s"],
            "stop_reason": out["doc"]["sweep"]["stop_reason"], "progress": out["progress"],
            "passed": fastest_gpus == 2,
            "criterion": "the fastest pick uses 2 ranks"}


# -- case gpt390 ----------------------------------------------------------------------------


# The gpt390 truth measured with the sweep's own runner (fresh ranks), for the configs that fit
# under the limit: `scripts/bench_search.py --bench gpt390 --measure-only --runner launcher
# --repeats 8 --configs KEY...`.
FRESH_TRUTH = bs.runner_truth_path("gpt390", "launcher")


def gpt390_truth(limit: int | None, cache: Path | None = None, subset: bool = False):
    """The ground truth's table (bench_search's gpt390 bench) under `limit`: the bench's own file,
    or `cache`; with `subset`, the configs that file holds (a truth of part of the space)."""
    b = bs.BENCHES["gpt390"]
    ns = argparse.Namespace(preset=b["preset"], seq_len=b["seq_len"], global_batch=None, space=b["space"],
                            min_measure_s=bt.TrialConfig().min_measure_s,
                            **{"warmup_steps": 2, "measure_steps": 5, "max_measure_steps": 15, **b["trial"]})
    spec = bt.make_spec(ns)
    from autotune.search.machine import MachineSpace

    ms = MachineSpace.for_spec(spec)
    configs = bt.enumerate_space(ms.restricted, None)
    doc = bt.load_cache(Path(cache or b["cache"]), None)
    if subset:
        configs = [(p, v) for p, v in configs if bt.config_key(v) in doc["entries"]]
    missing = [bt.config_key(v) for _, v in configs if bt.config_key(v) not in doc["entries"]]
    if missing:
        raise SystemExit(f"the gpt390 ground truth lacks {len(missing)} configs: run "
                         "`scripts/bench_search.py --bench gpt390 --measure --repeats 1` first")
    return spec, bt.build_table(doc, configs, spec, limit), ns


def sharding_peaks(table) -> dict[str, list[int]]:
    """Each DDP and FSDP2 config's median peak per rank (every micro-batch), by engine."""
    out: dict[str, list[int]] = {}
    for e in table.values():
        c = e.cfg
        name = ("FSDP2" if c.fsdp.value != "none" else "DDP" if c.zero_stage == 0 else None)
        if name and e.emulated_peak_bytes:
            out.setdefault(name, []).append(e.emulated_peak_bytes)
    return out


def best_and_regret(table: dict, pick: str) -> tuple[str, float | None]:
    """The cheapest config that fits (median cost), and the pick's cost over it (None: the pick
    does not fit)."""
    fits = {k: e for k, e in table.items() if e.usd is not None and not e.oom}
    best = min(fits, key=lambda k: fits[k].usd)
    return best, (table[pick].usd / fits[best].usd - 1 if pick in fits else None)


def regret_interval(table: dict, pick: str, fits: list[str], draws: int = 2000,
                    seed: int = 0) -> tuple[float, float]:
    """A 90% bootstrap interval of the pick's cost regret against the best of `fits`: each
    config's runs resampled with replacement, its median cost and the best recomputed per draw."""
    import random

    rng = random.Random(seed)
    usd = {k: [m.usd for m in table[k].runs if m.usd is not None] for k in fits}
    regrets = []
    for _ in range(draws):
        med = {k: statistics.median(rng.choices(v, k=len(v))) for k, v in usd.items()}
        regrets.append(med[pick] / min(med.values()) - 1)
    return percentile(regrets, 5), percentile(regrets, 95)


def fresh_judge(doc: dict, fits_pooled: list[str], path: Path | None = None) -> dict | None:
    """The pick against a truth measured with the sweep's own runner (fresh ranks), where that
    truth holds every config the pooled truth says fits; None where it does not."""
    path = path or FRESH_TRUTH
    if not path.exists():
        return None
    _, table, _ = gpt390_truth(doc["limit_bytes"], cache=path, subset=True)
    if not set(fits_pooled) <= set(table):
        return None
    pick = doc["cheapest"]
    best, regret = best_and_regret(table, pick)
    fits = sorted(k for k, e in table.items() if e.usd is not None and not e.oom)
    started = sorted(str(m.meta.get("started_utc")) for e in table.values() for m in e.runs)
    return {"path": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
            "fitting": fits, "best": best, "runs": {k: len(e.runs) for k, e in table.items()},
            "tokens_per_s": {k: e.tokens_per_s for k, e in table.items()},
            "measured_utc": [started[0], started[-1]], "regret": regret,
            "regret_interval_90": None if regret is None else list(regret_interval(table, pick, fits))}


def judge_gpt390(doc: dict) -> dict:
    """The sweep's picks against the ground truth as it stands (it may have gained runs since).
    The verdict is judged by the truth measured with the sweep's runner where one covers every
    config that fits (`fresh_judge`): on CPU a sweep under a limit runs each trial in fresh ranks,
    as the long run it picks for will, and a runner can shift configs against each other
    (scripts/bench_pool_scale.py); else by the pooled truth."""
    _, table, _ = gpt390_truth(doc["limit_bytes"])
    fits = {k: e for k, e in table.items() if e.usd is not None and not e.oom}
    best, regret = best_and_regret(table, doc["cheapest"])
    truth_runs = {k: len(e.runs) for k, e in table.items()}
    # What the truth's runs measured, and how they ran (its rounds' runner), beside what this
    # sweep's own runs measured: whether the sweep's runs ranked the configs as the truth does.
    truth_tps = {k: statistics.median(m.result.tokens_per_s for m in e.runs if m.result.tokens_per_s)
                 for k, e in table.items() if any(m.result.tokens_per_s for m in e.runs)}
    runners = sorted({str(m.meta.get("runner")) for e in table.values() for m in e.runs if m.meta.get("runner")})
    fresh = fresh_judge(doc, sorted(fits))
    judged = fresh["regret"] if fresh else regret
    return {**doc, "truth_best": best, "truth_best_usd": fits[best].usd, "truth_fitting": sorted(fits),
            "truth_runs": truth_runs, "truth_tokens_per_s": truth_tps, "truth_runners": runners,
            "cheapest_regret": regret, "fresh_truth": fresh,
            "criterion": f"the cheapest pick within {WITHIN:.0%} of the best fitting config of the truth "
                         f"measured with {'the sweep' if fresh else 'the pool'}'s runner; no build over the limit",
            "passed": judged is not None and judged <= WITHIN and not doc["build_over_limit_trials"]}


def case_gpt390(args) -> dict:
    _, table0, _ = gpt390_truth(None)
    peaks = sharding_peaks(table0)
    limit = bs.BENCHES["gpt390"]["mem_limit_bytes"]  # the replays' limit, fixed after measuring
    if not max(peaks["FSDP2"]) < limit < min(peaks["DDP"]):
        raise SystemExit(f"the gpt390 limit {limit} is not between FSDP2's and DDP's measured peaks {peaks}")
    b = bs.BENCHES["gpt390"]
    user_spec = {"workload": {"kind": "gpt", "shape": bt.NAMED_SHAPES[b["preset"]]}, "seq_len": b["seq_len"],
                 "space": str(b["space"]), "trial": b["trial"],
                 "memory": {"limit_bytes_per_rank": limit}, "study": "real-limit-gpt390"}
    with tempfile.TemporaryDirectory(prefix="real_limit_") as tmp:
        work = Path(tmp)
        user_spec["storage"] = f"sqlite:///{work / 'study.db'}"
        out = run_sweep_cli(user_spec, work)
        report = out["doc"]["report"]
        rows = trial_rows(report)
    build_over = [r["trial"] for r in rows if (r["build_peak_bytes"] or 0) > limit]
    return judge_gpt390({
        "case": "gpt390", "limit_bytes": limit, "sharding_peaks_bytes": peaks, "trials": rows,
        "cheapest": pick_key(report, "cheapest"), "fastest": pick_key(report, "fastest"),
        "build_over_limit_trials": build_over, "wall_s": out["wall_s"],
        "load1_before": out["load1_before"], "load1_after": out["load1_after"],
        "stop_reason": out["doc"]["sweep"]["stop_reason"], "progress": out["progress"]})


# -- the section ----------------------------------------------------------------------------


def measured_line(d: dict) -> str:
    """The pick's and the truth's best config's tokens/s: this sweep's runs (not the reused
    ones) against the truth's median. On CPU, trials under a memory limit run in fresh ranks
    (a pooled rank's peak would carry its earlier trials': autotune.run.pool); the truth's
    rounds name their runner."""
    def runs(key: str) -> str:
        tps = [r["tokens_per_s"] for r in d["trials"] if r["key"] == key and r["tokens_per_s"]
               and r.get("reused_from") is None]
        return ", ".join(f"{x:.1f}" for x in tps) or "none"

    keys = list(dict.fromkeys([d["cheapest"], d["truth_best"]]))
    truth = d["truth_tokens_per_s"]
    shown = "; ".join(f"`{k}` {runs(k)} here, {truth[k]:.1f} in the truth" for k in keys if k in truth)
    return (f"- Tokens/s per run (this sweep's fresh ranks) against the truth's median (runner: "
            f"{', '.join(d.get('truth_runners') or ['not recorded'])}): {shown}.")


def runner_shift_line(pick: str, best: str, path: Path = RESULTS / "pool_scale.json",
                      fresh: dict | None = None, pooled_tps: dict | None = None) -> str | None:
    """Where the pick and the truth's best differ: how the runner shifts one against the other at
    this scale (scripts/bench_pool_scale.py, per round: pooled/fresh of one over the other's),
    since this sweep ran fresh ranks and the truth is pooled; with a truth measured in fresh ranks
    (`fresh_judge`), what it measured against what the pool did. None where not measured."""
    if pick == best or not path.exists():
        return None
    data = json.loads(path.read_text())
    name = {key: n for n, key in data["configs"].items()}
    for c in data["summary"]["between_configs"]:
        if {name.get(pick), name.get(best)} == {c["a"], c["b"]}:
            best_over_pick = c["median"] if name.get(best) == c["a"] else 1 / c["median"]
            above = c["above_1"] if name.get(best) == c["a"] else c["below_1"]
            line = (f"- The runners: the pool measured the truth's best against this pick x{best_over_pick:.3f} "
                    f"of what fresh ranks measured (median of {len(c['per_round'])} back-to-back rounds, "
                    f"{above} of them above 1, sign test p {c['sign_test_p']:.3f}; `scripts/bench_pool_scale.py`)")
            ft = (fresh or {}).get("tokens_per_s") or {}
            if pick in ft and best in ft and pooled_tps and pick in pooled_tps and best in pooled_tps:
                f_ratio, p_ratio = ft[best] / ft[pick], pooled_tps[best] / pooled_tps[pick]
                return (line + f"; the truth measured in fresh ranks (below) has the best at x{f_ratio:.3f} "
                        f"of the pick's tokens/s, the pooled truth x{p_ratio:.3f}, so "
                        + ("that shift is not borne out here: the gap is the configs', not the pool's."
                           if abs(f_ratio / p_ratio - 1) < abs(best_over_pick - 1) / 2 else
                           "part of the pooled truth's gap is its runner.")
                        + " The verdict is judged by the truth measured in fresh ranks, as the sweep ran.")
            return (line + ", so part of the cost gap below may be the truth's runner, not the pick; "
                    "the verdict stays judged by the committed (pooled) truth.")
    return None


def earlier_runs(path: Path) -> list[dict]:
    """What the runs of this case kept before the one replacing `path` picked, and their verdicts
    (one line each, oldest first): a new run never hides an earlier outcome."""
    if not path.exists():
        return []
    old = json.loads(path.read_text())
    brief = {"date_utc": old["context"]["date_utc"], "git_commit": old["context"]["git_commit"],
             "cheapest": old["cheapest"], "fastest": old["fastest"], "passed": old["passed"],
             "cheapest_regret_pooled": old.get("cheapest_regret"),
             "cheapest_regret_fresh": (old.get("fresh_truth") or {}).get("regret")}
    return [*old.get("earlier", []), brief]


def earlier_line(runs: list[dict]) -> str:
    def one(r: dict) -> str:
        regrets = [f"{name} {r[k]:+.1%}" for name, k in (("pooled truth", "cheapest_regret_pooled"),
                                                          ("fresh-rank truth", "cheapest_regret_fresh"))
                   if r.get(k) is not None]
        return (f"{r['date_utc']} (`{r['git_commit']}`): cheapest `{r['cheapest']}`"
                + (f" ({', '.join(regrets)})" if regrets else "") + f", {'yes' if r['passed'] else 'no'}")
    return "- Earlier runs of this case: " + "; ".join(one(r) for r in runs) + "."


def tally_line(d: dict) -> str:
    """How many runs of this case passed, this one and the earlier ones: one run's verdict
    depends on its trials' noise."""
    passed = [r["passed"] for r in d.get("earlier", [])] + [d["passed"]]
    return f"- Runs of this case so far: {sum(passed)} of {len(passed)} passed."


def fresh_line(pick: str, f: dict) -> str:
    """The pick against the truth measured with the sweep's runner (`fresh_judge`)."""
    runs = sorted(set(f["runs"].values()))
    tps = f["tokens_per_s"]
    head = (f"- Against the truth measured with the sweep's runner (`{f['path']}`: the {len(f['runs'])} configs "
            f"the pooled truth says fit, {'-'.join(map(str, runs))} runs each in fresh ranks, "
            f"{f['measured_utc'][0]} to {f['measured_utc'][1]} UTC): best `{f['best']}` "
            f"{tps[f['best']]:.1f} tokens/s (median)")
    if f["regret"] is None:
        return head + f"; the pick `{pick}` does not fit there."
    lo, hi = f["regret_interval_90"]
    pick_tps = "" if pick == f["best"] else f", the pick {tps[pick]:.1f}"
    return (head + f"{pick_tps}; the pick's cost against it: {f['regret']:+.1%} "
            f"(90% bootstrap interval over the runs {lo:+.1%} to {hi:+.1%}).")


def section(docs: list[dict]) -> str:
    lines = ["## Real sweeps under a memory limit (`scripts/bench_real_limit.py`)", "",
             "The shipped CLI, `autotune sweep SPEC --trials 8`, run as a user would on this machine "
             "(2 CPU ranks), with a per-rank limit where memory binds. Raw: "
             + ", ".join(f"`benchmarks/results/real_limit_{d['case']}.json`" for d in docs) + ".", ""]
    for d in docs:
        again = reused(d["trials"])
        ran = [r for r in d["trials"] if r["status"] not in (None, "prescreened") and r not in again]
        oom = [r for r in ran if r["status"] == "oom"]
        ctx = d["context"]
        machine = f", {ctx['machine']}" if ctx.get("machine") else ""
        lines.append(f"### `{d['case']}` ({ctx['date_utc']}, commit `{ctx['git_commit']}`{machine})")
        lines.append("")
        if d["case"].startswith("default"):
            p = {k: f"{statistics.median(v) / MiB:,.0f}" for k, v in d["peaks_bytes"].items()}
            shown = ", ".join(f"`{k}` {v}" for k, v in p.items())
            lines.append(f"- Measured first (median peak per rank, MiB): {shown}; "
                         f"limit {d['limit_bytes'] / MiB:,.0f} MiB per rank.")
        else:
            p = {k: f"{min(v) / MiB:,.0f}-{max(v) / MiB:,.0f}" for k, v in d["sharding_peaks_bytes"].items()}
            lines.append(f"- Ground truth (`benchmarks/results/truth_gpt390_pool.json`) peaks per rank, MiB: "
                         f"{', '.join(f'{k} {v}' for k, v in p.items())}; limit {d['limit_bytes'] / MiB:,.0f} MiB; "
                         f"{len(d['truth_fitting'])} configs fit; the best that fits: `{d['truth_best']}`.")
            reg = d["cheapest_regret"]
            if d.get("truth_runs"):
                lines.append(f"- Runs per config in the truth: {min(d['truth_runs'].values())}-"
                             f"{max(d['truth_runs'].values())}; the pick `{d['cheapest']}` has "
                             f"{d['truth_runs'].get(d['cheapest'], 0)}, the best `{d['truth_best']}` "
                             f"{d['truth_runs'].get(d['truth_best'], 0)}.")
            if d.get("truth_tokens_per_s"):
                lines.append(measured_line(d))
            fresh = d.get("fresh_truth")
            shift = runner_shift_line(d["cheapest"], d["truth_best"], fresh=fresh,
                                      pooled_tps=d.get("truth_tokens_per_s"))
            if shift:
                lines.append(shift)
            lines.append("- Cheapest pick's cost against the pooled truth's best (its runs): "
                         + ("does not fit" if reg is None else f"{reg:+.1%}")
                         + f"; trials whose build went over the limit: {len(d['build_over_limit_trials'])}.")
            if fresh:
                lines.append(fresh_line(d["cheapest"], fresh))
        lines.append(f"- Trials: {len(ran)} launched ({len(oom)} out of memory), "
                     f"{len(d['trials']) - len(ran) - len(again)} held back, {len(again)} reused an "
                     f"earlier measurement; wall {d['wall_s']:,.0f} s; stop: "
                     f"{d['stop_reason'] or 'the --trials budget'}.")
        lines.append(f"- Picks: cheapest `{d['cheapest']}`, fastest `{d['fastest']}`.")
        if d.get("load1_before") is not None:
            lines.append(f"- Load average (1 min) before and after the sweep: {d['load1_before']}, {d['load1_after']}.")
        lines.append(f"- {d['criterion']}: **{'yes' if d['passed'] else 'no'}**.")
        if d.get("earlier"):
            lines.append(tally_line(d))
            lines.append(earlier_line(d["earlier"]))
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=["default", "gpt390"], action="append", default=None)
    ap.add_argument("--repeats", type=int, default=3, help="default: runs of 2 x mb4 and 2 x mb8 first")
    ap.add_argument("--summary-only", action="store_true")
    ap.add_argument("--rejudge", action="store_true",
                    help="judge the kept gpt390 sweep again against its ground truth as it stands now")
    ap.add_argument("--md-out", default=str(ROOT / "benchmarks" / "sections" / "real_limit.md"))
    args = ap.parse_args(argv)
    if args.rejudge:
        path = result_path("gpt390")
        write_outputs(str(path), None, judge_gpt390(json.loads(path.read_text())), "")
    for case in ([] if args.summary_only or args.rejudge else args.case or ["default", "gpt390"]):
        ctx, _ = start_run()
        doc = {"default": case_default, "gpt390": case_gpt390}[case](args)
        doc["context"] = ctx
        doc["earlier"] = earlier_runs(result_path(case))
        write_outputs(str(result_path(case)), None, doc, "")
        print(f"{case}: passed={doc['passed']}", flush=True)
    docs = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("real_limit_*.json"))]
    write_outputs(None, args.md_out, {}, section(docs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
