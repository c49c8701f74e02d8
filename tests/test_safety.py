"""Nothing lost, nothing leaked (issue #14): each case as a user meets it, through the real CLI.

Output folders keep what autotune did not write; study names stay inside the runs folder;
no form of a storage password reaches a terminal, file or report; bad numbers, names and
workloads end with exit 2 before any trial; read-only commands create nothing; a study copy
is all or nothing; files follow the umask; a sweep whose trials all failed exits 1.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.report_study import ddp_study

TINY_SPEC = """\
workload: {kind: gpt, preset: tiny}
seq_len: 32
target: {tokens: 1.0e7}
space: space.yaml
trial: {warmup_steps: 1, measure_steps: 2, max_measure_steps: 2, timeout_s: 240}
"""
ONE_CONFIG_SPACE = "num_gpus: [1]\nmicro_batch_size: [2]\nprecision: [fp32]\ncheckpointing: [none]\n"


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return ddp_study(tmp_path_factory)


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# 1. report --out -------------------------------------------------------------------------

def test_report_out_never_empties_a_folder(study, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("the user's notes")
    p = study.cli("report", "--out", str(out))
    assert p.returncode == 2 and "notes.txt" in p.stderr and "--force" in p.stderr, p.stderr
    assert _entries(out) == ["notes.txt"]
    p = study.cli("report", "--out", str(out), "--force")
    assert p.returncode == 0, p.stderr
    assert (out / "notes.txt").read_text() == "the user's notes" and (out / "report.html").is_file()
    # The study's own folder (it holds the database): refused, and the database stays.
    before = _entries(study.folder)
    for given in (str(study.folder), "."):
        p = study.cli("report", "--out", given)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert _entries(study.folder) == before


# 2. trial --out --------------------------------------------------------------------------

def _tiny_trial_config(path: Path) -> Path:
    from autotune.contract import GPTWorkload, TrialConfig

    TrialConfig(workload=GPTWorkload(preset="tiny"), seq_len=32, micro_batch_size=2, warmup_steps=1,
                measure_steps=2, max_measure_steps=2, timeout_s=240).write(path)
    return path


@pytest.mark.e2e
def test_trial_out_keeps_the_users_result_files(tmp_path, run_cli):
    cfg = _tiny_trial_config(tmp_path / "cfg.json")
    out = tmp_path / "runs"
    out.mkdir()
    (out / "result_backup.json").write_text('{"mine": true}')
    p = run_cli("trial", str(cfg), "--out", str(out))
    assert p.returncode == 2 and "result_backup.json" in p.stderr, p.stderr
    assert _entries(out) == ["result_backup.json"]
    old = os.umask(0o027)  # the trial's files follow the umask (case 9)
    try:
        p = run_cli("trial", str(cfg), "--out", str(out), "--force")
    finally:
        os.umask(old)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (out / "result_backup.json").read_text() == '{"mine": true}'
    assert json.loads((out / "result.json").read_text())["status"] == "ok"
    for name in ("result.json", "config.json", "command.json", "stdout.log"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o640, name
    # Without --out: a fresh numbered folder each time, never an earlier trial's.
    p = run_cli("trial", str(cfg))
    assert p.returncode == 0, p.stderr
    assert _entries(tmp_path / "autotune_runs" / "single") == ["trial_0000"]


# 3. study names --------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../../escaped", "/abs/elsewhere", "x/", "./x", "a/../b"])
def test_study_names_cannot_leave_the_runs_folder(tmp_path, cli, monkeypatch, name):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    for argv in (["sweep", "--study", name, "--trials", "1"], ["report", "--study", name],
                 ["study", "copy", "sqlite:///x.db", "sqlite:///y.db", "--to-study", name]):
        code, out, err = cli(*argv)
        assert code == 2 and "study" in err and "Traceback" not in err, (argv, err)
    assert _entries(tmp_path) == ["a"] and _entries(work) == []  # nothing written anywhere


# 4. passwords ----------------------------------------------------------------------------

@pytest.mark.postgres
@pytest.mark.e2e
def test_no_form_of_the_password_reaches_any_output(postgres, tmp_path, run_cli):
    """A user name holding '@' and a password holding '#', '/' and ':', as SQLAlchemy reads
    them; the URL given through AUTOTUNE_STORAGE (the README's way) and on the command line."""
    from urllib.parse import quote

    import psycopg2

    user, password = "admin@corp", "Pa#ss:w/rd-7x"
    conn = psycopg2.connect(host="127.0.0.1", port=postgres.port, user="autotune",
                            password="pg S3cret/pw@42", dbname="postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (user,))
        if not cur.fetchone():
            cur.execute(f'CREATE ROLE "{user}" LOGIN SUPERUSER PASSWORD %s', (password,))
    conn.close()
    url = f"postgresql://{user}:{password}@127.0.0.1:{postgres.port}/autotune"
    (tmp_path / "space.yaml").write_text(ONE_CONFIG_SPACE)
    (tmp_path / "spec.yaml").write_text(TINY_SPEC + "study: secret-check\n")
    env = {"AUTOTUNE_STORAGE": url}
    runs = [run_cli("sweep", "spec.yaml", "--trials", "1", env=env),
            run_cli("report", "--study", "secret-check", "--json", env=env),
            run_cli("report", "--study", "secret-check", "--html", "r.html", "--out", "rep", env=env),
            run_cli("report", "--study", "secret-check", "--storage", url),
            run_cli("report", "--study", "secret-check", "--storage", url.replace(password, "wrong#pw"))]
    assert [p.returncode for p in runs] == [0, 0, 0, 0, 2], [p.stderr for p in runs]
    assert "***" in runs[0].stdout and "***" in runs[4].stderr
    forms = {password, quote(password, safe=""), quote(password), "wrong#pw"}
    texts = [p.stdout + p.stderr for p in runs]
    texts += [f.read_text(errors="replace") for f in tmp_path.rglob("*") if f.is_file()]
    assert len(texts) > 10  # the trial folder's files, the reports
    for text in texts:
        for form in forms:
            assert form not in text


MALFORMED_PASSWORD = "p@ss#Secret"  # unencoded '@' and '#': SQLAlchemy reads password 'p'


def _pieces(secret: str, shortest: int = 4) -> set[str]:
    """Every stretch of `secret` at least `shortest` characters long, percent-encoded too,
    except plain lowercase words ("ecret" is in any study named "secret-check")."""
    from urllib.parse import quote

    parts = {secret[i:j] for i in range(len(secret)) for j in range(i + shortest, len(secret) + 1)}
    parts = {p for p in parts if not (p.isalpha() and p.islower())}
    return parts | {quote(p, safe="") for p in parts} | {"Secret", "ss#"}


@pytest.mark.postgres
def test_a_malformed_url_shows_no_part_of_its_password(postgres, tmp_path, run_cli):
    """`postgresql://u:p@ss#Secret@HOST:PORT/db`, as a user pastes it: through the real CLI
    (flag, environment, storage file) it is refused with exit 2 and the fix, hiding all between
    '://' and the last '@'. The same password percent-encoded opens the real server. What the
    driver says of the host SQLAlchemy parses out of it ("ss#Secret@127.0.0.1") is scrubbed."""
    import psycopg2
    from sqlalchemy.engine import make_url

    from autotune.run.storage import redact_text
    from tests.pg import PASSWORD, USER

    conn = psycopg2.connect(host="127.0.0.1", port=postgres.port, user=USER, password=PASSWORD,
                            dbname="postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_roles WHERE rolname = 'u'")
        if not cur.fetchone():
            cur.execute("CREATE ROLE u LOGIN SUPERUSER PASSWORD %s", (MALFORMED_PASSWORD,))
    conn.close()
    url = f"postgresql://u:{MALFORMED_PASSWORD}@127.0.0.1:{postgres.port}/autotune"
    (tmp_path / "space.yaml").write_text(ONE_CONFIG_SPACE)
    (tmp_path / "spec.yaml").write_text(TINY_SPEC + "study: malformed\n")
    given = tmp_path / "given"  # the user's own files, which hold the URL
    given.mkdir()
    (given / "db-url").write_text(url + "\n")
    runs = [run_cli("sweep", "spec.yaml", "--trials", "1", "--storage", url),
            run_cli("sweep", "spec.yaml", "--trials", "1", env={"AUTOTUNE_STORAGE": url}),
            run_cli("report", "--study", "malformed", "--storage-file", str(given / "db-url"))]
    for p in runs:
        assert p.returncode == 2, p.stdout + p.stderr
        assert f"postgresql://***@127.0.0.1:{postgres.port}/autotune" in p.stderr, p.stderr
        assert "percent-encode" in p.stderr and "Traceback" not in p.stderr
    # Percent-encoded, the same password opens the real server: past it, the study is missing.
    from urllib.parse import quote

    encoded = url.replace(MALFORMED_PASSWORD, quote(MALFORMED_PASSWORD, safe=""))
    runs.append(run_cli("report", "--study", "nope", "--storage", encoded))
    # Either answer comes from inside the database: whether an earlier test of the session
    # created Optuna's tables in it decides which (run alone, this test finds none).
    said = runs[-1].stderr
    assert runs[-1].returncode == 2 and ("no study 'nope'" in said or (
        "study 'nope'" in said and "holds no autotune study (no Optuna tables)" in said)), said

    # The driver's own message for the host SQLAlchemy reads out of the malformed URL.
    with pytest.raises(psycopg2.OperationalError) as err:
        psycopg2.connect(host=make_url(url).host, port=postgres.port, user="u",
                         password=make_url(url).password, dbname="autotune", connect_timeout=5)
    assert "ss#Secret" in str(err.value)  # the leak redact_text has to catch
    texts = [p.stdout + p.stderr for p in runs] + [redact_text(str(err.value), url)]
    texts += [f.read_text(errors="replace") for f in tmp_path.rglob("*")
              if f.is_file() and given not in f.parents]
    texts.append((postgres.root / "server.log").read_text(errors="replace"))
    for text in texts:
        leaked = sorted(piece for piece in _pieces(MALFORMED_PASSWORD) if piece in text)
        assert not leaked, (leaked, text[-2000:])


# 5. numbers ------------------------------------------------------------------------------

@pytest.mark.parametrize("spec_text, argv", [
    ("target: {tokens: .nan}\n", []),
    ("target: {tokens: .inf}\n", []),
    ("", ["--max-gpu-hours", "0"]),
    ("", ["--max-search-usd", "nan"]),
])
def test_nan_infinity_and_zero_are_refused_before_any_trial(tmp_path, cli, monkeypatch, spec_text, argv):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text(spec_text)
    code, out, err = cli("sweep", "spec.yaml", "--trials", "1", *argv)
    assert code == 2 and "To fix" in err and "Traceback" not in err, err
    assert _entries(tmp_path) == ["spec.yaml"]


# 7. read-only commands -------------------------------------------------------------------

def test_reading_creates_no_storage(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in (["report"], ["report", "--storage", "sqlite:///missing.db"],
                 ["export", "--pick", "cheapest", "--out", "launch"],
                 ["report", "--storage", "journal:///" + str(tmp_path / "missing.log")],
                 ["study", "copy", "sqlite:///nothere.db", "sqlite:///dst.db"]):
        code, out, err = cli(*argv)
        assert code == 2 and "Traceback" not in err, (argv, err)
    assert _entries(tmp_path) == []


def test_copying_a_missing_study_creates_no_destination(study, tmp_path):
    import subprocess
    import sys

    def copy(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "autotune.cli", "study", "copy", *argv],
                              capture_output=True, text=True, cwd=study.folder)

    p = copy(study.storage, f"sqlite:///{tmp_path}/other.db", "--study", "ghost")
    assert p.returncode == 2 and "ghost" in p.stderr
    assert not (tmp_path / "other.db").exists()
    p = copy(study.storage, f"sqlite:///{tmp_path}/dst.db", "--study", study.name, "--to-study", "x",
             "--to-runs-dir", str(tmp_path / "runs"))
    assert p.returncode == 0, p.stderr  # the real study copies
    from autotune.run.storage import open_storage, user_study_names

    assert user_study_names(open_storage(f"sqlite:///{tmp_path}/dst.db")) == ["x"]


# 8. study copy, all or nothing -----------------------------------------------------------

def test_a_failed_copy_leaves_nothing_that_blocks_a_retry(study, tmp_path):
    import shutil

    import optuna

    from autotune.cli.study import COPY_INCOMPLETE
    from autotune.run.storage import open_storage, user_study_names

    runs = tmp_path / "runs"
    shutil.copytree(study.folder / "autotune_runs" / study.name, runs / study.name, symlinks=True)
    # A dangling link in a trial folder: copying it fails half-way, as a full disk would.
    broken = next(p for p in (runs / study.name).iterdir() if p.is_dir()) / "dangling.log"
    broken.symlink_to(tmp_path / "no-such-file")
    dst = f"sqlite:///{tmp_path}/dst.db"
    argv = ("study", "copy", study.storage, dst, "--study", study.name, "--runs-dir", str(runs),
            "--to-runs-dir", str(tmp_path / "to"))
    import subprocess
    import sys

    def copy() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "autotune.cli", *argv], capture_output=True,
                              text=True, cwd=study.folder)

    p = copy()
    assert p.returncode != 0
    assert user_study_names(open_storage(dst)) == []  # no partial study
    assert not (tmp_path / "to").exists() or _entries(tmp_path / "to") == []  # no staged folders
    broken.unlink()
    # A copy killed half-way (no cleanup ran) leaves a study marked incomplete: a retry replaces it.
    storage = open_storage(dst)
    leftover = optuna.create_study(study_name=study.name, storage=storage, directions=["minimize"] * 2)
    storage.set_study_system_attr(leftover._study_id, COPY_INCOMPLETE, True)
    p = copy()
    assert p.returncode == 0, p.stderr
    copied = optuna.load_study(study_name=study.name, storage=dst)
    assert len(copied.trials) == len(optuna.load_study(study_name=study.name, storage=study.storage).trials)
    assert all(Path(t.user_attrs["trial_dir"]).is_dir() for t in copied.trials if "trial_dir" in t.user_attrs)
    assert not storage.get_study_system_attrs(copied._study_id)[COPY_INCOMPLETE]


