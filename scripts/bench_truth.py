"""Ground truth for the search benchmarks: every config of a space measured several times with
real trials, cached, topped up, and split into the runs a replay may observe and the runs its
truth is defined by.

    .venv/bin/python scripts/bench_truth.py --space benchmarks/search_space_big.yaml \\
        --cache benchmarks/results/truth_big.json --seq-len 64 --global-batch 32 --repeats 6

Measuring: `--repeats` runs per config, in rounds over the whole space (each round in its own
shuffled order, so a slow spell of the machine spreads over configs instead of hitting one,
and neighbours in the space are not always measured back to back); before each run it waits
(up to `--max-wait-s`) until at most `--max-busy` other processes are runnable: on a machine
shared with other people's test runs a run is otherwise 2-4x slower at random (measured: the
first rounds of the DeepSpeed-style space, kept in benchmarks/results/truth_ds_loaded.json).
Each run records when it ran, the load and the other runnable processes before it, the wait,
its round and the runner that ran it (`--runner`:
`launcher` = autotune.run.launch.run_trial, one fresh launcher per trial; a later runner such
as a worker pool registers in RUNNERS and the same command measures again). A cache is reused
and topped up while its identity (machine, model, trial settings, runner) matches.

Why held-out runs (the circularity): a replay that may observe every run the truth is defined
by is judged against numbers it has seen; re-measuring (racing) would then converge on the
truth by construction and pick accuracy would be inflated. So each replay seed splits every
config's runs in two halves, drawn by the seed: the replay observes only its half (a repeat of
a config draws the next run of that half, cycling when the half is used up), and the seed's
truth is the median of the other half. Truth and observations are independent runs, measured
in the same rounds. With 6 runs per config: 3 observable, truth = median of 3 held out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, install_sigterm_handler  # noqa: E402

from autotune.contract import GPTWorkload, TrialConfig, TrialResult  # noqa: E402
from autotune.contract.rank_env import CPU_HUGE_PAGES, cpu_rank_env  # noqa: E402

CACHE_VERSION = 2


def _launcher_runner():
    from autotune.run.launch import launcher_runner

    return launcher_runner()


def _pool_runner():
    from autotune.run.pool import pool_runner

    return pool_runner(fallback=_launcher_runner())


# Runners a measurement can use, by name: each returns a TrialRunner (autotune.run.launch).
# `pool` is what `autotune sweep` runs local trials with (autotune.run.pool): its trials cost
# ~0.2x a fresh launcher's (docs/benchmarks.md, pool section), so a quiet spell of the machine
# holds several rounds of a space, and its runs are the ones a shipped sweep would see.
RUNNERS: dict[str, Callable[[], Any]] = {"launcher": _launcher_runner, "pool": _pool_runner}


# ---------------------------------------------------------------------------------------
# The space
# ---------------------------------------------------------------------------------------


# Shapes a benchmark names that are not built-in presets: the 389.5M GPT of issues 13 and 28
# (12 layers, d_model 1536, vocab 32000: 389,526,528 parameters; tests/test_scale.py's).
NAMED_SHAPES = {"gpt390m": dict(n_layers=12, d_model=1536, n_heads=12, vocab_size=32000, max_seq_len=256)}


def workload_for(name: str) -> GPTWorkload:
    """A built-in preset, or one of NAMED_SHAPES."""
    if name in NAMED_SHAPES:
        from autotune.contract import GPTShape

        return GPTWorkload(preset=None, shape=GPTShape(**NAMED_SHAPES[name]))
    return GPTWorkload(preset=name)


def make_spec(args):
    from autotune.spec import BatchPolicy, SweepSpec, TrialSettings

    return SweepSpec(workload=workload_for(args.preset), seq_len=args.seq_len,
                     batch=BatchPolicy(global_batch_samples=args.global_batch),
                     space=str(args.space),
                     trial=TrialSettings(warmup_steps=args.warmup_steps, measure_steps=args.measure_steps,
                                         max_measure_steps=args.max_measure_steps,
                                         min_measure_s=args.min_measure_s,
                                         timeout_s=args.timeout_s))


def enumerate_space(rs, global_batch_samples: int | None) -> list[tuple[dict, dict]]:
    """All (optuna params, TrialConfig values) pairs `suggest` can return, depth first."""
    from autotune.search.space_walk import enumerate_configs

    return enumerate_configs(rs, global_batch_samples)


def config_key(values: dict[str, Any]) -> str:
    """A config's name in a ground truth; FSDP2 is named only when on (older keys stay valid)."""
    v = {k: getattr(x, "value", x) for k, x in values.items()}
    fsdp = v.get("fsdp") or "none"
    return (f"g{v['num_gpus']}-tp{v['tp_degree']}-mb{v['micro_batch_size']}-acc{v['grad_accum_steps']}"
            f"-{v['precision']}-ckpt:{v['checkpointing']}-z{v['zero_stage']}-off:{v['offload']}"
            + (f"-fsdp:{fsdp}" if fsdp != "none" else ""))


