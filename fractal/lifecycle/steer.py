"""The signal verbs: ``node stop``, ``finish`` (``--cancel``) and ``pause`` (ref §1.4).

A verb writes a signal row on the target's open run (the database is the source of
truth), then touches ``<node_dir>/.wake`` so the supervisor reacts at once; the
supervisor also polls the database at least once a second. Fan-out order: stop and
finish signal descendants first (deepest first), then the node; pause signals the node
first, then descendants shallowest-first, re-enumerating until none is left unsignalled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fractal.domain.outcome import Status, clip_reason
from fractal.domain.signals import Signal, fanout_reason
from fractal.errors import FractalError
from fractal.lifecycle.heal import heal_if_crashed
from fractal.lifecycle.targets import subtree_target
from fractal.runtime.waker import touch_wake
from fractal.tree import Tree, caller_branch
from fractal.workspace.nodedir import file_lock

if TYPE_CHECKING:  # imported where used: `acting_branch` alone stays free of SQLAlchemy
    from fractal.store.ledger import Ledger


@dataclass(frozen=True)
class Signalled:
    """What a verb did to one node: ``ok`` False carries the refusal in ``message``."""

    branch: str
    ok: bool
    message: str


class Refused(FractalError):
    """A verb was refused for the node it named; the reason is recorded as a failed event."""


def acting_branch(cwd: Path, tree: Tree) -> str:
    """The branch on whose behalf a verb runs. Inside a node's loop (its agent, or a tool
    the agent runs) it is that node, whatever ``--path`` says: an agent cannot pose as its
    parent. Otherwise the node whose worktree holds ``cwd`` (the root outside any)."""
    inside = os.environ.get("_NODE")
    if inside:
        branch = Path(inside).name
        if tree.owns(branch) and Path(inside) == tree.node(branch).node_dir:
            return branch
    return caller_branch(cwd, tree)


def actor_of(cwd: Path, tree: Tree) -> str:
    """Who is acting: the acting branch, or ``operator`` at the root."""
    branch = acting_branch(cwd, tree)
    return "operator" if branch == tree.root else branch


def descendants(ledger: Ledger, branch: str, tree: Tree) -> list[str]:
    """Registered descendants of ``branch`` (every node when it is the root), shallowest first."""
    prefix = "" if branch == tree.root else branch + "."
    found = [r.node for r in ledger.nodes() if r.node != branch and r.node.startswith(prefix)]
    return sorted(found, key=lambda b: (b.count("."), b))


def signal_node(tree: Tree, ledger: Ledger, branch: str, signal: Signal, *, actor: str,
                reason: str, include_paused: bool = False) -> Signalled:
    """Write ``signal`` for ``branch``'s open run and wake its supervisor.

    Refused (recorded as a ``failed`` event) unless the node is active with an open run
    (or parked, with ``include_paused``: the signal then waits for the resume).
    """
    reason = clip_reason(reason) if reason else ""
    allowed = {Status.ACTIVE.value} | ({Status.PAUSED.value} if include_paused else set())
    with file_lock(tree.lock_path):
        heal_if_crashed(tree, branch)
        row = ledger.node(branch)
        run = ledger.open_run_of(branch)
        if row is None or row.status not in allowed or run is None:
            status = row.status if row else "unregistered"
            why = f"node {branch} is {status}; {signal.value} needs an active node"
            ledger.add_event(branch, signal.value, actor=actor, status="failed",
                             metadata=f"refused: {why}", run_id=run.run_id if run else None)
            return Signalled(branch, False, why)
        ledger.add_signal(branch, run.run_id, signal.value, reason)
        # Recorded complete before the wake: the caller may be the node's own agent, which
        # a pause ends at once.
        ledger.add_event(branch, signal.value, actor=actor, status="completed",
                         metadata=reason, run_id=run.run_id)
    touch_wake(tree.node(branch).node_dir)
    return Signalled(branch, True, f"{signal.value} sent to {branch}")


def _active(ledger: Ledger, branches: list[str]) -> list[str]:
    rows = {r.node: r.status for r in ledger.nodes()}
    return [b for b in branches if rows.get(b) == Status.ACTIVE.value]


def send(cwd: Path, name: str | None, signal: Signal, reason: str | None = None) -> list[Signalled]:
    """Send stop, finish or pause to ``name`` (default: the caller's node) and its subtree.

    At the root it is a tree-wide broadcast with no self signal. Raises Refused when the
    named node itself is refused; refused descendants are skipped.
    """
    from fractal.store.ledger import Ledger

    tree, top = subtree_target(cwd, name)
    ledger = Ledger(tree.db_path)
    actor = actor_of(cwd, tree)
    is_root = top == tree.root
    results: list[Signalled] = []

    def one(branch: str) -> None:
        why = (reason or "") if branch == top else fanout_reason(reason, signal.value, top)
        results.append(signal_node(tree, ledger, branch, signal, actor=actor, reason=why))

    if signal is Signal.PAUSE:
        if not is_root:
            one(top)
            if not results[-1].ok:
                raise Refused(results[-1].message)
        done: set[str] = set()
        while True:  # re-enumerate: a child may have booted during the sweep
            todo = [b for b in _active(ledger, descendants(ledger, top, tree)) if b not in done]
            if not todo:
                break
            for branch in todo:
                done.add(branch)
                one(branch)
    else:
        for branch in reversed(_active(ledger, descendants(ledger, top, tree))):
            one(branch)
        if not is_root:
            one(top)
            if not results[-1].ok:
                raise Refused(results[-1].message)
    return results


def cancel_finish(cwd: Path, name: str | None) -> Signalled:
    """Withdraw ``name``'s own pending finish (ref §2.2 ``finish --cancel``)."""
    from fractal.store.ledger import Ledger

    tree, branch = subtree_target(cwd, name)
    ledger = Ledger(tree.db_path)
    actor = actor_of(cwd, tree)
    run = ledger.open_run_of(branch)
    if run is None:
        raise Refused(f"node {branch} has no open run; nothing to cancel")
    removed = ledger.delete_signals(run.run_id, Signal.FINISH.value)
    ledger.add_event(branch, "finish_cancel", actor=actor, status="completed",
                     metadata=f"{removed} finish signal(s) withdrawn", run_id=run.run_id)
    touch_wake(tree.node(branch).node_dir)
    return Signalled(branch, True, f"withdrew {removed} pending finish signal(s) of {branch}")