# 9. permissions --------------------------------------------------------------------------

def test_report_files_follow_the_umask(study, tmp_path):
    old = os.umask(0o027)
    try:
        p = study.cli("report", "--html", str(tmp_path / "r.html"), "--out", str(tmp_path / "rep"))
    finally:
        os.umask(old)
    assert p.returncode == 0, p.stderr
    assert stat.S_IMODE((tmp_path / "r.html").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "rep").stat().st_mode) == 0o750
    assert {stat.S_IMODE(f.stat().st_mode) for f in (tmp_path / "rep").iterdir()} == {0o640}
    # report --html over a page it wrote: fine; over a user's file: refused, --force or not
    # (autotune never replaces a file it did not write).
    assert study.cli("report", "--html", str(tmp_path / "r.html")).returncode == 0
    (tmp_path / "user.html").write_text("<p>mine</p>")
    for force in ([], ["--force"]):
        p = study.cli("report", "--html", str(tmp_path / "user.html"), *force)
        assert p.returncode == 2 and (tmp_path / "user.html").read_text() == "<p>mine</p>", p.stderr
        assert "is not a report autotune wrote" in p.stderr and "Traceback" not in p.stderr


# 10. a sweep whose trials all fail -------------------------------------------------------

def _sweep_entry_point(tmp_path, run_cli, function: str, trials: int, kwargs: str = "{}"):
    """`autotune sweep` of a 1-rank space of 6 micro-batches whose workload is
    tests.fixtures.entry_points:`function` called with `kwargs` (a YAML flow mapping)."""
    (tmp_path / "space.yaml").write_text("num_gpus: [1]\nmicro_batch_size: [1, 2, 4, 8, 16, 32]\n"
                                         "precision: [fp32]\ncheckpointing: [none]\n")
    (tmp_path / "spec.yaml").write_text(
        f"workload: {{kind: entry_point, entry_point: 'tests.fixtures.entry_points:{function}', "
        f"kwargs: {kwargs}}}\n"
        "seq_len: 16\nspace: space.yaml\n"
        "trial: {warmup_steps: 1, measure_steps: 2, max_measure_steps: 2, timeout_s: 240}\n")
    return run_cli("sweep", "spec.yaml", "--trials", str(trials), cwd=tmp_path,
                   env={"PYTHONPATH": str(Path(__file__).resolve().parent.parent)})


