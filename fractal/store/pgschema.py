"""Create or upgrade a PostgreSQL ledger to the head Alembic revision on first use: the
same models and migrations as a SQLite file (``store/schema.py`` for that), through a
SQLAlchemy ``postgresql+psycopg`` engine.

The check is one query on a seam connection (``alembic_version``); Alembic and
SQLAlchemy are imported only when the stamp is behind. Processes racing the first use
queue on ``pg_advisory_xact_lock(MIGRATION_LOCK_KEY)`` inside the upgrade's one
transaction (PostgreSQL's DDL is transactional: a failed upgrade leaves nothing), and
each re-reads the stamp once it holds the lock.
"""

from __future__ import annotations

from typing import Any

from fractal.errors import StoreError
from fractal.store import pgdriver
from fractal.store.backend import without_password
from fractal.store.schema import HEAD_REVISION, migrations_dir

__all__ = ["MIGRATION_LOCK_KEY", "current_revision", "ensure_once", "ensure_schema", "forget",
           "sqlalchemy_url"]

MIGRATION_LOCK_KEY = 0x6672_6163_6D69_6731
"""The advisory lock key the upgrades of one database queue on ("fracmig1" in ASCII)."""

_UNDEFINED_TABLE = "42P01"


def sqlalchemy_url(url: str) -> str:
    """``url`` in SQLAlchemy's form with the psycopg driver named."""
    return "postgresql+psycopg://" + url.split("://", 1)[1]


def current_revision(url: str) -> str | None:
    """The revision stamped in the database at ``url``, None before the first migration.
    Raises StoreError when the server cannot be reached."""
    try:
        conn = pgdriver.connect(url)
    except pgdriver.PgError as exc:
        raise unreachable(url, exc) from exc
    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except Exception as exc:
        if getattr(exc, "sqlstate", None) != _UNDEFINED_TABLE:
            conn.close()
            raise StoreError(f"cannot read the ledger at {without_password(url)}: {exc}") from exc
        pgdriver.give_back(url, conn)
        return None
    pgdriver.give_back(url, conn)
    return None if row is None else str(row[0])


def unreachable(url: str, exc: BaseException) -> StoreError:
    """The refusal of a ledger whose server did not answer."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return StoreError(f"cannot reach the tree's PostgreSQL ledger {without_password(url)}: "
                      f"{first}; check the server is up, the URL (FRACTAL_DATABASE_URL or "
                      "the tree's config.json `database`) and the password in ~/.pgpass "
                      "or PGPASSWORD")


def ensure_schema(url: str) -> None:
    """Bring the database at ``url`` to ``HEAD_REVISION`` (returns at once when it is
    there). Raises StoreError when it cannot be reached or migrated."""
    if current_revision(url) == HEAD_REVISION:
        return
    # Alembic and SQLAlchemy only when the stamp is behind: a quarter of a second.
    from alembic import command  # deferred: start-up cost (369 modules)
    from alembic.config import Config  # deferred: start-up cost (372 modules)
    from alembic.util import CommandError  # deferred: start-up cost (368 modules)
    from sqlalchemy import create_engine, text  # deferred: start-up cost (220 modules)
    from sqlalchemy.exc import SQLAlchemyError  # deferred: start-up cost (220 modules)
    from sqlalchemy.pool import NullPool  # deferred: start-up cost (220 modules)

    engine = create_engine(sqlalchemy_url(url), poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"))
            cfg = Config()
            cfg.set_main_option("script_location", str(migrations_dir()).replace("%", "%%"))
            cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    except (SQLAlchemyError, CommandError) as exc:
        raise StoreError(f"cannot migrate the ledger at {without_password(url)} to "
                         f"{HEAD_REVISION}: {_first_line(exc)}; check the database is this "
                         "tree's and the user may create tables in it") from exc
    finally:
        engine.dispose()


def _first_line(exc: Any) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_checked: set[str] = set()
"""The PostgreSQL ledgers this process has found at head (reads and writes alike)."""


def ensure_once(url: str) -> None:
    """``ensure_schema`` on ``url`` the first time this process uses it; later calls cost
    a set lookup. Raises StoreError as ``ensure_schema`` does."""
    if url not in _checked:
        ensure_schema(url)
        _checked.add(url)


def forget() -> None:
    """Check every ledger again at its next use (``db.close_connections``)."""
    _checked.clear()
