"""Atomic claims: "exactly one worker does X" on any Optuna storage, kept out of the study list
(optuna-dashboard shows every study in a storage; a claim is no study of the user's).

    if claim(storage, "llama/3f2a.../0", {"trial": 7}):    # True for exactly one caller, ever
        ...measure...
    claim_owner(storage, "llama/3f2a.../0")                # {"trial": 7}; None when unclaimed

Where a claim lives: RDB storages (SQLite, PostgreSQL, MySQL): a row of the table
`autotune_claims` in the same database, its name the primary key (the database refuses the
second insert); journal storages: a file created with O_EXCL in `<journal>.claims/` beside the
log (the file system refuses the second create); any other storage (in memory): a study named
`autotune-claim:NAME`, unique by Optuna's own rule. That last form is how earlier versions
stored every claim: such a study still counts as the claim in any storage, so a study resumed
after an upgrade keeps its claims (its baselines are not enqueued twice).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

# Studies whose name starts with this are claims written by the study-name form (see above).
CLAIM_PREFIX = "autotune-claim:"
CLAIMS_TABLE = "autotune_claims"
_TABLES: dict[str, Any] = {}  # database URL -> the claims Table, created once per process


def claim(storage, name: str, owner: dict[str, Any] | None = None) -> bool:
    """Atomically claim `name` in this storage: True for exactly one caller, ever. `owner` is
    stored with the claim for whoever loses the race."""
    owner = owner or {}
    if _legacy_owner(storage, name) is not None:
        return False
    engine, folder = _rdb_engine(storage), _journal_folder(storage)
    if engine is not None:
        import sqlalchemy as sa

        table = _table(engine)
        try:
            with engine.begin() as conn:
                conn.execute(table.insert().values(name=name, owner=json.dumps(owner, default=str)))
        except sa.exc.IntegrityError:
            return False
        return True
    if folder is not None:
        folder.mkdir(exist_ok=True)
        try:
            fd = os.open(folder / _file_name(name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            json.dump({"name": name, "owner": owner}, f, default=str)
        return True
    return _legacy_claim(storage, name, owner)


def claim_owner(storage, name: str) -> dict[str, Any] | None:
    """Who holds claim `name` ({} while the winner has not written it yet), None if unclaimed."""
    legacy = _legacy_owner(storage, name)
    if legacy is not None:
        return legacy
    engine, folder = _rdb_engine(storage), _journal_folder(storage)
    if engine is not None:
        table = _table(engine)
        with engine.connect() as conn:
            row = conn.execute(table.select().where(table.c.name == name)).first()
        return None if row is None else json.loads(row.owner)
    if folder is not None:
        path = folder / _file_name(name)
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text()).get("owner", {})
        except (OSError, ValueError):  # created, not yet written
            return {}
    return None


def _rdb_engine(storage):
    """The SQLAlchemy engine of an RDB storage (also behind Optuna's cache), else None."""
    from optuna.storages import RDBStorage

    backend = getattr(storage, "_backend", storage)
    return backend.engine if isinstance(backend, RDBStorage) else None


def _journal_folder(storage) -> Path | None:
    """`<journal>.claims/` beside a journal file storage's log, else None."""
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    if not isinstance(storage, JournalStorage):
        return None
    log = getattr(storage, "_backend", None)
    if not isinstance(log, JournalFileBackend):
        return None
    path = Path(log._file_path)
    return path.with_name(path.name + ".claims")


def _file_name(name: str) -> str:
    # Claim names hold '/' and may be long: a digest is a safe, fixed-length file name.
    return hashlib.sha256(name.encode()).hexdigest()[:40] + ".json"


def _table(engine):
    """The claims table, created when missing. Two workers may both try: the loser's CREATE
    fails, and the table is there all the same."""
    if str(engine.url) in _TABLES:
        return _TABLES[str(engine.url)]
    import sqlalchemy as sa

    meta = sa.MetaData()
    table = sa.Table(CLAIMS_TABLE, meta, sa.Column("name", sa.String(512), primary_key=True),
                     sa.Column("owner", sa.Text, nullable=False))
    for attempt in range(3):
        try:
            meta.create_all(engine, checkfirst=True)
            break
        except sa.exc.DBAPIError:
            if sa.inspect(engine).has_table(CLAIMS_TABLE) or attempt == 2:
                break
    _TABLES[str(engine.url)] = table
    return table


def _legacy_claim(storage, name: str, owner: dict[str, Any]) -> bool:
    import optuna

    try:
        study_id = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE],
                                            study_name=CLAIM_PREFIX + name)
    except optuna.exceptions.DuplicatedStudyError:
        return False
    for k, v in owner.items():
        storage.set_study_user_attr(study_id, k, v)
    return True


def _legacy_owner(storage, name: str) -> dict[str, Any] | None:
    try:
        study_id = storage.get_study_id_from_name(CLAIM_PREFIX + name)
    except KeyError:
        return None
    return storage.get_study_user_attrs(study_id)
