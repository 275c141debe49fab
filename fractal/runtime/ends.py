"""What a run's end says about its subtree (the loop's side of ``domain/subtree.py``).

``finish_reason`` names the gates a finish ended before they were approved, so a parent
(or ``node merge``) can tell that run from approved work. ``notify_unsettled`` posts an
outbox notice naming the descendants still running when the run ends.
``unmerged_reason`` names the children whose hand-back the node has not merged again, so
no run ends as if their work were in.
"""

from __future__ import annotations

import logging

from fractal.domain.states import Status
from fractal.domain.subtree import Unsettled, never_approved, not_merged, unsettled_notice
from fractal.errors import FractalError
from fractal.store.ledger import Ledger
from fractal.tree import NodePaths

__all__ = ["finish_reason", "notify_unsettled", "unmerged_reason", "unsettled_below"]

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
    from fractal.runtime.digest import unmerged_hand_backs  # a run's end: start-up cost

    try:
        return not_merged(reason, unmerged_hand_backs(ledger, paths))
    except FractalError as exc:
        log.warning("could not read the hand-backs of %s: %s", paths.branch, exc)
        return reason


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