def cfg_key(cfg: TrialConfig) -> str:
    return config_key(dict(num_gpus=cfg.num_gpus, tp_degree=cfg.tp_degree,
                           micro_batch_size=cfg.micro_batch_size, grad_accum_steps=cfg.grad_accum_steps,
                           precision=cfg.precision, checkpointing=cfg.checkpointing,
                           zero_stage=cfg.zero_stage, offload=cfg.offload, fsdp=cfg.fsdp))


def trial_config(values: dict, spec, ms, seed: int) -> TrialConfig:
    """The TrialConfig a sweep launches for these values (the sweep's own rule)."""
    from autotune.search.objective import trial_config_for

    return trial_config_for(values, spec, ms, num_nodes=1, seed=seed)


# ---------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------


def machine_identity(hw) -> dict[str, Any]:
    """What must match for cached runs to count as this machine's (not the hostname)."""
    return {"device_kind": hw.device_kind.value, "device_name": hw.device_name,
            "device_count": hw.device_count, "cpu_model": hw.cpu_model, "cpu_bf16": hw.cpu_bf16,
            "cpu_count": hw.cpu_count, "host_memory_gib": round((hw.host_memory_bytes or 0) / 2**30)}


def cache_identity(args, hw) -> dict[str, Any]:
    return {"version": CACHE_VERSION, "machine": machine_identity(hw), "preset": args.preset,
            "seq_len": args.seq_len, "global_batch": args.global_batch,
            "warmup_steps": args.warmup_steps, "measure_steps": args.measure_steps,
            "max_measure_steps": args.max_measure_steps, "min_measure_s": args.min_measure_s,
            "cpu_env": trial_cpu_env(), "runner": getattr(args, "runner", "launcher")}


def trial_cpu_env() -> dict[str, str]:
    """The allocator setting CPU trials launched from here get (autotune.contract.rank_env:
    huge pages, unless this environment turns them off)."""
    return {k: cpu_rank_env(1, os.environ)[k] for k in CPU_HUGE_PAGES}


# What caches measured before trials had a window floor and CPU huge pages (2026-12-01) ran with.
BEFORE_FLOOR = {"min_measure_s": 0.0, "cpu_env": {k: "0" for k in CPU_HUGE_PAGES}}


