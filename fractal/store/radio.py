"""The radio's writes: messages on nodes' channels, read receipts, saved marks,
withdrawals (the reads are ``store.radio_reads``'s, without SQLAlchemy).

Only storage: who may read or write which channel is decided by ``domain.radio`` and
checked by ``lifecycle.radio`` before any call here. Every write is one short
``BEGIN IMMEDIATE`` transaction, so concurrent senders never lose a message; a message
id is drawn again while it collides with an existing one. A withdrawn message
(``unsent_at`` set) stays in the table but no listing returns it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from fractal.store.db import Tx
from fractal.store.registry import Registry, new_id
from fractal.store.timefmt import utc_now

__all__ = ["Draft", "Radio", "insert_message", "new_message_uuid"]


@dataclass(frozen=True)
class Draft:
    """A message to store: ``host``'s ``channel``, written by ``sender``; ``priority``
    0-10; ``parent`` the 8-hex id it replies to (None: a new thread)."""

    host: str
    channel: str
    sender: str
    subject: str
    data: str
    priority: int
    parent: str | None = None


def new_message_uuid(tx: Tx) -> str:
    """A fresh 8-hex message id no stored message has (call inside a write transaction)."""
    while True:
        mid = os.urandom(4).hex()  # secrets.token_hex's source, without its import
        taken = tx.one("SELECT message_id FROM messages WHERE message_uuid = :mid LIMIT 1",
                       {"mid": mid})
        if taken is None:
            return mid


def insert_message(tx: Tx, draft: Draft) -> str:
    """Insert ``draft`` inside the caller's transaction; return its 8-hex id. The
    priority is clamped to 0-10."""
    mid = new_message_uuid(tx)
    new_id(tx, "messages", {
        "message_uuid": mid, "node": draft.host, "channel": draft.channel,
        "sender": draft.sender, "priority": max(0, min(10, draft.priority)),
        "subject": draft.subject, "data": draft.data, "created_at": utc_now(),
        "parent_message_uuid": draft.parent})
    return mid


class Radio(Registry):
    """Message writes on the tree database (see the module docstring)."""

    def post(self, draft: Draft) -> str:
        """Store ``draft``; return its 8-hex id."""
        with self._db() as tx:
            return insert_message(tx, draft)

    def mark_read(self, reader: str, message_ids: Sequence[int]) -> int:
        """Write ``reader``'s read receipt for each message (one per message and reader;
        an existing receipt keeps its first time). Returns how many were new."""
        if not message_ids:
            return 0
        now = utc_now()
        with self._db() as tx:
            return tx.many("INSERT INTO reads (message_id, node, created_at) "
                           "VALUES (:message_id, :node, :created_at) ON CONFLICT DO NOTHING",
                           [{"message_id": m, "node": reader, "created_at": now}
                            for m in message_ids])

    def set_saved(self, node: str, message_id: int, saved: bool) -> bool:
        """Save (or unsave) the message for ``node``; True when that changed anything."""
        params = {"message_id": message_id, "node": node}
        with self._db() as tx:
            if saved:
                return bool(tx.run(
                    "INSERT INTO saves (message_id, node, created_at) VALUES "
                    "(:message_id, :node, :created_at) ON CONFLICT DO NOTHING",
                    {**params, "created_at": utc_now()}))
            return bool(tx.run("DELETE FROM saves WHERE message_id = :message_id "
                               "AND node = :node", params))

    def unsend(self, message_id: int) -> bool:
        """Withdraw the message (``unsent_at`` set, the row and its receipts kept); False
        when it was withdrawn already."""
        with self._db() as tx:
            return bool(tx.run("UPDATE messages SET unsent_at = :now WHERE message_id = :id "
                               "AND unsent_at IS NULL", {"now": utc_now(), "id": message_id}))
