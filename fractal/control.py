"""The control plane below the loop: how the verbs and a running loop reach each other.

One effect-level module used by both the verbs (``fractal.lifecycle``) and the loop
(``fractal.runtime``), so neither has to import the other:

- its files: ``<node_dir>/.wake``, touched after a signal row is written so the node's
  supervisor looks at once (``wake_node``; on a PostgreSQL ledger it also notifies the
  tree's wake channel, which reaches a supervisor on another machine; the supervisor
  also polls the database: every second, every 5 s in an idle wait while it is watched
  or listening); the
  tree-wide latch ``<root data dir>/.paused`` (a PostgreSQL ledger's ``latches`` row, so
  every clone sees it), present while ``fractal pause`` brakes the
  tree; the per-node heal lock beside the tree lock (``Tree.lock_path``);
- signals: ``write_signal`` queues a signal row on a node's open run together with its
  event (one transaction) and touches the wake file; ``finish_subtree`` is the loop's
  recursive finish (a budget bound tripped); ``Steering`` is the loop's side of the same
  channel, reading its run's signal rows at every checkpoint and every wake (the
  database is the source of truth; the wake only makes the loop look sooner);
- reads: ``subtree`` lists a node's registered descendants; ``pause_pending``,
  ``pausing`` and ``paused_ancestor`` answer whether a pause is on its way.

Nothing here heals a crashed node or takes the tree lock: a verb does both first
(``fractal.lifecycle.steering.signal.signal_node``) and then calls in here; the loop calls in
directly, so a budget check never waits on the tree lock nor reaps a child's processes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fractal.domain.hosts import elsewhere, signal_note
from fractal.domain.run.reasons import clip_reason
from fractal.domain.signals import Signal, fanout_reason, winning
from fractal.domain.states import Status
from fractal.store.backend import database_url, this_host
from fractal.tree import Tree, parent_of
from fractal.workspace.nodedir import write_atomic

if TYPE_CHECKING:  # the callers hold a Ledger; importing SQLAlchemy here would slow reads
    from fractal.store.ledger import Ledger

__all__ = [
    "LATCH_FILE",
    "WAKE_FILE",
    "Signalled",
    "Steering",
    "clear_latch",
    "finish_subtree",
    "heal_lock_path",
    "latch_path",
    "latched",
    "pause_pending",
    "paused_ancestor",
    "pausing",
    "set_latch",
    "subtree",
    "touch_wake",
    "wake_node",
    "wake_path",
    "write_signal",
]


WAKE_FILE = ".wake"
"""The file in a node dir whose change wakes that node's supervisor."""

LATCH_FILE = ".paused"
"""The file in the root data dir that brakes the whole tree while it exists."""


@dataclass(frozen=True)
class Signalled:
    """What a verb did to one node: ``ok`` False carries the refusal in ``message``;
    ``note`` a second line when there is one (a relaunch's kept-environment note)."""

    branch: str
    ok: bool
    message: str
    note: str = ""


# ---- files ------------------------------------------------------------------------------


def wake_path(node_dir: Path) -> Path:
    """``<node_dir>/.wake``."""
    return node_dir / WAKE_FILE


def touch_wake(node_dir: Path) -> None:
    """Nudge a node's supervisor. Never raises: its database poll sees the change anyway."""
    with contextlib.suppress(OSError):
        wake_path(node_dir).write_text(f"{time.time():.6f}\n")


def wake_node(tree: Tree, *branches: str) -> None:
    """Nudge the supervisors of ``branches``: touch each node's wake file (seen on the
    machine whose clone holds it), and on a PostgreSQL ledger also notify the tree's wake
    channel (``store/wakes.py``), which a supervisor on any machine listens on. Never
    raises: each supervisor's database poll sees the change anyway."""
    for branch in branches:
        touch_wake(tree.node(branch).node_dir)
    if branches and database_url(tree.db_path) is not None:
        # deferred: only a PostgreSQL tree's wake notifies (1 module beyond the seam)
        from fractal.store import wakes

        wakes.notify(tree.db_path, tree.root, list(branches))


