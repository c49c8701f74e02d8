"""How a trial ended, read from the files its ranks wrote and the launcher's exit code, never
by grepping logs.

    result = read_result(files.result, rc, timed_out, files.stderr, files.stdout, cfg)
"""

from __future__ import annotations

import os
from pathlib import Path

from autotune.contract import TrialConfig, TrialResult, TrialStatus
from autotune.contract.trial_files import fatal_log_paths, fatal_log_rank, rank_result_paths

LOG_TAIL_CHARS = 4000
TRACEBACK_LOOKBACK_CHARS = 4 * LOG_TAIL_CHARS


def log_tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    """The last `chars` of a log, or from its last traceback's header when that began within
    TRACEBACK_LOOKBACK_CHARS of the end (deep stacks under long venv paths run past `chars`)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max(chars, TRACEBACK_LOOKBACK_CHARS)))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    tail = text[-chars:]
    header = "Traceback (most recent call last)"
    if header not in tail and header in text:
        return text[text.rindex(header):]
    return tail


def read_result(result_path: Path, rc: int, timed_out: bool, err_path: Path, out_path: Path,
                cfg: TrialConfig) -> TrialResult:
    """Classify how a trial ended from the result files and the exit code."""
    tail = (log_tail(err_path) + "\n" + log_tail(out_path, 1000)).strip()
    if timed_out:
        return TrialResult(status=TrialStatus.timeout, world_size=cfg.world_size,
                           error=f"trial exceeded timeout_s={cfg.timeout_s:g}; process group killed",
                           log_tail=tail)
    results: list[TrialResult] = []
    unreadable: TrialResult | None = None
    for path in [result_path, *rank_result_paths(result_path)]:
        if path.is_file():
            try:
                results.append(TrialResult.read(path))
            except (ValueError, OSError) as exc:
                unreadable = unreadable or TrialResult(
                    status=TrialStatus.crash, error_type=type(exc).__name__,
                    error=f"unreadable result file {path.name}: {exc}", log_tail=tail)
    if results and result_path.is_file() and results[0].status is TrialStatus.ok:
        result = results[0]
        if rc != 0:
            result.notes.append(f"launcher exited {rc} after rank 0 wrote an ok result")
        return result
    failures = [r for r in results if r.status is not TrialStatus.ok] + _fatal_signals(result_path.parent)
    if failures:
        # When one rank fails, its peers fail after it (a closed connection, a kill): the
        # cause is a specific failure (oom, nan, unsupported) before any crash, else the earliest.
        failures.sort(key=lambda r: (r.status is TrialStatus.crash,
                                     r.observations.get("failed_at_unix_s", float("inf"))))
        result = failures[0]
        for other in failures[1:]:
            result.notes.append(f"then rank {other.observations.get('rank', '?')}: "
                                f"{other.status.value} {other.error_type or ''}".rstrip())
        if not result.log_tail:
            result.log_tail = tail
        return result
    if unreadable is not None:
        return unreadable
    reason = f"signal {-rc}" if rc < 0 else f"exit code {rc}"
    return TrialResult(status=TrialStatus.crash, world_size=cfg.world_size, error_type="NoResult",
                       error=f"worker ended ({reason}) without writing a result", log_tail=tail)


def _fatal_signals(trial_dir: Path) -> list[TrialResult]:
    """Ranks killed by a fatal signal (SIGSEGV, SIGABRT, ...): the worker's faulthandler wrote
    their stack to fatal.rankN.log, which is empty for every rank that did not die that way."""
    out = []
    for path in fatal_log_paths(trial_dir):
        text = path.read_text(errors="replace") if path.stat().st_size else ""
        if not text.strip():
            continue
        rank = fatal_log_rank(path)
        first = text.strip().splitlines()[0]  # e.g. "Fatal Python error: Segmentation fault"
        out.append(TrialResult(status=TrialStatus.crash, error_type="FatalSignal",
                               error=f"rank {rank} died: {first}", log_tail=text[-LOG_TAIL_CHARS:],
                               observations={"rank": rank,
                                             "failed_at_unix_s": path.stat().st_mtime}))
    return out
