"""One SQLAlchemy engine per tree database: WAL, busy timeout, foreign keys, BEGIN IMMEDIATE.

Every new DBAPI connection gets ``busy_timeout=30000``, ``journal_mode=WAL``,
``foreign_keys=ON`` and ``synchronous=NORMAL``. pysqlite's own implicit BEGIN is turned
off and every SQLAlchemy ``begin`` emits ``BEGIN IMMEDIATE`` instead (the SQLAlchemy
SQLite-dialect recipe): a transaction takes the write lock up front, so two writers
queue on the busy timeout instead of failing a read-to-write upgrade with "database is
locked". Callers keep transactions short and never hold one across
an agent run.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Engine, create_engine, event
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from fractal.store.db import BUSY_TIMEOUT_MS, close_connections
from fractal.store.db import PRAGMAS as _PRAGMAS
from fractal.store.schema import ensure_schema

__all__ = ["BUSY_TIMEOUT_MS", "close_engines", "create_sqlite_engine", "open_engine"]

_engines: dict[Path, Engine] = {}
_engines_lock = threading.Lock()


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    """Turn off pysqlite's implicit BEGIN and apply the connection pragmas."""
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        for pragma in _PRAGMAS:
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
    url = URL.create("sqlite", database=str(db_path))
    connect_args = {"timeout": BUSY_TIMEOUT_MS / 1000}
    if pooled:
        engine = create_engine(url, connect_args=connect_args)
    else:
        engine = create_engine(url, connect_args=connect_args, poolclass=NullPool)
    event.listen(engine, "connect", _on_connect)
    event.listen(engine, "begin", _on_begin)
    return engine


def open_engine(db_path: Path) -> Engine:
    """The process's engine for the tree database at ``db_path``, created on first use.

    Creates the parent directory and brings the schema to head (``ensure_schema``)
    the first time a resolved path is seen in this process; later calls return the
    cached engine. Raises StoreError when the database cannot be created or migrated.
    """
    key = db_path.resolve()
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            ensure_schema(key)
            engine = create_sqlite_engine(key)
            _engines[key] = engine
        return engine


def close_engines() -> None:
    """Dispose every cached engine (closing pooled connections) and forget them; the
    connection seam's idle connections (``store.db``) close too."""
    with _engines_lock:
        engines = list(_engines.values())
        _engines.clear()
    for engine in engines:
        engine.dispose()
    close_connections()


def _forget_after_fork() -> None:
    """In a forked child, drop the parent's engines without touching its connections."""
    global _engines_lock
    _engines_lock = threading.Lock()
    for engine in _engines.values():
        engine.dispose(close=False)
    _engines.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
