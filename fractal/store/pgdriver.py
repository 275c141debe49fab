"""The PostgreSQL driver under the connection seam: psycopg 3 connections to a tree's
ledger database, the statements' markers rewritten to its style, rows like SQLite's.

Imported by the seam (``store/db.py``) and the read path (``store/reader.py``), stdlib
only at import: ``psycopg`` (about 40 ms) is imported on the first connection, so a
SQLite tree never loads it. Every connection is in autocommit mode (the seam opens its
transactions itself), waits ``lock_timeout`` = the first try's lock wait
(``lockwait.lock_wait().first``), and is kept idle per URL for the next transaction (a
forked child drops its parent's).

A statement is written once for both engines with ``:name`` markers (the seam's) or
``?`` (the read path's); ``translate`` makes them ``%(name)s`` / ``%s`` and doubles a
literal ``%``. ``Row`` answers both ``row["column"]`` and ``row[0]``, as ``sqlite3.Row``.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from fractal.store import lockwait
from fractal.store.backend import libpq_url

if TYPE_CHECKING:
    import psycopg

__all__ = ["TREE_LOCK_KEY", "ReadConnection", "ReadError", "Row", "close_connections", "connect",
           "give_back", "translate"]

TREE_LOCK_KEY = 0x6672_6163_7461_6C31
"""The advisory lock key of a tree's one-writer-at-a-time rule (``pg_advisory_xact_lock``):
one tree per database, so one constant ("fractal1" in ASCII)."""

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_INDEXED_BY = re.compile(r"\s+INDEXED BY \w+")

_idle: dict[str, list[psycopg.Connection[Row]]] = {}
_lock = threading.Lock()
_orphans: list[object] = []  # a forked child's inherited connections, kept unclosed


@lru_cache(maxsize=512)
def translate(sql: str) -> str:
    """``sql`` with ``:name`` made ``%(name)s``, ``?`` made ``%s`` and ``%`` doubled
    (the statements hold no ``?`` or ``:`` inside string literals), and SQLite's planner
    hint ``INDEXED BY <index>`` dropped (PostgreSQL's planner picks the index itself)."""
    sql = _INDEXED_BY.sub("", sql).replace("%", "%%")
    sql = _NAMED.sub(r"%(\1)s", sql)
    return sql.replace("?", "%s")


class Row(tuple):  # type: ignore[type-arg]
    """One result row, read by position (a tuple) or by column name (``row["status"]``)."""

    _names: dict[str, int]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._names[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        """The column names, in order (so ``dict(row)`` works as with ``sqlite3.Row``)."""
        return list(self._names)


def _row_factory(cursor: Any) -> Callable[[Sequence[Any]], Row]:
    """psycopg's row factory: one ``Row`` subclass per result, sharing its name index."""
    names = {col.name: i for i, col in enumerate(cursor.description or ())}
    cls = type("Row", (Row,), {"_names": names, "__slots__": ()})
    return lambda values: cls(values)


def connect(url: str) -> psycopg.Connection[Row]:
    """An idle connection to ``url`` from this process's pool, else a new one (autocommit,
    ``lock_timeout`` the first try's wait). Raises psycopg's OperationalError when the
    server cannot be reached."""
    with _lock:
        idle = _idle.get(url)
        if idle:
            return idle.pop()
    # psycopg is imported here, not at the top: only a PostgreSQL tree pays its import.
    import psycopg

    first_ms = int(lockwait.lock_wait().first * 1000)
    conn: psycopg.Connection[Row] = psycopg.connect(
        libpq_url(url), autocommit=True, row_factory=_row_factory,
        options=f"-c lock_timeout={first_ms}", application_name="fractal")
    return conn


class ReadError(sqlite3.OperationalError):
    """A PostgreSQL read's error, raised as the ``sqlite3.OperationalError`` the read path's
    callers already catch (a table a database predates, a refused query); ``sqlstate``
    keeps the server's code, so ``lockwait.is_lock_error`` reads it as for the seam."""

    def __init__(self, message: str, sqlstate: str | None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class ReadConnection:
    """The read path's connection to a PostgreSQL ledger (``store/reader.py``): the
    ``execute(sql, params)`` of a ``sqlite3.Connection`` with ``?`` markers, each query its
    own snapshot (autocommit), as a read-only SQLite connection reads; ``close`` keeps the
    connection for the process's next read."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: psycopg.Connection[Row] | None = connect(url)

    def execute(self, sql: str, params: Any = (), /) -> Any:
        """Run one query; the cursor's ``fetchone``/``fetchall``/iteration give ``Row``s.
        Raises ReadError for anything the server refused."""
        assert self._conn is not None, "read on a closed connection"
        try:
            values = params if isinstance(params, Mapping) else tuple(params)
            return self._conn.execute(translate(sql), values or None)
        except Exception as exc:
            if type(exc).__module__.split(".", 1)[0] != "psycopg":
                raise
            text = str(exc).strip().splitlines()
            raise ReadError(text[0] if text else type(exc).__name__,
                            getattr(exc, "sqlstate", None)) from exc

    def close(self) -> None:
        """Give the connection back (closed instead when it is broken)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if conn.closed or conn.info.transaction_status != 0:
            conn.close()
        else:
            give_back(self._url, conn)


def give_back(url: str, conn: psycopg.Connection[Row]) -> None:
    """Keep ``conn`` for the next transaction on ``url`` (it must be idle, no transaction)."""
    with _lock:
        _idle.setdefault(url, []).append(conn)


def idle_count() -> int:
    """How many idle connections this process keeps (for tests)."""
    with _lock:
        return sum(len(conns) for conns in _idle.values())


def iter_idle() -> Iterator[psycopg.Connection[Row]]:
    """Take every idle connection out of the pool."""
    with _lock:
        conns = [c for group in _idle.values() for c in group]
        _idle.clear()
    yield from conns


def close_connections() -> None:
    """Close every idle connection."""
    for conn in iter_idle():
        conn.close()


def _forget_after_fork() -> None:
    """In a forked child, drop the parent's connections without touching them (a close
    would tell the server the parent's session ended)."""
    global _lock
    _lock = threading.Lock()
    _orphans.extend(c for group in _idle.values() for c in group)  # never collected
    _idle.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
