"""The shared usage windows: one row per credential, written by every node's loop.

A node whose agent stops at a closed usage window records it here (``close``); every
node on that credential reads the row before each launch and waits (the decision is
``fractal.domain.usage.windows.decide``). Once the wake instant passes, exactly one node wins
``claim_probe`` (a compare-and-set) and launches; if it gets through it marks the
window ``open`` and the others are released in small batches (``release_slot``); if it
hits the window again it ``close``\\ s it once more with one more miss, which backs the
next wake off. An operator's ``fractal usage reopen`` moves a closed window's wake
instant to now (``wake_now``), so a waiting node probes at once. Instants are epoch
seconds.
"""

from __future__ import annotations

import sqlite3

from fractal.domain.usage.windows import (
    PROBE_STALE,
    RESUME_JITTER,
    WindowRow,
    WindowState,
    next_wake,
)
from fractal.store.registry import Registry
from fractal.store.timefmt import utc_now

__all__ = ["Windows"]

_WINDOW = "SELECT * FROM usage_windows WHERE credential = :credential"
_CLOSE_COLUMNS = ("window", "state", "resets_at", "wake_at", "prober", "probe_started", "misses",
                  "opened_at", "released", "closed_by", "updated_at")
# Column names quoted: ``window`` is a reserved word of PostgreSQL (SQLite takes it bare).
_QUOTED = tuple(f'"{c}"' for c in _CLOSE_COLUMNS)
_CLOSE = (f"INSERT INTO usage_windows (credential, {', '.join(_QUOTED)}) "
          f"VALUES (:credential, {', '.join(':' + c for c in _CLOSE_COLUMNS)}) "
          "ON CONFLICT (credential) DO UPDATE SET "
          + ", ".join(f"{q} = excluded.{q}" for q in _QUOTED))
_CLAIM = ("UPDATE usage_windows SET state = :probing, prober = :node, probe_started = :now, "
          "updated_at = :stamp WHERE credential = :credential AND ("
          "(state = :closed AND wake_at <= :now) OR "
          "(state = :probing AND (prober = :node OR probe_started <= :stale)))")
_ALL = "SELECT * FROM usage_windows ORDER BY credential"
_WAKE_NOW = ("UPDATE usage_windows SET resets_at = NULL, wake_at = :now, misses = 0, "
             "updated_at = :stamp WHERE credential = :credential AND state = :closed")
_REOPEN = ("UPDATE usage_windows SET state = :open, opened_at = :now, prober = NULL, "
           "probe_started = NULL, misses = 0, released = 0, updated_at = :stamp "
           "WHERE credential = :credential AND state = :probing AND prober = :node")


class Windows(Registry):
    """Reads and writes ``usage_windows`` on the tree database. Raises StoreError."""

    def window(self, credential: str) -> WindowRow | None:
        """The credential's window row, or None when it never closed."""
        with self._db(write=False, single=True) as tx:
            row = tx.one(_WINDOW, {"credential": credential})
        return None if row is None else _row(row)

    def windows(self) -> list[WindowRow]:
        """Every credential's window row, by credential."""
        with self._db(write=False, single=True) as tx:
            return [_row(r) for r in tx.all(_ALL, {})]

    def wake_now(self, credential: str, now: float) -> WindowRow | None:
        """Move a closed window's wake instant to ``now`` (its stated reset forgotten, its
        misses reset), so the next look of a waiting node claims the probe; return the row
        as it was before. A window that is probing or open is left as it is (and
        returned); None when the credential has no row."""
        with self._db() as tx:
            row = tx.one(_WINDOW, {"credential": credential})
            if row is not None and row["state"] == WindowState.CLOSED.value:
                tx.run(_WAKE_NOW, {"credential": credential, "now": now, "stamp": utc_now(),
                                   "closed": WindowState.CLOSED.value})
        return None if row is None else _row(row)

    def close(self, credential: str, window: str, resets_at: float | None, node: str,
              now: float, jitter: float = RESUME_JITTER) -> WindowRow:
        """Record that ``node`` found the window closed until ``resets_at``; return the row.
        Its wake instant is ``next_wake`` with ``jitter`` seconds past a stated reset.

        A first closing (no row, or an open one) starts with no miss. A closing by the
        node that was probing counts one more miss (the reset passed and the window is
        still closed), which lengthens the backoff when no new reset lies ahead. A
        closing of a window already closed keeps the later wake instant.
        """
        with self._db() as tx:
            old = tx.one(_WINDOW, {"credential": credential})
            misses = 0
            wake = next_wake(resets_at, now, 0, jitter)
            if old is not None and old["state"] == WindowState.PROBING.value:
                misses = int(old["misses"]) + 1
                wake = next_wake(resets_at, now, misses, jitter)
            elif old is not None and old["state"] == WindowState.CLOSED.value:
                misses = int(old["misses"])
                wake = max(wake, float(old["wake_at"]))
            values = {"window": window, "state": WindowState.CLOSED.value,
                      "resets_at": resets_at, "wake_at": wake, "prober": None,
                      "probe_started": None, "misses": misses, "opened_at": None,
                      "released": 0, "closed_by": node, "updated_at": utc_now()}
            tx.run(_CLOSE, {"credential": credential, **values})
        row = self.window(credential)
        assert row is not None
        return row

    def claim_probe(self, credential: str, node: str, now: float) -> bool:
        """Make ``node`` the one probe of a window whose wake instant has passed (or whose
        probe went silent for ``PROBE_STALE`` seconds). True when this node holds it."""
        with self._db() as tx:
            return tx.run(_CLAIM, {
                "credential": credential, "node": node, "now": now, "stamp": utc_now(),
                "stale": now - PROBE_STALE, "closed": WindowState.CLOSED.value,
                "probing": WindowState.PROBING.value}) == 1

    def reopen(self, credential: str, node: str, now: float) -> bool:
        """The probe ``node`` got through: the window is open from ``now``. Only the node
        holding the probe reopens it (a step that began before the window closed and
        ended well proves nothing). True when this call reopened it."""
        with self._db() as tx:
            return tx.run(_REOPEN, {
                "credential": credential, "node": node, "now": now, "stamp": utc_now(),
                "open": WindowState.OPEN.value, "probing": WindowState.PROBING.value}) == 1

    def release_slot(self, credential: str) -> int:
        """This node's place (0, 1, 2 ...) among the nodes released by a reopened window;
        -1 when the window is not open."""
        with self._db() as tx:
            row = tx.one("SELECT state, released FROM usage_windows "
                         "WHERE credential = :credential", {"credential": credential})
            if row is None or row[0] != WindowState.OPEN.value:
                return -1
            tx.run("UPDATE usage_windows SET released = released + 1 "
                   "WHERE credential = :credential", {"credential": credential})
            return int(row[1])


def _row(row: sqlite3.Row) -> WindowRow:
    return WindowRow(credential=row["credential"], window=row["window"],
                     resets_at=row["resets_at"], state=WindowState(row["state"]),
                     wake_at=row["wake_at"], prober=row["prober"],
                     probe_started=row["probe_started"], misses=row["misses"],
                     opened_at=row["opened_at"])