@pytest.mark.e2e
def test_a_sweep_whose_trials_all_fail_exits_1_and_stops_early(tmp_path, run_cli):
    """The user's model raises in every config: once the same error has ended three different
    configs the sweep stops (long before its 12 trials) and exits 1 with the reason."""
    p = _sweep_entry_point(tmp_path, run_cli, "build", 12, kwargs="{fail: raise}")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "no trial of this study succeeded" in p.stdout
    assert "the same error ended 3 different configs" in p.stdout
    folders = sorted((tmp_path / "autotune_runs" / "default").iterdir())
    assert all(json.loads((f / "result.json").read_text())["status"] == "crash" for f in folders)
    # A crash is not a property of its config, so the sampler may propose a crashed config
    # again: the stop counts different configs, and comes at the third.
    configs = [json.loads((f / "config.json").read_text())["micro_batch_size"] for f in folders]
    assert len(set(configs)) == 3 and len(set(configs[:-1])) == 2 and len(folders) < 12


@pytest.mark.e2e
def test_an_entry_point_that_breaks_its_calling_convention_stops_the_sweep_at_its_first_trial(tmp_path, run_cli):
    """An entry point that returns the model alone, not (model, batches[, info]), would end
    every config the same way: the sweep stops after the first trial, saying what the function
    returned, where it spent three before (the rule for any repeated error)."""
    p = _sweep_entry_point(tmp_path, run_cli, "build_model_only", 8)
    assert p.returncode == 1, p.stdout + p.stderr
    said = " ".join(p.stdout.split())
    assert ("stopped: the workload's entry point broke its calling convention, which every config would "
            "break alike: entry point 'tests.fixtures.entry_points:build_model_only' must return (model, "
            "batches) or (model, batches, info), got TinyLM. Fix the function") in said, p.stdout
    assert len(list((tmp_path / "autotune_runs" / "default").iterdir())) == 1


