"""What the commands print, as a user or a script reads it: `--version`, `--json` where a
command prints a result, install hints for missing extras, full names at 80 columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna

REPO = Path(__file__).resolve().parent.parent


def test_version(cli):
    import autotune

    code, out, _ = cli("--version")
    assert code == 0 and out.strip() == f"autotune {autotune.__version__}"


def test_study_copy_prints_json(cli, tmp_path):
    src, dst = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"
    study = optuna.create_study(study_name="s", storage=src, directions=["minimize", "minimize"])
    study.add_trial(optuna.trial.create_trial(values=[1.0, 2.0]))
    # A --runs-dir that is not there is a typo, not "0 trial folders": refused, nothing copied.
    code, out, err = cli("study", "copy", src, dst, "--study", "s", "--runs-dir", str(tmp_path / "runs"), "--json")
    assert code == 2 and "--runs-dir" in err and "is not a folder" in err, err
    assert not (tmp_path / "b.db").exists()
    # A URL and its file both given: refused, naming the flag.
    code, out, err = cli("study", "copy", src, dst, "--study", "s", "--dst-file", str(tmp_path / "u.txt"))
    assert code == 2 and "--dst-file given with a URL" in err, err
    (tmp_path / "runs").mkdir()
    code, out, err = cli("study", "copy", src, dst, "--study", "s", "--runs-dir", str(tmp_path / "runs"), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["trials"] == 1 and doc["study"] == "s" and doc["to_study"] == "s"
    assert len(optuna.load_study(study_name="s", storage=dst).trials) == 1


# Run before anything else in the child: the optional report packages look uninstalled.
_HIDE = """
import sys
class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("plotly", "matplotlib"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _Hide())
"""


def test_report_without_the_report_extra_names_the_install(tmp_path):
    """On main: an ImportError traceback. Now one line with the pip command, exit 2, and
    nothing written."""
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text(_HIDE)
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'hide'}{os.pathsep}{REPO}")
    for flag, target in (("--html", "r.html"), ("--out", "rep")):
        p = subprocess.run([sys.executable, "-m", "autotune.cli", "report", flag, target], cwd=tmp_path,
                           capture_output=True, text=True, env=env, timeout=120)
        assert p.returncode == 2, p.stderr
        assert "pip install 'autotune-llm[report]'" in p.stderr and "Traceback" not in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert not (tmp_path / target).exists()


def test_catalog_shows_every_gpu_and_offer_name_whole_at_80_columns(run_cli):
    """On main `autotune catalog` cut the GPU names users pass to --gpu (`cpu-co…`)."""
    from autotune.pricing.load import load_catalog

    cat = load_catalog(None)
    p = run_cli("catalog", env={"COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    words = {w.strip(",;()") for ln in lines for w in ln.split()}
    assert set(cat.gpus) <= words, set(cat.gpus) - words
    assert {o.name for o in cat.offers} <= words, {o.name for o in cat.offers} - words
    table = lines[:lines.index(next(ln for ln in lines if ln.startswith("break-even")))] \
        if any(ln.startswith("break-even") for ln in lines) else lines
    assert all(len(ln) <= 80 for ln in table), max(table, key=len)


def test_the_console_is_as_wide_as_columns_says_or_a_log_line(capsys, monkeypatch):
    """stdout here is captured (not a terminal), as in a Slurm job's .out file: without a
    $COLUMNS of digits (rich ignores any other) the console takes LOG_WIDTH_COLUMNS, so that
    a log keeps each line whole; with one, that width, as on a terminal."""
    from autotune.cli.common import LOG_WIDTH_COLUMNS, console

    monkeypatch.delenv("COLUMNS", raising=False)
    assert not console().is_terminal and console().width == LOG_WIDTH_COLUMNS
    assert console(stderr=True).width == LOG_WIDTH_COLUMNS
    monkeypatch.setenv("COLUMNS", "wide")
    assert console().width == LOG_WIDTH_COLUMNS
    monkeypatch.setenv("COLUMNS", "100")
    assert console().width == 100


def test_help_paragraphs_are_reflowed_at_80_columns(run_cli):
    """Typer kept a docstring's own line breaks and then wrapped each line again at 80 columns,
    so `autotune sweep --help` read "... Ctrl-C" / "finishes" / "the running trial ...". Its
    help is now markdown: a paragraph is reflowed, and only its last line is short."""
    p = run_cli("sweep", "--help", env={"COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    lines = [ln.strip() for ln in p.stdout.split("╭")[0].splitlines()]
    assert "Ctrl-C finishes the running trial" in " ".join(lines)
    ragged = [ln for ln, nxt in zip(lines, lines[1:]) if ln and nxt and len(ln) < 60]
    assert ragged == [], lines


def test_help_shows_no_type_for_a_flag(cli):
    """typer's rich help gave every flag a type, as if it took a value (`--json <bool>`,
    `--help <bool>`); a flag now shows none, and an option that takes a value keeps its own."""
    for args in (("--help",), ("sweep", "--help")):
        code, out, _ = cli(*args)
        assert code == 0 and "<bool>" not in out, out
        row = next(ln for ln in out.splitlines() if "--help" in ln)
        assert "<" not in row, row
    code, out, _ = cli("sweep", "--help")
    assert next(ln for ln in out.splitlines() if "--json" in ln and "print" in ln).count("<") == 0
    assert "<float>" in next(ln for ln in out.splitlines() if "--max-gpu-hours" in ln)
