"""How a trial ended, read from the files its ranks wrote and the launcher's exit code, never
by grepping logs for errors. One thing only the launcher knows: the signal that ended a rank
which left no result (SIGKILL runs no code in it); that is read from the per-rank failure
summary torch.distributed.elastic prints (torchrun, accelerate), matched by the pid in the
rank's alive marker.

    result = read_result(files.result, rc, timed_out, files.stderr, files.stdout, cfg)
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

from autotune.contract import MemoryReport, MemorySource, TrialConfig, TrialResult, TrialStatus
from autotune.contract.trial_files import (
    ALIVE_MARKERS,
    FATAL_LOGS,
    rank_result_paths,
)
from autotune.format import fmt_bytes

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
    failures += _killed_ranks(result_path.parent, failures, err_path, out_path, cfg)
    if failures:
        # When one rank fails, its peers fail after it (a closed connection, a kill): the
        # cause is a specific failure (oom, nan, unsupported), then a rank killed by a signal
        # no launcher sends to tear a trial down (SIGKILL: the OOM killer), then the earliest
        # crash; a rank the launcher tore down (SIGTERM) comes last.
        failures.sort(key=_cause_order)
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
    for path in FATAL_LOGS.paths(trial_dir):
        text = path.read_text(errors="replace") if path.stat().st_size else ""
        if not text.strip():
            continue
        rank = FATAL_LOGS.rank_of(path)
        first = text.strip().splitlines()[0]  # e.g. "Fatal Python error: Segmentation fault"
        out.append(TrialResult(status=TrialStatus.crash, error_type="FatalSignal",
                               error=f"rank {rank} died: {first}", log_tail=text[-LOG_TAIL_CHARS:],
                               observations={"rank": rank,
                                             "failed_at_unix_s": path.stat().st_mtime}))
    return out


# The signals launchers send to tear the other ranks down once one failed.
TEARDOWN_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
# torch.distributed.elastic's failure summary, one entry per failed rank:
#   "exitcode  : -9 (pid: 3118)  (SIGKILL)"
_ELASTIC_EXITCODE = re.compile(r"exitcode\s*:\s*(-?\d+) \(pid: (\d+)\)")


def _cause_order(r: TrialResult) -> tuple[int, float]:
    killed_by = r.observations.get("killed_by_signal")
    if r.status is not TrialStatus.crash:
        tier = 0
    elif killed_by is not None:
        tier = 3 if killed_by in {s.name for s in TEARDOWN_SIGNALS} else 1
    else:
        tier = 2
    return tier, r.observations.get("failed_at_unix_s", float("inf"))


def _exit_codes_by_pid(err_path: Path, out_path: Path) -> dict[int, int]:
    """The exit code of each failed rank's process, from the launcher's failure summary.

    torchrun's only: DeepSpeed's launcher (deepspeed/launcher/launch.py, 0.19.8, read 2026-12-07)
    logs "<cmd> exits with return code = N" for the first process it finds ended, but `cmd`
    is the last rank it spawned, whichever failed, and N may be a survivor's (a rank SIGKILLed
    while its peer exits 1 on the closed connection logged "rank 1 ... code = 1"), so it is
    not read: such a rank is reported without its exit code."""
    codes: dict[int, int] = {}
    for path in (err_path, out_path):
        for code, pid in _ELASTIC_EXITCODE.findall(log_tail(path, TRACEBACK_LOOKBACK_CHARS)):
            codes[int(pid)] = int(code)
    return codes


def _killed_ranks(trial_dir: Path, failures: list[TrialResult], err_path: Path, out_path: Path,
                  cfg: TrialConfig) -> list[TrialResult]:
    """Ranks whose alive marker is still there (trials/alive.py): killed before their own code
    could say how they ended. A rank with its own result or fatal log is not counted twice."""
    reported = {f.observations.get("rank") for f in failures}
    codes = _exit_codes_by_pid(err_path, out_path)
    out = []
    for path in ALIVE_MARKERS.paths(trial_dir):
        try:
            marker = json.loads(path.read_text())
        except (OSError, ValueError):
            marker = {}  # torn by the kill mid-write: its name still says the rank
        rank = marker.get("rank", ALIVE_MARKERS.rank_of(path))
        if rank in reported:
            continue
        code = codes.get(marker.get("pid", -1))
        out.append(_killed_result(rank, marker, code, path.stat().st_mtime, cfg))
    return out


def _killed_result(rank, marker: dict, code: int | None, seen_unix_s: float,
                   cfg: TrialConfig) -> TrialResult:
    peak = marker.get("host_rss_peak_bytes")
    seen = marker.get("seen_unix_s", seen_unix_s)
    obs = {"rank": rank, "failed_at_unix_s": seen, "pid": marker.get("pid"), "exit_code": code}
    sig = _signal_of(code)
    if sig is not None:
        obs["killed_by_signal"] = sig.name
        error = f"rank {rank} was killed by {sig.name} (signal {sig.value}) and left no result"
        if sig is signal.SIGKILL:  # the kernel log (dmesg) is root's on most hosts: not read
            error = (f"rank {rank} was killed by SIGKILL (signal 9), as the kernel's "
                     "out-of-memory killer or kill -9 ends a process (the kernel log is not read "
                     "here)")
    elif code is not None:  # e.g. a library's os._exit: no Python exception to classify
        error = f"rank {rank} exited with code {code} without writing a result"
    else:
        error = (f"rank {rank} ended without a result or a fatal log (its exit code is not in "
                 "the launcher's output): killed by a signal it cannot catch (SIGKILL, as the "
                 "kernel's out-of-memory killer sends) or by the launcher's teardown")
    result = TrialResult(status=TrialStatus.crash, world_size=cfg.world_size,
                         error_type=sig.name if sig is not None else "NoResult", observations=obs)
    if peak is not None:
        error += f"; its host RSS peak before: {fmt_bytes(peak)} (recorded up to 1 s before)"
        result.memory = MemoryReport(host_rss_peak_bytes=[peak])
        if cfg.device.value == "cpu":  # host memory is what a CPU trial's ranks run in
            result.peak_mem_bytes, result.peak_mem_source = peak, MemorySource.host_rss
    result.error = error
    return result


def _signal_of(code: int | None) -> signal.Signals | None:
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code)
    except ValueError:
        return None