# 12. relative paths and the workload check -----------------------------------------------

@pytest.mark.e2e
def test_a_config_beside_the_spec_is_found_from_any_folder(tmp_path, run_cli):
    project = tmp_path / "project"
    project.mkdir()
    (project / "llama-tiny.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 128,
        "max_position_embeddings": 64}))
    (project / "space.yaml").write_text(ONE_CONFIG_SPACE)
    (project / "spec.yaml").write_text(TINY_SPEC.replace("{kind: gpt, preset: tiny}",
                                                         "{kind: hf, config_path: llama-tiny.json}"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = run_cli("sweep", "../project/spec.yaml", "--trials", "1", cwd=elsewhere)
    assert p.returncode == 0, p.stdout + p.stderr
    result = next((elsewhere / "autotune_runs" / "default").glob("trial_*/result.json"))
    assert json.loads(result.read_text())["status"] == "ok"
    # A config that is not there: exit 2 before any trial, naming the spec and the file.
    (project / "spec.yaml").write_text(TINY_SPEC.replace("{kind: gpt, preset: tiny}",
                                                         "{kind: hf, config_path: nothere.json}"))
    p = run_cli("sweep", "../project/spec.yaml", "--trials", "1", "--study", "second", cwd=elsewhere)
    assert p.returncode == 2 and "nothere.json" in p.stderr and "spec.yaml" in p.stderr, p.stderr
    assert not (elsewhere / "autotune_runs" / "second").exists()
