"""Point reads of the event log the cleanup verbs need (stdlib ``sqlite3``, read-only)."""

from __future__ import annotations

from pathlib import Path

from fractal.store.reader import _connect
from fractal.store.rows import EventRow, build

__all__ = ["last_event", "pause_ask"]


def last_event(db_path: Path, node: str, event: str, status: str | None = None) -> EventRow | None:
    """``node``'s newest ``event`` row (with ``status`` when given), or None. ``unretire``
    reads the status its ``retire`` event recorded. Raises StoreError."""
    sql = "SELECT * FROM events WHERE node = ? AND event = ?"
    params: list[object] = [node, event]
    if status is not None:
        sql += " AND status = ?"
        params.append(status)
    with _connect(db_path) as conn:
        row = conn.execute(sql + " ORDER BY event_id DESC LIMIT 1", params).fetchone()
    return None if row is None else build(EventRow, row)


def pause_ask(db_path: Path, node: str) -> EventRow | None:
    """The newest ``pause`` that someone asked of ``node`` (a ``completed`` row whose actor
    is not its own loop) since its newest ``resume``, or None: an ask older than that
    resume was answered by it. Its ``meta`` is the reason given (a fan-out's carries
    ``(via pause of <branch>)``; '' when none was). Raises StoreError."""
    with _connect(db_path) as conn:
        row = conn.execute(
            "SELECT * FROM events WHERE node = ? AND event = 'pause' AND status = 'completed' "
            "AND actor != 'loop' AND event_id > COALESCE((SELECT MAX(event_id) FROM events "
            "WHERE node = ? AND event = 'resume' AND status = 'completed'), 0) "
            "ORDER BY event_id DESC LIMIT 1", (node, node)).fetchone()
    return None if row is None else build(EventRow, row)
