"""Wakes through a PostgreSQL ledger: ``NOTIFY`` from a verb, ``LISTEN`` in a supervisor.

A verb that changes what a node's loop should do touches the node's ``.wake`` file
(``control.wake_node``); that file is only on the machine whose clone holds the node.
On a PostgreSQL ledger the verb also notifies the tree's channel (``channel``: one per
tree, ``fractal_wake_<root>``) with the node's name as the payload, and the node's
supervisor, listening on that channel wherever it runs, wakes within a round trip. A
wake carries no data (the loop re-reads its rows); a lost notification costs only the
database poll's delay, so nothing here raises into a verb.

A SQLite tree never imports this module.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from fractal.errors import StoreError
from fractal.store import pgdriver
from fractal.store.backend import database_url
from fractal.store.db import transaction

__all__ = ["Listener", "channel", "notify"]

_CHANNEL_PREFIX = "fractal_wake_"
_CHANNEL_BYTES = 63  # PostgreSQL's identifier length: a longer channel is refused


def channel(root: str) -> str:
    """The tree's wake channel: ``fractal_wake_<root>``, clipped to PostgreSQL's 63-byte
    identifier length (a tree is one database, so a clipped name still names one tree)."""
    name = (_CHANNEL_PREFIX + root).encode("utf-8")[:_CHANNEL_BYTES]
    return name.decode("utf-8", "ignore")


def notify(db_path: Path, root: str, nodes: list[str]) -> None:
    """Notify the tree's channel once per node in ``nodes`` (the payload: the node's
    name), outside any transaction. Never raises: the node's supervisor polls the ledger
    anyway, so a refused notification only delays it (at most its poll: 1 s, 5 s idle)."""
    if not nodes or database_url(db_path) is None:
        return
    with (contextlib.suppress(StoreError, pgdriver.PgError, OSError),
          transaction(db_path, write=False, tx=False) as tx):
        for node in nodes:
            tx.scalar("SELECT pg_notify(:channel, :node)",
                      {"channel": channel(root), "node": node})


class Listener:
    """One session listening on a tree's wake channel: ``fileno`` to wait on (``select``),
    ``received`` the node names notified since the last call, ``close``.

    Its own connection, never the seam's pool: a listening session must stay open (a
    pooled one would be lent to a transaction). Raises PgError when the server cannot be
    reached or refuses the ``LISTEN``."""

    def __init__(self, url: str, root: str) -> None:
        self._channel = channel(root)
        self._conn = pgdriver.connect(url)
        try:
            quoted = '"' + self._channel.replace('"', '""') + '"'
            self._conn.execute(f"LISTEN {quoted}")
        except BaseException:
            self._conn.close()
            raise

    def fileno(self) -> int:
        """The connection's socket: readable when the server sent something."""
        return self._conn.socket()

    def received(self) -> list[str]:
        """The node names notified on the channel since the last call (none: empty), read
        without blocking. Raises PgError when the connection is lost."""
        return [payload for chan, payload in self._conn.notifications()
                if chan == self._channel]

    def close(self) -> None:
        """End the session (idempotent)."""
        self._conn.close()
