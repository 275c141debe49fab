"""Writes of the attention inbox: acknowledgements and the ``notify`` claims
(the ``inbox_acks`` and ``notifications`` tables, migration 0009)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, insert, select, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from fractal.store.models import InboxAck, Notification
from fractal.store.registry import Registry
from fractal.store.timefmt import utc_now

__all__ = ["Claim", "InboxStore"]


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
        stmt = sqlite_insert(InboxAck).values(item_key=item_key, fingerprint=fingerprint,
                                              created_at=utc_now())
        stmt = stmt.on_conflict_do_update(
            index_elements=[InboxAck.item_key],
            set_={"fingerprint": fingerprint, "created_at": utc_now()})
        with self._tx() as conn:
            conn.execute(stmt)

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
        with self._tx() as conn:
            known = {str(k): str(f) for k, f in conn.execute(
                select(Notification.item_key, Notification.fingerprint)
                .where(Notification.item_key.in_(keys)))}
            for event in events:
                if known.get(event.item_key) == event.fingerprint:
                    continue
                status = "skipped" if event.kind in skipped else "pending"
                values = {"fingerprint": event.fingerprint, "kind": event.kind,
                          "node": event.node, "batch": batch, "status": status,
                          "exit_code": None, "meta": "", "created_at": now, "ended_at": None}
                conn.execute(delete(Notification).where(
                    Notification.item_key == event.item_key))
                conn.execute(insert(Notification).values(item_key=event.item_key, **values))
                if status == "pending":
                    claimed.append(event)
        return claimed

    def settle(self, batch: str, status: str, exit_code: int | None, reason: str) -> int:
        """Close the pending rows of ``batch`` as ``status``; return how many."""
        with self._tx() as conn:
            return conn.execute(
                update(Notification).where(Notification.batch == batch,
                                           Notification.status == "pending")
                .values(status=status, exit_code=exit_code, meta=reason[:250],
                        ended_at=utc_now())).rowcount
