"""Figures written in prose agree with the raw results they cite (issue #27): the pool section's
trial counts as scripts/bench_pool.py renders them from benchmarks/results/pool.json, and the
GPU reading's ranges recomputed from benchmarks/results/gpu_check.json. No benchmark runs here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = (REPO / "docs" / "benchmarks.md").read_text()


def test_the_pool_sections_prose_is_what_bench_pool_renders_from_its_raw_file(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    sys.modules.pop("bench_pool", None)
    import bench_pool

    data = json.loads((REPO / "benchmarks" / "results" / "pool.json").read_text())
    text = bench_pool.render(data, argparse.Namespace(**data["settings"]))
    sentence = next(line for line in text.splitlines() if "configs of the DeepSpeed-style space" in line)
    modes = [r["mode"] for r in data["runs"]]
    assert f"{modes.count('unpooled')} unpooled, {modes.count('pooled')} pooled" in sentence
    for doc in (DOC, (REPO / "benchmarks" / "sections" / "pool.md").read_text()):
        assert sentence in doc


def test_the_gpu_readings_ranges_are_the_raw_files():
    trials = json.loads((REPO / "benchmarks" / "results" / "gpu_check.json").read_text())["trials"]
    calibrated = [t["sweep_predicted_bytes"] / t["allocator_peak_bytes"] - 1 for t in trials
                  if t.get("sweep_predicted_bytes") and t["sweep_predicted_basis"].startswith("calibrated")]
    low, high = round(100 * min(calibrated)), round(100 * max(calibrated))
    # trial_long's phase covers 100 steps; the others their short measured window
    measure_s = [t["phase_s"]["measure"] for t in trials if t["trial"] != "trial_long" and t.get("phase_s")]
    for doc in (DOC, (REPO / "benchmarks" / "gpu_check_report.md").read_text()):
        flat = " ".join(doc.split())
        assert f"calibrated prediction was {low}% to {high}% above the allocator peak" in flat
        assert f"the measured steps are {min(measure_s):.2f}-{max(measure_s):.2f} s" in flat
