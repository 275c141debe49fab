"""Booking and reading rescue rows: one per rescue ref written before a destructive verb.

``files`` is stored as a JSON array of repo-relative paths (names may hold spaces or
newlines, so no separator would do) and comes back as a tuple. Rows are never deleted:
they outlive the node they name, like every history row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from fractal.store.registry import Registry, new_id

__all__ = ["RescueBook", "RescueRow"]


@dataclass(frozen=True)
class RescueRow:
    """One ``rescues`` row; ``created_at`` is the rescue's instant (database format)."""

    rescue_id: int
    node: str
    operation: str
    ref: str
    sha: str
    tip: str
    files: tuple[str, ...]
    actor: str | None
    created_at: str


class RescueBook(Registry):
    """Writes and reads ``rescues`` rows on the tree database. Raises StoreError."""

    def record_rescue(self, *, node: str, operation: str, ref: str, sha: str, tip: str,
                      files: Sequence[str], actor: str | None, created_at: str) -> int:
        """Insert the row of a rescue ref already written; return its ``rescue_id``.

        ``created_at`` is the rescue's own instant (the stamp in its ref name), in the
        database format. Raises StoreError when ``ref`` is booked already.
        """
        with self._db() as tx:
            return new_id(tx, "rescues", {
                "node": node, "operation": operation, "ref": ref, "sha": sha, "tip": tip,
                "files": json.dumps(list(files)), "actor": actor, "created_at": created_at})

    def rescues(self, node: str | None = None) -> list[RescueRow]:
        """Every booked rescue (of ``node`` only when given), oldest first."""
        where = "" if node is None else "WHERE node = :node "
        with self._db(write=False, single=True) as tx:
            rows = tx.all(f"SELECT * FROM rescues {where}ORDER BY rescue_id", {"node": node})
        return [RescueRow(rescue_id=r["rescue_id"], node=r["node"], operation=r["operation"],
                          ref=r["ref"], sha=r["sha"], tip=r["tip"], files=_files(r["files"]),
                          actor=r["actor"], created_at=r["created_at"]) for r in rows]


def _files(text: str) -> tuple[str, ...]:
    try:
        value = json.loads(text)
    except ValueError:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else ()
