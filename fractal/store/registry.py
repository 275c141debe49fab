"""The store's database handle and the node registry (the ``nodes`` table).

``Registry`` owns the short-transaction helpers every store write goes through (one
``BEGIN IMMEDIATE`` transaction per call, DBAPI errors turned into StoreError), the
registry rows, and WAL maintenance. ``Outbox`` adds the channel messages,
``Transitions`` the node-status moves and ``Ledger`` the run > iteration > step ledger;
callers use ``Ledger``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, delete, insert, select, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import Select

from fractal.errors import NodeNotFound, StoreError
from fractal.store.engine import open_engine
from fractal.store.models import Node
from fractal.store.rows import NodeRow, build
from fractal.store.timefmt import utc_now

__all__ = ["CAP_KEYS", "Registry", "new_id"]

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

R = TypeVar("R", bound="DataclassInstance")

CAP_KEYS = ("max_cost", "max_depth", "max_children", "max_descendants")
"""The spawn and cost caps a node registers; ``max_cost`` is USD, the rest counts."""


class Registry:
    """The tree database at ``db_path`` (created on first use) and its node registry.

    Raises StoreError (from every method) when the database cannot be opened,
    migrated or written, naming the file and SQLite's message.
    """

    def __init__(self, db_path: Path) -> None:
        self.db_path = Path(db_path)
        self._engine = open_engine(self.db_path)

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        """One short BEGIN IMMEDIATE transaction; DBAPI errors become StoreError."""
        try:
            with self._engine.begin() as conn:
                yield conn
        except DBAPIError as exc:
            if "locked" in str(exc.orig) or "busy" in str(exc.orig):
                raise StoreError(
                    f"database {self.db_path} is locked by another process (a sqlite3 shell "
                    "or a tool holding a transaction open); nothing was written; try again "
                    "once it lets go"
                ) from exc
            raise StoreError(
                f"database {self.db_path} refused the operation: {exc.orig}; check the file "
                "is writable and is this tree's fractal database"
            ) from exc

    def _one(self, cls: type[R], stmt: Select[Any]) -> R | None:
        """The first row of ``stmt`` as a ``cls`` value, or None."""
        with self._tx() as conn:
            row = conn.execute(stmt.limit(1)).mappings().first()
        return None if row is None else build(cls, row)

    def _all(self, cls: type[R], stmt: Select[Any]) -> list[R]:
        """Every row of ``stmt`` as ``cls`` values."""
        with self._tx() as conn:
            return [build(cls, row) for row in conn.execute(stmt).mappings()]

    def _set(self, key: Any, ident: object, values: Mapping[str, object]) -> int:
        """UPDATE the row whose ORM attribute ``key`` equals ``ident``; return rows matched."""
        with self._tx() as conn:
            return conn.execute(update(key.class_).where(key == ident).values(**values)).rowcount

    def _set_node(self, node: str, **values: object) -> None:
        """Update a registered node's columns; raise NodeNotFound when it is not registered.
        Never its status: that changes only by a move (``Transitions.move``)."""
        if "status" in values:
            raise StoreError("a node's status changes only through Ledger.move")
        if self._set(Node.node, node, {"updated_at": utc_now(), **values}) == 0:
            raise NodeNotFound(f"node {node!r} is not registered in {self.db_path}; "
                               "create it with `fractal node init`")

    # ---- nodes -------------------------------------------------------------------

    def register_node(self, node: str, *, parent: str | None, title: str | None,
                      worktree: str | None, status: str = "idle",
                      caps: Mapping[str, float | int | None] | None = None) -> None:
        """Insert the registry row of ``node``, or update it when it already exists.

        ``status`` is the status the row is born with (``idle`` for a new node); every
        later change is a move (``Transitions.move``). ``caps`` maps CAP_KEYS to values (``None`` = unlimited); on re-registration
        only the caps named are changed. Raises StoreError for an unknown cap key.
        """
        cap_values = _caps(caps)
        now = utc_now()
        fields: dict[str, object] = {"parent": parent, "title": title, "worktree": worktree,
                                     "status": status, **cap_values}
        stmt = sqlite_insert(Node).values(node=node, created_at=now, updated_at=now, **fields)
        stmt = stmt.on_conflict_do_update(
            index_elements=[Node.node], set_={**fields, "updated_at": now})
        with self._tx() as conn:
            conn.execute(stmt)

    def set_caps(self, node: str, caps: Mapping[str, float | int | None]) -> None:
        """Rewrite the named caps of a registered node (``fractal node update``, drift heal).

        Raises NodeNotFound when ``node`` is not registered, StoreError for a bad key.
        """
        self._set_node(node, **_caps(caps))

    def set_title(self, node: str, title: str | None) -> None:
        """Rewrite the title of a registered node (``fractal node update``, drift heal).

        Raises NodeNotFound when ``node`` is not registered.
        """
        self._set_node(node, title=title)

    def node(self, node: str) -> NodeRow | None:
        """The registry row of ``node``, or None."""
        return self._one(NodeRow, select(Node.__table__).where(Node.node == node))

    def nodes(self) -> list[NodeRow]:
        """Every registered node, in registration order."""
        return self._all(NodeRow, select(Node.__table__).order_by(Node.node_id))

    def set_tmux(self, node: str, session: str | None, socket: str | None) -> None:
        """Record the node's tmux session name and socket path (None clears them)."""
        self._set_node(node, tmux_session=session, tmux_socket=socket)

    def set_supervisor(self, node: str, pid: int | None, started: float | None) -> None:
        """Record the supervisor's pid and process create time (epoch s; None clears)."""
        self._set_node(node, supervisor_pid=pid, supervisor_started=started)

    def delete_node(self, node: str) -> None:
        """Remove the registry row only; history rows stay. Idempotent."""
        with self._tx() as conn:
            conn.execute(delete(Node).where(Node.node == node))

    # ---- maintenance -------------------------------------------------------------

    def checkpoint(self) -> None:
        """Fold the WAL into the main file and truncate it (``wal_checkpoint(TRUNCATE)``)."""
        self._pragma("PRAGMA wal_checkpoint(TRUNCATE)")

    def integrity_ok(self) -> bool:
        """True when SQLite's ``integrity_check`` reports ``ok``."""
        return self._pragma("PRAGMA integrity_check") == [("ok",)]

    def _pragma(self, sql: str) -> list[tuple[Any, ...]]:
        """Run a pragma outside any transaction (checkpoints cannot run inside one)."""
        try:
            raw = self._engine.raw_connection()
        except DBAPIError as exc:
            raise StoreError(f"cannot open database {self.db_path}: {exc.orig}") from exc
        try:
            cursor = raw.cursor()
            cursor.execute(sql)
            return [tuple(row) for row in cursor.fetchall()]
        except sqlite3.Error as exc:
            raise StoreError(f"database {self.db_path} failed {sql!r}: {exc}") from exc
        finally:
            raw.close()


def new_id(conn: Connection, model: Any, values: Mapping[str, object]) -> int:
    """INSERT one row of ``model`` inside ``conn``'s transaction; return its integer id."""
    key = conn.execute(insert(model).values(**values)).inserted_primary_key
    if key is None:
        raise StoreError(f"the database returned no id for a new {model.__tablename__} row")
    return int(key[0])


def _caps(caps: Mapping[str, float | int | None] | None) -> dict[str, float | int | None]:
    """Validate cap keys; coerce ``max_cost`` to float and the counts to int."""
    out: dict[str, float | int | None] = {}
    for key, value in (caps or {}).items():
        if key not in CAP_KEYS:
            raise StoreError(f"unknown node cap {key!r}; expected one of {', '.join(CAP_KEYS)}")
        if value is None:
            out[key] = None
        else:
            out[key] = float(value) if key == "max_cost" else int(value)
    return out
