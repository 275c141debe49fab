# Over 400 lines: the one connection seam, its two drivers' transactions side by side (a
# PostgreSQL Tx apart would import this module and be imported by it).
"""The store's one connection seam: a DB-API connection to the tree database, lent out
for one short transaction at a time.

The ledger's statements are plain portable SQL with named parameters (``:name``), run
through a ``Tx``; nothing above this module sees a driver. The driver here is the stdlib
``sqlite3`` (importing SQLAlchemy costs a verb about a quarter of a second and a
supervisor about 30 MiB; the schema itself stays owned by the SQLAlchemy models and the
Alembic migrations, which run only when ``schema.ensure_schema`` finds the stamp behind).

Every connection gets the same setup as the SQLAlchemy engine's (``store.engine``):
``busy_timeout`` (the first try's wait, 30 s by default), WAL, foreign keys on,
``synchronous=NORMAL``, and autocommit mode so the transactions are explicit: a write
opens with ``BEGIN IMMEDIATE`` (the write lock up front, so two writers queue on the busy
timeout instead of failing an upgrade), a read with a deferred ``BEGIN`` (one WAL
snapshot, no lock taken). A lock held past the first try is waited out
(``store.lockwait``: spans doubling up to a bound, then DatabaseLocked) at the write's
``BEGIN IMMEDIATE`` and at a read's statements. Idle connections are
kept per database file and reused (threads each borrow their own); a forked child drops
its parent's without closing them.

A tree whose ledger is a PostgreSQL database (``store.backend.database_url``: the URL in
its config or ``FRACTAL_DATABASE_URL``) gets the second ``Tx``, ``PgTx``, on a libpq
connection (``store.pgdriver``, which loads libpq on first use): the ``:name`` markers
rewritten to the driver's style, ``insert`` ids from ``RETURNING``, a write opened with
``BEGIN`` and ``pg_advisory_xact_lock(TREE_LOCK_KEY)`` (one writer at a time per tree, as
SQLite's ``BEGIN IMMEDIATE``; the lock waits ``lock_timeout`` and then
``lockwait.patiently`` as a busy SQLite file does), a read with a ``REPEATABLE READ``
snapshot. The statements above the seam stay as they are.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from fractal.domain.errors import InvalidValue
from fractal.errors import StoreError
from fractal.store import lockwait, pgdriver
from fractal.store.backend import database_url, without_password
from fractal.store.connect import BUSY_TIMEOUT_MS, PRAGMAS
from fractal.store.lockwait import is_lock_error, patiently
from fractal.store.schema import ensure_schema

__all__ = ["BUSY_TIMEOUT_MS", "PgTx", "Tx", "close_connections", "prepare", "transaction"]

CACHE_PRAGMA = "PRAGMA cache_size=-32"
"""The page cache of a seam connection, 32 KiB (negative: KiB, not a page count).
SQLite's default lets it grow to 2 MiB, and a supervisor's connection lives for hours
while every iteration appends rows to new pages: the cache kept every page it had
touched, a resident set growing with each iteration. The statements here touch a
handful of pages each; the operating system's file cache serves the rest (and another
process's commit invalidates this cache anyway). The migrations' engine keeps the
default: an index build on a large table wants the room."""

Params = Mapping[str, object]
T = TypeVar("T")

_idle: dict[Path, list[sqlite3.Connection]] = {}
_ready: set[Path] = set()
_resolved: dict[Path, Path] = {}  # an absolute path as given -> its resolved, ready key
_lock = threading.Lock()


class Tx:
    """One open transaction. Statements use ``:name`` parameters; rows come back keyed
    by column name (``row["status"]``) and by position.

    In a read transaction a statement refused for another process's lock is run again
    until it gets through (``lockwait.patiently``): a read takes its snapshot at its
    first statement, so nothing was read before the refusal. A write holds its lock
    from ``BEGIN IMMEDIATE`` on, so its statements never meet one."""

    def __init__(self, conn: sqlite3.Connection, db_path: Path, write: bool) -> None:
        self._conn = conn
        self._db_path = db_path
        self._write = write

    def _execute(self, sql: str, params: Params) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, params)
        except sqlite3.Error as exc:
            if self._write or not is_lock_error(exc):
                raise
            return patiently(self._db_path, _waiting(self._conn, lambda: self._conn.execute(
                sql, params)), exc)

    def run(self, sql: str, params: Params | None = None) -> int:
        """Execute one statement; return the rows it changed (0 for a SELECT)."""
        return self._execute(sql, params or {}).rowcount

    def many(self, sql: str, rows: Sequence[Params]) -> int:
        """Execute one statement once per parameter set; return the rows changed."""
        return self._conn.executemany(sql, rows).rowcount

    def one(self, sql: str, params: Params | None = None) -> sqlite3.Row | None:
        """The first row of a query, or None."""
        row: sqlite3.Row | None = self._execute(sql, params or {}).fetchone()
        return row

    def all(self, sql: str, params: Params | None = None) -> list[sqlite3.Row]:
        """Every row of a query."""
        return list(self._execute(sql, params or {}).fetchall())

    def scalar(self, sql: str, params: Params | None = None) -> Any:
        """The first column of the first row, or None when there is no row."""
        row = self.one(sql, params)
        return None if row is None else row[0]

    def insert(self, table: str, values: Params) -> int:
        """INSERT one row of ``table`` (column names are the keys of ``values``, always
        names written in the store's code); return its integer primary key."""
        columns = ", ".join(values)
        marks = ", ".join(f":{name}" for name in values)
        cursor = self._conn.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", values)
        if cursor.lastrowid is None:
            raise StoreError(f"the database returned no id for a new {table} row")
        return int(cursor.lastrowid)

    def pragma(self, sql: str) -> list[tuple[Any, ...]]:
        """A pragma's rows (run outside any transaction: see ``transaction(tx=False)``)."""
        return [tuple(row) for row in self._conn.execute(sql).fetchall()]


class PgTx(Tx):
    """One open transaction on a PostgreSQL ledger: the same calls as ``Tx``, the
    statements translated (``pgdriver.translate``), rows ``pgdriver.Row`` (keyed by
    column name and by position, as ``sqlite3.Row``). A write holds the tree's advisory
    lock from its start, a read its snapshot, so no statement waits on a lock here."""

    def __init__(self, conn: pgdriver.Connection, url: str) -> None:
        self._pg = conn
        self._url = url

    def _execute(self, sql: str, params: Params) -> Any:
        return self._pg.execute(*pgdriver.bind(sql, params))

    def run(self, sql: str, params: Params | None = None) -> int:
        """Execute one statement; return the rows it changed."""
        return int(self._execute(sql, params or {}).rowcount)

    def many(self, sql: str, rows: Sequence[Params]) -> int:
        """Execute one statement once per parameter set; return the rows changed."""
        return sum(int(self._execute(sql, row).rowcount) for row in rows)

    def one(self, sql: str, params: Params | None = None) -> sqlite3.Row | None:
        """The first row of a query, or None."""
        row: sqlite3.Row | None = self._execute(sql, params or {}).fetchone()
        return row

    def all(self, sql: str, params: Params | None = None) -> list[sqlite3.Row]:
        """Every row of a query."""
        return list(self._execute(sql, params or {}).fetchall())

    def insert(self, table: str, values: Params) -> int:
        """INSERT one row of ``table``; return its integer primary key (``RETURNING``),
        0 for a table keyed otherwise (``pools``, ``pool_items``: the caller named the key,
        where SQLite would hand back a rowid nobody reads)."""
        columns = ", ".join(values)
        marks = ", ".join(f":{name}" for name in values)
        sql = f"INSERT INTO {table} ({columns}) VALUES ({marks})"
        key = _integer_key(self._pg, table)
        if key is None:
            self._execute(sql, values)
            return 0
        row = self._execute(f"{sql} RETURNING {key}", values).fetchone()
        if row is None:
            raise StoreError(f"the database returned no id for a new {table} row")
        return int(row[0])

    def pragma(self, sql: str) -> list[tuple[Any, ...]]:
        """A SQLite pragma's answer on PostgreSQL: ``wal_checkpoint`` has nothing to fold
        (the server keeps its own log), ``integrity_check`` reads ``ok`` when the server
        answers a query (its checksums are the server's job); any other is refused."""
        if "wal_checkpoint" in sql:
            return []
        if "integrity_check" in sql:
            self._pg.execute("SELECT 1").fetchone()
            return [("ok",)]
        raise StoreError(f"{sql!r} is a SQLite pragma; the tree's ledger is PostgreSQL")


class PgSingleWrite(PgTx):
    """A write of one statement (``transaction(single=True)``): its ``BEGIN``, the tree's
    advisory lock, the statement and the ``COMMIT`` go to the server in one round trip
    (libpq's pipeline mode). When the lock is not had within the first try's wait, the
    transaction is rolled back and taken the two-step way (``_pg_begin``'s patient wait),
    the statement then run in it. A second statement is a programming error."""

    def __init__(self, conn: pgdriver.Connection, url: str) -> None:
        super().__init__(conn, url)
        self._ran = False

    def _execute(self, sql: str, params: Params) -> Any:
        if self._ran:
            raise StoreError("a one-statement write ran a second statement; open it "
                             "without single=True")
        self._ran = True
        text, values = pgdriver.bind(sql, params)
        try:
            return self._pg.pipeline([("BEGIN", ()), (_LOCK, ()), (text, values),
                                      ("COMMIT", ())])[2]
        except pgdriver.PgError as exc:
            if not self._pg.closed and self._pg.transaction_status != _IDLE:
                self._pg.execute("ROLLBACK")
            if not lockwait.is_lock_error(exc):
                raise
            _pg_begin(self._pg, self._url, True, refused=exc)
            return self._pg.execute(text, values)  # committed as any write's statement


_integer_keys: dict[str, str | None] = {}  # a table -> its integer key column, per process


def _integer_key(conn: pgdriver.Connection, table: str) -> str | None:
    """The primary key column of ``table`` when it is one integer column, else None
    (asked of the catalog once per process)."""
    if table not in _integer_keys:
        rows = conn.execute(
            "SELECT a.attname, a.atttypid = 'integer'::regtype FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = $1::regclass AND i.indisprimary", (table,)).fetchall()
        single = len(rows) == 1 and bool(rows[0][1])
        _integer_keys[table] = str(rows[0][0]) if single else None
    return _integer_keys[table]


def _waiting(conn: sqlite3.Connection, action: Callable[[], T]) -> Callable[[float], T]:
    """``action`` as one try of ``lockwait.patiently``: the connection's busy handler
    waits ``span`` seconds for the lock, then the process's first-try wait again."""

    def attempt(span: float) -> T:
        conn.execute(f"PRAGMA busy_timeout={int(span * 1000)}")
        try:
            return action()
        finally:
            conn.execute(f"PRAGMA busy_timeout={_first_ms()}")

    return attempt


def _first_ms() -> int:
    """The first try's wait on a lock (ms), as the busy handler takes it."""
    return int(lockwait.lock_wait().first * 1000)


def prepare(db_path: Path, *, create: bool = False) -> Path:
    """Bring ``db_path`` to the head revision the first time this process sees it (a
    stdlib read of the stamp; Alembic only when it is behind); return the resolved path.
    A missing tree database is created only with ``create`` (``fractal init``; see
    ``schema.ensure_schema``). Raises StoreError when the database cannot be created
    or migrated, DatabaseMissing when it may not be created. A PostgreSQL ledger
    (``backend.database_url``) is migrated by its first transaction instead; the path
    comes back as given."""
    path = Path(db_path)
    if database_url(path) is not None:
        return path
    key = _resolved.get(path)
    if key is not None:  # resolved and checked already (a loop asks on every statement)
        return key
    key = path.resolve()
    if key not in _ready:
        ensure_schema(key, create=create)
        with _lock:
            _ready.add(key)
    if path.is_absolute():  # a relative path resolves against the working directory
        _resolved[path] = key
    return key


def _connect(key: Path) -> sqlite3.Connection:
    first = _first_ms()
    conn = sqlite3.connect(str(key), timeout=first / 1000, isolation_level=None,
                           check_same_thread=False)
    conn.row_factory = sqlite3.Row
    for pragma in (f"PRAGMA busy_timeout={first}", *PRAGMAS[1:], CACHE_PRAGMA):
        conn.execute(pragma)
    return conn


def _borrow(key: Path) -> sqlite3.Connection:
    with _lock:
        idle = _idle.get(key)
        if idle:
            return idle.pop()
    return _connect(key)


def _give_back(key: Path, conn: sqlite3.Connection) -> None:
    with _lock:
        _idle.setdefault(key, []).append(conn)


def _refusal(db_path: Path, exc: sqlite3.Error) -> StoreError:
    text = str(exc)
    if is_lock_error(exc):  # past the bound, or a lock met where no wait was safe
        return lockwait.locked_error(db_path, lockwait.lock_wait().first)
    return StoreError(f"database {db_path} refused the operation: {text}; check the file "
                      "is writable and is this tree's fractal database")


@contextmanager
def transaction(db_path: Path, *, write: bool = True, tx: bool = True,
                single: bool = False) -> Iterator[Tx]:
    """One short transaction on the tree database at ``db_path`` (migrated first use).

    ``write`` takes the write lock up front (``BEGIN IMMEDIATE``), else a deferred read
    snapshot; ``tx=False`` opens none (pragmas such as checkpoints). ``single`` says the
    block runs exactly one statement: on PostgreSQL a read then runs on its own (one
    statement is one snapshot), and a write sends its ``BEGIN``, the tree's lock, the
    statement and its ``COMMIT`` in one round trip (``PgSingleWrite``), sparing two
    round trips either way; on SQLite it changes nothing. Commits when the
    block ends, rolls back when it raises; SQLite errors become StoreError naming the
    file, other exceptions pass through after the rollback.
    """
    url = database_url(db_path)
    if url is not None:
        with _pg_transaction(url, write, tx and (write or not single),
                             single=single and write and tx) as pg:
            yield pg
        return
    key = prepare(db_path)
    conn = _opened(key, db_path, write, tx)
    healthy = True
    try:
        try:
            yield Tx(conn, db_path, write)
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise
        if conn.in_transaction:
            conn.commit()
    except sqlite3.Error as exc:
        healthy = False
        raise _refusal(db_path, exc) from exc
    except UnicodeEncodeError as exc:  # rolled back above: nothing of it was written
        raise InvalidValue(f"text that is not valid UTF-8 cannot be stored ({exc.reason} at "
                           f"character {exc.start}); nothing was written: pass UTF-8 "
                           "text") from None
    finally:
        if healthy and not conn.in_transaction:
            _give_back(key, conn)
        else:
            conn.close()


def _opened(key: Path, db_path: Path, write: bool, tx: bool) -> sqlite3.Connection:
    """A connection to ``key`` with its transaction open (none when ``tx`` is False).
    ``BEGIN IMMEDIATE`` takes the write lock; another process's lock is waited for
    (``lockwait.patiently``: up to the bound, then DatabaseLocked), as is one met while
    connecting. Other SQLite errors become StoreError naming the file."""
    try:
        conn = _borrow(key)
    except sqlite3.Error as exc:
        if not is_lock_error(exc):
            raise _refusal(db_path, exc) from exc
        try:
            conn = patiently(db_path, lambda _span: _connect(key), exc)
        except sqlite3.Error as again:
            raise _refusal(db_path, again) from again
    if not tx:
        return conn
    begin = "BEGIN IMMEDIATE" if write else "BEGIN"
    try:
        try:
            conn.execute(begin)
        except sqlite3.Error as exc:
            if not is_lock_error(exc):
                raise
            patiently(db_path, _waiting(conn, lambda: conn.execute(begin)), exc)
    except BaseException as exc:
        conn.close()
        if isinstance(exc, sqlite3.Error):
            raise _refusal(db_path, exc) from exc
        raise
    return conn



_IDLE = 0  # libpq's PQTRANS_IDLE: no transaction open


@contextmanager
def _pg_transaction(url: str, write: bool, tx: bool, *, single: bool = False
                    ) -> Iterator[PgTx]:
    """``transaction`` on the PostgreSQL ledger at ``url``: migrated on first use
    (``pgschema.ensure_schema``); a write opens with the tree's advisory lock, waited for
    as ``lockwait.patiently`` says; the server's errors become StoreError naming the URL."""
    # The schema module imports SQLAlchemy only to migrate; a SQLite tree never loads it.
    from fractal.store import pgschema  # deferred: start-up cost (1 module)

    pgschema.ensure_once(url)
    try:
        conn = pgdriver.connect(url)
    except Exception as exc:
        raise pgschema.unreachable(url, exc) from exc
    healthy = True
    try:
        piped = single and conn.pipelines
        if tx and not piped:
            _pg_begin(conn, url, write)
        try:
            yield PgSingleWrite(conn, url) if piped else PgTx(conn, url)
        except BaseException:
            if conn.transaction_status != _IDLE:
                conn.execute("ROLLBACK")
            raise
        if conn.transaction_status != _IDLE:
            conn.execute("COMMIT")
    except StoreError:
        healthy = False
        raise
    except UnicodeEncodeError as exc:
        raise InvalidValue(f"text that is not valid UTF-8 cannot be stored ({exc.reason} at "
                           f"character {exc.start}); nothing was written: pass UTF-8 "
                           "text") from None
    except Exception as exc:
        if not _is_driver_error(exc):
            raise
        healthy = False
        shown = without_password(url)
        if lockwait.is_lock_error(exc):
            raise lockwait.locked_error(Path(shown), lockwait.lock_wait().first) from exc
        raise StoreError(f"the ledger {shown} refused the operation: "
                         f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}"
                         "; check the URL names this tree's database") from exc
    finally:
        if healthy and not conn.closed and conn.transaction_status == _IDLE:
            pgdriver.give_back(url, conn)
        else:
            conn.close()


