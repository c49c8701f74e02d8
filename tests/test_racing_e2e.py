"""Re-measuring before recommending with real trials (issue #15): two configs within the noise
of this machine, a real sweep through the CLI, repeats measured back to back, and the report
and the terminal say how sure the pick is."""

from __future__ import annotations

import json

import pytest

from tests.test_sweep_e2e import SPEC as E2E_SPEC

pytestmark = pytest.mark.e2e

# The end-to-end sweep's spec (tiny GPT, short trials), as study "race". One rank,
# micro-batch 4: no checkpointing against selective checkpointing, which on this tiny model
# recomputes next to nothing: the two are within the run-to-run noise.
SPEC = E2E_SPEC.replace("study: e2e", "study: race")
SPACE = """
num_gpus: [1]
micro_batch_size: [4]
precision: [fp32]
checkpointing: [none, selective]
"""


def test_rivals_within_noise_are_measured_again_and_the_report_says_how_sure(tmp_path, run_cli):
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "spec.yaml").write_text(SPEC.replace("SPACE", str(tmp_path / "space.yaml")))
    p = run_cli("sweep", "spec.yaml", "--trials", "4")
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(run_cli("report", "--study", "race", "--json", cwd=tmp_path).stdout)
    launched = [t for t in doc["trials"] if t["reused_from"] is None and t["state"] == "COMPLETE"]
    # Both configs measured, then (every config tried) the two again, back to back: 4 trials.
    assert len(launched) == 4, p.stdout
    firsts = {t["number"] for t in launched[:2]}
    assert {tuple(sorted(o["runs"])) for o in doc["options"]} == {
        tuple(sorted(n for n in (t["number"] for t in launched)
                     if n == first or doc["trials"][n]["config"] == doc["trials"][first]["config"]))
        for first in firsts}
    # The sweep's progress names each re-measurement and the trial whose config it measures again.
    again = {t["number"]: next(n for n in firsts if doc["trials"][n]["config"] == t["config"])
             for t in launched[2:]}
    for n, first in again.items():
        assert f"trial {n:>3}  re-measures #{first}: ok" in p.stdout, p.stdout
    for t in launched[:2]:
        assert f"trial {t['number']:>3}  ok" in p.stdout, p.stdout
    (cost, time) = doc["picks"]
    assert cost["trial"] == doc["cheapest"]["trial"] and len(cost["runs"]) == 2
    blocks = {r["block"] for r in cost["runs"]}
    assert None in blocks and len(blocks) == 2  # the first run alone, the repeat in a block
    # Both configs have one run alone and one in the same block, so the estimate at the level of
    # the study's runs (autotune.search.estimates._level_shift) is the geometric mean of its own
    # two (within the polish's convergence), whatever spell the block ran in.
    own = [r["tokens_per_s"] for r in cost["runs"]]
    assert cost["tokens_per_s"] == pytest.approx((own[0] * own[1]) ** 0.5, rel=1e-3)
    assert cost["tokens_per_s_low"] < cost["tokens_per_s"] < cost["tokens_per_s_high"]
    assert cost["runner_up"] in firsts - {cost["trial"]}
    assert f"trial {cost['runner_up']}" in cost["how_sure"]
    # The sweep's closing summary prints the sentence and the interval (rich may wrap the line);
    # the full report lists the runs too.
    flat = " ".join(p.stdout.split())
    assert " ".join(cost["how_sure"].split()) in flat and "(90%: $" in flat, p.stdout
    # The estimate beside the runs it comes from (it nets out a block's shared spell, so it may
    # lie outside them).
    lo, hi = sorted(r["tokens_per_s"] for r in cost["runs"])
    assert f"{cost['tokens_per_s']:,.0f} tokens/s estimated from 2 runs ({lo:,.0f} to {hi:,.0f})" in flat, p.stdout
    rep = run_cli("report", "--study", "race", cwd=tmp_path)
    flat = " ".join(rep.stdout.split())
    assert "how sure: " + " ".join(cost["how_sure"].split()) in flat and "2 run(s)" in flat, rep.stdout
    # Its table of trials says the same of each re-measurement.
    assert all(f"ok (re-measures #{first})" in rep.stdout for first in again.values()), rep.stdout
    from autotune.report.html import _trials_table  # the HTML page's table of trials, on this study

    assert all(f"ok (re-measures #{first})" in _trials_table(doc["trials"]) for first in again.values())
