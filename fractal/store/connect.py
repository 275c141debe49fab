"""How fractal connects to a tree database (one SQLite file per tree): the settings every
connection gets, whether the stdlib connection seam (``store/db.py``) opens it or a
SQLAlchemy engine does (``create_sqlite_engine``: the migrations and ``store/engine.py``).

Every new connection gets ``busy_timeout=30000``, ``journal_mode=WAL``,
``foreign_keys=ON`` and ``synchronous=NORMAL``. An engine turns pysqlite's own implicit
BEGIN off and every SQLAlchemy ``begin`` emits ``BEGIN IMMEDIATE`` instead (the
SQLAlchemy SQLite-dialect recipe): a transaction takes the write lock up front, so two
writers queue on the busy timeout instead of failing a read-to-write upgrade with
"database is locked".

Below both the seam and the schema (``store/schema.py`` migrates through an engine made
here; the seam ensures the schema), so none of the three imports another in a circle.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.engine import Connection

__all__ = ["BUSY_TIMEOUT_MS", "PRAGMAS", "create_sqlite_engine"]

BUSY_TIMEOUT_MS = 30_000
"""How long a connection waits for another writer's lock before failing (ms)."""

PRAGMAS = (
    f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}",
    "PRAGMA journal_mode=WAL",
    "PRAGMA foreign_keys=ON",
    "PRAGMA synchronous=NORMAL",
)
"""Applied to every new connection (a seam connection and an engine's alike)."""


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    """Turn off pysqlite's implicit BEGIN and apply the connection pragmas."""
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        for pragma in PRAGMAS:
            cursor.execute(pragma)
    finally:
        cursor.close()


def _on_begin(conn: Connection) -> None:
    """Open every SQLAlchemy transaction with the write lock held."""
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def create_sqlite_engine(db_path: Path, *, pooled: bool = True) -> Engine:
    """A new engine on the SQLite file ``db_path`` with fractal's connection setup.

    Does not create or migrate the schema (``open_engine`` does). ``pooled=False``
    uses a NullPool (one-shot connections, for migrations). Returns an Engine whose
    transactions all start with ``BEGIN IMMEDIATE``.
    """
    # sqlalchemy is imported here, not at the top: the connection seam (store/db.py) and
    # so every verb import this module for its settings, and only migrations need this.
    # deferred: start-up cost (SQLAlchemy, 223 modules)
    from sqlalchemy import URL, create_engine, event
    from sqlalchemy.pool import NullPool  # deferred: start-up cost (SQLAlchemy, 223 modules)

    url = URL.create("sqlite", database=str(db_path))
    connect_args = {"timeout": BUSY_TIMEOUT_MS / 1000}
    if pooled:
        engine = create_engine(url, connect_args=connect_args)
    else:
        engine = create_engine(url, connect_args=connect_args, poolclass=NullPool)
    event.listen(engine, "connect", _on_connect)
    event.listen(engine, "begin", _on_begin)
    return engine
