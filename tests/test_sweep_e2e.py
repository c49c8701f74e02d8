"""A real sweep end to end on CPU: real launched trials, results read back from storage,
and a resumed sweep that adds trials without losing the first ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

SPEC = """
workload: {kind: gpt, preset: tiny}
seq_len: 64
target: {tokens: 1.0e8}
space: SPACE
trial: {warmup_steps: 1, measure_steps: 2, max_measure_steps: 3, timeout_s: 180}
study: e2e
"""

# Two ranks on every trial: the 2-rank DDP path is the one that must not break.
SPACE = """
num_gpus: [2]
micro_batch_size: [1, 2, 4]
grad_accum_steps: [1, 2]
precision: [fp32]
checkpointing: [none, full]
"""


def _report(run_cli, cwd: Path) -> dict:
    p = run_cli("report", "--study", "e2e", "--json", cwd=cwd)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_sweep_then_resume(tmp_path, run_cli):
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "spec.yaml").write_text(SPEC.replace("SPACE", str(tmp_path / "space.yaml")))

    p = run_cli("sweep", "spec.yaml", "--trials", "3")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("  trial ") >= 3, p.stdout  # one progress line per finished trial
    assert "cheapest" in p.stdout and "fastest" in p.stdout

    first = _report(run_cli, tmp_path)
    assert len(first["trials"]) == 3
    for t in first["trials"]:
        assert t["state"] == "COMPLETE", t
        assert t["status"] == "ok" and t["tokens_per_s"] > 0
        assert t["config"]["num_gpus"] == 2
        assert t["hours"] > 0 and t["usd"] > 0
        folder = Path(t["trial_dir"])
        for name in ("config.json", "command.json", "stdout.log", "stderr.log", "result.json"):
            assert (folder / name).is_file(), name
        result = json.loads((folder / "result.json").read_text())
        assert result["world_size"] == 2
        # The stored score is the result priced: wall clock = the catalog offer's setup (0.1 h
        # for aws-c7i) + tokens / (tokens/s) + checkpoint writes (tiny model: negligible).
        training_h = 1.0e8 / result["tokens_per_s"] / 3600
        assert training_h + 0.1 == pytest.approx(t["hours"], rel=1e-3)
    assert first["pareto"], "a study with completed trials has a Pareto front"

    p = run_cli("sweep", "spec.yaml", "--trials", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "(3 trials so far)" in p.stdout
    second = _report(run_cli, tmp_path)
    assert len(second["trials"]) == 4
    # The first three are untouched by the resume.
    assert second["trials"][:3] == first["trials"]
