"""The shared provider outages: one row per credential while its provider is down.

A node whose launch failed with a transient API error records the outage here
(``record``): the first failure starts at attempt 1, and a failure of the node holding
the probe counts one more attempt with the doubled back-off its caller computed. Every
node on that credential reads the row before each launch and waits until ``wake_at``;
then exactly one node wins ``claim_probe`` (a compare-and-set) and launches. If it gets
through it deletes the row (``clear``) and the others launch; if it fails again it
records the next attempt. Instants are epoch seconds.
"""

from __future__ import annotations

from collections.abc import Callable

from fractal.domain.usage.outage import OUTAGE_PROBE_STALE, OutageRow, OutageState
from fractal.store.registry import Registry
from fractal.store.timefmt import utc_now

__all__ = ["Outages"]

_ROW = "SELECT * FROM provider_outages WHERE credential = :credential"
_COLUMNS = ("label", "attempts", "wake_at", "state", "prober", "probe_started", "closed_by",
            "updated_at")
_PUT = (f"INSERT INTO provider_outages (credential, {', '.join(_COLUMNS)}) "
        f"VALUES (:credential, {', '.join(':' + c for c in _COLUMNS)}) "
        "ON CONFLICT (credential) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS))
_CLAIM = ("UPDATE provider_outages SET state = :probing, prober = :node, probe_started = :now, "
          "updated_at = :stamp WHERE credential = :credential AND ("
          "(state = :waiting AND wake_at <= :now) OR "
          "(state = :probing AND (prober = :node OR probe_started <= :stale)))")


class Outages(Registry):
    """Reads and writes ``provider_outages`` on the tree database. Raises StoreError."""

    def outage(self, credential: str) -> OutageRow | None:
        """The credential's outage, or None when its provider is not known to be down."""
        with self._db(write=False, single=True) as tx:
            row = tx.one(_ROW, {"credential": credential})
        if row is None:
            return None
        return OutageRow(credential=row["credential"], label=row["label"],
                         attempts=int(row["attempts"]), wake_at=float(row["wake_at"]),
                         state=OutageState(row["state"]), prober=row["prober"],
                         probe_started=row["probe_started"], closed_by=row["closed_by"])

    def record(self, credential: str, label: str, node: str, now: float,
               backoff: Callable[[int], float]) -> OutageRow:
        """Record that ``node``'s launch failed on the credential's provider (``label``:
        ``HTTP 529``) at ``now``; return the row. ``backoff(attempt)`` gives the seconds
        to wait after ``attempt`` failures in a row.

        No row: attempt 1. The node holding the probe failed: one more attempt, waiting
        ``backoff`` of it. Another node found the outage while the row waits or another
        node probes (its launch began before): the row is kept as it is."""
        with self._db() as tx:
            old = tx.one(_ROW, {"credential": credential})
            if old is None or (old["state"] == OutageState.PROBING.value
                               and old["prober"] == node):
                attempts = 1 if old is None else int(old["attempts"]) + 1
                tx.run(_PUT, {"credential": credential, "label": label, "attempts": attempts,
                              "wake_at": now + backoff(attempts),
                              "state": OutageState.WAITING.value, "prober": None,
                              "probe_started": None, "closed_by": node,
                              "updated_at": utc_now()})
        row = self.outage(credential)
        assert row is not None
        return row

    def claim_probe(self, credential: str, node: str, now: float) -> bool:
        """Make ``node`` the one probe of an outage whose wake instant has passed (or
        whose probe went silent for ``OUTAGE_PROBE_STALE`` seconds). True when it holds it."""
        with self._db() as tx:
            return tx.run(_CLAIM, {
                "credential": credential, "node": node, "now": now, "stamp": utc_now(),
                "stale": now - OUTAGE_PROBE_STALE, "waiting": OutageState.WAITING.value,
                "probing": OutageState.PROBING.value}) == 1

    def wake_now(self, credential: str, now: float) -> bool:
        """Cut the credential's wait short: the next launch at or after ``now`` probes.
        True when there was a waiting outage to cut."""
        with self._db() as tx:
            return tx.run("UPDATE provider_outages SET wake_at = :now, updated_at = :stamp "
                          "WHERE credential = :credential AND state = :waiting AND "
                          "wake_at > :now", {"credential": credential, "now": now,
                                             "stamp": utc_now(),
                                             "waiting": OutageState.WAITING.value}) == 1

    def clear(self, credential: str) -> bool:
        """A launch on the credential got through: the outage is over. True when this
        call ended it."""
        with self._db() as tx:
            return tx.run("DELETE FROM provider_outages WHERE credential = :credential",
                          {"credential": credential}) == 1

