"""Helpers shared by the benchmark scripts: machine context, load warning, tables, statistics.

    ctx = run_context()                    # date, git commit, machine, load average (+ warning)
    print(markdown_table(["a", "b"], [[1, 2]]))
    spearman([1, 2, 3], [1, 3, 2])         # rank correlation, ties averaged (no scipy needed)

Each script writes its result as JSON (`--json-out`) and a markdown section (`--md-out`);
`scripts/run_benchmarks.sh` joins the sections into docs/benchmarks.md.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # scripts run as files: make `autotune` importable from this checkout
    sys.path.insert(0, str(ROOT))


def install_sigterm_handler() -> None:
    """Turn SIGTERM (e.g. `timeout`) into KeyboardInterrupt, so `run_trial` kills the trial's
    process group on the way out instead of leaving its ranks running."""
    import signal

    def _raise(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _raise)


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10)
        # The benchmarks' own outputs (logs are truncated by the shell before the script
        # starts) do not make the measured code "uncommitted".
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)benchmarks/results", ":(exclude)benchmarks/sections",
                                ":(exclude)docs/benchmarks.md"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10)
        commit = out.stdout.strip() or "unknown"
        return commit + (" (+ uncommitted changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def load_warning() -> str | None:
    """A warning when the machine is busier than its cores: timings taken now are contaminated."""
    from autotune.contract.hardware import usable_cpu_count

    try:
        load1 = os.getloadavg()[0]
    except OSError:
        return None
    cores = usable_cpu_count()
    if load1 > cores:
        return (f"WARNING: 1-minute load average {load1:.2f} exceeds the {cores} usable cores at "
                "start: other work shares this machine, so the timings below are contaminated "
                "(slower and noisier than on an idle machine).")
    return None


def run_context() -> dict[str, Any]:
    from autotune.run.hardware import local_hardware

    hw = local_hardware()
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    warning = load_warning()
    if warning:
        print(warning, file=sys.stderr, flush=True)
    return {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "git_commit": git_commit(),
        "machine": machine_line(hw),
        "hardware_key": hw.key(),
        "cpu_count": hw.cpu_count,
        "load_avg_at_start": load,
        "load_warning": warning,
        "python": sys.version.split()[0],
    }


def add_output_args(ap) -> None:
    """The output flags every benchmark script takes."""
    ap.add_argument("--json-out", default=None, help="write the raw figures here (JSON)")
    ap.add_argument("--md-out", default=None, help="write the document section here (Markdown)")


def start_run():
    """What every benchmark does first: its context (date, commit, machine, load), SIGTERM
    handling, and this machine's fingerprint. Returns (context, hardware)."""
    from autotune.run.hardware import local_hardware

    ctx = run_context()
    install_sigterm_handler()
    return ctx, local_hardware()


def machine_line(hw) -> str:
    mem = f", {hw.host_memory_bytes / 2**30:.0f} GiB RAM" if hw.host_memory_bytes else ""
    if hw.device_kind.value == "cuda":
        return f"{hw.device_count} x {hw.device_name} ({hw.cpu_model}, {hw.cpu_count} cores{mem})"
    return f"CPU only: {hw.cpu_model}, {hw.cpu_count} usable cores{mem}"


def context_lines(ctx: dict[str, Any]) -> list[str]:
    lines = [f"- Run: {ctx['date_utc']}, commit `{ctx['git_commit']}`",
             f"- Machine: {ctx['machine']}"]
    if ctx.get("load_avg_at_start"):
        lines.append("- Load average at start (1/5/15 min): "
                     + " / ".join(f"{x:.2f}" for x in ctx["load_avg_at_start"]))
    if ctx.get("load_warning"):
        lines.append(f"- **{ctx['load_warning']}**")
    return lines


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        if v is None:
            return "not measured"
        if isinstance(v, float):
            if math.isinf(v):
                return "not reached"
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
        return str(v).replace("|", "\\|")

    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(out)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]); inf values (not reached) sort last."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    if xs[hi] == math.inf:
        return math.inf if pos > lo or xs[lo] == math.inf else xs[lo]
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):  # ties share their mean rank
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation: Pearson's r of the ranks (ties averaged). None if < 3 points
    or a constant series (undefined)."""
    if len(xs) != len(ys) or len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def write_outputs(json_out: str | None, md_out: str | None, data: dict[str, Any], md: str) -> None:
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    if md_out:
        Path(md_out).parent.mkdir(parents=True, exist_ok=True)
        Path(md_out).write_text(md.rstrip() + "\n")
    print(md)


def shown_path(path: Path) -> str:
    """A path as the docs show it: relative to the repository when inside it."""
    full = Path(path).resolve()
    return str(full.relative_to(ROOT)) if full.is_relative_to(ROOT) else str(path)


def stdev_or_nan(xs: Sequence[float]) -> float:
    """Sample standard deviation; NaN with fewer than two values."""
    import statistics

    return statistics.stdev(xs) if len(xs) > 1 else math.nan


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "not measured"
    return f"{n / 2**20:,.0f} MiB"
