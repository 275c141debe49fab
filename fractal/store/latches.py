"""The tree-wide brake of a PostgreSQL ledger: one ``latches`` row while it is on, so
every clone of the tree (every host) sees it. A SQLite tree keeps its ``.paused`` file
(``control.latch_path``); ``control`` chooses by ``backend.database_url``.
"""

from __future__ import annotations

from pathlib import Path

from fractal.store.db import transaction
from fractal.store.timefmt import utc_now

__all__ = ["clear", "reason", "set_reason"]

_SET = ("INSERT INTO latches (latch_id, reason, created_at) VALUES (1, :reason, :now) "
        "ON CONFLICT (latch_id) DO UPDATE SET reason = excluded.reason, "
        "created_at = excluded.created_at")


def reason(db_path: Path) -> str | None:
    """The brake's reason while it is on, else None."""
    with transaction(db_path, write=False) as tx:
        value = tx.scalar("SELECT reason FROM latches WHERE latch_id = 1")
    return None if value is None else str(value)


def set_reason(db_path: Path, why: str) -> None:
    """Put the brake on with ``why`` (again: the newer reason)."""
    with transaction(db_path) as tx:
        tx.run(_SET, {"reason": why, "now": utc_now()})


def clear(db_path: Path) -> bool:
    """Take the brake off; returns whether it was on."""
    with transaction(db_path) as tx:
        return tx.run("DELETE FROM latches") > 0
