"""The radio's rows: messages on nodes' channels, read receipts, saved marks, threads.

Only storage: who may read or write which channel is decided by ``domain.radio`` and
checked by ``lifecycle.radio`` before any call here. Every write is one short
``BEGIN IMMEDIATE`` transaction, so concurrent senders never lose a message; a message
id is drawn again while it collides with an existing one. A withdrawn message
(``unsent_at`` set) stays in the table but no listing returns it.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, and_, delete, exists, select, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from fractal.store.models import Message, MessageRead, MessageSave
from fractal.store.registry import Registry, new_id
from fractal.store.rows import MessageRow, build
from fractal.store.timefmt import utc_now

__all__ = ["Draft", "Radio", "ReadState", "insert_message", "new_message_uuid"]


class ReadState(enum.Enum):
    """Which messages a listing returns for its reader."""

    UNREAD = "unread"
    READ = "read"
    ALL = "all"
    SAVED = "saved"


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


def new_message_uuid(conn: Connection) -> str:
    """A fresh 8-hex message id no stored message has (call inside a write transaction)."""
    while True:
        mid = secrets.token_hex(4)
        taken = conn.execute(select(Message.message_id).where(Message.message_uuid == mid)
                             .limit(1)).first()
        if taken is None:
            return mid


def insert_message(conn: Connection, draft: Draft) -> str:
    """Insert ``draft`` inside the caller's transaction; return its 8-hex id. The
    priority is clamped to 0-10."""
    mid = new_message_uuid(conn)
    new_id(conn, Message, {
        "message_uuid": mid, "node": draft.host, "channel": draft.channel,
        "sender": draft.sender, "priority": max(0, min(10, draft.priority)),
        "subject": draft.subject, "data": draft.data, "created_at": utc_now(),
        "parent_message_uuid": draft.parent})
    return mid


class Radio(Registry):
    """Message reads and writes on the tree database (see the module docstring)."""

    def post(self, draft: Draft) -> str:
        """Store ``draft``; return its 8-hex id."""
        with self._tx() as conn:
            return insert_message(conn, draft)

    def message(self, uuid: str) -> MessageRow | None:
        """The message with id ``uuid`` (withdrawn ones too), or None."""
        return self._one(MessageRow, select(Message.__table__)
                         .where(Message.message_uuid == uuid))

    def listing(self, reader: str, *, hosts: Sequence[str] | None, channels: Sequence[str],
                state: ReadState = ReadState.ALL, since: str | None = None,
                limit: int | None = None, sender: str | None = None) -> list[MessageRow]:
        """Messages on ``channels`` of ``hosts`` (every node when None), newest first.

        ``state`` filters by ``reader``'s receipts (or saved marks); ``since`` keeps
        messages created at or after that stored timestamp; ``sender`` keeps one
        author's messages. Withdrawn messages are never listed.
        """
        table = Message.__table__
        stmt = select(table).where(Message.unsent_at.is_(None))
        if channels:
            stmt = stmt.where(Message.channel.in_(list(channels)))
        if hosts is not None:
            stmt = stmt.where(Message.node.in_(list(hosts)))
        if sender is not None:
            stmt = stmt.where(Message.sender == sender)
        if since is not None:
            stmt = stmt.where(Message.created_at >= since)
        read = exists().where(and_(MessageRead.message_id == Message.message_id,
                                   MessageRead.node == reader))
        if state is ReadState.UNREAD:
            stmt = stmt.where(~read)
        elif state is ReadState.READ:
            stmt = stmt.where(read)
        elif state is ReadState.SAVED:
            stmt = stmt.where(exists().where(and_(MessageSave.message_id == Message.message_id,
                                                  MessageSave.node == reader)))
        stmt = stmt.order_by(Message.message_id.desc())
        if limit is not None:
            stmt = stmt.limit(max(limit, 0))
        return self._all(MessageRow, stmt)

    def hosts(self) -> list[str]:
        """Every node that hosts a message (deleted nodes' history included), sorted."""
        with self._tx() as conn:
            return sorted(conn.execute(select(Message.node).distinct()).scalars())

    def mark_read(self, reader: str, message_ids: Sequence[int]) -> int:
        """Write ``reader``'s read receipt for each message (one per message and reader;
        an existing receipt keeps its first time). Returns how many were new."""
        if not message_ids:
            return 0
        now = utc_now()
        with self._tx() as conn:
            result = conn.execute(sqlite_insert(MessageRead).values(
                [{"message_id": m, "node": reader, "created_at": now} for m in message_ids])
                .on_conflict_do_nothing())
            return int(result.rowcount or 0)

    def readers(self, message_id: int) -> list[str]:
        """The nodes that have read the message, in the order they read it."""
        with self._tx() as conn:
            return list(conn.execute(select(MessageRead.node)
                                     .where(MessageRead.message_id == message_id)
                                     .order_by(MessageRead.read_id)).scalars())

    def read_ids(self, reader: str, message_ids: Sequence[int]) -> set[int]:
        """Which of ``message_ids`` ``reader`` has read."""
        if not message_ids:
            return set()
        with self._tx() as conn:
            return set(conn.execute(select(MessageRead.message_id).where(
                MessageRead.node == reader,
                MessageRead.message_id.in_(list(message_ids)))).scalars())

    def set_saved(self, node: str, message_id: int, saved: bool) -> bool:
        """Save (or unsave) the message for ``node``; True when that changed anything."""
        with self._tx() as conn:
            if saved:
                result = conn.execute(sqlite_insert(MessageSave).values(
                    message_id=message_id, node=node, created_at=utc_now())
                    .on_conflict_do_nothing())
            else:
                result = conn.execute(delete(MessageSave).where(
                    MessageSave.message_id == message_id, MessageSave.node == node))
            return bool(result.rowcount)

    def unsend(self, message_id: int) -> bool:
        """Withdraw the message (``unsent_at`` set, the row and its receipts kept); False
        when it was withdrawn already."""
        with self._tx() as conn:
            return bool(conn.execute(update(Message).where(
                Message.message_id == message_id, Message.unsent_at.is_(None))
                .values(unsent_at=utc_now())).rowcount)

    def thread(self, uuid: str) -> list[MessageRow]:
        """The whole thread ``uuid`` belongs to: its first message, then every reply
        below it (any depth), oldest first; withdrawn messages left out. Empty when no
        such message exists."""
        with self._tx() as conn:
            root = uuid
            seen = {root}
            while True:  # climb to the message that started the thread
                parent = conn.execute(select(Message.parent_message_uuid)
                                      .where(Message.message_uuid == root)).scalar()
                if parent is None or parent in seen:
                    break
                seen.add(parent)
                root = parent
            seen = {root}
            rows = [build(MessageRow, r) for r in conn.execute(
                select(Message.__table__).where(Message.message_uuid == root)).mappings()]
            if not rows:
                return []
            members, frontier = [rows[0]], [root]
            while frontier:
                children = [build(MessageRow, r) for r in conn.execute(
                    select(Message.__table__)
                    .where(Message.parent_message_uuid.in_(frontier))).mappings()]
                children = [c for c in children if c.message_uuid not in seen]
                seen.update(c.message_uuid for c in children)
                members.extend(children)
                frontier = [c.message_uuid for c in children]
        return sorted((m for m in members if m.unsent_at is None), key=lambda m: m.message_id)
