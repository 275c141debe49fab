"""Messages: notices a node posts to its channels. Every run that ends ``exited`` posts
``run exited: <reason>`` with priority 7 to its node's outbox, in the same transaction as
the move that exits it (``insert_exit_notice``, called by ``Transitions.move``)."""

from __future__ import annotations

import uuid

from sqlalchemy import Connection, select

from fractal.domain.outcome import clip_reason
from fractal.store.models import Message
from fractal.store.registry import Registry, new_id
from fractal.store.rows import MessageRow
from fractal.store.timefmt import utc_now

OUTBOX = "outbox"
EXIT_NOTICE_PRIORITY = 7  # the priority of the notice every exited run posts


class Outbox(Registry):
    """Posting and reading channel messages on the tree database."""

    def post_message(self, node: str, subject: str, data: str = "", *,
                     channel: str = OUTBOX, sender: str | None = None,
                     priority: int = 5) -> str:
        """Post a message to ``node``'s ``channel``; return its 8-hex uuid.

        ``priority`` is clamped to 0-10 (10 most urgent).
        """
        with self._tx() as conn:
            return insert_message(conn, node, subject, data, channel=channel, sender=sender,
                                  priority=priority)

    def messages(self, node: str, channel: str = OUTBOX) -> list[MessageRow]:
        """The channel's messages, newest first."""
        return self._all(MessageRow, select(Message.__table__).where(
            Message.node == node, Message.channel == channel)
            .order_by(Message.message_id.desc()))


def insert_message(conn: Connection, node: str, subject: str, data: str, *, channel: str,
                   sender: str | None, priority: int) -> str:
    """Insert one message inside the caller's transaction; return its 8-hex uuid."""
    mid = uuid.uuid4().hex[:8]
    new_id(conn, Message, {
        "message_uuid": mid, "node": node, "channel": channel, "sender": sender or node,
        "priority": max(0, min(10, priority)), "subject": subject, "data": data,
        "created_at": utc_now()})
    return mid


def insert_exit_notice(conn: Connection, node: str, reason: str, figures: str = "") -> str:
    """Insert ``run exited: <reason>`` (priority 7; the subject clipped like a reason) into
    ``node``'s outbox inside the caller's transaction; ``figures`` (a capped run's spend)
    join the body. Returns the 8-hex uuid."""
    return insert_message(conn, node, clip_reason(f"run exited: {reason}"),
                          f"{reason}\n{figures}" if figures else reason, channel=OUTBOX,
                          sender=None, priority=EXIT_NOTICE_PRIORITY)