def latch_path(tree: Tree) -> Path:
    """``<root data dir>/.paused``: present while the whole tree is braked."""
    return tree.data_dir / LATCH_FILE


def latched(tree: Tree) -> bool:
    """True while the tree-wide brake is on (the ``.paused`` file; on a PostgreSQL ledger
    its ``latches`` row, which every clone sees)."""
    if database_url(tree.db_path) is not None:
        # deferred: the seam: only a PostgreSQL tree's brake reads it (20 modules)
        from fractal.store import latches

        return latches.reason(tree.db_path) is not None
    return latch_path(tree).exists()


def set_latch(tree: Tree, reason: str) -> None:
    """Put the brake on (atomically); the file (or the row) holds ``reason``."""
    if database_url(tree.db_path) is not None:
        from fractal.store import latches  # deferred: start-up cost (20 modules)

        latches.set_reason(tree.db_path, reason or "paused")
        return
    write_atomic(latch_path(tree), (reason or "paused") + "\n")


def clear_latch(tree: Tree) -> bool:
    """Take the brake off; returns whether it was on."""
    if database_url(tree.db_path) is not None:
        from fractal.store import latches  # deferred: start-up cost (20 modules)

        return latches.clear(tree.db_path)
    try:
        latch_path(tree).unlink()
        return True
    except FileNotFoundError:
        return False


def heal_lock_path(tree: Tree, branch: str) -> Path:
    """The lock file healers of ``branch`` take turns on."""
    return tree.worktrees_dir / f".heal-{branch}.lock"


# ---- reads ------------------------------------------------------------------------------


def subtree(ledger: Ledger, branch: str, tree: Tree) -> list[str]:
    """Registered descendants of ``branch`` (every node when it is the root), shallowest
    first, then by name."""
    prefix = "" if branch == tree.root else branch + "."
    found = [r.node for r in ledger.nodes() if r.node != branch and r.node.startswith(prefix)]
    return sorted(found, key=lambda b: (b.count("."), b))


def pause_pending(ledger: Ledger, branch: str) -> bool:
    """True when ``branch`` is active and a pause signal waits on its open run."""
    row = ledger.node(branch)
    if row is None or row.status is not Status.ACTIVE:
        return False
    run = ledger.open_run_of(branch)
    return run is not None and _has_pause(s.signal for s in ledger.signals(run.run_id))


def _has_pause(names: Iterable[str]) -> bool:
    """True when a pause is among the pending signal ``names``."""
    return Signal.PAUSE.value in set(names)


def pausing(ledger: Ledger, branch: str) -> bool:
    """True when ``branch`` is paused, or active with a pause still pending."""
    row = ledger.node(branch)
    return row is not None and (row.status is Status.PAUSED or pause_pending(ledger, branch))


def paused_ancestor(tree: Tree, ledger: Ledger, branch: str) -> str | None:
    """The nearest ancestor of ``branch`` (the root excluded) that is paused or pausing."""
    parent = parent_of(branch)
    while parent is not None and parent != tree.root:
        if pausing(ledger, parent):
            return parent
        parent = parent_of(parent)
    return None


# ---- signals ----------------------------------------------------------------------------


