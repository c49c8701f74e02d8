"""Memory one rank of a trial may use, and what that is, for the report's headroom.

    capacity, source = capacity(rec, config)   # (12_638_091_264, "host RAM / 2 rank(s)")

The sweep's prescreen stores the limit it held each trial to: the spec's limit per rank where
one is set, else the machine's own memory (autotune.search.calibration.device_limit_bytes).
The latter is named as the machine's memory, not as a limit nobody set.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from autotune.contract.trial_files import TrialFiles
from autotune.record import TrialRecord

SWEEP_LIMIT = "per-rank limit of the sweep"


def capacity(rec: TrialRecord, cfg: dict[str, Any]) -> tuple[int | None, str | None]:
    """Memory one rank may use, and what that is: the study's per-rank limit when the sweep
    stored one smaller than the machine's; else the GPU's memory, or on CPU the host's RAM
    shared by the ranks."""
    own = _machine_capacity(rec, cfg)
    pre = rec.memory_prescreen
    if pre is not None and pre.limit_bytes and pre.limit_bytes != own[0]:
        return pre.limit_bytes, SWEEP_LIMIT
    return own


def _machine_capacity(rec: TrialRecord, cfg: dict[str, Any]) -> tuple[int | None, str | None]:
    hw = rec.machine if rec.machine is not None else _result_hardware(rec)
    ranks = max(1, int(cfg.get("num_gpus") or 1))
    if hw.get("device_kind") == "cuda" and hw.get("device_memory_bytes"):
        return int(hw["device_memory_bytes"]), f"device memory ({hw.get('device_name', '')})"
    host_mem = hw.get("host_memory_bytes")
    if host_mem is None and hw.get("hostname") and hw.get("hostname") == socket.gethostname():
        import psutil  # the trial ran on this very host: its RAM is ours to read

        host_mem = int(psutil.virtual_memory().total)
    if host_mem:
        return int(host_mem) // ranks, f"host RAM / {ranks} rank(s)"
    return None, None


def _result_hardware(rec: TrialRecord) -> dict[str, Any]:
    """The hardware block of the trial's result.json, when its folder is on this machine."""
    folder = rec.trial_dir
    if not folder:
        return {}
    try:
        return json.loads(TrialFiles(Path(folder)).result.read_text()).get("hardware") or {}
    except (OSError, ValueError, AttributeError):
        return {}
