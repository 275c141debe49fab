"""Booking check rows: one short ``BEGIN IMMEDIATE`` insert per finished check."""

from __future__ import annotations

from fractal.store.registry import Registry, new_id
from fractal.store.timefmt import utc_now

__all__ = ["CheckBook"]


class CheckBook(Registry):
    """Writes ``checks`` rows on the tree database at ``db_path``. Raises StoreError."""

    def book_check(self, *, node: str, run_id: int, iter_id: int | None, step_id: int | None,
                   kind: str, command: str, exit_code: int, signature: str,
                   failures: int | None, passed: int | None, output_path: str | None,
                   started_at: str, score: float | None = None) -> int:
        """Insert a finished check that began at ``started_at`` and ends now; return its id.

        ``kind`` is ``exit`` or ``gate`` (``step_id`` then names the gate's step row);
        ``signature`` is '' for a pass; counts and ``score`` are None when unknown.
        """
        with self._db() as tx:
            return new_id(tx, "checks", {
                "node": node, "run_id": run_id, "iter_id": iter_id, "step_id": step_id,
                "kind": kind, "command": command, "exit_code": exit_code,
                "signature": signature, "failures": failures, "passed": passed,
                "output_path": output_path, "started_at": started_at, "ended_at": utc_now(),
                "score": score})