def write_signal(tree: Tree, ledger: Ledger, branch: str, signal: Signal, *, actor: str,
                 reason: str, include_paused: bool = False) -> Signalled:
    """Queue ``signal`` on ``branch``'s open run with its ``completed`` event (one
    transaction), then touch the node's wake file.

    Refused, and recorded as a ``failed`` event, unless the node is active with an open
    run (or parked, with ``include_paused``: the signal then waits for the resume).
    ``reason`` is clipped to 250 characters. Raises StoreError.
    """
    reason = clip_reason(reason) if reason else ""
    allowed = {Status.ACTIVE} | ({Status.PAUSED} if include_paused else set())
    row = ledger.node(branch)
    run = ledger.open_run_of(branch)
    if row is None or row.status not in allowed or run is None:
        status = row.status if row else "unregistered"
        why = f"node {branch} is {status}; {signal.value} needs an active node"
        ledger.add_event(branch, signal.value, actor=actor, status="failed",
                         metadata=f"refused: {why}", run_id=run.run_id if run else None)
        return Signalled(branch, False, why)
    # Recorded complete before the wake: the caller may be the node's own agent, which a
    # pause ends at once.
    ledger.signal_run(branch, run.run_id, signal.value, actor=actor, reason=reason)
    wake_node(tree, branch)
    owner = elsewhere(row.host, this_host())
    note = f" ({signal_note(owner)})" if owner is not None else ""
    return Signalled(branch, True, f"{signal.value} sent to {branch}{note}")


def finish_subtree(tree: Tree, ledger: Ledger, branch: str, reason: str) -> list[Signalled]:
    """The loop's recursive finish: a finish carrying ``reason`` to every active or paused
    descendant of ``branch`` (deepest first, each attributed ``(via finish of
    <branch>)``, actor ``branch``), then to ``branch``'s own run (actor ``loop``).

    A paused descendant gets it too: its parked run keeps the signal, so a resume winds
    down instead of spending past the ancestor's ceiling. Raises StoreError.
    """
    rows = {r.node: r.status for r in ledger.nodes()}
    below = [b for b in subtree(ledger, branch, tree)
             if rows.get(b) in (Status.ACTIVE, Status.PAUSED)]
    sent = [write_signal(tree, ledger, child, Signal.FINISH, actor=branch,
                         reason=fanout_reason(reason, Signal.FINISH.value, branch),
                         include_paused=True)
            for child in reversed(below)]
    sent.append(write_signal(tree, ledger, branch, Signal.FINISH, actor="loop", reason=reason))
    return sent


class Steering:
    """Reads this run's pending signals. ``stop``/``finish`` stay requested once seen."""

    def __init__(self, ledger: Ledger, run_id: int) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.stop_requested = False
        self.finish_requested = False
        self._last_good: set[str] = set()

    def pending(self) -> set[str]:
        """Names of the signals present for the run (the last good read on contention)."""
        try:
            names = {s.signal for s in self.ledger.signals(self.run_id)}
        except Exception as exc:  # a locked database must not crash the loop
            import logging  # deferred: the verbs never log: only the loop's reads reach this

            logging.getLogger(__name__).warning("could not read signals: %s", exc)
            return set(self._last_good)
        self._last_good = names
        if Signal.STOP.value in names:
            self.stop_requested = True
        if Signal.FINISH.value in names:
            self.finish_requested = True
        elif self.finish_requested and Signal.FINISH.value not in names:
            self.finish_requested = False  # finish --cancel withdrew it
        return names

    def pause_pending(self) -> bool:
        """True when a pause is pending on this run (it outranks everything else)."""
        return _has_pause(self.pending())

    def check(self, *, allow_finish: bool = True, allow_stop: bool = True) -> Signal | None:
        """The signal that acts here (pause > finish > stop), or None."""
        return winning(self.pending(), allow_finish=allow_finish, allow_stop=allow_stop)

    def clear_pause(self) -> None:
        """Drop this run's pause rows (a resume boot consumed them)."""
        self.ledger.delete_signals(self.run_id, Signal.PAUSE.value)

    def done_reason(self) -> str | None:
        """The reason the node's own ``node done`` gave (``""`` without one), or None when
        no done signal is present (a locked database reads as none)."""
        try:
            for row in self.ledger.signals(self.run_id):
                if row.signal == Signal.DONE.value:
                    return row.meta or ""
        except Exception:
            return None
        return None

    def killed(self) -> str | None:
        """The kill attribution when a kill signal is present, else None."""
        try:
            for row in self.ledger.signals(self.run_id):
                if row.signal == Signal.KILL.value:
                    return row.meta or "killed"
        except Exception:
            return None
        return None
