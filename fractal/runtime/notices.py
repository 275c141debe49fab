"""The loop's notices to the node's ``outbox`` (its ancestors read them in their radio
feed): a run's end and an approval gate that starts waiting. One call each from the
supervisor and the approval gate; a notice that cannot be posted is logged, never fatal
(the loop's own bookkeeping already holds the facts).
"""

from __future__ import annotations

import logging

from fractal.domain.errors import FractalError
from fractal.domain.radio import gate_notice
from fractal.store.ledger import Ledger
from fractal.tree import NodePaths
from fractal.workspace.diffstat import fork_diffstat

__all__ = ["post_gate_waiting", "post_run_end", "run_end_draft"]

log = logging.getLogger(__name__)


def post_run_end(ledger: Ledger, branch: str, run_id: int, status: str, reason: str,
                 figures: str = "") -> None:
    """Post ``run <status>: <reason>`` with the run's spend (and a capped run's
    ``figures``) to ``branch``'s outbox; call it before the node's status flips, so a
    reader that sees the node settled finds the notice."""
    try:
        ledger.post_run_end_notice(branch, run_id, status, reason, figures)
    except FractalError as exc:
        log.warning("could not post the run-end notice: %s", exc)


def run_end_draft(ledger: Ledger, run_id: int, status: str, reason: str,
                  figures: str = "") -> tuple[str, str] | None:
    """The (subject, body) of the run's end notice, posted by the END move in the same
    transaction as the status flip; None when it cannot be composed (the move then
    posts the plain exit notice of an exited run)."""
    try:
        return ledger.run_end_draft(run_id, status, reason, figures)
    except FractalError as exc:
        log.warning("could not compose the run-end notice: %s", exc)
        return None


def post_gate_waiting(ledger: Ledger, paths: NodePaths, step_name: str, step_id: int) -> None:
    """Post ``<STEP> awaits approval: fractal node approve <branch> <step_id>`` with the
    node's diffstat since it forked from its parent to the node's outbox."""
    branch = paths.branch
    parent = branch.rsplit(".", 1)[0] if "." in branch else branch
    try:
        subject, body = gate_notice(step_name, branch, step_id,
                                    fork_diffstat(paths.worktree, parent))
        ledger.post_notice(branch, subject, body)
    except FractalError as exc:
        log.warning("could not post the approval notice: %s", exc)
