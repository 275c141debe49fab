"""The store's database handle and the node registry (the ``nodes`` table).

``Registry`` owns the short-transaction helpers every store write goes through (one
``BEGIN IMMEDIATE`` transaction per call, DBAPI errors turned into StoreError), the
registry rows, and WAL maintenance. ``Outbox`` adds the channel messages,
``Transitions`` the node-status moves and ``Ledger`` the run > iteration > step ledger;
callers use ``Ledger``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from fractal.errors import NodeNotFound, StoreError
from fractal.store.backend import this_host
from fractal.store.db import Tx, prepare, transaction
from fractal.store.rows import NodeRow, build
from fractal.store.timefmt import utc_now

__all__ = ["CAP_KEYS", "Registry", "new_id"]

R = TypeVar("R", bound=tuple[Any, ...])  # a row class of ``fractal.store.rows``

CAP_KEYS = ("max_cost", "max_depth", "max_children", "max_descendants")
"""The spawn and cost caps a node registers; ``max_cost`` is USD, the rest counts."""


class Registry:
    """The tree database at ``db_path`` and its node registry. A database outside any
    tree is created on first use; a tree's only with ``create`` (``fractal init``, see
    ``schema.ensure_schema``), else a missing one raises DatabaseMissing.

    Raises StoreError (from every method) when the database cannot be opened,
    migrated or written, naming the file and SQLite's message.
    """

    def __init__(self, db_path: Path, *, create: bool = False) -> None:
        self.db_path = Path(db_path)
        prepare(self.db_path, create=create)

    @contextmanager
    def _db(self, *, write: bool = True, single: bool = False) -> Iterator[Tx]:
        """One short transaction through the store's connection seam (``store.db``):
        ``BEGIN IMMEDIATE`` for a write, a deferred snapshot for ``write=False``
        (``single``: a block of one statement, ``db.transaction``'s)."""
        with transaction(self.db_path, write=write, single=single) as tx:
            yield tx

    def _one(self, cls: type[R], sql: str, params: Mapping[str, object] | None = None) -> R | None:
        """The first row of the query ``sql`` as a ``cls`` value, or None."""
        with self._db(write=False, single=True) as tx:
            row = tx.one(sql, params)
        return None if row is None else build(cls, row)

    def _all(self, cls: type[R], sql: str, params: Mapping[str, object] | None = None) -> list[R]:
        """Every row of the query ``sql`` as ``cls`` values."""
        with self._db(write=False, single=True) as tx:
            return [build(cls, row) for row in tx.all(sql, params)]

    def _set(self, table: str, key: str, ident: object, values: Mapping[str, object]) -> int:
        """UPDATE the ``table`` row whose column ``key`` equals ``ident``; return rows matched."""
        with self._db(single=True) as tx:  # one UPDATE
            return set_row(tx, table, key, ident, values)

    def _set_node(self, node: str, **values: object) -> None:
        """Update a registered node's columns; raise NodeNotFound when it is not registered.
        Never its status: that changes only by a move (``Transitions.move``)."""
        if "status" in values:
            raise StoreError("a node's status changes only through Ledger.move")
        if self._set("nodes", "node", node, {"updated_at": utc_now(), **values}) == 0:
            raise NodeNotFound(f"node {node!r} is not registered in {self.db_path}; "
                               "create it with `fractal node init`")

    # ---- nodes -------------------------------------------------------------------

    def register_node(self, node: str, *, parent: str | None, title: str | None,
                      worktree: str | None, status: str = "idle",
                      caps: Mapping[str, float | int | None] | None = None) -> None:
        """Insert the registry row of ``node``, or update it when it already exists.

        The row's ``host`` is this machine (``this_host``): the one that owns the node's
        worktree and processes. ``worktree`` is recorded as given: relative to the clone
        (``Tree.recorded``), so every clone reads it as its own (``Tree.worktree_at``). ``status`` is the status the row is born with (``idle`` for a new node); every
        later change is a move (``Transitions.move``). ``caps`` maps CAP_KEYS to values (``None`` = unlimited); on re-registration
        only the caps named are changed. Raises StoreError for an unknown cap key.
        """
        cap_values = _caps(caps)
        now = utc_now()
        fields: dict[str, object] = {"parent": parent, "title": title, "worktree": worktree,
                                     "status": status, "host": this_host(), **cap_values}
        columns = ["node", *fields, "created_at", "updated_at"]
        sets = ", ".join(f"{name} = excluded.{name}" for name in [*fields, "updated_at"])
        with self._db() as tx:
            tx.run(f"INSERT INTO nodes ({', '.join(columns)}) "
                   f"VALUES ({', '.join(':' + c for c in columns)}) "
                   f"ON CONFLICT (node) DO UPDATE SET {sets}",
                   {"node": node, **fields, "created_at": now, "updated_at": now})

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
        return self._one(NodeRow, "SELECT * FROM nodes WHERE node = :node", {"node": node})

    def nodes(self) -> list[NodeRow]:
        """Every registered node, in registration order."""
        return self._all(NodeRow, "SELECT * FROM nodes ORDER BY node_id")

    def set_tmux(self, node: str, session: str | None, socket: str | None) -> None:
        """Record the node's tmux session name and socket path (None clears them)."""
        self._set_node(node, tmux_session=session, tmux_socket=socket)

    def set_supervisor(self, node: str, pid: int | None, started: float | None) -> None:
        """Record the supervisor's pid and process create time (epoch s; None clears)."""
        self._set_node(node, supervisor_pid=pid, supervisor_started=started)

    def delete_node(self, node: str) -> None:
        """Remove the registry row only; history rows stay. Idempotent."""
        with self._db() as tx:
            tx.run("DELETE FROM nodes WHERE node = :node", {"node": node})

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
            with transaction(self.db_path, tx=False) as tx:
                return tx.pragma(sql)
        except StoreError as exc:
            raise StoreError(f"database {self.db_path} failed {sql!r}: {exc.__cause__}") from exc


def set_row(tx: Tx, table: str, key: str, ident: object, values: Mapping[str, object]) -> int:
    """UPDATE the ``table`` row whose column ``key`` equals ``ident`` inside ``tx``'s
    transaction; return the rows matched."""
    sets = ", ".join(f"{name} = :{name}" for name in values)
    return tx.run(f"UPDATE {table} SET {sets} WHERE {key} = :_key", {**values, "_key": ident})


def new_id(tx: Tx, table: str, values: Mapping[str, object]) -> int:
    """INSERT one row of ``table`` inside ``tx``'s transaction; return its integer id."""
    return tx.insert(table, values)


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
