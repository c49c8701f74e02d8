"""Before a sweep's first trial: does the workload build at all?

    check_workload(spec)     # UserError (exit 2) naming the problem, else returns

The built-in GPT needs no check. A Hugging Face config or a user's entry point is checked in
a subprocess (`python -m trials.preflight`, the trials' own environment, no torch in this
process): a missing or unreadable config file, an unknown model type, or an entry point that
does not import would otherwise end every trial the same way and spend the whole budget.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from autotune.errors import UserError

PREFLIGHT_TIMEOUT_S = 300.0


def check_workload(spec, python: str = sys.executable, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> None:
    from autotune.contract import HFWorkload, TrialConfig
    from autotune.contract.trial_files import TrialFiles

    wl = spec.workload
    if wl.kind == "gpt":
        return
    where = f"{spec.source}: " if spec.source else ""
    if isinstance(wl, HFWorkload) and wl.config_path:
        _check_hf_file(Path(wl.config_path), where)
    from autotune.run.argv import launch_env

    cfg = TrialConfig(workload=wl, seq_len=spec.seq_len)
    with tempfile.TemporaryDirectory(prefix="autotune-preflight-") as tmp:
        path = TrialFiles(Path(tmp)).config
        cfg.write(path)
        try:
            p = subprocess.run([python, "-m", "trials.preflight", str(path)], env=launch_env(cfg),
                               capture_output=True, text=True, timeout=timeout_s,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise UserError(f"{where}workload: checking it took more than {timeout_s:.0f} s",
                            fix="make the entry point's module import quickly (build the "
                                "model inside the function, not at import)") from None
    if p.returncode != 0:
        lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        reason = lines[-1] if lines else f"exit code {p.returncode}"
        message, _, fix = reason.partition(". To fix: ")
        raise UserError(f"{where}workload {wl.kind}: {message}",
                        fix=fix or "correct the workload section of the spec")


def _check_hf_file(path: Path, where: str) -> None:
    """The config file's own problems, named without starting a subprocess."""
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise UserError(f"{where}workload: HF config '{path}' does not exist",
                        fix="point config_path at a local config.json (a relative path is read "
                            "from the spec file's folder)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{where}workload: HF config '{path}' is not readable JSON: "
                        f"{type(exc).__name__}: {exc}", fix="give a transformers config.json") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise UserError(f"{where}workload: HF config '{path}' has no `model_type`",
                        fix='add e.g. "model_type": "llama"')
