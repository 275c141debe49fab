"""Missing nodes: a registered node whose worktree or branch vanished behind fractal's
back is moved to ``missing`` by the read that notices it, and back when both return.

The move is VANISH (from a resting status: idle, settled or retired; a live node is left
to its loop and to crash healing), recorded with an ``orphan`` event whose metadata keeps
the status it had (``was completed: its worktree is gone``); RECOVER gives that status
back once the worktree and branch are there again. ``fractal node delete NODE``
deregisters a missing node. Reads stay cheap: git is asked once for every branch, and
the ledger (SQLAlchemy) is only imported when a move is due.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fractal.domain.cleanup import (
    NodeFacts,
    is_missing,
    previous_status,
    recovered_status,
    vanish_note,
)
from fractal.domain.hosts import elsewhere
from fractal.domain.states import Move, Status
from fractal.store.backend import this_host
from fractal.tree import Tree

if TYPE_CHECKING:
    from fractal.store.rows import NodeRow

__all__ = ["missing_detail", "missing_parts", "settle_missing"]

_RESTING = frozenset({Status.IDLE.value, Status.COMPLETED.value, Status.STOPPED.value,
                      Status.EXITED.value, Status.KILLED.value, Status.RETIRED.value})


def missing_parts(tree: Tree, rows: Sequence[NodeRow]) -> dict[str, str]:
    """``{branch: "worktree" | "branch"}`` for each of ``rows`` that is missing: its branch
    is gone, or its worktree is while it is not retired (one ``git for-each-ref`` for all).
    The worktree is the row's (relative to this clone, ``Tree.worktree_at``); a node
    another host owns is never judged from this clone."""
    from fractal.workspace import git  # deferred: start-up cost (16 modules)

    if not rows:
        return {}
    listed = git.run_git(["for-each-ref", "--format=%(refname:short)", "refs/heads/"],
                         tree.repo, check=False)
    branches = set(listed.stdout.splitlines()) if listed.returncode == 0 else None
    out: dict[str, str] = {}
    here = this_host()
    for row in rows:
        if elsewhere(row.host, here) is not None:
            continue  # its worktree and branch are in its own host's clone, not this one
        worktree = tree.worktree_at(row.worktree) or tree.worktree_of(row.node)
        facts = NodeFacts(branch=row.node, status=row.status,
                          worktree_exists=(worktree / ".git").exists(),
                          branch_exists=branches is None or row.node in branches)
        if is_missing(facts):
            out[row.node] = "branch" if not facts.branch_exists else "worktree"
    return out


def missing_detail(branch: str, gone: str) -> str:
    """The detail of a missing node: what vanished and the command that deregisters it."""
    return f"its {gone} is gone; `fractal node delete {branch}` deregisters it"


def settle_missing(tree: Tree, rows: Sequence[NodeRow], gone: dict[str, str]) -> bool:
    """Record what the read saw: VANISH each resting node of ``gone`` not yet ``missing``,
    RECOVER each ``missing`` node no longer in ``gone``. Returns whether anything moved
    (the caller re-reads the rows). Raises StoreError."""
    due = [r for r in rows if (r.node in gone and r.status in _RESTING)
           or (r.node not in gone and r.status == Status.MISSING.value)]
    if not due:
        return False
    from fractal.store.eventlog import last_event  # deferred: start-up cost (15 modules)
    from fractal.store.ledger import Ledger  # deferred: start-up cost (25 modules)
    from fractal.store.transition import EventNote  # deferred: start-up cost (24 modules)

    ledger = Ledger(tree.db_path)
    for row in due:
        if row.node in gone:
            ledger.move(row.node, Move.VANISH, event=EventNote(
                "orphan", metadata=vanish_note(row.status, gone[row.node])))
        else:
            event = last_event(tree.db_path, row.node, "orphan")
            status = recovered_status(previous_status(event.meta) if event else None)
            ledger.move(row.node, Move.RECOVER, to=Status(status), event=EventNote(
                "recover", metadata=f"worktree and branch are back; restored {status}"))
    return True
