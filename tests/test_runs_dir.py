"""The runs folder of a sweep (RUNS_DIR/STUDY): checked before the storage or any trial is
created, and owned by one study in one storage (autotune.run.preflight): another study's trial
folders are never overwritten, while the same study resumed (or a second worker) goes on."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from autotune.errors import UserError
from autotune.run.preflight import (
    check_runs_dir,
    owner_file,
    runs_folder_verdict,
    storage_label,
    take_runs_folder,
)

SPACE = """
num_gpus: [1]
micro_batch_size: [1, 2]
grad_accum_steps: [2]
precision: [fp32]
checkpointing: [none]
"""

SPEC = """
workload: {kind: gpt, preset: tiny}
seq_len: 32
target: {tokens: 1.0e7}
space: space.yaml
trial: {warmup_steps: 1, measure_steps: 2, max_measure_steps: 2, timeout_s: 80}
study: s1
"""


def _write_spec(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "spec.yaml").write_text(SPEC)


def _refused(p, *words: str) -> str:
    err = p.stdout + p.stderr
    assert p.returncode == 2, err
    assert "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


def test_a_runs_dir_that_is_a_file_ends_before_the_storage_is_created(tmp_path, run_cli):
    _write_spec(tmp_path)
    (tmp_path / "afile").write_text("hi\n")
    p = run_cli("sweep", "spec.yaml", "--trials", "1", "--runs-dir", "afile", "--study", "s9",
                "--storage", "sqlite:///s9.db")
    _refused(p, "--runs-dir 'afile' is a file, not a folder", "To fix:")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["afile", "space.yaml", "spec.yaml"]
    assert (tmp_path / "afile").read_text() == "hi\n"


@pytest.mark.e2e
def test_another_storage_is_refused_and_the_same_study_resumes(tmp_path, run_cli):
    _write_spec(tmp_path)
    p = run_cli("sweep", "spec.yaml", "--trials", "1", "--storage", "sqlite:///a.db")
    assert p.returncode == 0, p.stdout + p.stderr
    folder = tmp_path / "autotune_runs" / "s1"
    result = folder / "trial_0000" / "result.json"
    first = result.read_bytes()
    assert owner_file(folder) == tmp_path / "autotune_runs" / "s1.autotune-study.json"
    owner = json.loads(owner_file(folder).read_text())
    assert owner["study"] == "s1" and owner["storage"] == f"sqlite:///{tmp_path.resolve() / 'a.db'}"

    # Same study name, another storage: its trial_0000 would replace a.db's.
    p = run_cli("sweep", "spec.yaml", "--trials", "1", "--storage", "sqlite:///b.db")
    _refused(p, "runs folder 'autotune_runs/s1'", "a.db", "b.db", "--runs-dir")
    assert result.read_bytes() == first
    assert not (tmp_path / "b.db").exists()
    assert sorted(x.name for x in folder.iterdir()) == ["trial_0000"]

    # The study itself, resumed in its storage, goes on in its folder.
    p = run_cli("sweep", "spec.yaml", "--trials", "1", "--storage", "sqlite:///a.db")
    assert p.returncode == 0, p.stdout + p.stderr
    trials = sorted(x.name for x in folder.iterdir())  # the folder holds trial folders only
    assert len(trials) == 2 and trials[0] == "trial_0000", trials
    assert (folder / trials[1] / "result.json").is_file()
    assert result.read_bytes() == first
    assert json.loads(owner_file(folder).read_text()) == owner

    # A copy of the study with its folders (autotune study copy) sweeps in its own copy.
    p = run_cli("study", "copy", "sqlite:///a.db", "sqlite:///c.db", "--study", "s1", "--to-study", "s2")
    assert p.returncode == 0, p.stdout + p.stderr
    p = run_cli("sweep", "spec.yaml", "--trials", "1", "--storage", "sqlite:///c.db", "--study", "s2")
    assert p.returncode == 0, p.stdout + p.stderr
    copied = json.loads(owner_file(tmp_path / "autotune_runs" / "s2").read_text())
    assert copied["study"] == "s2" and copied["owner"] != owner["owner"]
    assert copied["storage"].endswith("c.db")
    assert json.loads(owner_file(folder).read_text()) == owner
    assert result.read_bytes() == first


# -- the rules, without trials


def _study(url: str, name: str, trial_dirs: list[Path] = ()):
    import optuna

    from autotune.record import TrialRecord
    from autotune.search.study import open_study

    st = open_study(url, name)
    for d in trial_dirs:
        st.add_trial(optuna.trial.create_trial(values=[1.0, 1.0],
                                               user_attrs=TrialRecord.attrs(trial_dir=str(d.resolve()))))
    return st


def test_the_runs_folder_is_checked_without_creating_anything(tmp_path, monkeypatch):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "s1").write_text("")
    with pytest.raises(UserError, match=r"runs folder '.*runs/s1': '.*runs/s1' is a file, not a folder"):
        check_runs_dir(tmp_path / "runs", "s1")
    (tmp_path / "plain").write_text("")
    with pytest.raises(UserError, match="'.*plain' is a file, not a folder"):
        check_runs_dir(tmp_path / "plain" / "deeper", "s1")
    assert check_runs_dir(tmp_path / "new" / "runs", "s1") == tmp_path / "new" / "runs" / "s1"
    assert not (tmp_path / "new").exists()
    (tmp_path / "ro" / "s1").mkdir(parents=True)  # the owner file goes beside the folder
    # Doubles for the permission check: tests run as root, for whom every folder is writable,
    # and cannot mount a read-only file system. The real refusals run end to end through the
    # CLI above (a file in the way) and in tests/test_output_paths.py (/proc refuses root too).
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != tmp_path / "ro")
    with pytest.raises(UserError, match=f"no permission to write in '{tmp_path / 'ro'}'"):
        check_runs_dir(tmp_path / "ro", "s1")

    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    monkeypatch.setattr(os, "statvfs", lambda p: ReadOnly())
    with pytest.raises(UserError, match="cannot create the runs folder .*: Read-only file system"):
        check_runs_dir(tmp_path / "new", "s1")


def test_a_folder_older_versions_wrote_is_adopted_only_by_its_study(tmp_path):
    url, folder = f"sqlite:///{tmp_path / 'a.db'}", tmp_path / "runs" / "s1"
    (folder / "trial_0000").mkdir(parents=True)
    other = f"sqlite:///{tmp_path / 'b.db'}"
    with pytest.raises(UserError, match=r"holds trial folders \(trial_0000\) that study 's1' in "):
        runs_folder_verdict(folder, "s1", other)
    assert not (tmp_path / "b.db").exists()  # the refusal created no storage
    (tmp_path / "empty.db").write_bytes(b"")  # nor wrote Optuna's tables into a foreign file
    with pytest.raises(UserError, match="did not write"):
        runs_folder_verdict(folder, "s1", f"sqlite:///{tmp_path / 'empty.db'}")
    assert (tmp_path / "empty.db").read_bytes() == b""

    st = _study(url, "s1", [folder / "trial_0000"])
    assert runs_folder_verdict(folder, "s1", url) == "adopt"
    take_runs_folder(st, folder, url, "adopt")
    owner = json.loads(owner_file(folder).read_text())
    assert runs_folder_verdict(folder, "s1", url) == "ours"
    # A second worker that raced the first to an empty folder finds the file ours.
    take_runs_folder(_study(url, "s1"), folder, url, "new")
    assert json.loads(owner_file(folder).read_text()) == owner
    # A study of the same name elsewhere whose trials point here (a copy that shares the
    # folder) is refused: the file was written here, by the other study.
    twin = _study(other, "s1", [folder / "trial_0000"])
    with pytest.raises(UserError, match="belongs to study 's1' in sqlite:///.*a.db"):
        runs_folder_verdict(folder, "s1", other)
    assert twin.study_name == "s1"
    # The runs folder copied whole with its owner file (cp -r) serves a study whose trials
    # point at the copy: the file names the folder it was written for, not this one.
    shutil.copytree(tmp_path / "runs", tmp_path / "runs2")
    copy = tmp_path / "runs2" / "s1"
    third = f"sqlite:///{tmp_path / 'c.db'}"
    with pytest.raises(UserError, match="belongs to study 's1'"):
        runs_folder_verdict(copy, "s1", third)  # no trial of c.db's s1 points there yet
    _study(third, "s1", [copy / "trial_0000"])
    assert runs_folder_verdict(copy, "s1", third) == "adopt"


def test_an_empty_folder_becomes_the_studys(tmp_path):
    url, folder = f"sqlite:///{tmp_path / 'a.db'}", tmp_path / "runs" / "s1"
    (folder / "slurm").mkdir(parents=True)  # written by `--slurm-jobs` before any worker ran
    assert runs_folder_verdict(folder, "s1", url) == "new"
    take_runs_folder(_study(url, "s1"), folder, url, "new")
    assert runs_folder_verdict(folder, "s1", url) == "ours"
    owner_file(folder).write_text("{half")
    with pytest.raises(UserError, match="is not the JSON autotune writes there"):
        runs_folder_verdict(folder, "s1", url)


def test_the_storage_label_holds_no_secret(tmp_path):
    label = storage_label("postgresql://tuner:s3cret-pw@db.lan:5432/autotune")
    assert "s3cret-pw" not in label and "db.lan" in label
    assert storage_label("sqlite:///x.db") == f"sqlite:///{Path('x.db').resolve()}"
    assert storage_label(f"journal://{tmp_path}/j.log") == f"journal://{tmp_path}/j.log"


def test_a_study_moved_by_study_copy_takes_its_runs_folder_along(tmp_path):
    """README's `study copy SRC - --dst-file F   # move a study (and its trial folders)`: same
    name, same runs folder. The folder's trial numbers can go on in one study only: the copy
    takes it over, and the source, if swept again there, is refused (the copy's first sweep
    was refused before, and the message's advice left its trials' folders behind)."""
    from autotune.cli.study import copy_study

    runs, src, dst = tmp_path / "runs", f"sqlite:///{tmp_path / 'a.db'}", f"journal://{tmp_path}/j.log"
    folder = runs / "s1"
    (folder / "trial_0000").mkdir(parents=True)
    st = _study(src, "s1", [folder / "trial_0000"])
    take_runs_folder(st, folder, src, "new")
    result = copy_study(src, dst, "s1", "s1", runs, runs)
    assert result["moved_runs"] and result["folders"] == 0
    assert runs_folder_verdict(folder, "s1", dst) == "ours"
    with pytest.raises(UserError, match=r"belongs to study 's1' in journal://"):
        runs_folder_verdict(folder, "s1", src)
    assert (folder / "trial_0000").is_dir()


def test_a_study_gone_from_its_storage_is_named_as_gone(tmp_path):
    url, folder = f"sqlite:///{tmp_path / 'a.db'}", tmp_path / "runs" / "s1"
    (folder / "trial_0000").mkdir(parents=True)
    take_runs_folder(_study(url, "s1", [folder / "trial_0000"]), folder, url, "new")
    (tmp_path / "a.db").unlink()  # the study deleted; its folders stay
    with pytest.raises(UserError, match=r"was written by an earlier study 's1' in .*a.db, which no "
                                        r"longer holds it .*To fix: move '.*s1' and '.*s1.autotune-study.json'"):
        runs_folder_verdict(folder, "s1", url)


def test_a_server_database_refused_for_the_runs_folder_gets_no_tables(tmp_path, postgres):
    """A real PostgreSQL server: a fresh, empty database given to a sweep whose runs folder is
    another study's is refused, and the refusal leaves the database as it was: no Optuna
    table. Once the folder is the server study's own, the same check reads the study there."""
    src, folder = f"sqlite:///{tmp_path / 'a.db'}", tmp_path / "runs" / "s1"
    (folder / "trial_0000").mkdir(parents=True)
    take_runs_folder(_study(src, "s1", [folder / "trial_0000"]), folder, src, "new")
    postgres.create_database("runs_fresh")
    fresh = postgres.url.rsplit("/", 1)[0] + "/runs_fresh"

    def tables() -> set[str]:
        conn = postgres.connect("runs_fresh")
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
                return {row[0] for row in cur.fetchall()}
        finally:
            conn.close()

    with pytest.raises(UserError, match=r"belongs to study 's1' in sqlite:///.*a.db") as err:
        runs_folder_verdict(folder, "s1", fresh)
    assert "S3cret" not in str(err.value)
    assert tables() == set()

    other = tmp_path / "runs" / "s2"
    assert runs_folder_verdict(other, "s2", fresh) == "new"
    take_runs_folder(_study(fresh, "s2"), other, fresh, "new")
    assert "studies" in tables() and runs_folder_verdict(other, "s2", fresh) == "ours"
