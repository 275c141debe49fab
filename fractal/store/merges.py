"""The ``merges`` table: one row per ``fractal node merge`` (migration 0007).

A merge books its row ``active`` (with the target's tip before it and the squash commit it
is about to land) before the target moves, and settles it ``merged`` only once the target's
branch contains the squash commit, or ``failed`` with the reason. An ``active`` row left by
an interrupted merge tells the next merge into the same target what to finish or roll back.
Every settle is fenced (``WHERE status = 'active'``): the first writer wins.
"""

from __future__ import annotations

from typing import NamedTuple

from fractal.store.registry import Registry, new_id
from fractal.store.timefmt import utc_now

__all__ = ["MergeBook", "MergeRow"]


class MergeRow(NamedTuple):
    """One ``merges`` row (see ``models.Merge`` for the fields)."""

    merge_id: int
    child: str
    target: str
    child_sha: str
    target_sha: str
    squash_sha: str | None
    files: int | None
    status: str
    actor: str | None
    meta: str
    created_at: str
    ended_at: str | None


class MergeBook(Registry):
    """Writes and reads of the ``merges`` table of the tree database at ``db_path``.

    Every method raises StoreError when the database cannot be opened or written.
    """

    def book_merge(self, *, child: str, target: str, child_sha: str, target_sha: str,
                   squash_sha: str | None, files: int | None, actor: str | None,
                   status: str = "active", reason: str = "") -> int:
        """Insert a merge row (``active`` unless ``status`` says otherwise; a non-active
        row is closed at once); return its merge_id."""
        now = utc_now()
        values = {"child": child, "target": target, "child_sha": child_sha,
                  "target_sha": target_sha, "squash_sha": squash_sha, "files": files,
                  "status": status, "actor": actor, "metadata": reason, "created_at": now,
                  "ended_at": None if status == "active" else now}
        with self._db() as tx:
            return new_id(tx, "merges", values)

    def settle_merge(self, merge_id: int, status: str, reason: str = "") -> bool:
        """Close an ``active`` merge as ``merged`` or ``failed``; True when this call won."""
        with self._db() as tx:
            return tx.run("UPDATE merges SET status = :status, metadata = :reason, "
                          "ended_at = :now WHERE merge_id = :id AND status = 'active'",
                          {"status": status, "reason": reason, "now": utc_now(),
                           "id": merge_id}) == 1

    def active_merges(self, target: str) -> list[MergeRow]:
        """The target's merges still ``active`` (interrupted ones), oldest first."""
        return self._all(MergeRow, "SELECT * FROM merges WHERE target = :target AND "
                         "status = 'active' ORDER BY merge_id", {"target": target})

    def merges_of(self, child: str) -> list[MergeRow]:
        """Every merge of ``child``, oldest first."""
        return self._all(MergeRow, "SELECT * FROM merges WHERE child = :child "
                         "ORDER BY merge_id", {"child": child})