def _same_identity(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """A version-1 cache (the 40-config space) named the machine by its old hardware key."""
    if old.get("version") == 1:
        legacy = {k: old.get(k) for k in ("preset", "seq_len", "global_batch", "warmup_steps",
                                          "measure_steps", "max_measure_steps")}
        return (legacy == {k: new[k] for k in legacy}
                and all(new.get(k) == v for k, v in BEFORE_FLOOR.items())
                and old.get("cpu_count") == new["machine"]["cpu_count"]
                and old.get("hardware_key") in (f"cpu:{new['machine']['cpu_model']}",
                                                f"cuda:{new['machine']['device_name']}"))
    old = {**BEFORE_FLOOR, **old}
    if "cpu_bf16" not in (old.get("machine") or {}):
        # Measured before the identity named the CPU's bf16 (2026-12-01): unknown, not different.
        old = {**old, "machine": {**old.get("machine", {}), "cpu_bf16": new["machine"].get("cpu_bf16")}}
    return old == new


def load_cache(path: Path, ident: dict[str, Any] | None, log=print) -> dict[str, Any]:
    """The cache document (entries[key] = {config, results, runs_meta}); an empty one when the
    file is missing or (with `ident`) was measured elsewhere or with other settings."""
    doc: dict[str, Any] = {"identity": ident, "entries": {}}
    if path.is_file():
        old = json.loads(path.read_text())
        if ident is None or _same_identity(old.get("identity") or {}, ident):
            doc = old
        else:
            log(f"cache {path} was measured elsewhere or with other settings: measuring again")
    for entry in doc["entries"].values():
        if "result" in entry:  # version 1: a single run
            entry["results"] = [entry.pop("result")]
        entry.setdefault("runs_meta", [{} for _ in entry["results"]])
    return doc


def _load1() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def others_running(samples: int = 2) -> float:
    """Processes other than this one ready to run right now (the kernel's instantaneous count
    of runnable tasks, /proc/loadavg field 4, minus the reader), averaged over `samples`
    seconds. Unlike the load average it does not remember this benchmark's own last run."""
    counts = []
    for i in range(samples):
        try:
            with open("/proc/loadavg") as f:
                counts.append(int(f.read().split()[3].split("/")[0]) - 1)
        except (OSError, ValueError, IndexError):
            return 0.0
        if i + 1 < samples:
            time.sleep(1.0)
    return sum(counts) / len(counts)


def _wait_for_quiet(max_busy: float | None, max_wait_s: float) -> tuple[float, float]:
    """Wait (at most `max_wait_s`) until at most `max_busy` other processes are runnable on
    average: a machine shared with other people's test runs (2 cores, their trials of 2-4
    ranks) slows a run 2-4x at random, which no number of runs averages out. A run still
    starts after the wait; its wait and the other processes' count are recorded."""
    waited, busy = 0.0, others_running()
    while max_busy is not None and max_busy >= 0 and waited < max_wait_s and busy > max_busy:
        time.sleep(10.0)
        waited += 15.0
        busy = others_running()
    return waited, busy


def measure(configs, spec, ms, args, log=print) -> dict[str, Any]:
    """Measure every config until it has `args.repeats` runs, a round at a time (a round =
    every config once, in an order shuffled by the round number). Saves after every run."""
    cache = Path(args.cache)
    doc = load_cache(cache, cache_identity(args, ms.hardware), log) if not args.remeasure else \
        {"identity": cache_identity(args, ms.hardware), "entries": {}}
    todo = []
    for rep in range(args.repeats):
        order = list(configs)
        random.Random(rep).shuffle(order)
        todo += [(rep, v) for _, v in order
                 if len(doc["entries"].get(config_key(v), {}).get("results", [])) <= rep]
    if todo and getattr(args, "replay_only", False):
        raise SystemExit(f"--replay-only: {len(todo)} runs are missing from {cache}")
    if not todo:
        return doc
    runner = RUNNERS[args.runner]()
    deadline_s = getattr(args, "deadline_s", None)
    deadline = None if deadline_s is None else time.monotonic() + deadline_s
    try:
        _measure_todo(doc, todo, runner, spec, ms, args, cache, log, deadline)
    finally:
        close = getattr(runner, "close", None)
        if close is not None:
            close()
    return doc


def _measure_todo(doc, todo, runner, spec, ms, args, cache: Path, log, deadline: float | None = None) -> None:
    """Runs `todo` in order, saving after each; none starts after `deadline` (time.monotonic():
    a lent GPU's time is counted, and what ran by then is kept)."""
    from autotune.contract import write_json_atomic

    with tempfile.TemporaryDirectory(prefix="bench_truth_") as tmp:
        for i, (rep, values) in enumerate(todo):
            if deadline is not None and time.monotonic() >= deadline:
                log(f"  deadline reached: {len(todo) - i} of {len(todo)} runs not measured; "
                    "the same command measures them later", flush=True)
                return
            cfg = trial_config(values, spec, ms, seed=spec.seed)
            entry = doc["entries"].setdefault(config_key(values), {
                "config": cfg.model_dump(mode="json"), "results": [], "runs_meta": []})
            if len(entry["results"]) > rep:  # measured meanwhile (an earlier round's top-up)
                continue
            waited, busy = _wait_for_quiet(getattr(args, "max_busy", None), getattr(args, "max_wait_s", 0.0))
            meta = {"round": rep, "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                    "load1_before": _load1(), "others_running_before": busy, "runner": args.runner,
                    "waited_s": waited}
            t0 = time.monotonic()
            result = runner(cfg, Path(tmp) / f"trial_{i:05d}")
            meta["controller_wall_s"] = round(time.monotonic() - t0, 3)
            result.log_tail = None  # keep the data file small; the status and error stay
            entry["results"].append(result.model_dump(mode="json"))
            entry["runs_meta"].append(meta)
            log(f"  [{i + 1}/{len(todo)}] round {rep + 1}: {config_key(values)}: "
                f"{result.status.value} {result.tokens_per_s or 0:,.0f} tok/s, "
                f"{meta['controller_wall_s']:.1f}s, load {meta['load1_before']}", flush=True)
            doc["measured_utc"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            write_json_atomic(cache, doc)  # resumable: every run is kept


# ---------------------------------------------------------------------------------------
# The table the replays read
# ---------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class _Scored:
    """What the replay reads of a run, or of a config's truth: priced, or out of memory."""

    oom: bool = False
    hours: float | None = None
    usd: float | None = None

    @property
    def feasible(self) -> bool:
        return self.hours is not None and not self.oom


@dataclass
class Measured(_Scored):
    """One real run of a config, as the replay scores it."""

    result: TrialResult
    emulated_peak_bytes: int | None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def trial_s(self) -> float:
        """Seconds this trial costs in a replay. An OOM trial ends at its first step: its
        measured wall time without the measured steps."""
        wall = self.result.wall_s or 0.0
        if self.oom:
            return max(0.0, wall - self.result.phase_s.get("measure", 0.0))
        return wall


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def _aggregate(target: _Scored, runs: list["Measured"]) -> None:
    """A config's truth from some of its runs: medians, feasible when most runs scored."""
    scored = [m for m in runs if m.hours is not None]
    target.hours = target.usd = None
    if runs and len(scored) * 2 > len(runs):
        target.hours = _median([m.hours for m in scored])
        target.usd = _median([m.usd for m in scored])


@dataclass
class Entry(_Scored):
    """A config of the ground truth: its runs and the truth over all of them (medians). A
    replay seed sees it through `view(seed)`: the runs it may observe and its own truth."""

    key: str
    values: dict[str, Any]
    cfg: TrialConfig
    runs: list[Measured]
    emulated_peak_bytes: int | None = None
    tokens_per_s: float | None = None

    @property
    def result(self) -> TrialResult:
        return self.runs[0].result

    @property
    def trial_s(self) -> float:
        return _median([m.trial_s for m in self.runs])

    def split(self, seed: int, holdout: bool) -> tuple[list[Measured], list[Measured]]:
        """(observable, truth) runs for a replay seed. Without `holdout` (a table of fewer than
        2 runs per config, or the old benchmark) both are every run.

        The split is by measurement round, the same rounds for every config of a seed: a round
        measured every config within minutes, while rounds lie hours apart, under other load
        (truth_ds.json: the top configs ran ~20% slower in rounds 2-3 than in rounds 0-1, all
        alike). Shuffled per config, one config's observed runs would come from a fast round
        and its rival's from a slow one, and the held-out truth from the opposite: a drift no
        sweep sees (its runs are minutes apart), which turned even the exhaustive reference
        into 1/60. Runs without a round keep their index as one."""
        def rank(i: int) -> bytes:
            rnd = self.runs[i].meta.get("round", i)
            return hashlib.sha256(f"{seed}/round/{rnd}".encode()).digest()

        order = sorted(range(len(self.runs)), key=rank)
        runs = [self.runs[i] for i in order]
        if not holdout or len(runs) < 2:
            return runs, list(self.runs)
        half = len(runs) // 2
        return runs[:half], runs[half:]

    def observed(self, seed: int, nth: int = 0, holdout: bool = False) -> Measured:
        """The run a replay with this seed measures the `nth` time it runs this config."""
        obs, _ = self.split(seed, holdout)
        return obs[nth % len(obs)]

    @property
    def spread(self) -> float | None:
        """Run-to-run spread of tokens/s: (max - min) / median, None with one ok run."""
        tps = [m.result.tokens_per_s for m in self.runs if m.result.ok and m.result.tokens_per_s]
        return (max(tps) - min(tps)) / _median(tps) if len(tps) > 1 else None


def emulated_peak(result: TrialResult) -> int | None:
    """The peak a device limit is about, as the tool defines it (calibration.measured_peak_bytes:
    NVML or allocator on CUDA, peak RSS on CPU; max over ranks)."""
    from autotune.search.calibration import measured_peak_bytes

    return measured_peak_bytes(result)[0]


def build_table(doc, configs, spec, mem_limit_bytes: int | None) -> dict[str, Entry]:
    from autotune.pricing.load import load_catalog
    from autotune.search.score import device_type_key, score_trial

    catalog = load_catalog(spec.platforms.catalog)
    table: dict[str, Entry] = {}
    for _, values in configs:
        key = config_key(values)
        raw = doc["entries"][key]
        cfg = TrialConfig.model_validate(raw["config"])
        runs = []
        metas = raw.get("runs_meta") or []
        for i, r in enumerate(raw.get("results") or [raw["result"]]):
            result = TrialResult.model_validate(r)
            m = Measured(result, emulated_peak(result), metas[i] if i < len(metas) else {})
            if result.ok:
                score = score_trial(result, cfg, spec, catalog, device_type_key(cfg))
                if score is not None:
                    m.hours, m.usd = score.hours, score.usd
            if mem_limit_bytes is not None and m.emulated_peak_bytes is not None:
                m.oom = m.emulated_peak_bytes > mem_limit_bytes
            runs.append(m)
        table[key] = _entry(key, values, cfg, runs, mem_limit_bytes)
    return table


def _entry(key: str, values: dict[str, Any], cfg: TrialConfig, runs: list[Measured],
           mem_limit_bytes: int | None) -> Entry:
    """A config's entry from its scored runs: the truth over all of them (medians)."""
    e = Entry(key, values, cfg, runs)
    peaks = [m.emulated_peak_bytes for m in runs if m.emulated_peak_bytes is not None]
    e.emulated_peak_bytes = int(_median(peaks)) if peaks else None
    _aggregate(e, runs)
    if e.hours is not None:
        e.tokens_per_s = _median([m.result.tokens_per_s for m in runs if m.hours is not None])
    if mem_limit_bytes is not None and e.emulated_peak_bytes is not None:
        e.oom = e.emulated_peak_bytes > mem_limit_bytes
    return e


def rounds_of(table: dict[str, Entry]) -> list[Any]:
    """The measurement rounds every config of the table was measured in."""
    each = [{m.meta.get("round", i) for i, m in enumerate(e.runs)} for e in table.values()]
    return sorted(set.intersection(*each)) if each else []


def rounds_dates(doc: dict[str, Any]) -> str | None:
    """When a ground truth's rounds were measured, from its runs' records: "6 rounds: rounds 1-3
    on 2026-12-01, 4-6 on 2026-12-02" (a round's date: its first run's). None where its runs
    record no rounds (the oldest truths)."""
    first: dict[Any, str] = {}
    for entry in doc.get("entries", {}).values():
        for m in entry.get("runs_meta") or []:
            rnd, at = (m or {}).get("round"), (m or {}).get("started_utc")
            if rnd is not None and at:
                first[rnd] = min(first.get(rnd, at), at)
    if not first:
        return None
    by_date: dict[str, list[Any]] = {}
    for rnd, at in first.items():
        by_date.setdefault(at[:10], []).append(rnd)
    parts = []
    for day in sorted(by_date):  # a day's rounds as runs of consecutive numbers: "1-3, 5"
        spans: list[list[Any]] = []
        for rnd in sorted(by_date[day]):
            if spans and spans[-1][1] + 1 == rnd:
                spans[-1][1] = rnd
            else:
                spans.append([rnd, rnd])
        parts.append(", ".join(f"{a + 1}" + (f"-{b + 1}" if b != a else "") for a, b in spans) + f" on {day}")
    n = len(first)
    return f"{n} round{'s' * (n > 1)}: " + ("rounds " if n > 1 else "round ") + ", ".join(parts)


def resampled(table: dict[str, Entry], rounds: list[Any], mem_limit_bytes: int | None) -> dict[str, Entry]:
    """The table as if its rounds had been `rounds` (drawn with replacement from rounds_of:
    the bootstrap of bench_resample): every config gets its runs of those rounds, renumbered
    0, 1, ... so that a replay splits them as it splits measured rounds. A round drawn twice
    is two runs with the same figures. Drawing rounds, not runs, keeps what the configs of
    one round share (the load of that spell), as the replays' split by round does."""
    out = {}
    for key, e in table.items():
        by_round = {m.meta.get("round", i): m for i, m in enumerate(e.runs)}
        runs = [replace(by_round[r], meta={**by_round[r].meta, "round": i})
                for i, r in enumerate(rounds)]
        out[key] = _entry(key, e.values, e.cfg, runs, mem_limit_bytes)
    return out


@dataclass
class Truth:
    """One replay seed's truth: each config's score from its held-out runs, and the optima."""

    usd: dict[str, float]
    hours: dict[str, float]
    best_usd: float
    best_hours: float
    # Each config's share of its judged runs that ran out of memory: the chance a run of it does
    # (0.0 without a limit); what a pick's long run risks, which its median peak does not say.
    oom_share: dict[str, float] = field(default_factory=dict)

    def within(self, key: str, metric: str, tol: float) -> bool:
        v = getattr(self, metric).get(key)
        return v is not None and v <= getattr(self, f"best_{metric}") * (1 + tol)


def truth_for(table: dict[str, Entry], seed: int, holdout: bool) -> Truth:
    usd, hours, oom_share = {}, {}, {}
    for e in table.values():
        judged = e.split(seed, holdout)[1]
        oom_share[e.key] = sum(m.oom for m in judged) / len(judged) if judged else 0.0
        if e.oom:
            continue
        t = _Scored()
        _aggregate(t, judged)
        if t.hours is not None:
            usd[e.key], hours[e.key] = t.usd, t.hours
    # Where no config fits, the optima are infinite and no pick is right (bench_search).
    return Truth(usd, hours, min(usd.values(), default=math.inf), min(hours.values(), default=math.inf),
                 oom_share)


# ---------------------------------------------------------------------------------------


def add_space_args(ap) -> None:
    """The flags that define a benchmark space and its trials (shared with bench_search)."""
    ap.add_argument("--preset", default="tiny", help="built-in GPT preset or a NAMED_SHAPES name (default tiny)")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--global-batch", type=int, default=8,
                    help="samples per optimizer step; 0 = free (accumulation is a dimension)")
    ap.add_argument("--space", type=Path, default=ROOT / "benchmarks" / "search_space_cpu.yaml")
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--measure-steps", type=int, default=5)
    ap.add_argument("--max-measure-steps", type=int, default=15)
    ap.add_argument("--min-measure-s", type=float, default=TrialConfig().min_measure_s)
    ap.add_argument("--timeout-s", type=float, default=300.0)
    ap.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / "search_ground_truth.json",
                    help="ground-truth data file")
    ap.add_argument("--runner", default="launcher", choices=sorted(RUNNERS),
                    help="what runs a trial: launcher (a fresh one per trial) or pool (what a sweep uses)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per config")
    ap.add_argument("--remeasure", action="store_true", help="measure every config again")
    ap.add_argument("--max-busy", type=float, default=1.0,
                    help="before each run, wait until at most this many other processes are "
                         "runnable on average (negative: do not wait)")
    ap.add_argument("--max-wait-s", type=float, default=900.0, help="... for at most this long")


def normalise(args) -> None:
    if args.global_batch == 0:
        args.global_batch = None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_space_args(ap)
    args = ap.parse_args(argv)
    normalise(args)
    from autotune.search.machine import MachineSpace

    install_sigterm_handler()
    spec = make_spec(args)
    ms = MachineSpace.for_spec(spec)
    configs = enumerate_space(ms.restricted, spec.batch.global_batch_samples)
    print(f"{args.space}: {len(configs)} configs, {args.repeats} runs each", flush=True)
    measure(configs, spec, ms, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
