"""The PostgreSQL driver under the connection seam: libpq connections (``store/libpq.py``,
through ctypes) to a tree's ledger database, the statements' markers rewritten to its
style, rows like SQLite's.

Imported by the seam (``store/db.py``) and the read path (``store/reader.py``), stdlib
only at import: libpq is loaded on the first connection, so a SQLite tree never loads it
(and no command imports psycopg, which only the migrations use). Every connection is
in autocommit mode (the seam opens its transactions itself), waits ``lock_timeout`` =
the first try's lock wait (``lockwait.lock_wait().first``), and is kept idle per URL for
the next transaction (a forked child drops its parent's without closing them).

A statement is written once for both engines with ``:name`` markers (the seam's) or
``?`` (the read path's); ``translate`` makes them ``$1``, ``$2``, ... and says which
parameter goes where. ``Row`` answers both ``row["column"]`` and ``row[0]``, as
``sqlite3.Row``.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any

from fractal.store import lockwait
from fractal.store.backend import libpq_url
from fractal.store.libpq import Connection, PgError

__all__ = ["TREE_LOCK_KEY", "Connection", "PgError", "ReadConnection", "ReadError", "Row",
           "bind", "close_connections", "connect", "give_back", "translate"]

TREE_LOCK_KEY = 0x6672_6163_7461_6C31
"""The advisory lock key of a tree's one-writer-at-a-time rule (``pg_advisory_xact_lock``):
one tree per database, so one constant ("fractal1" in ASCII)."""

_MARKER = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)|\?")
_INDEXED_BY = re.compile(r"\s+INDEXED BY \w+")

_idle: dict[str, list[Connection]] = {}
_lock = threading.Lock()
_orphans: list[object] = []  # a forked child's inherited connections, kept unclosed


@lru_cache(maxsize=512)
def translate(sql: str) -> tuple[str, tuple[str, ...] | None]:
    """``sql`` with its markers made ``$1``, ``$2``, ...: ``:name`` markers (one number
    per name) give the names in number order, ``?`` markers None (positional); SQLite's
    planner hint ``INDEXED BY <index>`` is dropped (PostgreSQL's planner picks the index
    itself). The statements hold no ``?`` or ``:name`` inside string literals."""
    sql = _INDEXED_BY.sub("", sql)
    names: list[str] = []
    count = 0

    def number(match: re.Match[str]) -> str:
        nonlocal count
        name = match.group(1)
        if name is None:
            count += 1
            return f"${count}"
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    text = _MARKER.sub(number, sql)
    return text, (tuple(names) if names or not count else None)


def bind(sql: str, params: Mapping[str, object] | Sequence[object] | None
         ) -> tuple[str, list[object]]:
    """(the translated statement, its parameters in ``$n`` order)."""
    text, names = translate(sql)
    if not params:
        return text, []
    if isinstance(params, Mapping):
        return text, [params[name] for name in names or ()]
    return text, list(params)


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


def _row_class(names: Sequence[str]) -> Callable[[list[Any]], Row]:
    """The ``Row`` class of one result's columns, sharing its name index."""
    index = {name: i for i, name in enumerate(names)}
    return type("Row", (Row,), {"_names": index, "__slots__": ()})


def connect(url: str) -> Connection:
    """An idle connection to ``url`` from this process's pool, else a new one (autocommit,
    ``lock_timeout`` the first try's wait). Raises PgError when the server cannot be
    reached."""
    with _lock:
        idle = _idle.get(url)
        if idle:
            return idle.pop()
    conn = Connection(libpq_url(url), _row_class)
    first_ms = int(lockwait.lock_wait().first * 1000)
    conn.execute(f"SET lock_timeout = {first_ms}; SET application_name = 'fractal'")
    return conn


def give_back(url: str, conn: Connection) -> None:
    """Keep ``conn`` for the next transaction on ``url`` (it must be idle, no transaction)."""
    with _lock:
        _idle.setdefault(url, []).append(conn)


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
        self._conn: Connection | None = connect(url)

    def execute(self, sql: str, params: Any = (), /) -> Any:
        """Run one query; the cursor's ``fetchone``/``fetchall``/iteration give ``Row``s.
        Raises ReadError for anything the server refused."""
        assert self._conn is not None, "read on a closed connection"
        try:
            return self._conn.execute(*bind(sql, params))
        except PgError as exc:
            text = str(exc).strip().splitlines()
            raise ReadError(text[0] if text else "the read failed", exc.sqlstate) from exc

    def close(self) -> None:
        """Give the connection back (closed instead when it is broken)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if conn.closed or conn.transaction_status != 0:
            conn.close()
        else:
            give_back(self._url, conn)


def idle_count() -> int:
    """How many idle connections this process keeps (for tests)."""
    with _lock:
        return sum(len(conns) for conns in _idle.values())


def iter_idle() -> Iterator[Connection]:
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
