"""Create or upgrade a tree's database to the head Alembic revision on first use.

The check is cheap on purpose: a stdlib ``sqlite3`` read of ``alembic_version``. Only
when that is not ``HEAD_REVISION`` is Alembic imported and run, under an exclusive
``flock`` on ``<db>.lock`` so processes racing the first use queue up and all succeed:
a database is created and upgraded to head automatically on first use. Stdlib only at
import time: the fast read path (``reader``) imports this module.
"""

from __future__ import annotations

import fcntl
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from fractal.errors import StoreError

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "HEAD_REVISION",
    "DatabaseMissing",
    "alembic_config",
    "current_revision",
    "ensure_schema",
    "migrations_dir",
    "node_traces",
    "refuse_missing",
]

HEAD_REVISION = "0018"
"""The newest migration in ``migrations/versions``; a test checks it against Alembic."""

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def migrations_dir() -> Path:
    """The Alembic script directory.

    ``<fractal package>/migrations`` in an installed wheel (pyproject force-includes
    it there), else ``<repo>/migrations`` in an editable checkout. Raises StoreError
    when neither holds an ``env.py``.
    """
    for candidate in (_PACKAGE_DIR / "migrations", _PACKAGE_DIR.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise StoreError(
        f"fractal's database migrations are missing (looked in {_PACKAGE_DIR / 'migrations'} "
        f"and {_PACKAGE_DIR.parent / 'migrations'}); reinstall fractal"
    )


def alembic_config(db_path: Path) -> Config:
    """An Alembic ``Config`` built from code for the database at ``db_path``.

    Sets ``script_location`` to ``migrations_dir()`` and ``sqlalchemy.url`` to the
    file; no ``alembic.ini`` is read. Imports Alembic (slow; never on a read path).
    """
    from alembic.config import Config  # deferred: start-up cost (Alembic, 371 modules)

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()).replace("%", "%%"))
    url = f"sqlite:///{db_path.resolve()}"
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def current_revision(db_path: Path) -> str | None:
    """The revision stamped in ``db_path``, or None (no file, no table, unreadable).

    Plain ``sqlite3``, opened read-write without create (``mode=rw``) so a missing
    file is never created here.
    """
    if not db_path.is_file():
        return None
    try:
        conn = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=rw", uri=True, timeout=30.0)
    except sqlite3.Error:
        return None
    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return str(row[0]) if row else None


def ensure_schema(db_path: Path, *, create: bool = False) -> None:
    """Make ``db_path`` exist at ``HEAD_REVISION``; create parent directories.

    Returns at once when the stamp already matches (Alembic is not imported).
    Otherwise takes an exclusive ``flock`` on ``<db_path>.lock``, re-checks, and runs
    ``alembic upgrade head`` in one ``BEGIN IMMEDIATE`` transaction on a WAL database.
    A missing file that is a tree's database is created only with ``create`` (``fractal
    init``, which checks ``refuse_missing`` itself first); otherwise DatabaseMissing says
    why and how to recover. Raises StoreError when the directory
    cannot be created or the upgrade fails.
    """
    if current_revision(db_path) == HEAD_REVISION:
        return
    if not create and not db_path.is_file():
        refuse_missing(db_path, create=False)
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = db_path.with_name(db_path.name + ".lock")
        with lock_path.open("a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                if current_revision(db_path) != HEAD_REVISION:
                    _upgrade(db_path)
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    except OSError as exc:
        raise StoreError(f"cannot create the database at {db_path}: {exc}") from exc


class DatabaseMissing(StoreError):
    """A tree's database file is missing where it may not be created (see ``ensure_schema``)."""


def refuse_missing(db_path: Path, *, create: bool) -> None:
    """Raise DatabaseMissing unless the missing ``db_path`` may be created now: it is no
    tree's database, or ``create`` and the tree's nodes left no trace."""
    tree = _tree_of(db_path)
    if tree is None:
        return
    # deferred: start-up cost (1 module)
    from fractal.domain.dbmissing import missing_database_refusal

    repo, root = tree
    why = missing_database_refusal(str(db_path), str(repo), node_traces(repo, root),
                                   creating=create)
    if why is not None:
        raise DatabaseMissing(why)


def _tree_of(db_path: Path) -> tuple[Path, str] | None:
    """(repository, root branch) when ``db_path`` is a tree's database: named
    ``fractal.db`` in ``<repo>/.fractal/<root>/`` beside a ``config.json`` saying ``"user":
    true``; None for any other path."""
    import json  # deferred: start-up cost (json: 5 modules)
    data_dir = db_path.parent
    if db_path.name != "fractal.db" or data_dir.parent.name != ".fractal":
        return None

    try:
        config = json.loads((data_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(config, dict) or config.get("user") is not True:
        return None
    return data_dir.parent.parent, data_dir.name


def node_traces(repo: Path, root: str) -> list[str]:
    """What the tree rooted at ``root`` in ``repo`` still has of its nodes, on disk: each
    node worktree ``.worktrees/<root>.*`` and a leftover journal of an older database
    (``fractal.db-wal``), as a refusal names them."""
    found: list[str] = []
    try:
        entries = sorted(p.name for p in (repo / ".worktrees").iterdir() if p.is_dir())
    except OSError:
        entries = []
    found += [f"worktree .worktrees/{name}" for name in entries if name.startswith(root + ".")]
    wal = repo / ".fractal" / root / "fractal.db-wal"
    if wal.exists():
        found.append(f"the old database's journal .fractal/{root}/{wal.name}")
    return found


def _upgrade(db_path: Path) -> None:
    """Run ``alembic upgrade head`` on ``db_path`` through a WAL, BEGIN IMMEDIATE engine."""
    from alembic import command  # deferred: start-up cost (Alembic, 368 modules)
    from alembic.util import CommandError  # deferred: start-up cost (Alembic, 367 modules)
    from sqlalchemy.exc import SQLAlchemyError  # deferred: start-up cost (SQLAlchemy, 219 modules)

    from fractal.store.connect import create_sqlite_engine  # deferred: start-up cost (1 module)

    engine = create_sqlite_engine(db_path, pooled=False)
    try:
        cfg = alembic_config(db_path)
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    except (SQLAlchemyError, CommandError) as exc:
        stamped = current_revision(db_path)
        hint = ("a newer fractal may have written it: upgrade fractal" if stamped
                else "check the file is a fractal database and is writable")
        raise StoreError(
            f"cannot migrate the database at {db_path} from revision {stamped or 'none'} "
            f"to {HEAD_REVISION}: {exc}; {hint}"
        ) from exc
    finally:
        engine.dispose()
