"""One SQLAlchemy engine per tree database, made on first use and cached per process.

The engines serve the migrations and the tests that inspect the schema; the verbs and the
loop go through the stdlib seam (``store/db.py``). Each engine is set up as
``store/connect.py`` says (WAL, busy timeout, foreign keys, ``BEGIN IMMEDIATE``). Callers
keep transactions short and never hold one across an agent run.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from sqlalchemy import Engine

from fractal.store.connect import create_sqlite_engine
from fractal.store.db import close_connections
from fractal.store.schema import ensure_schema

__all__ = ["close_engines", "open_engine"]

_engines: dict[Path, Engine] = {}
_engines_lock = threading.Lock()


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
