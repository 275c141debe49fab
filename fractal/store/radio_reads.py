"""The radio's read path: listings, one message, threads, readers. Stdlib ``sqlite3``
through the read-only connections of ``reader``, so ``fractal radio messages``, ``feed``,
``sent`` and ``thread`` never import SQLAlchemy. Withdrawn messages (``unsent_at`` set)
are never listed; the writes are ``store.radio``'s.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from pathlib import Path

from fractal.store.reader import _connect
from fractal.store.rows import MessageRow, build

__all__ = ["ReadState", "hosts", "listing", "message", "readers", "thread"]


class ReadState(enum.Enum):
    """Which messages a listing returns for its reader."""

    UNREAD = "unread"
    READ = "read"
    ALL = "all"
    SAVED = "saved"


def _marks(values: Sequence[object]) -> str:
    return ", ".join("?" for _ in values)


def listing(db_path: Path, reader: str, *, hosts: Sequence[str] | None,
            channels: Sequence[str], state: ReadState = ReadState.ALL,
            since: str | None = None, limit: int | None = None,
            sender: str | None = None) -> list[MessageRow]:
    """Messages on ``channels`` of ``hosts`` (every node when None), newest first.

    ``state`` filters by ``reader``'s receipts (or saved marks); ``since`` keeps messages
    created at or after that stored timestamp; ``sender`` keeps one author's messages.
    """
    sql = "SELECT * FROM messages m WHERE m.unsent_at IS NULL"
    params: list[object] = []
    if channels:
        sql += f" AND m.channel IN ({_marks(channels)})"
        params += list(channels)
    if hosts is not None:
        if not hosts:
            return []
        sql += f" AND m.node IN ({_marks(hosts)})"
        params += list(hosts)
    if sender is not None:
        sql += " AND m.sender = ?"
        params.append(sender)
    if since is not None:
        sql += " AND m.created_at >= ?"
        params.append(since)
    read = "EXISTS (SELECT 1 FROM reads r WHERE r.message_id = m.message_id AND r.node = ?)"
    if state is ReadState.UNREAD:
        sql += f" AND NOT {read}"
        params.append(reader)
    elif state is ReadState.READ:
        sql += f" AND {read}"
        params.append(reader)
    elif state is ReadState.SAVED:
        sql += (" AND EXISTS (SELECT 1 FROM saves s WHERE s.message_id = m.message_id "
                "AND s.node = ?)")
        params.append(reader)
    sql += " ORDER BY m.message_id DESC"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(max(limit, 0))
    with _connect(db_path) as conn:
        return [build(MessageRow, row) for row in conn.execute(sql, params)]


def message(db_path: Path, uuid: str) -> MessageRow | None:
    """The message with id ``uuid`` (withdrawn ones too), or None."""
    with _connect(db_path) as conn:
        row = conn.execute("SELECT * FROM messages WHERE message_uuid = ?", (uuid,)).fetchone()
    return None if row is None else build(MessageRow, row)


def hosts(db_path: Path) -> list[str]:
    """Every node that hosts a message (deleted nodes' history included), sorted."""
    with _connect(db_path) as conn:
        return sorted(str(r[0]) for r in conn.execute("SELECT DISTINCT node FROM messages"))


def readers(db_path: Path, message_ids: Sequence[int]) -> dict[int, list[str]]:
    """For each message id, the nodes that read it, in the order they read it."""
    found: dict[int, list[str]] = {m: [] for m in message_ids}
    if not message_ids:
        return found
    with _connect(db_path) as conn:
        for mid, node in conn.execute(
                f"SELECT message_id, node FROM reads WHERE message_id IN "
                f"({_marks(message_ids)}) ORDER BY read_id", list(message_ids)):
            found[int(mid)].append(str(node))
    return found


def thread(db_path: Path, uuid: str) -> list[MessageRow]:
    """The whole thread ``uuid`` belongs to: its first message and every reply below it
    (any depth), oldest first, withdrawn messages left out; empty when ``uuid`` is not a
    stored message."""
    sql = ("WITH RECURSIVE up(uuid, parent, depth) AS ("
           " SELECT message_uuid, parent_message_uuid, 0 FROM messages WHERE message_uuid = ?"
           " UNION SELECT m.message_uuid, m.parent_message_uuid, up.depth + 1 FROM messages m"
           " JOIN up ON m.message_uuid = up.parent WHERE up.depth < 10000),"
           " root(uuid) AS (SELECT uuid FROM up ORDER BY depth DESC LIMIT 1),"
           " down(uuid, depth) AS (SELECT uuid, 0 FROM root"
           " UNION SELECT m.message_uuid, down.depth + 1 FROM messages m"
           " JOIN down ON m.parent_message_uuid = down.uuid WHERE down.depth < 10000)"
           " SELECT * FROM messages WHERE message_uuid IN (SELECT uuid FROM down)"
           " AND unsent_at IS NULL ORDER BY message_id")
    with _connect(db_path) as conn:
        return [build(MessageRow, row) for row in conn.execute(sql, (uuid,))]
