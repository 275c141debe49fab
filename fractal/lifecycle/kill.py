"""``fractal node kill``: an immediate reap of a node and its subtree (ref §1.4).

TERM to the supervisor's group, the agent groups of open steps and the pane, a grace,
then KILL; open rows close ``killed`` with the attribution ``killed by <actor>[: reason]``.
Descendants go first and are re-enumerated to a fixpoint, so a child booting during the
sweep is caught (bug ledger #7).
"""

from __future__ import annotations

from pathlib import Path

from fractal import tmux
from fractal.domain.markers import launch_marker
from fractal.domain.outcome import Status, clip_reason
from fractal.domain.signals import Signal, attribution, fanout_reason
from fractal.lifecycle.heal import heal_if_crashed
from fractal.lifecycle.steer import Refused, Signalled, actor_of, descendants
from fractal.lifecycle.targets import subtree_target
from fractal.runtime.processes import GroupHandle, group_of, kill_group
from fractal.store.ledger import Ledger
from fractal.store.rows import NodeRow
from fractal.tree import Tree

KILL_GRACE = 5.0  # seconds between TERM and KILL for a kill verb (ref §1.4)


def killable(row: NodeRow) -> bool:
    """Active, paused, or idle with a live session (a supervisor still booting)."""
    if row.status in (Status.ACTIVE.value, Status.PAUSED.value):
        return True
    if row.status == Status.IDLE.value and row.tmux_session:
        socket = Path(row.tmux_socket) if row.tmux_socket else tmux.socket_path()
        return tmux.probe(row.tmux_session, socket) is tmux.Liveness.ALIVE
    return False


def kill_node(tree: Tree, ledger: Ledger, branch: str, *, actor: str,
              reason: str | None) -> Signalled:
    """Reap one node: supervisor, agent groups, pane; close its rows ``killed``."""
    heal_if_crashed(tree, branch)
    row = ledger.node(branch)
    if row is None or not killable(row):
        status = row.status if row else "unregistered"
        why = f"node {branch} is {status}; nothing to kill"
        ledger.add_event(branch, Signal.KILL.value, actor=actor, status="failed",
                         metadata=f"refused: {why}")
        return Signalled(branch, False, why)
    note = clip_reason(attribution("kill", actor, reason))
    run = ledger.open_run_of(branch)
    # Recorded complete up front: the caller may be inside the node and die with it.
    ledger.add_event(branch, Signal.KILL.value, actor=actor, status="completed",
                     metadata=note, run_id=run.run_id if run else None)
    if run is not None:
        ledger.add_signal(branch, run.run_id, Signal.KILL.value, note)
    ledger.set_node_status(branch, Status.KILLED.value)  # the dying loop must not relabel it
    handles: list[GroupHandle] = []
    if row.supervisor_pid and row.supervisor_started:
        handle = group_of(row.supervisor_pid, row.supervisor_started)
        if handle is not None:
            handles.append(handle)
    for step in ledger.open_steps(branch):
        if step.pgid is not None and step.pgid_started is not None:
            handles.append(GroupHandle(pid=step.pgid, pgid=step.pgid,
                                       create_time=step.pgid_started,
                                       marker=launch_marker(str(tree.db_path), step.step_id)))
    for handle in handles:
        kill_group(handle, grace=KILL_GRACE)
    if row.tmux_session:
        socket = Path(row.tmux_socket) if row.tmux_socket else tmux.socket_path()
        tmux.kill_session(row.tmux_session, socket)
    ledger.close_open(branch, Status.KILLED.value, note)
    if run is not None:
        ledger.close_run(run.run_id, Status.KILLED.value, 1, note)
    ledger.set_supervisor(branch, None, None)
    return Signalled(branch, True, f"killed {branch}")


def kill(cwd: Path, name: str | None, reason: str | None = None) -> list[Signalled]:
    """Kill ``name`` (default: the caller's node) and every killable descendant.

    At the root every node of the tree is killed. Raises Refused when the named node
    itself cannot be killed.
    """
    tree, top = subtree_target(cwd, name)
    ledger = Ledger(tree.db_path)
    actor = actor_of(cwd, tree)
    results: list[Signalled] = []
    done: set[str] = set()
    while True:
        rows = {r.node: r for r in ledger.nodes()}
        todo = [b for b in reversed(descendants(ledger, top, tree))
                if b not in done and killable(rows[b])]
        if not todo:
            break
        for branch in todo:
            done.add(branch)
            results.append(kill_node(tree, ledger, branch, actor=actor,
                                     reason=fanout_reason(reason, "kill", top)))
    if top != tree.root:
        result = kill_node(tree, ledger, top, actor=actor, reason=reason)
        results.append(result)
        if not result.ok:
            raise Refused(result.message)
    return results
