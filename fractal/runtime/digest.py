"""Gather the facts of the SYNC digest (``domain.prompt.digest``) from the tree database: the
node's direct children's outbox notices since a stored timestamp, their gates awaiting
approval, and the node's unread inbox. A read that fails leaves the digest out (the SYNC
still runs)."""

from __future__ import annotations

import logging

from fractal.domain.errors import FractalError
from fractal.domain.prompt.digest import NEWEST, Digest, render_digest
from fractal.domain.run.outcome import Status
from fractal.store import radio_reads
from fractal.store.ledger import Ledger
from fractal.tree import NodePaths

__all__ = ["sync_digest"]

log = logging.getLogger(__name__)


def sync_digest(ledger: Ledger, paths: NodePaths, since: str | None) -> str:
    """The rendered digest for ``paths.branch`` (``since``: a stored UTC timestamp, None
    for everything), or '' when the database cannot be read."""
    branch, db = paths.branch, paths.tree.db_path
    prefix = branch + "."
    try:
        children = [r.node for r in ledger.nodes()
                    if r.node.startswith(prefix) and "." not in r.node[len(prefix):]]
        notices = radio_reads.listing(db, branch, hosts=children, channels=["outbox"],
                                      since=since)
        gates = [(child[len(prefix):], s.step_name, s.step_id) for child in children
                 for s in ledger.pending_approvals(child)
                 if s.status in (Status.ACTIVE, Status.PAUSED)]
        unread = radio_reads.listing(db, branch, hosts=[branch], channels=["inbox"],
                                     state=radio_reads.ReadState.UNREAD)
    except (FractalError, OSError) as exc:
        log.warning("could not gather the SYNC digest: %s", exc)
        return ""
    return render_digest(Digest(
        notices=[(m.node[len(prefix):], m.subject) for m in reversed(notices)],
        gates=gates, unread=len(unread), subjects=[m.subject for m in unread[:NEWEST]]))
