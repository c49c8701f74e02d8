"""Output folders: a command never deletes or overwrites what it did not write
(autotune.report.files, used by report --out, export --out, trial --out and study copy)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.errors import UserError
from autotune.report.files import MANIFEST, REPORT, prepare_out_dir, write_files


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_a_new_folder_is_written_whole_with_umask_permissions(tmp_path):
    old = os.umask(0o027)
    try:
        out = prepare_out_dir(tmp_path / "report", kind=REPORT)
        write_files(out, {"a.json": "{}", "run.sh": "#!/bin/sh\n"}, executable={"run.sh"}, kind=REPORT)
    finally:
        os.umask(old)
    assert sorted(p.name for p in out.iterdir()) == sorted(["a.json", "run.sh", MANIFEST])
    assert _mode(out) == 0o750 and _mode(out / "a.json") == 0o640 and _mode(out / "run.sh") == 0o750


def test_a_folder_with_user_files_is_refused_without_force_and_kept_with_it(tmp_path):
    out = tmp_path / "here"
    out.mkdir()
    (out / "autotune.db").write_text("the user's study")
    (out / "report.json").write_text("the user's own report.json")
    with pytest.raises(UserError) as exc:
        prepare_out_dir(out, kind=REPORT)
    assert "autotune.db" in str(exc.value) and "--force" in str(exc.value)
    write_files(prepare_out_dir(out, force=True, kind=REPORT), {"report.html": "<html>"}, kind=REPORT)
    assert (out / "autotune.db").read_text() == "the user's study"
    assert (out / "report.json").read_text() == "the user's own report.json"
    assert (out / "report.html").read_text() == "<html>"


def test_dot_and_cwd_name_a_real_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "autotune.db").write_text("study")
    for given in (".", str(tmp_path)):
        with pytest.raises(UserError):
            prepare_out_dir(given, kind=REPORT)
    write_files(prepare_out_dir(".", force=True, kind=REPORT), {"x.txt": "1"}, kind=REPORT)
    assert (tmp_path / "autotune.db").read_text() == "study" and (tmp_path / "x.txt").read_text() == "1"


def test_rewriting_own_output_needs_no_force_and_removes_only_own_stale_files(tmp_path):
    out = tmp_path / "report"
    write_files(prepare_out_dir(out, kind=REPORT), {"report.json": "1", "memory.png": "old plot", "pareto.png": "p"},
                kind=REPORT)
    (out / "pareto.png").write_text("edited by the user")  # no longer what autotune wrote
    with pytest.raises(UserError) as exc:
        prepare_out_dir(out, kind=REPORT)
    assert "pareto.png" in str(exc.value)
    (out / "pareto.png").write_text("p")  # back as autotune wrote it
    write_files(prepare_out_dir(out, kind=REPORT), {"report.json": "2"}, kind=REPORT)
    assert (out / "report.json").read_text() == "2"
    assert not (out / "memory.png").exists() and not (out / "pareto.png").exists()
    # With --force a user's changed file survives even under one of autotune's names it
    # no longer writes.
    write_files(prepare_out_dir(out, kind=REPORT), {"report.json": "3", "memory.png": "new"}, kind=REPORT)
    (out / "memory.png").write_text("the user's annotated copy")
    write_files(prepare_out_dir(out, force=True, kind=REPORT), {"report.json": "4"}, kind=REPORT)
    assert (out / "memory.png").read_text() == "the user's annotated copy"


# A real write failure: a child process whose files may grow to FSIZE_LIMIT bytes at most
# (RLIMIT_FSIZE) writes a file larger than that; with SIGXFSZ ignored the write fails with
# EFBIG ("File too large"), as a full disk fails it with ENOSPC, half-way through the files.
FSIZE_LIMIT = 64 * 1024
_WRITE_UNDER_LIMIT = """
import resource, signal, sys
from pathlib import Path
from autotune.errors import UserError
from autotune.report.files import REPORT, prepare_out_dir, write_files

out, files = Path(sys.argv[1]), {"a.txt": "new a", "b.txt": "x" * (16 * int(sys.argv[2]))}
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
try:
    write_files(prepare_out_dir(out, kind=REPORT) if out.exists() else out, files, kind=REPORT)
except UserError as exc:
    print(exc.message)
    sys.exit(3)
"""


def _write_past_the_file_size_limit(out: Path) -> str:
    """`write_files` of a small a.txt and a b.txt past the limit into `out`, in a child under
    the limit; what its UserError said."""
    done = subprocess.run([sys.executable, "-c", _WRITE_UNDER_LIMIT, str(out), str(FSIZE_LIMIT)],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 3, done.stdout + done.stderr
    return done.stdout


def test_a_failure_half_way_leaves_the_old_files(tmp_path):
    out = tmp_path / "report"
    write_files(prepare_out_dir(out, kind=REPORT), {"a.txt": "old a", "b.txt": "old b"}, kind=REPORT)

    said = _write_past_the_file_size_limit(out)
    assert "b.txt" in said and "File too large" in said, said
    assert (out / "a.txt").read_text() == "old a" and (out / "b.txt").read_text() == "old b"
    assert sorted(p.name for p in out.iterdir()) == sorted(["a.txt", "b.txt", MANIFEST])
    said = _write_past_the_file_size_limit(tmp_path / "new")
    assert "b.txt" in said and "File too large" in said, said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


@pytest.mark.parametrize("bad", ["file", "missing/parent"])
def test_bad_targets_are_user_errors(tmp_path, bad):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError):
        prepare_out_dir(tmp_path / bad, kind=REPORT)


def test_trial_json_follows_the_umask(tmp_path):
    from autotune.contract import write_json_atomic

    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "result.json", {"a": 1})
    finally:
        os.umask(old)
    assert _mode(tmp_path / "result.json") == 0o644
