"""Check a trial's workload before any trial runs: the HF config loads, the entry point imports.

    python -m trials.preflight CONFIG.json      # exit 0, or exit 3 with the reason on stderr

Run once by the controller before a sweep (`autotune.run.preflight.check_workload`), in a
subprocess with the trials' environment, so that a missing config file or an import error in
the user's module ends the sweep at once with one message, instead of failing every trial the
same way, or a sequence longer than the model takes. Builds no model and touches no device.
"""

from __future__ import annotations

import sys

EXIT_BAD_WORKLOAD = 3


def check(cfg) -> None:
    """Raise with the reason when the workload cannot be built."""
    from autotune.contract import EntryPointWorkload, HFWorkload

    wl = cfg.workload
    if isinstance(wl, HFWorkload):
        from trials.workloads.hf import build_hf_config, check_positions

        check_positions(build_hf_config(wl), cfg.seq_len)  # the config every trial builds
    elif isinstance(wl, EntryPointWorkload):
        from trials.workloads.entry import load_function

        load_function(wl)


def main(argv: list[str] | None = None) -> int:
    from autotune.contract import TrialConfig

    args = sys.argv[1:] if argv is None else argv
    try:
        check(TrialConfig.read(args[0]))
    except Exception as exc:  # noqa: BLE001 - every reason becomes one line for the controller
        print(f"{type(exc).__name__}: {exc}".replace("\n", " "), file=sys.stderr)
        return EXIT_BAD_WORKLOAD
    return 0


if __name__ == "__main__":
    sys.exit(main())
