"""What a run's end says about its subtree (the loop's side of ``domain/run/subtree.py``).

``finish_reason`` names the gates a finish ended before they were approved, so a parent
(or ``node merge``) can tell that run from approved work. ``notify_unsettled`` posts an
outbox notice naming the descendants still running when the run ends.
``unmerged_reason`` names the children whose hand-back the node has not merged again, so
no run ends as if their work were in. ``record_unmerged`` books, when a run ends
``completed``, the descendants whose work never reached the node (an ``unmerged`` event
of the run), which the inbox reads instead of asking git on every refresh: a top-level
node with such work is not announced ready to merge. A descendant still running counts as
such work; when its own run ends, ``refresh_unmerged_above`` books its ancestors' facts
again as they now stand (``workspace.subtree.refresh_unmerged``, which a merge landing in
a node runs too).
"""

from __future__ import annotations

import logging

from fractal.domain.merge.rules import UNMERGED_EVENT
from fractal.domain.run.subtree import Unsettled, never_approved, not_merged, unsettled_notice
from fractal.domain.states import Status
from fractal.errors import FractalError
from fractal.store.ledger import Ledger
from fractal.tree import NodePaths

__all__ = ["finish_reason", "notify_unsettled", "record_unmerged", "refresh_unmerged_above",
           "unmerged_reason", "unsettled_below"]

log = logging.getLogger(__name__)


_RUNNING = (Status.ACTIVE.value, Status.PAUSED.value)


def finish_reason(ledger: Ledger, node: str, run_id: int, reason: str) -> str:
    """``reason``, plus ``; <STEP> never approved`` when it is a finish and run ``run_id``
    of ``node`` still has gated steps nobody approved."""
    gates = [s.step_name for s in ledger.pending_approvals(node) if s.run_id == run_id]
    return never_approved(reason, gates)


def unmerged_reason(ledger: Ledger, paths: NodePaths, reason: str) -> str:
    """``reason``, plus ``; hand-back of <child> not merged`` for each direct child of
    ``paths.branch`` still holding a hand-back note (``runtime.digest``); a registry that
    cannot be read leaves ``reason`` as it is (logged)."""
    # deferred: a run's end: start-up cost (25 modules)
    from fractal.runtime.digest import unmerged_hand_backs

    try:
        return not_merged(reason, unmerged_hand_backs(ledger, paths))
    except FractalError as exc:
        log.warning("could not read the hand-backs of %s: %s", paths.branch, exc)
        return reason


def record_unmerged(ledger: Ledger, paths: NodePaths, run_id: int) -> tuple[str, ...]:
    """Book the descendants of ``paths.branch`` whose work has not reached it
    (``workspace.subtree.unmerged_below``: a hand-back not merged again, a settled node's
    work never merged) as an ``unmerged`` event of run ``run_id``, its metadata their
    labels joined by ``; ``; nothing is booked when there are none. Returns the labels. A
    registry or git that cannot be read books nothing (logged)."""
    # deferred: a completed run's end only: start-up cost (2 modules, git behind them)
    from fractal.workspace.subtree import unmerged_below

    try:
        found = unmerged_below(paths.tree, [(r.node, r.status) for r in ledger.nodes()],
                               paths.branch)
        if found:
            ledger.add_event(paths.branch, UNMERGED_EVENT, actor="loop", run_id=run_id,
                             metadata="; ".join(found))
    except FractalError as exc:
        log.warning("could not check the subtree of %s: %s", paths.branch, exc)
        return ()
    return found


def refresh_unmerged_above(ledger: Ledger, paths: NodePaths) -> None:
    """After a run of ``paths.branch`` ended: its settled ancestors' ``unmerged`` facts
    that named it still running are booked again as they now stand
    (``workspace.subtree.refresh_unmerged_above``), so a lead that ended while this node
    ran is announced ready once nothing of its subtree is missing. A registry or git that
    cannot be read refreshes nothing (logged)."""
    # deferred: a run's end only: start-up cost (1 module, git behind it)
    from fractal.workspace.subtree import refresh_unmerged_above as refresh

    try:
        refresh(paths.tree, ledger, paths.branch, actor="loop")
    except FractalError as exc:
        log.warning("could not refresh the subtree facts above %s: %s", paths.branch, exc)


def unsettled_below(ledger: Ledger, node: str) -> list[Unsettled]:
    """``node``'s descendants that are active or paused, each marked when it waits at an
    approval gate, by branch."""
    out: list[Unsettled] = []
    for row in ledger.nodes():
        if not row.node.startswith(node + ".") or row.status not in _RUNNING:
            continue
        waiting = any(s.status in _RUNNING for s in ledger.pending_approvals(row.node))
        out.append(Unsettled(row.node, row.status, waiting))
    return sorted(out, key=lambda u: u.branch)


def notify_unsettled(ledger: Ledger, node: str) -> str | None:
    """Post ``ended with N children still running: ...`` to ``node``'s outbox when some of
    its descendants still run; return the notice (None when none does). A failed post is
    logged, never raised: the run's end must not fail over a notice."""
    try:
        notice = unsettled_notice(unsettled_below(ledger, node))
        if notice is not None:
            ledger.post_notice(node, notice, notice)
        return notice
    except FractalError as exc:
        log.warning("could not post the unsettled-children notice: %s", exc)
        return None
