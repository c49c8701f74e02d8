"""Output paths a user gives the writing commands (export, report, trial, catalog import, study
copy): one that cannot be written, or that names a file as a folder, is one clear message and
exit 2, with nothing left behind; a file the user wrote is never replaced, even with --force.
Through the real CLI, on one real tiny study (one trial) built once for this module.

Unwritable paths are under /proc (no new files there, even for root) or below a regular file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SKYPILOT = Path(__file__).resolve().parent / "data" / "skypilot"

SPACE = "num_gpus: [1]\nmicro_batch_size: [1]\ngrad_accum_steps: [2]\nprecision: [fp32]\ncheckpointing: [none]\n"
SPEC = ("workload: {{kind: gpt, preset: tiny}}\nseq_len: 32\ntarget: {{tokens: 1.0e7}}\nspace: space.yaml\n"
        "trial: {{warmup_steps: 1, measure_steps: 2, max_measure_steps: 2, timeout_s: 240}}\n"
        "study: s1\nstorage: sqlite:///{db}\n")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """(folder, storage URL) of study 's1': one real trial."""
    folder = tmp_path_factory.mktemp("s1")
    (folder / "space.yaml").write_text(SPACE)
    (folder / "spec.yaml").write_text(SPEC.format(db=folder / "autotune.db"))
    p = subprocess.run([sys.executable, "-m", "autotune.cli", "sweep", "spec.yaml", "--trials", "1"],
                       cwd=folder, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, COLUMNS="200"))
    assert p.returncode == 0, p.stdout + p.stderr
    return folder, f"sqlite:///{folder / 'autotune.db'}"


def _proc_leftovers() -> list[str]:
    return sorted(n for n in os.listdir("/proc") if n.startswith("."))


def _one_clear_error(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "To fix:" in err, err
    for w in words:
        assert w in err, (w, err)


def _command(kind: str, study, target: str) -> list[str]:
    folder, url = study
    at = ["--study", "s1", "--storage", url]
    return {
        "export": ["export", "--pick", "cheapest", "--out", target, *at],
        "report-html": ["report", "--html", target, *at],
        "report-out": ["report", "--out", target, *at],
        "catalog": ["catalog", "import", "--skypilot", str(SKYPILOT), "--skip-unknown", "--out", target],
        "trial": ["trial", str(folder / "autotune_runs" / "s1" / "trial_0000" / "config.json"), "--out", target],
    }[kind]


KINDS = ["export", "report-html", "report-out", "catalog", "trial"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_path_the_system_refuses_is_one_message_and_leaves_nothing(study, cli, kind):
    target = {"report-out": "/proc/sys/autotune-x"}.get(kind, "/proc/autotune-x")
    before = _proc_leftovers()
    code, _, err = cli(*_command(kind, study, target))
    _one_clear_error(code, err, f"cannot write --{'html' if kind == 'report-html' else 'out'} '{target}'",
                     "takes no new files")
    assert _proc_leftovers() == before  # no temporary file or folder, no probe


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_where_a_folder_should_be_is_called_a_file(study, cli, tmp_path, kind):
    (tmp_path / "afile").write_text("hi\n")
    code, _, err = cli(*_command(kind, study, str(tmp_path / "afile" / "sub")))
    _one_clear_error(code, err, "afile' is a file, not a folder")
    assert "does not exist" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    assert (tmp_path / "afile").read_text() == "hi\n"


def test_report_writes_neither_target_when_one_cannot_be_written(study, cli, tmp_path):
    for html, out in ((tmp_path / "r.html", "/proc/autotune-x"), ("/proc/autotune-x.html", tmp_path / "rep")):
        code, _, err = cli(*_command("report-html", study, str(html)), "--out", str(out))
        _one_clear_error(code, err, "cannot write")
        assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("runs_dir", ["afile", "afile/deeper", "/proc/autotune-runs"])
def test_study_copy_checks_the_runs_dir_before_creating_the_destination(study, cli, tmp_path, monkeypatch, runs_dir):
    folder, url = study
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("hi\n")
    code, _, err = cli("study", "copy", url, "sqlite:///c2.db", "--study", "s1", "--to-study", "s2",
                       "--runs-dir", str(folder / "autotune_runs"), "--to-runs-dir", runs_dir)
    _one_clear_error(code, err, "--to-runs-dir")
    assert ("is a file, not a folder" if runs_dir.startswith("afile") else "cannot write") in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # no c2.db, no folder


def test_study_copy_into_a_new_runs_dir_still_works(study, cli, tmp_path):
    folder, url = study
    code, _, err = cli("study", "copy", url, f"sqlite:///{tmp_path / 'c2.db'}", "--study", "s1",
                       "--to-study", "s2", "--runs-dir", str(folder / "autotune_runs"),
                       "--to-runs-dir", str(tmp_path / "a" / "b"))
    assert code == 0, err
    assert (tmp_path / "a" / "b" / "s2" / "trial_0000" / "config.json").is_file()


def test_a_catalog_folder_without_vms_csv_names_the_flag_used(cli, tmp_path):
    (tmp_path / "d").mkdir()
    code, _, err = cli("catalog", "--catalog", str(tmp_path / "d"))
    _one_clear_error(code, err, "--catalog", "no vms.csv")
    assert "--skypilot" not in err


def test_catalog_import_into_a_folder_says_folder_first(cli, tmp_path):
    (tmp_path / "d").mkdir()
    for force in ([], ["--force"]):
        code, _, err = cli(*_command("catalog", (tmp_path, ""), str(tmp_path / "d")), *force)
        _one_clear_error(code, err, "is a folder")
        assert "--force" not in err
    assert list((tmp_path / "d").iterdir()) == []


def test_force_never_replaces_a_file_autotune_did_not_write(study, cli, tmp_path):
    out = tmp_path / "f"
    out.mkdir()
    (out / "mine.txt").write_text("mine\n")
    (out / "launch.sh").write_text("keep\n")
    for force in ([], ["--force"]):
        code, _, err = cli(*_command("export", study, str(out)), *force)
        _one_clear_error(code, err, "launch.sh", "did not write", "choose another --out")
        assert sorted(p.name for p in out.iterdir()) == ["launch.sh", "mine.txt"]
        assert (out / "launch.sh").read_text() == "keep\n"
    # Moved away: --force writes autotune's files beside the user's, which stay.
    (out / "launch.sh").rename(out / "my_launch.sh")
    code, _, err = cli(*_command("export", study, str(out)), "--force")
    assert code == 0, err
    assert (out / "mine.txt").read_text() == "mine\n" and (out / "my_launch.sh").read_text() == "keep\n"
    assert (out / "launch.sh").read_text() != "keep\n"
    # The same for report --out (and its --html is not written either).
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "report.json").write_text("{}\n")
    code, _, err = cli(*_command("report-out", study, str(tmp_path / "rep")), "--force",
                       "--html", str(tmp_path / "r.html"))
    _one_clear_error(code, err, "report.json", "did not write")
    assert [p.name for p in (tmp_path / "rep").iterdir()] == ["report.json"]
    assert not (tmp_path / "r.html").exists()


def test_catalog_import_force_replaces_only_an_earlier_import(cli, tmp_path):
    """`catalog import --out F --force` replaced any F, a hand-kept price list included; now
    only a catalog an earlier import wrote (its first line says so)."""
    mine = tmp_path / "prices.yaml"
    mine.write_text("offers: []  # my negotiated prices\n")
    for force in ([], ["--force"]):
        code, _, err = cli(*_command("catalog", (tmp_path, ""), str(mine)), *force)
        _one_clear_error(code, err, "is not a catalog autotune wrote", "never replaces")
        assert mine.read_text() == "offers: []  # my negotiated prices\n"
    imported = tmp_path / "imported.yaml"
    code, _, err = cli(*_command("catalog", (tmp_path, ""), str(imported)))
    assert code == 0, err
    first = imported.read_text()
    assert first.startswith("# Imported by `autotune catalog import --skypilot` on ")
    code, _, err = cli(*_command("catalog", (tmp_path, ""), str(imported)))
    _one_clear_error(code, err, "exists (an earlier import)", "--force")
    imported.write_text(first + "# a line of mine\n")
    code, _, err = cli(*_command("catalog", (tmp_path, ""), str(imported)), "--force")
    assert code == 0, err
    assert imported.read_text() == first


def test_trial_force_never_replaces_a_file_of_the_users_and_reruns_over_its_own(study, cli, tmp_path):
    """`trial --out F --force` replaced a config.json or result.json of the user's in F (the
    trial's files had no manifest); now it refuses them, and records its own files, so that
    a rerun into the same folder, with or without --force, replaces just those."""
    out = tmp_path / "t"
    out.mkdir()
    (out / "config.json").write_text("mine\n")
    (out / "notes.txt").write_text("keep\n")
    code, _, err = cli(*_command("trial", study, str(out)), "--force")
    _one_clear_error(code, err, "config.json", "did not write")
    assert (out / "config.json").read_text() == "mine\n"
    (out / "config.json").unlink()
    assert cli(*_command("trial", study, str(out)), "--force")[0] == 0
    assert (out / "notes.txt").read_text() == "keep\n" and (out / "result.json").is_file()
    code, _, err = cli(*_command("trial", study, str(out)))  # without --force: notes.txt is not its own
    _one_clear_error(code, err, "notes.txt")
    (out / "notes.txt").unlink()
    assert cli(*_command("trial", study, str(out)))[0] == 0  # its own files alone: no --force needed
    # A folder of the user's under the name the launcher's run folder takes (removed after each
    # trial): refused even with --force, and kept.
    (out / "launcher_logs").mkdir()
    (out / "launcher_logs" / "mine.txt").write_text("keep\n")
    code, _, err = cli(*_command("trial", study, str(out)), "--force")
    _one_clear_error(code, err, "launcher_logs", "did not write")
    assert (out / "launcher_logs" / "mine.txt").read_text() == "keep\n"


def test_trial_out_reruns_in_a_folder_an_earlier_trial_numbered_for_itself(study, cli, tmp_path, monkeypatch):
    """`autotune trial C` writes autotune_runs/single/trial_0000; `autotune trial C --out` that
    folder was refused as holding files "autotune did not write" (only --out folders recorded
    what the trial wrote), where the README says autotune's own earlier output is taken."""
    monkeypatch.chdir(tmp_path)
    config = _command("trial", study, "unused")[1]
    assert cli("trial", config)[0] == 0
    numbered = tmp_path / "autotune_runs" / "single" / "trial_0000"
    code, _, err = cli("trial", config, "--out", str(numbered))
    assert code == 0, err
    assert (numbered / "result.json").is_file() and not (numbered.parent / "trial_0001").exists()
