"""The line `launch.sh --check` ends with: what autotune's worker measured in the user's setup,
beside what the sweep measured for the same trial.

    python -m autotune.report.check_line RESULT_JSON EXIT_CODE [SWEEP_TOKENS_PER_S SWEEP_PEAK_BYTES]
    # launch.sh --check: ok: 9,870 tokens/s, 0.97x the sweep's 10,222; peak 461.6 MiB per rank
    #   (the sweep's 461.1 MiB); result: /runs/autotune_check_result.json

launch.sh runs it from / (a folder named autotune/ where the user stands must not shadow it),
so the result's path comes absolute. It imports no torch: it only reads the result's JSON.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import ValidationError

from autotune.contract import TrialResult, TrialStatus
from autotune.format import fmt_bytes

PREFIX = "launch.sh --check:"


def check_line(result_path: Path, exit_code: int, sweep_tokens_per_s: float | None = None,
               sweep_peak_bytes: int | None = None) -> str:
    """One line: the check's status, its tokens/s and peak memory against the sweep's, and where
    its result is; where the launcher ended before the worker wrote a result, that."""
    try:
        result = TrialResult.model_validate_json(result_path.read_text())
    except (OSError, ValidationError):
        return (f"{PREFIX} no result: the launcher exited {exit_code} before autotune's worker wrote "
                f"{result_path} (its output is above)")
    if result.status is not TrialStatus.ok:
        why = (result.error or "").strip().splitlines()
        reason = f"{result.error_type}: {why[0]}" if why else (result.error_type or "no reason given")
        return f"{PREFIX} {result.status.value}: {reason}; result: {result_path}"
    said = []
    if result.tokens_per_s:
        ratio = (f", {result.tokens_per_s / sweep_tokens_per_s:.2f}x the sweep's {sweep_tokens_per_s:,.0f}"
                 if sweep_tokens_per_s else "")
        said.append(f"{result.tokens_per_s:,.0f} tokens/s{ratio}")
    if result.peak_mem_bytes:
        sweep = f" (the sweep's {fmt_bytes(sweep_peak_bytes)})" if sweep_peak_bytes else ""
        said.append(f"peak {fmt_bytes(result.peak_mem_bytes)} per rank{sweep}")
    return f"{PREFIX} ok: " + "; ".join([*said, f"result: {result_path}"])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    tokens = float(args[2]) if len(args) > 2 and args[2] else None
    peak = int(args[3]) if len(args) > 3 and args[3] else None
    print(check_line(Path(args[0]), int(args[1]), tokens, peak), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
