"""`report --out` and `export --out` into the same folder, and pages and files the user edited:
each command replaces and removes only its own files (the manifest says which command wrote
each), so another command's output counts as the user's files: without --force the folder is
refused (exit 2, naming that command and the fix), with --force it is kept. A file changed
since autotune wrote it, report.json or an --html page, is never replaced, --force or not.
Through the real CLI, on one real tiny study (one trial) built once for this module.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SPACE = "num_gpus: [1]\nmicro_batch_size: [1]\ngrad_accum_steps: [2]\nprecision: [fp32]\ncheckpointing: [none]\n"
SPEC = ("workload: {kind: gpt, preset: tiny}\nseq_len: 32\ntarget: {tokens: 1.0e7}\nspace: space.yaml\n"
        "trial: {warmup_steps: 1, measure_steps: 2, max_measure_steps: 2, timeout_s: 240}\n")
REPORT_FILES = {"report.html", "report.json", "pareto.png", "throughput.png", "memory.png"}
EXPORT_FILES = {"launch.sh", "bill.json", "bill.md", "accelerate_config.yaml", "trial_config.json"}


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """The folder of study 's1' (study.db): one real trial."""
    folder = tmp_path_factory.mktemp("s1")
    (folder / "space.yaml").write_text(SPACE)
    (folder / "spec.yaml").write_text(SPEC)
    p = _run(folder, "sweep", "spec.yaml", "--trials", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    return folder


def _run(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args, "--study", "s1",
                           "--storage", f"sqlite:///{folder / 'study.db'}"], cwd=folder, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, COLUMNS="200"))


def _report(study: Path, *args: str) -> subprocess.CompletedProcess:
    return _run(study, "report", *args)


def _export(study: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return _run(study, "export", "--pick", "cheapest", "--out", str(out), *args)


def _files(folder: Path) -> dict[str, bytes]:
    """Every entry of `folder` (its manifest included) with its bytes."""
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _refused(p: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2 with one clear message: the fix and `words` in it, no traceback."""
    err = p.stderr
    assert p.returncode == 2, p.stdout + err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "To fix:" in err, err
    for w in words:
        assert w in err, (w, err)


def _kept(before: dict[str, bytes], folder: Path, names: set[str]) -> None:
    """`names` of `before` are still in `folder`, byte for byte."""
    now = _files(folder)
    assert names <= before.keys(), sorted(before)
    for name in names:
        assert now.get(name) == before[name], f"{name} was {'changed' if name in now else 'deleted'}"


def test_a_report_into_an_exports_folder_is_refused_and_with_force_keeps_the_export(study, tmp_path):
    out = tmp_path / "exp3"
    assert _export(study, out).returncode == 0
    exported = _files(out)
    # Without --force: refused, naming the export and another --out; nothing changed.
    _refused(_report(study, "--out", str(out)), "launch.sh", "autotune export", "another --out", "--force")
    assert _files(out) == exported
    # With --force: the report beside the export, every file of the export as it was.
    p = _report(study, "--out", str(out), "--force")
    assert p.returncode == 0, p.stderr
    _kept(exported, out, EXPORT_FILES)
    assert REPORT_FILES <= set(_files(out))
    # And the report again (its own files replaced, the export's still kept).
    both = _files(out)
    assert _report(study, "--out", str(out), "--force").returncode == 0
    _kept(both, out, EXPORT_FILES)


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_an_export_into_a_reports_folder_keeps_the_report(study, tmp_path, force):
    out = tmp_path / "rep"
    assert _report(study, "--out", str(out)).returncode == 0
    reported = _files(out)
    p = _export(study, out, *force)
    if not force:  # refused, naming the report and another --out; nothing changed
        _refused(p, "report.json", "autotune report", "another --out", "--force")
        assert _files(out) == reported
        return
    assert p.returncode == 0, p.stderr
    _kept(reported, out, REPORT_FILES)  # the help says: "they are kept"
    assert EXPORT_FILES <= set(_files(out))


def test_each_command_removes_only_its_own_stale_files_and_never_the_users(study, tmp_path):
    out = tmp_path / "mixed"
    out.mkdir()
    (out / "notes.txt").write_text("the user's notes\n")
    assert _export(study, out, "--force").returncode == 0
    assert _report(study, "--out", str(out), "--force").returncode == 0
    before = _files(out)
    _kept(before, out, EXPORT_FILES | {"notes.txt"})
    # An export for the Trainer writes no accelerate_config.yaml: the earlier export's, its own
    # and unchanged, goes; the report's files and the user's notes stay.
    p = _export(study, out, "--for", "hf-trainer", "--force")
    assert p.returncode == 0, p.stderr
    assert not (out / "accelerate_config.yaml").exists() and (out / "trainer_flags.txt").is_file()
    _kept(before, out, REPORT_FILES | {"notes.txt"})
    # The report again: the export's files and the notes stay.
    before = _files(out)
    assert _report(study, "--out", str(out), "--force").returncode == 0
    _kept(before, out, set(before) - REPORT_FILES - {".autotune-files.json"})


def test_an_edited_report_json_is_never_replaced(study, tmp_path):
    out = tmp_path / "rep"
    assert _report(study, "--out", str(out)).returncode == 0
    assert _report(study, "--out", str(out)).returncode == 0  # its own, unchanged: rewritten
    (out / "report.json").write_text('{"my": "notes"}\n')
    before = _files(out)
    for force in ([], ["--force"]):  # --force's help: a file of yours is never replaced
        _refused(_report(study, "--out", str(out), *force), "report.json", "changed since")
        assert _files(out) == before
    assert "never replaced" in _run(study, "report", "--help").stdout


def test_an_edited_html_page_is_never_replaced(study, tmp_path):
    page = tmp_path / "r.html"
    assert _report(study, "--html", str(page)).returncode == 0
    assert _report(study, "--html", str(page)).returncode == 0  # its own, unchanged: rewritten
    text = page.read_text()
    # An edit keeping the generator tag (all the old check read): refused, --force or not, and
    # the --out folder given with it is not written either.
    edited = text.replace("</body>", "<p>my notes on these options</p></body>")
    assert edited != text
    page.write_text(edited)
    for force in ([], ["--force"]):
        p = _report(study, "--html", str(page), "--out", str(tmp_path / "rep"), *force)
        _refused(p, str(page), "changed since", "another --html")
        assert page.read_text() == edited and not (tmp_path / "rep").exists()
    # A page whose digest line is gone (as before pages had one): it cannot be told unedited.
    page.write_text(text[:text.rstrip("\n").rfind("\n") + 1])
    _refused(_report(study, "--html", str(page)), "changed since")


def test_the_page_of_an_out_folder_is_refused_as_what_it_is(study, tmp_path):
    # `--html DIR/report.html` on the page `--out DIR` wrote, untouched, said it "was changed
    # since autotune wrote it": refused still (the folder's record would no longer match), with
    # the reason that is true and the command that refreshes it.
    out = tmp_path / "rep"
    assert _report(study, "--out", str(out)).returncode == 0
    before = _files(out)
    _refused(_report(study, "--html", str(out / "report.html")), "is the page of a report folder",
             f"--out {out}")
    assert _files(out) == before
    (out / "report.html").write_text((out / "report.html").read_text() + "<!-- mine -->\n")
    _refused(_report(study, "--html", str(out / "report.html")), "changed since")
