"""Read-only commands (report, export, study status, the source of study copy) never write into
a database they did not write: a SQLite file or server database without Optuna's tables is one
clear error, and its bytes (its tables) stay as they were. Writing commands still create them."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import optuna
import pytest

from autotune.errors import UserError
from autotune.run.storage import open_storage, user_study_names

READ_ONLY = {
    "report": lambda url: ["report", "--study", "s1", "--storage", url],
    "export": lambda url: ["export", "--pick", "cheapest", "--out", "out", "--study", "s1",
                           "--storage", url],
    "study status": lambda url: ["study", "status", "--study", "s1", "--storage", url],
    "study copy": lambda url: ["study", "copy", url, "sqlite:///dst.db", "--study", "s1"],
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _foreign_app_db(path: Path) -> Path:
    """Someone's application database: one table of its own, one row."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    return path


def _tables(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"))
    finally:
        conn.close()


@pytest.fixture(params=["app.db", "empty.db"])
def foreign_db(request, tmp_path, monkeypatch) -> Path:
    """A SQLite file autotune did not write: an app's database, or a 0-byte file."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / request.param
    if request.param == "app.db":
        return _foreign_app_db(path)
    path.touch()
    return path


@pytest.mark.parametrize("command", sorted(READ_ONLY))
def test_read_only_command_leaves_a_foreign_database_untouched(command, foreign_db, cli):
    before, listing = _sha(foreign_db), sorted(p.name for p in foreign_db.parent.iterdir())
    code, out, err = cli(*READ_ONLY[command](f"sqlite:///{foreign_db.name}"))
    assert code == 2, (out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert f"storage sqlite:///{foreign_db.name} holds no autotune study (no Optuna tables)" in lines[0]
    assert "--storage (or AUTOTUNE_STORAGE)" in lines[0]
    assert _sha(foreign_db) == before
    # No table, no journal file, no destination database, no export folder left behind.
    assert sorted(p.name for p in foreign_db.parent.iterdir()) == listing


def test_the_audit_repro_through_the_real_cli(tmp_path, run_cli):
    """The reported case end to end: `autotune report` on an app's 8 KiB database."""
    app = _foreign_app_db(tmp_path / "app.db")
    before, size = _sha(app), app.stat().st_size
    p = run_cli("report", "--study", "s1", "--storage", "sqlite:///app.db")
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().count("\n") == 0 and "no Optuna tables" in p.stderr, p.stderr
    assert "no study 's1'" not in p.stderr
    assert (_sha(app), app.stat().st_size, _tables(app)) == (before, size, ["users"])


def test_a_partial_optuna_database_is_refused_without_writing(tmp_path):
    path = tmp_path / "half.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE studies (study_id INTEGER PRIMARY KEY, study_name TEXT)")
    conn.commit()
    conn.close()
    before = _sha(path)
    with pytest.raises(UserError) as exc:
        open_storage(f"sqlite:///{path}", must_exist=True)
    assert "not a whole Optuna database" in str(exc.value) and "version_info" in str(exc.value)
    assert _sha(path) == before and _tables(path) == ["studies"]


def test_a_study_database_still_opens_read_only_unchanged(tmp_path, cli, monkeypatch):
    """A database a sweep wrote (its study created the sweep's way) opens for reading, as is."""
    from autotune.search.study import open_study

    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path}/s.db"
    open_study(url, "s1")
    before = _sha(tmp_path / "s.db")
    assert user_study_names(open_storage(url, must_exist=True)) == ["s1"]
    code, out, err = cli("study", "status", "--study", "s1", "--storage", url)
    assert code == 0 and "study 's1'" in out, (out, err)
    code, out, err = cli("report", "--study", "s1", "--storage", url)
    assert code == 0 and "0 trials" in out, (out, err)
    assert _sha(tmp_path / "s.db") == before


def test_a_writing_command_still_creates_the_tables_in_an_empty_file(tmp_path):
    path = tmp_path / "new.db"
    path.touch()
    storage = open_storage(f"sqlite:///{path}")  # what a sweep does
    optuna.create_study(study_name="s1", storage=storage)
    assert user_study_names(storage) == ["s1"]
    assert {"studies", "trials", "version_info", "alembic_version"} <= set(_tables(path))


# --- PostgreSQL (a real server: tests/pg.py; skipped without its binaries) -----------------

def _pg_database(pg, foreign_table: bool) -> tuple[str, str]:
    """A fresh database on the shared server, optionally holding an app's table; its URL."""
    db = f"ro{time.monotonic_ns()}"
    pg.create_database(db)
    if foreign_table:
        conn = pg.connect(db)
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE users (id integer)")
        conn.close()
    return db, pg.url.rsplit("/", 1)[0] + "/" + db


def _pg_tables(pg, db: str) -> list[str]:
    conn = pg.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
            return sorted(r[0] for r in cur.fetchall())
    finally:
        conn.close()


@pytest.mark.postgres
@pytest.mark.parametrize("foreign_table", [True, False], ids=["app-table", "empty"])
def test_read_only_command_creates_no_table_on_a_server(postgres, cli, tmp_path, monkeypatch,
                                                         foreign_table):
    from tests.pg import PASSWORD

    monkeypatch.chdir(tmp_path)
    db, url = _pg_database(postgres, foreign_table)
    before = _pg_tables(postgres, db)
    code, out, err = cli("report", "--study", "s1", "--storage", url)
    assert code == 2, (out, err)
    assert "holds no autotune study (no Optuna tables)" in err and err.strip().count("\n") == 0, err
    assert "***" in err and PASSWORD not in err and "S3cret" not in out + err
    assert _pg_tables(postgres, db) == before == (["users"] if foreign_table else [])
    # A sweep (a writing open) still creates Optuna's tables there.
    assert user_study_names(open_storage(url)) == []
    assert "studies" in _pg_tables(postgres, db)
