"""Which nodes' rows changed since the dashboard last read them: high-water marks.

Rows are appended (each table's id only grows) and updated only while open (a run,
iteration or step closes once; a gate is approved while its step is open; a merge settles
once), so ``changes`` needs only each table's newest id, the open rows, the active merges
and the registry to name every node whose rows differ from the previous marks. Every
query reads a primary key or an index; the registry (one row per node) is read whole.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fractal.store.reader import _connect
from fractal.store.rows import NodeRow

__all__ = ["Marks", "changes"]

# (table, id column, the node columns a new row touches)
_APPENDED = (("runs", "run_id", ("node",)), ("iterations", "iter_id", ("node",)),
             ("steps", "step_id", ("node",)), ("events", "event_id", ("node",)),
             ("signals", "signal_id", ("node",)), ("merges", "merge_id", ("child",)),
             ("messages", "message_id", ("node", "sender")))
_OPEN = (("runs", "run_id", "NULL"), ("iterations", "iter_id", "NULL"),
         ("steps", "step_id", "approved"))


@dataclass(frozen=True)
class Marks:
    """What ``changes`` saw: each table's newest id, the open rows (table, id, node,
    approval), the active merges (id, child), the newest read receipt, the registry and
    the usage windows."""

    ids: tuple[int, ...]
    open_rows: frozenset[tuple[str, int, str, str | None]]
    merges: frozenset[tuple[int, str]]
    read_id: int
    nodes: frozenset[tuple[Any, ...]]  # the registry's rows, as NodeRow's fields
    windows: tuple[tuple[object, ...], ...]

    def branches(self) -> set[str]:
        """Every registered branch."""
        return {str(r[1]) for r in self.nodes}


def _newest(conn: sqlite3.Connection, table: str, column: str) -> int:
    row = conn.execute(f"SELECT MAX({column}) FROM {table}").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _marks(conn: sqlite3.Connection) -> Marks:
    from fractal.store.attention import _columns  # deferred: start-up cost (8 modules)

    ids = tuple(_newest(conn, table, column) for table, column, _ in _APPENDED)
    open_rows = frozenset(
        (table, int(r[0]), str(r[1]), None if r[2] is None else str(r[2]))
        for table, column, extra in _OPEN for r in conn.execute(
            f"SELECT {column}, node, {extra} FROM {table} INDEXED BY ix_{table}_ended_at "
            "WHERE ended_at IS NULL"))
    merges = frozenset((int(r[0]), str(r[1])) for r in conn.execute(
        "SELECT merge_id, child FROM merges WHERE status = 'active'"))
    nodes = frozenset(tuple(r) for r in conn.execute(f"SELECT {_columns(NodeRow)} FROM nodes"))
    windows = tuple(tuple(r) for r in conn.execute(
        "SELECT credential, state, wake_at FROM usage_windows ORDER BY credential"))
    return Marks(ids, open_rows, merges, _newest(conn, "reads", "read_id"), nodes, windows)


def changes(db_path: Path, before: Marks | None) -> tuple[set[str] | None, Marks]:
    """The nodes whose rows changed since ``before`` (None: unknown, read everything), and
    the new marks. A change of the usage windows names every active node. Never creates
    the database (raises TreeGone, a StoreError)."""
    with _connect(db_path, create=False) as conn:
        conn.row_factory = None
        now = _marks(conn)
        if before is None:
            return None, now
        touched: set[str] = set()
        for (table, column, owners), old, new in zip(_APPENDED, before.ids, now.ids,
                                                     strict=True):
            if new > old:
                for row in conn.execute(f"SELECT DISTINCT {', '.join(owners)} FROM {table} "
                                        f"WHERE {column} > ?", (old,)):
                    touched.update(str(v) for v in row if v is not None)
        if now.read_id > before.read_id:
            touched.update(str(r[0]) for r in conn.execute(
                "SELECT DISTINCT m.sender FROM reads AS r JOIN messages AS m ON "
                "m.message_id = r.message_id WHERE r.read_id > ? AND m.sender IS NOT NULL",
                (before.read_id,)))
    touched.update(row[2] for row in before.open_rows ^ now.open_rows)
    touched.update(child for _, child in before.merges ^ now.merges)
    touched.update(str(r[1]) for r in before.nodes ^ now.nodes)  # (node_id, node, ...)
    if before.windows != now.windows:
        touched.update(str(r[1]) for r in now.nodes if r[4] == "active")
    return touched, now
