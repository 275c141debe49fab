"""Reads for ``node activity --follow``: activity rows at or after an instant, oldest
first, and a cheap change token for the database files (stdlib ``sqlite3`` only)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fractal.store.reader import _connect
from fractal.store.rows import ActivityRow, build

__all__ = ["activity_since", "db_token"]

# Oldest first; among rows of one instant a start row before its own end row, parents
# (lower ids) first: the reverse of the listing's newest-first order.
_OLDEST_FIRST = (
    "ORDER BY timestamp ASC, run_id ASC, iter_id ASC, step_id ASC, event_id ASC, "
    "CASE event WHEN 'end' THEN 1 ELSE 0 END"
)


def activity_since(db_path: Path, nodes: Sequence[str] | None,
                   since: str | None) -> list[ActivityRow]:
    """Rows of the ``activity`` view with ``timestamp >= since`` (every row when None),
    oldest first; ``nodes`` restricts to those branches (None: every node)."""
    clauses: list[str] = []
    params: list[object] = []
    if nodes is not None:
        if not nodes:
            return []
        clauses.append(f"node IN ({', '.join('?' * len(nodes))})")
        params.extend(nodes)
    if since is not None:
        clauses.append("timestamp >= ?")
        params.append(since)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    with _connect(db_path) as conn:
        sql = f"SELECT * FROM activity {where} {_OLDEST_FIRST}"
        return [build(ActivityRow, row) for row in conn.execute(sql, params)]


def db_token(db_path: Path) -> tuple[tuple[int, int], ...]:
    """(mtime ns, size) of the database and its ``-wal`` file: a write changes it. No
    connection is opened; a missing file reads as (0, 0)."""
    out: list[tuple[int, int]] = []
    for path in (db_path, db_path.with_name(db_path.name + "-wal")):
        try:
            info = path.stat()
        except OSError:
            out.append((0, 0))
            continue
        out.append((info.st_mtime_ns, info.st_size))
    return tuple(out)
