"""A minimal PostgreSQL client on the system's libpq through ctypes: what the store's seam
and read path need of a connection, at a fraction of a driver's start-up.

A ``fractal`` command is a fresh interpreter, and importing psycopg costs it a quarter of
a second or more (its package loads asyncio and every SQLSTATE's exception class);
loading ``libpq.so.5`` with ctypes costs about 10 ms. The store's statements need little:
text parameters (the server infers their types, as it does for a literal), rows of
integers, floats, text and NULLs, the transaction status and the SQLSTATE of an error.
psycopg remains the driver of the migrations (SQLAlchemy's ``postgresql+psycopg``).

Parameters are sent as text with no type (``None`` is NULL, a ``bool`` is ``1``/``0`` as
SQLite stores it, a float its shortest exact text); results come back as text and are
read by column type (``int2/int4/int8``, ``float4/float8``, ``numeric``, ``bool``; any
other as ``str``). Errors raise ``PgError`` with the server's ``sqlstate``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Connection", "Cursor", "PgError", "load"]

_CONNECTION_OK = 0
_COMMAND_OK, _TUPLES_OK = 1, 2
_PIPELINE_SYNC, _PIPELINE_ABORTED = 10, 11
_DIAG_SQLSTATE = ord("C")
_INTS = frozenset({20, 21, 23, 26})  # int8, int2, int4, oid
_FLOATS = frozenset({700, 701})  # float4, float8
_NUMERIC, _BOOL = 1700, 16

_lib: Any = None


class _Notify(ctypes.Structure):
    """libpq's ``PGnotify``: one NOTIFY a listening session received."""

    _fields_ = [("relname", ctypes.c_char_p), ("be_pid", ctypes.c_int),
                ("extra", ctypes.c_char_p), ("next", ctypes.c_void_p)]


class PgError(Exception):
    """An error the server (or libpq) reported; ``sqlstate`` its code, None when the
    connection itself failed."""

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def load() -> Any:
    """libpq, loaded once per process (``libpq.so.5``; Debian's ``libpq5``). Raises
    PgError when it is not installed."""
    global _lib
    if _lib is not None:
        return _lib
    try:
        lib = ctypes.CDLL("libpq.so.5")
    except OSError:
        # find_library runs ldconfig (tens of ms): only when the usual name is not found.
        from ctypes.util import find_library  # deferred: start-up cost (28 modules)

        try:
            lib = ctypes.CDLL(find_library("pq") or "libpq.so")
        except OSError as exc:
            raise PgError(f"libpq is not installed ({exc}); install libpq5 (make "
                          "bootstrap)") from exc
    p, i, s = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    for fname, restype, argtypes in (
            ("PQconnectdb", p, [s]), ("PQstatus", i, [p]), ("PQerrorMessage", s, [p]),
            ("PQfinish", None, [p]), ("PQtransactionStatus", i, [p]),
            ("PQexecParams", p, [p, s, i, p, ctypes.POINTER(s), p, p, i]),
            ("PQexec", p, [p, s]), ("PQresultStatus", i, [p]),
            ("PQresultErrorMessage", s, [p]), ("PQresultErrorField", s, [p, i]),
            ("PQntuples", i, [p]), ("PQnfields", i, [p]), ("PQfname", s, [p, i]),
            ("PQftype", ctypes.c_uint, [p, i]), ("PQgetvalue", ctypes.c_void_p, [p, i, i]),
            ("PQgetlength", i, [p, i, i]), ("PQgetisnull", i, [p, i, i]),
            ("PQcmdTuples", s, [p]), ("PQclear", None, [p]), ("PQsocket", i, [p]),
            ("PQconsumeInput", i, [p]), ("PQnotifies", ctypes.POINTER(_Notify), [p]),
            ("PQfreemem", None, [p]),
            ("PQsendQueryParams", i, [p, s, i, p, ctypes.POINTER(s), p, p, i]),
            ("PQgetResult", p, [p]), ("PQenterPipelineMode", i, [p]),
            ("PQexitPipelineMode", i, [p]), ("PQpipelineSync", i, [p])):
        func = getattr(lib, fname, None)
        if func is None:  # libpq before 14 has no pipeline mode: ``pipelines`` says so
            continue
        func.restype = restype
        func.argtypes = argtypes
    _lib = lib
    return lib


