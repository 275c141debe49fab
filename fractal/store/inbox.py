"""Writes of the attention inbox: acknowledgements and the ``notify`` claims
(the ``inbox_acks`` and ``notifications`` tables, migration 0009)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fractal.store.registry import Registry
from fractal.store.timefmt import utc_now

__all__ = ["Claim", "InboxStore"]

_ACK = ("INSERT INTO inbox_acks (item_key, fingerprint, created_at) "
        "VALUES (:item_key, :fingerprint, :created_at) ON CONFLICT (item_key) DO UPDATE SET "
        "fingerprint = excluded.fingerprint, created_at = excluded.created_at")
_FORGET = "DELETE FROM notifications WHERE item_key = :item_key"
_SETTLE = ("UPDATE notifications SET status = :status, exit_code = :exit_code, "
           "metadata = :meta, ended_at = :ended_at WHERE batch = :batch AND status = 'pending'")


@dataclass(frozen=True)
class Claim:
    """An attention event to hand to ``notify``: its key, state, kind and node."""

    item_key: str
    fingerprint: str
    kind: str
    node: str


class InboxStore(Registry):
    """Acknowledge items; claim events for ``notify`` at most once. Raises StoreError."""

    def ack(self, item_key: str, fingerprint: str) -> None:
        """Hide ``item_key`` while its state is ``fingerprint`` (replaces an older ack)."""
        with self._db() as tx:
            tx.run(_ACK, {"item_key": item_key, "fingerprint": fingerprint,
                          "created_at": utc_now()})

    def claim(self, events: Sequence[Claim], batch: str, *, skipped: set[str]) -> list[Claim]:
        """Record every event of ``events`` not yet notified in its current state, in one
        transaction; return the ones claimed (the others were claimed before, by this or
        another dispatcher). A claim whose kind is in ``skipped`` is recorded ``skipped``.
        """
        if not events:
            return []
        keys = [e.item_key for e in events]
        now = utc_now()
        claimed: list[Claim] = []
        marks = {f"k{n}": key for n, key in enumerate(keys)}
        known_sql = ("SELECT item_key, fingerprint FROM notifications WHERE item_key IN ("
                     + ", ".join(f":{mark}" for mark in marks) + ")")
        with self._db() as tx:
            known = {str(k): str(f) for k, f in tx.all(known_sql, marks)}
            for event in events:
                if known.get(event.item_key) == event.fingerprint:
                    continue
                status = "skipped" if event.kind in skipped else "pending"
                values = {"fingerprint": event.fingerprint, "kind": event.kind,
                          "node": event.node, "batch": batch, "status": status,
                          "exit_code": None, "metadata": "", "created_at": now, "ended_at": None}
                tx.run(_FORGET, {"item_key": event.item_key})
                tx.insert("notifications", {"item_key": event.item_key, **values})
                if status == "pending":
                    claimed.append(event)
        return claimed

    def settle(self, batch: str, status: str, exit_code: int | None, reason: str) -> int:
        """Close the pending rows of ``batch`` as ``status``; return how many."""
        with self._db() as tx:
            return tx.run(_SETTLE, {"batch": batch, "status": status, "exit_code": exit_code,
                                    "meta": reason[:250], "ended_at": utc_now()})
