"""A test's own look into the ledger, on whichever backend holds it: the SQLite file at
``db_path``, or the PostgreSQL database ``FRACTAL_DATABASE_URL`` names (``--backend``).

``connect(db_path)`` gives what ``sqlite3.connect`` gave the tests (``execute`` with
``?`` markers, rows as plain tuples, committed when the block ends), so an assertion on
raw rows reads the same on both engines.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class _PgLook:
    """``execute`` on a libpq connection in autocommit, ``?`` markers, tuple rows."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, args: Any = ()) -> Any:
        from fractal.store.pgdriver import bind

        return self._conn.execute(*bind(sql, tuple(args)))


def backend() -> str:
    """``postgres`` when the test's ledger is a PostgreSQL database, else ``sqlite``."""
    return "postgres" if os.environ.get("FRACTAL_DATABASE_URL") else "sqlite"


@contextmanager
def connect(db_path: Path) -> Iterator[Any]:
    """A connection to the ledger the store uses for ``db_path`` (see module docstring)."""
    url = os.environ.get("FRACTAL_DATABASE_URL")
    if url is None:
        with sqlite3.connect(db_path) as conn:
            yield conn
        conn.close()
        return
    pg = _open.get(url)
    if pg is None or pg.closed:
        from fractal.store.libpq import Connection

        pg = _open[url] = Connection(url, lambda _names: tuple)  # kept: a connect is ~7 ms
    yield _PgLook(pg)


_open: dict[str, Any] = {}


def close() -> None:
    """Close the connections ``connect`` kept (the backend's teardown, before its drop)."""
    for pg in _open.values():
        pg.close()
    _open.clear()


def rows(db_path: Path, sql: str, *args: object) -> list[tuple[Any, ...]]:
    """Every row of ``sql`` (``?`` markers) on the ledger of ``db_path``."""
    with connect(db_path) as conn:
        return [tuple(row) for row in conn.execute(sql, args).fetchall()]
