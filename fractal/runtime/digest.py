"""Gather the facts of the SYNC digest (``domain.digest``) from the tree database and the
node directories: the node's direct children's outbox notices since a stored timestamp,
their gates awaiting approval, the children holding a hand-back the node has not merged
again, the node's unread inbox and, while a children wait holds it, every child it
waits on with its state; with them the ``DigestKey`` a waiting loop compares
(``domain.digest.news``). A read that fails leaves the digest out (the SYNC still runs)
and finds no news (a wait launches nothing on a failed look)."""

from __future__ import annotations

import logging
from typing import NamedTuple

from fractal.domain.digest import NEWEST, Digest, DigestKey
from fractal.domain.errors import FractalError
from fractal.domain.outcome import Status
from fractal.domain.waits import WAIT_STEP
from fractal.runtime.gates import waiting_children
from fractal.store import radio_reads
from fractal.store.ledger import Ledger
from fractal.tree import NodePaths
from fractal.workspace.handback import read_note

__all__ = ["Look", "look", "unmerged_hand_backs"]

log = logging.getLogger(__name__)


class Look(NamedTuple):
    """One look at the tree around a node: the digest's facts and the key they give."""

    digest: Digest
    key: DigestKey


def unmerged_hand_backs(ledger: Ledger, paths: NodePaths) -> list[str]:
    """The direct children of ``paths.branch`` holding a hand-back note (a conflict handed
    back by ``node merge --hand-back`` that no merge has landed since: the landing merge
    removes the note), by branch. Raises StoreError when the database cannot be read."""
    prefix = paths.branch + "."
    return sorted(r.node for r in ledger.nodes()
                  if r.node.startswith(prefix) and "." not in r.node[len(prefix):]
                  and read_note(paths.tree.node(r.node).node_dir) is not None)


def look(ledger: Ledger, paths: NodePaths, since: str | None) -> Look | None:
    """The digest for ``paths.branch`` (``since``: a stored UTC timestamp, None for
    everything) and its key, or None when the database cannot be read."""
    branch, db = paths.branch, paths.tree.db_path
    prefix = branch + "."
    try:
        children = [r for r in ledger.nodes()
                    if r.node.startswith(prefix) and "." not in r.node[len(prefix):]]
        names = [r.node for r in children]
        notices = radio_reads.listing(db, branch, hosts=names, channels=["outbox"],
                                      since=since)
        newest = notices[:1] if since is None else radio_reads.listing(
            db, branch, hosts=names, channels=["outbox"], limit=1)
        gates = [(child[len(prefix):], s.step_name, s.step_id) for child in names
                 for s in ledger.pending_approvals(child)
                 if s.status in (Status.ACTIVE, Status.PAUSED)]
        unread = radio_reads.listing(db, branch, hosts=[branch], channels=["inbox"],
                                     state=radio_reads.ReadState.UNREAD)
        waits = any(s.step_name == WAIT_STEP for s in ledger.open_steps(branch))
        waiting = waiting_children(ledger, branch) if waits else None
    except (FractalError, OSError) as exc:
        log.warning("could not gather the SYNC digest: %s", exc)
        return None
    handed = [(r.node[len(prefix):], str(r.status)) for r in children
              if read_note(paths.tree.node(r.node).node_dir) is not None]
    digest = Digest(
        notices=[(m.node[len(prefix):], m.subject) for m in reversed(notices)],
        gates=gates, unread=len(unread), subjects=[m.subject for m in unread[:NEWEST]],
        hand_backs=handed, waiting=waiting)
    key = DigestKey(children=tuple((r.node, str(r.status)) for r in children),
                    gates=frozenset(g[2] for g in gates),
                    newest_notice=newest[0].message_id if newest else 0,
                    unread=frozenset(m.message_id for m in unread),
                    handed_to_me=read_note(paths.node_dir) is not None,
                    stuck=frozenset(c.branch for c in waiting or ()
                                    if c.never_started and c.status is Status.IDLE))
    return Look(digest, key)