def _text(value: object) -> bytes | None:
    """A parameter as the text the server reads (None stays NULL)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return b"1" if value else b"0"
    if isinstance(value, float):
        return repr(value).encode()
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


def _reader(oid: int) -> Callable[[str], Any]:
    if oid in _INTS:
        return int
    if oid in _FLOATS:
        return float
    if oid == _NUMERIC:
        return lambda text: float(text) if ("." in text or "e" in text.lower()) else int(text)
    if oid == _BOOL:
        return lambda text: text == "t"
    return str


class Cursor:
    """One statement's result: ``fetchone``, ``fetchall``, iteration, ``rowcount``."""

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self._next = 0
        self.rowcount = rowcount

    def fetchone(self) -> Any:
        if self._next >= len(self._rows):
            return None
        row = self._rows[self._next]
        self._next += 1
        return row

    def fetchall(self) -> list[Any]:
        rows, self._next = self._rows[self._next:], len(self._rows)
        return rows

    def __iter__(self) -> Any:
        return iter(self.fetchall())


class Connection:
    """One libpq connection: ``execute(sql, params)`` with ``$n`` markers (or none),
    ``transaction_status`` (libpq's: 0 idle, 2 in a transaction, 3 failed), ``close``.
    ``make_row(names)`` builds the row class of a result's columns."""

    def __init__(self, dsn: str, make_row: Callable[[Sequence[str]], Callable[[list[Any]], Any]]
                 ) -> None:
        self._lib = load()
        self._make_row = make_row
        self._conn = self._lib.PQconnectdb(dsn.encode())
        if not self._conn or self._lib.PQstatus(self._conn) != _CONNECTION_OK:
            message = self._message()
            self.close()
            raise PgError(message or "could not connect to the server")

    @property
    def closed(self) -> bool:
        return not self._conn

    @property
    def transaction_status(self) -> int:
        """libpq's PQtransactionStatus: 0 idle, 1 active, 2 in a transaction, 3 failed, 4
        unknown (a lost connection)."""
        return 4 if not self._conn else int(self._lib.PQtransactionStatus(self._conn))

    def _message(self) -> str:
        raw = self._lib.PQerrorMessage(self._conn) if self._conn else b""
        return (raw or b"").decode("utf-8", "replace").strip()

    def execute(self, sql: str, params: Sequence[object] = ()) -> Cursor:
        """Run one statement (several, ``;``-separated, when it has no parameters).
        Raises PgError with the server's SQLSTATE."""
        if self.closed:
            raise PgError("the connection is closed")
        lib = self._lib
        if params:
            count = len(params)
            values = (ctypes.c_char_p * count)(*(_text(v) for v in params))
            result = lib.PQexecParams(self._conn, sql.encode("utf-8"), count, None, values,
                                      None, None, 0)
        else:
            result = lib.PQexec(self._conn, sql.encode("utf-8"))
        if not result:
            raise PgError(self._message() or "no answer from the server")
        try:
            return self._cursor(result)
        finally:
            lib.PQclear(result)

    def _cursor(self, result: Any) -> Cursor:
        """One statement's result as a Cursor; PgError for an error result."""
        lib = self._lib
        status = lib.PQresultStatus(result)
        if status == _COMMAND_OK:
            done = lib.PQcmdTuples(result) or b""
            return Cursor([], int(done) if done else 0)
        if status != _TUPLES_OK:
            state = lib.PQresultErrorField(result, _DIAG_SQLSTATE)
            message = (lib.PQresultErrorMessage(result) or b"").decode("utf-8", "replace")
            raise PgError(message.strip() or "the statement failed",
                          state.decode() if state else None)
        return self._rows(result)

    @property
    def pipelines(self) -> bool:
        """Whether this libpq has pipeline mode (14 and later)."""
        return hasattr(self._lib, "PQenterPipelineMode")

    def pipeline(self, statements: Sequence[tuple[str, Sequence[object]]]) -> list[Cursor]:
        """Send ``statements`` (each one statement with ``$n`` markers, and its parameters)
        in one round trip (libpq's pipeline mode) and read their results in order. The
        first error is raised (PgError) once every result was read; the statements after
        it did not run (the server skips them). The caller ends a transaction it left
        open or failed."""
        if self.closed:
            raise PgError("the connection is closed")
        lib = self._lib
        if not lib.PQenterPipelineMode(self._conn):
            raise PgError(self._message() or "pipeline mode refused")
        cursors: list[Cursor] = []
        failed: PgError | None = None
        try:
            for sql, params in statements:
                count = len(params)
                values = (ctypes.c_char_p * max(count, 1))(*(_text(v) for v in params))
                if not lib.PQsendQueryParams(self._conn, sql.encode("utf-8"), count, None,
                                             values, None, None, 0):
                    raise PgError(self._message() or "the statement could not be sent")
            if not lib.PQpipelineSync(self._conn):
                raise PgError(self._message() or "the pipeline could not be sent")
            for _ in statements:
                result = lib.PQgetResult(self._conn)
                if not result:
                    raise PgError(self._message() or "no answer from the server")
                try:
                    if lib.PQresultStatus(result) == _PIPELINE_ABORTED:
                        cursors.append(Cursor([], 0))
                    else:
                        try:
                            cursors.append(self._cursor(result))
                        except PgError as exc:
                            failed = failed or exc
                            cursors.append(Cursor([], 0))
                finally:
                    lib.PQclear(result)
                lib.PQgetResult(self._conn)  # the NULL that ends each statement's results
            synced = lib.PQgetResult(self._conn)
            if synced:
                lib.PQclear(synced)
        finally:
            if not lib.PQexitPipelineMode(self._conn):
                message = self._message()
                self.close()  # results left unread: the session cannot be trusted
                raise PgError(message or "the pipeline did not end")
        if failed is not None:
            raise failed
        return cursors

    def _rows(self, result: Any) -> Cursor:
        lib = self._lib
        nrows, ncols = lib.PQntuples(result), lib.PQnfields(result)
        names = [lib.PQfname(result, c).decode() for c in range(ncols)]
        readers = [_reader(int(lib.PQftype(result, c))) for c in range(ncols)]
        build = self._make_row(names)
        rows = []
        for r in range(nrows):
            values: list[Any] = []
            for c in range(ncols):
                if lib.PQgetisnull(result, r, c):
                    values.append(None)
                    continue
                size = lib.PQgetlength(result, r, c)
                text = ctypes.string_at(lib.PQgetvalue(result, r, c), size).decode("utf-8")
                values.append(readers[c](text))
            rows.append(build(values))
        return Cursor(rows, nrows)

    def socket(self) -> int:
        """The file descriptor of the connection's socket (to wait on with ``select``);
        raises PgError when the connection is closed or lost."""
        fd = int(self._lib.PQsocket(self._conn)) if self._conn else -1
        if fd < 0:
            raise PgError("the connection is closed")
        return fd

    def notifications(self) -> list[tuple[str, str]]:
        """Read what the server sent without blocking, and return the NOTIFYs received
        since the last call as (channel, payload) pairs, oldest first (none: an empty
        list). Raises PgError when the connection is lost."""
        if self.closed:
            raise PgError("the connection is closed")
        lib = self._lib
        if not lib.PQconsumeInput(self._conn):
            raise PgError(self._message() or "the connection was lost")
        received: list[tuple[str, str]] = []
        while True:
            note = lib.PQnotifies(self._conn)
            if not note:
                return received
            try:
                received.append(((note.contents.relname or b"").decode("utf-8", "replace"),
                                 (note.contents.extra or b"").decode("utf-8", "replace")))
            finally:
                lib.PQfreemem(ctypes.cast(note, ctypes.c_void_p))

    def close(self) -> None:
        """End the session (idempotent)."""
        if self._conn:
            self._lib.PQfinish(self._conn)
            self._conn = None