def _is_driver_error(exc: BaseException) -> bool:
    """True for an error the server or libpq reported."""
    return isinstance(exc, pgdriver.PgError)


_LOCK = f"SELECT pg_advisory_xact_lock({pgdriver.TREE_LOCK_KEY})"
_WRITE_BEGIN = f"BEGIN; {_LOCK}"
_READ_BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ"


def _pg_begin(conn: pgdriver.Connection, url: str, write: bool, *,
              refused: BaseException | None = None) -> None:
    """Open the transaction; a write takes the tree's advisory lock, waiting the
    connection's ``lock_timeout`` (the first try's wait), then ``lockwait.patiently``
    (at once when ``refused``: the first try's lock error, the try already made)."""
    if not write:
        conn.execute(_READ_BEGIN)
        return
    exc: BaseException
    if refused is not None:
        exc = refused
    else:
        try:
            conn.execute(_WRITE_BEGIN)
            return
        except Exception as first:
            if not lockwait.is_lock_error(first):
                raise
            conn.execute("ROLLBACK")
            exc = first

    def attempt(span: float) -> None:
        try:
            conn.execute(f"BEGIN; SET LOCAL lock_timeout = {max(int(span * 1000), 1)}; "
                         f"{_LOCK}")
        except Exception:
            conn.execute("ROLLBACK")
            raise

    patiently(Path(without_password(url)), attempt, exc)


def close_connections() -> None:
    """Close every idle connection and forget which databases were checked."""
    with _lock:
        idle = [c for conns in _idle.values() for c in conns]
        _idle.clear()
        _ready.clear()
        _resolved.clear()
    for conn in idle:
        conn.close()
    pgdriver.close_connections()
    # deferred: start-up cost (1 module): a SQLite tree never loads it otherwise
    from fractal.store import pgschema

    pgschema.forget()


def _forget_after_fork() -> None:
    """In a forked child, drop the parent's connections without touching them."""
    global _lock
    _lock = threading.Lock()
    _idle.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
