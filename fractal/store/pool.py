"""The worker pools' state: ``pools`` and ``pool_items``, written only by fractal.

Every change of an item is one ``BEGIN IMMEDIATE`` transaction that reads the row,
applies the pure rule of ``fractal.domain.pool`` and writes the result, so two
dispatchers racing cannot claim one item twice, count an attempt twice, or claim past
the pool's width.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from fractal.domain.pool import (
    Item,
    ItemStatus,
    claim,
    clamp_workers,
    fail,
    finish,
    reject,
    resume,
)
from fractal.errors import FractalError, StoreError
from fractal.store.backend import database_url
from fractal.store.db import Tx
from fractal.store.reader import _connect
from fractal.store.registry import Registry
from fractal.store.timefmt import utc_now

__all__ = ["PoolStore", "pool_progress"]

_POOL = "SELECT brief, max_workers, review_done, created_at FROM pools WHERE pool = :pool"
_ITEMS = "SELECT * FROM pool_items WHERE pool = :pool ORDER BY position"
_CLAIMED = ("SELECT * FROM pool_items WHERE pool = :pool AND status = :claimed "
            "ORDER BY position")
_BUSY = "SELECT COUNT(*) FROM pool_items WHERE pool = :pool AND status = :claimed"
_FIRST_OPEN = ("SELECT * FROM pool_items WHERE pool = :pool AND status = :open "
               "ORDER BY position LIMIT 1")
_HELD = ("SELECT * FROM pool_items WHERE pool = :pool AND worker = :worker "
         "AND status = :claimed")
_ITEM = "SELECT * FROM pool_items WHERE pool = :pool AND item_id = :item_id"
_RENAME_ITEMS = "UPDATE pool_items SET pool = :kept WHERE pool = :pool"
_RENAME_POOL = "UPDATE pools SET pool = :kept WHERE pool = :pool"
_REVIEWED = "UPDATE pools SET review_done = 1 WHERE pool = :pool AND review_done = 0"


def pool_progress(db_path: Path) -> dict[str, tuple[int, int, int, int]]:
    """Every pool's (done, failed, claimed, total) item counts by pool node, read on a
    read-only connection (the dashboard's path: nothing is created or migrated); empty
    when the database or its pool tables are not there yet."""
    if database_url(db_path) is not None:
        try:
            with _connect(db_path, create=False) as pg:
                rows = pg.execute("SELECT pool, status, COUNT(*) FROM pool_items "
                                  "GROUP BY pool, status").fetchall()
        except StoreError:
            return {}
        return _progress(rows)
    if not db_path.is_file():
        return {}
    try:
        conn = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True, timeout=2.0)
        try:
            rows = conn.execute("SELECT pool, status, COUNT(*) FROM pool_items "
                                "GROUP BY pool, status").fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return {}
    return _progress(rows)


def _progress(rows: list[Any]) -> dict[str, tuple[int, int, int, int]]:
    """(done, failed, claimed, total) by pool from (pool, status, count) rows."""
    counts: dict[str, dict[str, int]] = {}
    for name, status, number in rows:
        counts.setdefault(str(name), {})[str(status)] = int(number)
    return {name: (c.get("done", 0), c.get("failed", 0), c.get("claimed", 0),
                   sum(c.values())) for name, c in counts.items()}


def _item(row: Any) -> Item:
    return Item(item_id=row["item_id"], input=row["input"], status=ItemStatus(row["status"]),
                worker=row["worker"], attempts=int(row["attempts"]), result=row["result"])


class PoolStore(Registry):
    """Reads and writes one tree's pools. Raises StoreError; FractalError for an unknown
    pool or item; PoolRefused (a ValueError) for a move the rules forbid."""

    def create_pool(self, pool: str, brief: str, max_workers: int | None,
                    items: Sequence[tuple[str, str]]) -> int:
        """Register ``pool`` with its ``items`` ((id, input) pairs, in order), all open;
        return the width used. Refused when the pool exists."""
        width = clamp_workers(max_workers)
        now = utc_now()
        with self._db() as tx:
            if tx.one(_POOL, {"pool": pool}) is not None:
                raise FractalError(f"pool {pool} already exists; `fractal pool status {pool}` "
                                   "lists its items")
            tx.insert("pools", {"pool": pool, "brief": brief, "max_workers": width,
                                "review_done": 0, "created_at": now})
            for position, (item_id, value) in enumerate(items):
                tx.insert("pool_items", {
                    "pool": pool, "item_id": item_id, "position": position, "input": value,
                    "status": ItemStatus.OPEN.value, "worker": None, "attempts": 0,
                    "result": "", "created_at": now, "claimed_at": None, "ended_at": None})
        return width

    def pool(self, pool: str) -> tuple[str, int, bool] | None:
        """(brief, max_workers, review_done) of ``pool``, or None."""
        with self._db(write=False, single=True) as tx:
            row = tx.one(_POOL, {"pool": pool})
        return None if row is None else (row[0], int(row[1]), bool(row[2]))

    def items(self, pool: str) -> list[Item]:
        """Every item of ``pool`` in file order."""
        with self._db(write=False, single=True) as tx:
            return [_item(r) for r in tx.all(_ITEMS, {"pool": pool})]

    def claim_next(self, pool: str, worker_of: Callable[[str], str]) -> Item | None:
        """Claim the first open item for its worker (``worker_of(item_id)``) when the pool
        has a free slot; None when it has none or no item is open."""
        with self._db() as tx:
            head = tx.one(_POOL, {"pool": pool})
            if head is None:
                raise FractalError(f"no pool {pool}")
            busy = tx.scalar(_BUSY, {"pool": pool, "claimed": ItemStatus.CLAIMED.value})
            if int(busy or 0) >= int(head["max_workers"]):
                return None
            row = tx.one(_FIRST_OPEN, {"pool": pool, "open": ItemStatus.OPEN.value})
            if row is None:
                return None
            # The previous attempt's error stays in the worker's own run records; while
            # claimed, ``result`` holds what this attempt's worker reports.
            after = replace(claim(_item(row), worker_of(row["item_id"])), result="")
            self._write(tx, pool, after, claimed=True)
            return after

    def claims(self, pool: str) -> list[tuple[Item, str | None]]:
        """The claimed items of ``pool`` in file order, each with its claim instant."""
        with self._db(write=False, single=True) as tx:
            return [(_item(r), r["claimed_at"]) for r in tx.all(
                _CLAIMED, {"pool": pool, "claimed": ItemStatus.CLAIMED.value})]

    def report(self, pool: str, worker: str, text: str) -> Item:
        """The worker ``worker`` reports its one-line result: kept on the item it holds
        claimed (the dispatcher makes it the item's result when the worker's run
        completes). Refused when ``worker`` holds no claimed item of ``pool``."""
        with self._db() as tx:
            row = tx.one(_HELD, {"pool": pool, "worker": worker,
                                 "claimed": ItemStatus.CLAIMED.value})
            if row is None:
                raise FractalError(f"{worker} holds no claimed item of pool {pool}: a result "
                                   "is reported by the worker while its item is being worked")
            after = replace(_item(row), result=" ".join(text.split())[:250])
            self._write(tx, pool, after)
            return after

    def archive(self, pool: str) -> str | None:
        """Move the rows of ``pool`` (a pool whose node no longer exists) aside under
        ``<pool>@<its creation instant>``, so a new pool may take the name and the old
        items stay on record; returns the new name, None when there was no such pool."""
        with self._db() as tx:
            head = tx.one(_POOL, {"pool": pool})
            if head is None:
                return None
            kept = f"{pool}@{head['created_at']}"
            tx.run(_RENAME_ITEMS, {"pool": pool, "kept": kept})
            tx.run(_RENAME_POOL, {"pool": pool, "kept": kept})
            return kept

    def finish(self, pool: str, item_id: str, result: str) -> Item:
        """The worker of a claimed item finished well: ``done`` with ``result``."""
        return self._move(pool, item_id, lambda i: finish(i, result))

    def fail(self, pool: str, item_id: str, error: str) -> Item:
        """The worker of a claimed item failed: open again, or failed at 2 attempts."""
        return self._move(pool, item_id, lambda i: fail(i, error))

    def reject(self, pool: str, item_id: str, reason: str) -> Item:
        """The review rejected a done item: open again with attempts reset to 1."""
        return self._move(pool, item_id, lambda i: reject(i, reason))

    def mark_reviewed(self, pool: str) -> bool:
        """Record that the pool's one review pass ran; False when it had already."""
        with self._db() as tx:
            return tx.run(_REVIEWED, {"pool": pool}) == 1

    def resume(self, pool: str, alive: Callable[[str], bool]) -> list[Item]:
        """Return every claimed item whose worker is not ``alive`` to open (or failed
        ``interrupted`` at 2 attempts); the items that changed."""
        changed: list[Item] = []
        with self._db() as tx:
            for row in tx.all(_CLAIMED, {"pool": pool, "claimed": ItemStatus.CLAIMED.value}):
                before = _item(row)
                after = resume(before, alive(before.worker or ""))
                if after != before:
                    self._write(tx, pool, after)
                    changed.append(after)
        return changed

    def _move(self, pool: str, item_id: str, rule: Callable[[Item], Item]) -> Item:
        with self._db() as tx:
            row = tx.one(_ITEM, {"pool": pool, "item_id": item_id})
            if row is None:
                raise FractalError(f"pool {pool} has no item {item_id!r}; "
                                   f"`fractal pool status {pool}` lists them")
            after = rule(_item(row))
            self._write(tx, pool, after)
            return after

    @staticmethod
    def _write(tx: Tx, pool: str, item: Item, *, claimed: bool = False) -> None:
        """UPDATE the item's row to ``item`` (status, worker, attempts, result); a claim
        also stamps ``claimed_at`` and clears ``ended_at``, a done or failed item stamps
        ``ended_at``. Column names here are fixed in the code, never caller input."""
        now = utc_now()
        values: dict[str, object] = {"status": item.status.value, "worker": item.worker,
                                     "attempts": item.attempts, "result": item.result}
        if claimed:
            values.update(claimed_at=now, ended_at=None)
        elif item.status in (ItemStatus.DONE, ItemStatus.FAILED):
            values["ended_at"] = now
        sets = ", ".join(f"{column} = :{column}" for column in values)
        tx.run(f"UPDATE pool_items SET {sets} WHERE pool = :pool AND item_id = :item_id",
               {**values, "pool": pool, "item_id": item.item_id})
