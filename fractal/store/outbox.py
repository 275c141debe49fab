"""Messages: notices a node posts to its channels (issue 4: every exited run posts
``run exited: <reason>`` with priority 7 to its outbox)."""

from __future__ import annotations

import uuid

from sqlalchemy import Connection, select

from fractal.domain.outcome import clip_reason
from fractal.store.models import Message
from fractal.store.registry import Registry, new_id
from fractal.store.rows import MessageRow
from fractal.store.timefmt import utc_now

OUTBOX = "outbox"
EXIT_NOTICE_PRIORITY = 7  # issue 4: every exited run posts to the node's outbox


class Outbox(Registry):
    """Posting and reading channel messages on the tree database."""

    def post_exit_notice(self, node: str, reason: str, figures: str = "") -> str:
        """Post ``run exited: <reason>`` (priority 7; the subject clipped like a reason) to
        ``node``'s outbox; ``figures`` (a capped run's spend) join the body. Returns the
        uuid (issue 4: every ``exited`` run posts a notice)."""
        with self._tx() as conn:
            return insert_exit_notice(conn, node, reason, figures)

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
    """``post_exit_notice`` inside the caller's transaction."""
    return insert_message(conn, node, clip_reason(f"run exited: {reason}"),
                          f"{reason}\n{figures}" if figures else reason, channel=OUTBOX,
                          sender=None, priority=EXIT_NOTICE_PRIORITY)
