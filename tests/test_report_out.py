"""`autotune report --out`: the folder a user names, and what the command says it wrote.

The study is the real sweep loop with a TrialRunner that measures nothing (as in
tests/test_export_picks.py), stored in SQLite so the real CLI reads it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.test_export_picks import SHAPE, _runner


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """The --storage flag of a 3-trial study 'out' in SQLite."""
    from autotune.contract import GPTWorkload
    from autotune.search.study import open_study
    from autotune.search.sweep import run_sweep
    from autotune.spec import SweepSpec

    tmp = tmp_path_factory.mktemp("report_out")
    space = tmp / "space.yaml"
    space.write_text("num_gpus: [1, 2]\nmicro_batch_size: [2, 4]\nprecision: [fp32]\ncheckpointing: [none]\n")
    spec = SweepSpec.model_validate(dict(workload=GPTWorkload(preset=None, shape=SHAPE), seq_len=64,
                                         space=str(space), budget=dict(trials=3)))
    url = f"sqlite:///{tmp / 'studies.db'}"
    run_sweep(spec, open_study(url, "out"), 3, tmp / "runs", runner=_runner)
    return url


def _report(url: str, cwd, *args: str) -> subprocess.CompletedProcess:
    """The real CLI, as a user runs it in folder `cwd`."""
    return subprocess.run([sys.executable, "-m", "autotune.cli", "report", "--study", "out", "--storage", url,
                           *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})


@pytest.mark.parametrize("name", ["report.json", "Report.HTML", "summary.md", "pareto.png"])
def test_out_named_like_a_file_is_refused_and_nothing_is_written(stored, tmp_path, name):
    """`report --out report.json` made a FOLDER named report.json (with report.html, report.json
    and the PNGs in it) and exited 0. Now: exit 2, one message saying --out names a folder and
    what writes the file meant, and nothing written."""
    res = _report(stored, tmp_path, "--out", name)
    said = " ".join((res.stdout + res.stderr).split())  # one line, however the console wrapped it
    assert res.returncode == 2, said
    assert f"--out {name} names a folder" in said, said
    if name.endswith(".json"):
        assert f"autotune report --json > {name}" in said, said
    if name.lower().endswith(".html"):
        assert f"--html {name}" in said, said
    assert f"--out {name.rsplit('.', 1)[0]}/" in said, said
    assert list(tmp_path.iterdir()) == []


def test_out_lists_each_file_it_wrote_by_its_path_from_here(stored, tmp_path):
    """After `report --out DIR` the terminal said only 'wrote DIR'. Now it lists each file
    written (report.html, report.json, the PNGs), relative to the current folder, as `autotune
    export` lists its own; the list is exactly the folder's files."""
    from autotune.report.files import MANIFEST

    res = _report(stored, tmp_path, "--out", "rep")
    assert res.returncode == 0, res.stderr
    on_disk = sorted(p.name for p in (tmp_path / "rep").iterdir() if p.name != MANIFEST)
    assert "report.html" in on_disk and "report.json" in on_disk and any(n.endswith(".png") for n in on_disk)
    lines = res.stdout.splitlines()
    start = lines.index(f"wrote {len(on_disk)} files into rep:")
    assert lines[start + 1:] == [f"  {os.path.join('rep', n)}" for n in on_disk], res.stdout


def test_export_lists_its_files_by_their_path_from_here_too(stored, tmp_path):
    """`autotune export --out launch` listed each file by its absolute path, where `report
    --out` lists them from the current folder (autotune.report.out_path.shown_path): now alike."""
    from autotune.report.files import MANIFEST

    res = subprocess.run([sys.executable, "-m", "autotune.cli", "export", "--study", "out", "--storage", stored,
                          "--pick", "cheapest", "--out", "launch"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    on_disk = sorted(p.name for p in (tmp_path / "launch").iterdir() if p.name != MANIFEST)
    assert "launch.sh" in on_disk
    listed = [line for line in res.stdout.splitlines() if line.startswith("  ")]
    assert listed == [f"  {os.path.join('launch', n)}" for n in on_disk], res.stdout
