"""Waiting out another process's database lock: the bound, the back-off and the notice.

A busy database is waited for, never a reason to fail at once: a statement that meets
another process's lock (a sqlite3 shell or a backup tool holding a transaction open)
is tried again until the lock goes or ``LockWait.bound`` seconds have passed since
the first try began. Each try waits inside the driver (SQLite's own busy handler, which polls
the lock) for a span that doubles from ``LockWait.first`` up to ``MAX_SPAN_S``, so the
bound is checked between spans and a lock let go is taken within SQLite's poll; with
no lock in the way nothing here runs (the first try is the statement itself).

Which errors are lock errors is one function (``is_lock_error``), so a second backend
maps its own (PostgreSQL's lock and serialization failures) there. The person watching
is told once per wait (``set_wait_notice``: the supervisor's pane); a wait that outlasts
the bound raises ``DatabaseLocked``.

Test and operator knobs (seconds, read by each new connection and each wait): ``FRACTAL_DB_BUSY_S`` the
first try's wait (default 30, the old one-shot timeout), ``FRACTAL_DB_LOCK_WAIT_S`` the
bound (default 600).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, TypeVar

from fractal.errors import StoreError

__all__ = ["LOCK_WAIT", "DatabaseLocked", "LockWait", "is_lock_error", "lock_wait",
           "locked_error", "patiently", "set_wait_notice"]

T = TypeVar("T")

MAX_SPAN_S = 30.0
"""The longest single try after the first (s): the bound is checked at least this often."""

_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6  # primary result codes (extended codes keep them)


class LockWait(NamedTuple):
    """How long a statement waits on another process's lock (seconds)."""

    first: float = 30.0
    """The first try's wait inside the driver; a lock let go sooner costs nothing more."""
    bound: float = 600.0
    """The whole wait, counted from the first try, before ``DatabaseLocked`` is raised."""


def _seconds(name: str, default: float) -> float:
    """The positive number of seconds in environment variable ``name``, else ``default``."""
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if 0 < value < 1e9 else default


LOCK_WAIT: LockWait | None = None
"""This process's wait when set (a test's ``monkeypatch.setattr``); None: the environment's."""


def lock_wait() -> LockWait:
    """The wait in force: ``LOCK_WAIT``, else the environment's knobs over the defaults
    (read at each call, so a process forked with another environment obeys its own)."""
    if LOCK_WAIT is not None:
        return LOCK_WAIT
    return LockWait(_seconds("FRACTAL_DB_BUSY_S", 30.0), _seconds("FRACTAL_DB_LOCK_WAIT_S", 600.0))


class DatabaseLocked(StoreError):
    """Another process held the database's lock for longer than the bound; the statement
    was not run (a write wrote nothing)."""


_notice: Callable[[str], None] | None = None


def set_wait_notice(notice: Callable[[str], None] | None) -> None:
    """Call ``notice(text)`` once at the start of each wait longer than the first try
    (None: tell nobody). The supervisor passes its pane's warning, a command its stderr."""
    global _notice
    _notice = notice


_PG_LOCK_STATES = frozenset({"55P03", "40001", "40P01"})
"""PostgreSQL's SQLSTATEs worth waiting for: lock_not_available (``lock_timeout`` ran
out), serialization_failure, deadlock_detected (the transaction was rolled back)."""


def is_lock_error(exc: BaseException) -> bool:
    """True when ``exc`` says another connection holds a lock this one needs (SQLite's
    ``SQLITE_BUSY`` or ``SQLITE_LOCKED``, extended codes included; PostgreSQL's
    ``_PG_LOCK_STATES``, read from the error's ``sqlstate``): worth
    waiting for."""
    state = getattr(exc, "sqlstate", None)
    if isinstance(state, str):
        return state in _PG_LOCK_STATES
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:  # a driver without result codes: its message says it
        text = str(exc)
        return "locked" in text or "busy" in text
    return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)


def locked_error(db_path: Path, waited: float) -> DatabaseLocked:
    """The refusal of a statement that waited ``waited`` seconds in vain."""
    return DatabaseLocked(
        f"database {db_path} stayed locked by another process for {waited:.0f}s (a sqlite3 "
        "shell or a tool holding a transaction open); nothing was written; end that "
        f"process's transaction (`fuser {db_path}` lists the processes that have it open; "
        "on PostgreSQL, pg_stat_activity), then try again")


def patiently(db_path: Path, attempt: Callable[[float], T], refused: BaseException, *,
              waited: float | None = None) -> T:
    """Try ``attempt(span)`` again until it returns, after it was refused with the lock
    error ``refused`` (the caller's first try, which waited ``waited`` seconds, by
    default ``lock_wait().first``).

    ``attempt`` receives the seconds the driver may wait on the lock this time and must
    leave nothing half done when it raises. The span doubles from the first try's wait
    (at least 1 s) up to ``MAX_SPAN_S`` and never passes the bound. Tells the wait
    notice once; raises ``DatabaseLocked`` once the bound's seconds have passed
    since the first try began, and any error that is not a lock error as it is.
    """
    wait = lock_wait()
    first = wait.first if waited is None else waited
    started = time.monotonic() - first  # the first try waited that long already
    deadline = started + wait.bound
    notice = _notice
    if notice is not None:
        notice(f"the database {db_path} is locked by another process; waiting for it "
               f"(up to {wait.bound:.0f}s)")
    span = max(first, 1.0)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise locked_error(db_path, time.monotonic() - started) from refused
        span = min(span * 2, MAX_SPAN_S)
        try:
            return attempt(min(span, left))
        except Exception as exc:
            if not is_lock_error(exc):
                raise
            refused = exc
            if (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF == _SQLITE_LOCKED:
                time.sleep(0.05)  # no busy handler waits on a table lock: pace the tries
